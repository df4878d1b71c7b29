//! The third-party MCP servers tests run against, installed with npm into
//! `target/mcp-peers/` by `scripts/mcp-peers.sh`. Where node or npm is
//! missing a test prints SKIPPED and returns; with `CI=true` it fails.

use std::path::PathBuf;
use std::process::Command;

/// The node scripts of the installed servers.
pub struct Peers {
    /// `@modelcontextprotocol/server-filesystem`.
    #[allow(dead_code)]
    pub filesystem: PathBuf,
    /// `@modelcontextprotocol/server-everything` (not every test starts it).
    #[allow(dead_code)]
    pub everything: PathBuf,
    /// Where they are installed, the official TypeScript SDK with them
    /// (for servers a test writes itself).
    #[allow(dead_code)]
    pub node_modules: PathBuf,
}

/// The servers, or `None` after printing why they cannot be had (and
/// panicking instead under `CI=true`).
pub fn peers(test: &str) -> Option<Peers> {
    // Included by tests of the root package and of shells/.
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = if here.join("scripts").is_dir() {
        here
    } else {
        here.join("..")
    };
    let out = Command::new("bash")
        .arg(root.join("scripts/mcp-peers.sh"))
        .current_dir(&root)
        .output();
    let why = match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let path = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}=")))
                    .map(PathBuf::from)
            };
            match (path("filesystem"), path("everything"), path("node_modules")) {
                (Some(filesystem), Some(everything), Some(node_modules)) => {
                    return Some(Peers {
                        filesystem,
                        everything,
                        node_modules,
                    });
                }
                _ => format!("mcp-peers.sh printed no server paths: {text}"),
            }
        }
        Ok(o) => format!(
            "mcp-peers.sh failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("bash: {e}"),
    };
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: the MCP peers are required in CI: {why}"
    );
    eprintln!("*** SKIPPED {test}: {why} ***");
    None
}
