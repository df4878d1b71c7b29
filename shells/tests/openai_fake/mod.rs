//! A fake OpenAI-compatible server for tests/model_openai.rs: a few lines of
//! raw HTTP/1.1 over tokio on loopback. Every response is
//! `Connection: close`, and streamed bodies are written piece by piece, which
//! lets a test send garbled, oversized or truncated streams at will.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentsessions_shells::model::{OpenAiClient, OpenAiConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The client's default model.
pub const MODEL: &str = "gpt-test";

#[derive(Debug, Clone)]
pub struct Captured {
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Captured {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is json")
    }
}

#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response.
    Full(u16, Vec<u8>),
    /// A 200 event stream written as these pieces; then, if `hold`, the
    /// connection stays open instead of closing.
    Stream(Vec<Vec<u8>>, bool),
}

pub struct Fake {
    pub base: String,
    seen: Arc<Mutex<Vec<Captured>>>,
}

impl Fake {
    pub fn requests(&self) -> Vec<Captured> {
        self.seen.lock().unwrap().clone()
    }

    pub fn config(&self) -> OpenAiConfig {
        OpenAiConfig::new(MODEL)
            .with_base_url(format!("{}/v1", self.base))
            .with_stream(false)
    }

    pub fn client(&self) -> OpenAiClient {
        OpenAiClient::new(self.config()).unwrap()
    }

    pub fn streaming(&self) -> OpenAiClient {
        OpenAiClient::new(self.config().with_stream(true)).unwrap()
    }
}

/// Serves `reply` to every request.
pub async fn serve(reply: Reply) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (reply, record) = (reply.clone(), Arc::clone(&record));
            tokio::spawn(async move {
                let _ = handle(conn, reply, record).await;
            });
        }
    });
    Fake { base, seen }
}

async fn handle(
    mut conn: TcpStream,
    reply: Reply,
    seen: Arc<Mutex<Vec<Captured>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let target = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .nth(1)
        .unwrap_or("")
        .to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let len = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let mut chunk = [0u8; 4096];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    seen.lock().unwrap().push(Captured {
        target,
        headers,
        body,
    });
    match reply {
        Reply::Full(status, body) => {
            let head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            conn.write_all(head.as_bytes()).await?;
            conn.write_all(&body).await?;
        }
        Reply::Stream(pieces, hold) => {
            conn.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
            )
            .await?;
            for p in pieces {
                conn.write_all(&p).await?;
                conn.flush().await?;
            }
            if hold {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        }
    }
    conn.shutdown().await
}

pub fn ok(body: Value) -> Reply {
    Reply::Full(200, body.to_string().into_bytes())
}

pub fn sse(frames: &[Value], done: bool) -> Reply {
    let mut pieces: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| format!("data: {f}\n\n").into_bytes())
        .collect();
    if done {
        pieces.push(b"data: [DONE]\n\n".to_vec());
    }
    Reply::Stream(pieces, false)
}
