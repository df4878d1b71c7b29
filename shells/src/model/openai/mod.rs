//! An OpenAI-compatible Chat Completions client.
//!
//! HTTP goes through `reqwest` with rustls on ring and bundled webpki roots:
//! it reuses the hyper/tokio stack already in the build (tonic), and needs
//! only rustc plus a C compiler, no cmake and no system OpenSSL.

use std::fmt;
use std::time::Duration;

use agentsessions_machine::vocab::ModelReply;
use agentsessions_proto::v1::ModelCall;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::{BoxFuture, ChunkSink, ModelClient, ModelError};

pub mod sse;
pub mod wire;

use sse::{LineSplitter, Step, StreamState};
use wire::{ChatResponse, Completion, ErrorEnvelope};

/// Default API root.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Default endpoint path under the root.
pub const DEFAULT_PATH: &str = "/chat/completions";
/// Default auth header name.
pub const DEFAULT_AUTH_HEADER: &str = "Authorization";
/// Whole-request timeout (connect, send, and reading the full body).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest response body read, and largest streamed completion accumulated.
pub const MAX_BODY: usize = 32 << 20;
/// Largest server-sent-events line.
pub const MAX_SSE_LINE: usize = 8 << 20;
/// How much of a non-JSON error body is quoted.
const ERROR_SNIPPET_CHARS: usize = 200;

/// Client settings. Build with [`OpenAiConfig::new`] and the `with_*` methods.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// API root; a trailing `/` is trimmed.
    pub base_url: String,
    /// Endpoint path; a leading `/` is added. May carry a query string.
    pub path: String,
    /// The model used when a request names none or names `echo`. Required.
    pub model: String,
    /// The key; empty sends no auth header.
    pub api_key: String,
    /// Header carrying the key: `Authorization` (any case) sends
    /// `Bearer <key>`, any other name sends the raw key.
    pub auth_header: String,
    /// Extra headers, applied last (each replaces a same-named one).
    pub headers: Vec<(String, String)>,
    /// Whole-request timeout.
    pub timeout: Duration,
    /// Stream completions (forwarding text chunks) instead of one response.
    pub stream: bool,
}

// The key must never reach logs, so Debug is written by hand.
impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("path", &self.path)
            .field("model", &self.model)
            .field(
                "api_key",
                &if self.api_key.is_empty() {
                    ""
                } else {
                    "<redacted>"
                },
            )
            .field("auth_header", &self.auth_header)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("stream", &self.stream)
            .finish()
    }
}

impl OpenAiConfig {
    /// Defaults around a default `model`: the public endpoint, no key,
    /// `Authorization`, two minutes, streaming on.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_owned(),
            path: DEFAULT_PATH.to_owned(),
            model: model.into(),
            api_key: String::new(),
            auth_header: DEFAULT_AUTH_HEADER.to_owned(),
            headers: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            stream: true,
        }
    }

    /// Sets the API root (empty keeps the default).
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        let url = url.into();
        if !url.is_empty() {
            self.base_url = url;
        }
        self
    }

    /// Sets the endpoint path (empty keeps the default).
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        let path = path.into();
        if !path.is_empty() {
            self.path = path;
        }
        self
    }

    /// Sets the key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = key.into();
        self
    }

    /// Sets the header that carries the key (empty keeps the default).
    pub fn with_auth_header(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !name.is_empty() {
            self.auth_header = name;
        }
        self
    }

    /// Adds an extra header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the whole-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Chooses streaming or single-response completions.
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// The endpoint URL: root without trailing `/`, path with leading `/`.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if self.path.starts_with('/') {
            format!("{base}{}", self.path)
        } else {
            format!("{base}/{}", self.path)
        }
    }
}

/// The Chat Completions client. Cheap to clone.
#[derive(Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    default_model: String,
    /// Kept only to scrub it out of provider error text.
    api_key: String,
    stream: bool,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("default_model", &self.default_model)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// Validates `config` and builds the client.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        if config.model.is_empty() {
            return Err(ModelError::MissingModel);
        }
        let url = reqwest::Url::parse(&config.endpoint()).map_err(|_| ModelError::InvalidUrl)?;
        let headers = build_headers(&config)?;
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| ModelError::Client(e.without_url().to_string()))?;
        Ok(Self {
            http,
            url,
            headers,
            default_model: config.model,
            api_key: config.api_key,
            stream: config.stream,
        })
    }

    /// The model a request is sent with: its own, unless empty or `echo`
    /// (the echo harness's placeholder), which means the configured default.
    pub fn effective_model<'a>(&'a self, request: &'a ModelCall) -> &'a str {
        match request.model.as_str() {
            "" | "echo" => &self.default_model,
            m => m,
        }
    }

    /// One non-streamed completion.
    pub async fn complete(&self, request: &ModelCall) -> Result<ModelReply, ModelError> {
        let model = self.effective_model(request);
        let body = wire::encode_request(model, request, false)?;
        let resp = self.send(model, &body).await?;
        let bytes = read_limited(resp, model).await?;
        let parsed: ChatResponse =
            serde_json::from_slice(&bytes).map_err(|_| ModelError::InvalidBody {
                model: model.to_owned(),
            })?;
        let Some(choice) = parsed.choices.unwrap_or_default().into_iter().next() else {
            return Err(ModelError::NoChoices {
                model: model.to_owned(),
            });
        };
        Completion::from_message(choice.message.unwrap_or_default(), parsed.usage).into_reply(model)
    }

    /// One streamed completion; text deltas go to `on_chunk` in order.
    pub async fn stream(
        &self,
        request: &ModelCall,
        on_chunk: ChunkSink<'_>,
    ) -> Result<ModelReply, ModelError> {
        let model = self.effective_model(request);
        let body = wire::encode_request(model, request, true)?;
        let mut resp = self.send(model, &body).await?;
        let mut lines = LineSplitter::new(MAX_SSE_LINE);
        let mut state = StreamState::new(model, MAX_BODY);
        let too_long = || ModelError::LineTooLong {
            model: model.to_owned(),
            limit: MAX_SSE_LINE,
        };
        let mut done = false;
        'read: loop {
            let chunk = resp.chunk().await.map_err(|e| self.transport(model, e))?;
            let Some(chunk) = chunk else { break };
            lines.push(&chunk);
            while let Some(line) = lines.next_line().map_err(|_| too_long())? {
                let step = state
                    .line(&line, &mut *on_chunk)
                    .map_err(|e| self.scrub(e))?;
                if step == Step::Done {
                    done = true;
                    break 'read;
                }
            }
        }
        if !done && let Some(line) = lines.finish() {
            done = state
                .line(&line, &mut *on_chunk)
                .map_err(|e| self.scrub(e))?
                == Step::Done;
        }
        state.finish(done)?.into_reply(model)
    }

    /// POSTs `body`, returning the response only if it is a 200.
    async fn send(
        &self,
        model: &str,
        body: &serde_json::Value,
    ) -> Result<reqwest::Response, ModelError> {
        let bytes = serde_json::to_vec(body).map_err(|_| ModelError::EncodeArgs)?;
        let mut request = self
            .http
            .post(self.url.clone())
            .headers(self.headers.clone());
        // The model call's span is current: a provider that traces joins it.
        for (key, value) in crate::telemetry::propagation::outgoing_headers() {
            request = request.header(key, value);
        }
        let resp = request
            .body(bytes)
            .send()
            .await
            .map_err(|e| self.transport(model, e))?;
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(resp);
        }
        // The error body is only quoted, so a failure to read it just means
        // there is less to say.
        let body = read_limited(resp, model).await.unwrap_or_default();
        Err(self.scrub(ModelError::Status {
            model: model.to_owned(),
            status,
            detail: error_detail(&body),
        }))
    }

    fn transport(&self, model: &str, e: reqwest::Error) -> ModelError {
        // The URL may carry a query with credentials; it is dropped, and the
        // remaining text is reqwest's own description.
        let detail = if e.is_timeout() {
            "timeout".to_owned()
        } else {
            e.without_url().to_string()
        };
        self.scrub(ModelError::Transport {
            model: model.to_owned(),
            detail,
        })
    }

    /// Removes the key from provider-supplied text (some providers echo it).
    fn scrub(&self, mut e: ModelError) -> ModelError {
        if let ModelError::Status { detail, .. }
        | ModelError::Provider { detail, .. }
        | ModelError::Transport { detail, .. } = &mut e
            && self.api_key.len() >= 4
            && detail.contains(&self.api_key)
        {
            *detail = detail.replace(&self.api_key, "<redacted>");
        }
        e
    }
}

impl ModelClient for OpenAiClient {
    fn invoke<'a>(
        &'a self,
        request: &'a ModelCall,
        on_chunk: ChunkSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        if self.stream {
            Box::pin(self.stream(request, on_chunk))
        } else {
            Box::pin(self.complete(request))
        }
    }
}

fn build_headers(config: &OpenAiConfig) -> Result<HeaderMap, ModelError> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if !config.api_key.is_empty() {
        let name = if config.auth_header.is_empty() {
            DEFAULT_AUTH_HEADER
        } else {
            config.auth_header.as_str()
        };
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| ModelError::InvalidHeader)?;
        let raw = if name == AUTHORIZATION {
            format!("Bearer {}", config.api_key)
        } else {
            config.api_key.clone()
        };
        let mut value = HeaderValue::from_str(&raw).map_err(|_| ModelError::InvalidHeader)?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    for (name, value) in &config.headers {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| ModelError::InvalidHeader)?;
        let value = HeaderValue::from_str(value).map_err(|_| ModelError::InvalidHeader)?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Reads the body, refusing more than [`MAX_BODY`] bytes.
async fn read_limited(mut resp: reqwest::Response, model: &str) -> Result<Vec<u8>, ModelError> {
    let mut out = Vec::new();
    loop {
        let chunk = resp.chunk().await.map_err(|e| ModelError::Transport {
            model: model.to_owned(),
            detail: e.without_url().to_string(),
        })?;
        let Some(chunk) = chunk else { return Ok(out) };
        if out.len() + chunk.len() > MAX_BODY {
            return Err(ModelError::TooLarge {
                model: model.to_owned(),
                limit: MAX_BODY,
            });
        }
        out.extend_from_slice(&chunk);
    }
}

/// What a non-200 says: the provider's `error.message`, else the start of
/// the body, else nothing (the status alone is reported).
fn error_detail(body: &[u8]) -> String {
    if let Ok(ErrorEnvelope { error: Some(e) }) = serde_json::from_slice::<ErrorEnvelope>(body)
        && let Some(m) = e.message.filter(|m| !m.is_empty())
    {
        return m;
    }
    let text = String::from_utf8_lossy(body);
    text.trim().chars().take(ERROR_SNIPPET_CHARS).collect()
}
