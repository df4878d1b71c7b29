//! A slow MCP server written here on the official TypeScript SDK (stdio),
//! for the tests of a call cut short (a Cancel, a killed daemon); they
//! drive it with `support/caller.rs`.
//!
//! The server's tools `append` (not idempotent) and `append_idem`
//! (idempotent), neither read-only, append their `text` argument as one
//! line to the server's output file *before* they log `started <request
//! id>`, then answer only once the hold file is gone; a request the client
//! cancels logs `cancelled <request id>` and answers at once. So a test
//! that sees `started` knows the effect happened and the answer has not.
//! Each server process logs `pid <pid>` first; [`SlowServer`] kills every
//! one still running when dropped (a killed daemon orphans its child).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SERVER: &str = r#"
import { Server } from "SDK/server/index.js";
import { StdioServerTransport } from "SDK/server/stdio.js";
import { ListToolsRequestSchema, CallToolRequestSchema } from "SDK/types.js";
import { appendFileSync, existsSync } from "node:fs";

const [out, log, hold] = process.argv.slice(2);
const note = (line) => appendFileSync(log, `${line}\n`);
note(`pid ${process.pid}`);
const tool = (name, idempotent) => ({
  name,
  description: "appends args.text to a file, then answers once the hold file is gone",
  inputSchema: { type: "object", properties: { text: { type: "string" } } },
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: idempotent },
});
const server = new Server({ name: "slow", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [tool("append", false), tool("append_idem", true)],
}));
server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
  const id = extra.requestId;
  extra.signal.addEventListener("abort", () => note(`cancelled ${id}`));
  appendFileSync(out, `${req.params.arguments?.text ?? ""}\n`);
  note(`started ${id}`);
  while (existsSync(hold) && !extra.signal.aborted) {
    await new Promise((r) => setTimeout(r, 20));
  }
  return { content: [{ type: "text", text: "appended" }] };
});
await server.connect(new StdioServerTransport());
"#;

/// One slow server's files. See the module docs.
pub struct SlowServer {
    pub script: PathBuf,
    /// Where the tools append their lines.
    pub out: PathBuf,
    /// `pid`, `started` and `cancelled` lines.
    pub log: PathBuf,
    /// While it exists, calls do not answer.
    pub hold: PathBuf,
}

impl SlowServer {
    /// Writes the server under `dir`, importing the SDK from `node_modules`.
    pub fn new(node_modules: &Path, dir: &Path) -> Self {
        let sdk = node_modules.join("@modelcontextprotocol/sdk/dist/esm");
        let script = dir.join("slow.mjs");
        let text = SERVER.replace("SDK/", &format!("file://{}/", sdk.display()));
        std::fs::write(&script, text).unwrap();
        Self {
            script,
            out: dir.join("slow.out"),
            log: dir.join("slow.log"),
            hold: dir.join("slow.hold"),
        }
    }

    /// The `--mcp` value serving it as `name`.
    pub fn spec(&self, name: &str) -> String {
        let quoted = |p: &Path| {
            let p = p.display().to_string();
            assert!(!p.contains('\''), "{p}: a test path without quotes");
            format!("'{p}'")
        };
        format!(
            "{name}=node {} {} {} {}",
            quoted(&self.script),
            quoted(&self.out),
            quoted(&self.log),
            quoted(&self.hold)
        )
    }

    /// Calls stop answering until [`SlowServer::release`].
    pub fn hold(&self) {
        std::fs::write(&self.hold, "").unwrap();
    }

    pub fn release(&self) {
        let _ = std::fs::remove_file(&self.hold);
    }

    /// The lines the tools appended.
    pub fn lines(&self) -> Vec<String> {
        read_lines(&self.out)
    }

    /// The request ids logged with `what` (`started`, `cancelled`).
    pub fn logged(&self, what: &str) -> Vec<String> {
        read_lines(&self.log)
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("{what} ")).map(str::to_owned))
            .collect()
    }

    /// Waits until `n` calls have started (their lines appended); the
    /// last one's request id.
    pub async fn wait_started(&self, n: usize, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let started = self.logged("started");
            if started.len() >= n {
                return started[n - 1].clone();
            }
            assert!(
                Instant::now() < deadline,
                "{n} calls not started in {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for SlowServer {
    fn drop(&mut self) {
        self.release();
        for pid in self.logged("pid") {
            // Only a process still running this server's script is ours.
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let script = self.script.display().to_string();
            if String::from_utf8_lossy(&cmdline).contains(&script) {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid])
                    .status();
            }
        }
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}
