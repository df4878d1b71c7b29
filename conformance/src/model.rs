//! A fake OpenAI-compatible Chat Completions server.
//!
//! It is the suite's only model, so it is built to expose what a host must
//! not do:
//!
//! - Every request is counted. A check reads the counter before and after
//!   a replay or a recovery; "served from the journal" means the counter did
//!   not move.
//! - Answers are nondeterministic: each carries the request number
//!   (`echo:<last user text> #<n>`), so a host that re-asked the model could
//!   never reproduce a recorded output.
//! - A streamed request (`"stream": true`) is answered as server-sent events.
//!   The text goes out as one delta, or in 3-character deltas when the last
//!   user text contains `+chunks`, which lets a check compare a finely
//!   streamed turn with a coarse one.
//!
//! The HTTP is a few lines of HTTP/1.1 over tokio: one request per
//! connection, answered with `Connection: close`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The marker that asks for a finely chunked stream.
pub const CHUNKS: &str = "+chunks";
/// Largest request accepted (requests carry whole histories).
const MAX_REQUEST: usize = 8 << 20;

/// A running fake model server. Dropping it stops accepting.
#[derive(Debug)]
pub struct FakeModel {
    base_url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct State {
    requests: AtomicUsize,
    bodies: Mutex<Vec<Value>>,
    /// Set by [`FakeModel::hold_next`]: the next request waits on it.
    hold: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

/// Keeps a held request waiting; dropping it lets the answer go.
#[derive(Debug)]
pub struct Hold(#[allow(dead_code)] tokio::sync::oneshot::Sender<()>);

impl FakeModel {
    /// Binds 127.0.0.1:0 and starts serving.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let state = Arc::new(State::default());
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    // A client that hangs up early is its own business.
                    let _ = handle(conn, state).await;
                });
            }
        });
        Ok(Self {
            base_url,
            state,
            task,
        })
    }

    /// The base URL to configure a host with (the default
    /// `/chat/completions` path goes under it).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Makes the next request wait for its answer until the returned
    /// [`Hold`] is dropped (a model call that is in flight for as long as a
    /// test needs it to be).
    pub fn hold_next(&self) -> Hold {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut hold) = self.state.hold.lock() {
            *hold = Some(rx);
        }
        Hold(tx)
    }

    /// How many completion requests arrived so far.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The JSON bodies received, in order.
    pub fn bodies(&self) -> Vec<Value> {
        self.state
            .bodies
            .lock()
            .map(|b| b.clone())
            .unwrap_or_default()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The answer text for request number `n` whose last user text is `text`.
pub fn answer(text: &str, n: usize) -> String {
    format!("echo:{text} #{n}")
}

/// The text of the last user message of a Chat Completions body. Content is
/// either a string or a list of typed parts.
fn last_user_text(body: &Value) -> String {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return String::new();
    };
    let Some(last) = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return String::new();
    };
    match last.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

async fn read_request(conn: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_REQUEST {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim() == "content-length")
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_REQUEST);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let mut chunk = [0u8; 4096];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(body))
}

async fn handle(mut conn: TcpStream, state: Arc<State>) -> std::io::Result<()> {
    let Some(raw) = read_request(&mut conn).await? else {
        return Ok(());
    };
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
    if let Ok(mut bodies) = state.bodies.lock() {
        bodies.push(body.clone());
    }
    let held = state.hold.lock().ok().and_then(|mut h| h.take());
    if let Some(gate) = held {
        // Released or dropped: either way the answer goes out now.
        let _ = gate.await;
    }
    let text = last_user_text(&body);
    let content = answer(&text, n);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("gpt-test")
        .to_owned();
    let usage = json!({"prompt_tokens": text.len(), "completion_tokens": content.len()});
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        conn.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
        )
        .await?;
        let pieces: Vec<String> = if text.contains(CHUNKS) {
            content
                .chars()
                .collect::<Vec<_>>()
                .chunks(3)
                .map(|c| c.iter().collect())
                .collect()
        } else {
            vec![content]
        };
        for piece in pieces {
            let frame =
                json!({"model": model, "choices": [{"index": 0, "delta": {"content": piece}}]});
            conn.write_all(format!("data: {frame}\n\n").as_bytes())
                .await?;
            conn.flush().await?;
        }
        let last = json!({"model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage});
        conn.write_all(format!("data: {last}\n\ndata: [DONE]\n\n").as_bytes())
            .await?;
    } else {
        let reply = json!({
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": usage,
        })
        .to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            reply.len()
        );
        conn.write_all(head.as_bytes()).await?;
        conn.write_all(reply.as_bytes()).await?;
    }
    conn.shutdown().await
}
