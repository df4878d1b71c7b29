//! Notifications: telling people that an approval waits, was decided or
//! expired, or that a turn failed, by POSTing to their webhooks.
//!
//! Invariant: the journal is the queue. What to announce is written by the
//! store in the same transaction as the record announced
//! (`agentsessions_journal::outbox`); this module only renders, signs and
//! delivers what the outbox holds, so nothing committed goes unannounced
//! and a daemon that dies mid-delivery loses nothing.

pub mod body;
pub mod deliver;
pub mod sign;

pub use body::Format;

/// `--notify …`: where and how notices go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifySettings {
    /// Receivers (`--notify URL`, repeatable); empty: no notifications.
    pub urls: Vec<String>,
    /// `--notify-secret`: signs each body (HMAC-SHA256).
    pub secret: Option<String>,
    /// `--notify-format`.
    pub format: Format,
    /// `--notify-include-arguments`: put tool arguments in the body.
    pub include_arguments: bool,
    /// The console's base URL for links (set from `--console-addr`).
    pub console: Option<String>,
}

impl NotifySettings {
    /// Why these settings cannot work, if they cannot.
    pub fn problem(&self) -> Option<String> {
        self.urls.iter().find_map(|u| match reqwest::Url::parse(u) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => None,
            Ok(_) => Some(format!("--notify {u:?}: want an http:// or https:// URL")),
            Err(e) => Some(format!("--notify {u:?}: {e}")),
        })
    }
}
