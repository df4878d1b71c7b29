//! GET /sessions/{uid}/events: the session's new records as server-sent
//! events while the page is open, so a running Exec shows as it commits.
//!
//! The records are the ones a gRPC client reads: each tick asks
//! GetSession for the head and Replay for what lies past the last record
//! sent, with the viewer's caller. Streams are bounded in number
//! ([`super::MAX_LIVE_STREAMS`]) and each ends when the daemon stops or
//! the page goes away.
//!
//! Invariant: a stream sends nothing its viewer could not read right now.
//! Every tick resolves the console session again and verifies its
//! credential again before reading; when that fails (logout, an expired
//! JWT, a JWT whose key left the JWKS file) the stream says `signedout`
//! and ends.

use std::convert::Infallible;
use std::time::Duration;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response as HttpResponse};
use tokio_stream::wrappers::ReceiverStream;

use super::view::{self, RecordRow};
use super::{Console, Failure};

/// How often the head is read at most. A read that takes longer (a
/// journal longer than the daemon's cache is read whole) waits four times
/// its own length before the next, so open pages take at most a fifth of
/// the drive loop.
const TICK: Duration = Duration::from_millis(250);
/// Records sent per tick at most (a burst is spread over ticks).
const BATCH: usize = 200;
/// Events buffered per stream; a stalled browser holds up only its own
/// stream.
const BUFFER: usize = 64;

#[derive(Debug, serde::Deserialize)]
pub struct EventsQuery {
    /// The last seq the page shows.
    #[serde(default)]
    after: i64,
}

/// One timeline row, rendered as the page renders it.
#[derive(Template)]
#[template(path = "console/row.html")]
struct RowFragment<'a> {
    r: &'a RecordRow,
}

#[derive(serde::Serialize)]
struct Head {
    last_seq: i64,
    exec: &'static str,
    compute: &'static str,
    pending: bool,
}

pub async fn events(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(uid): Path<String>,
    Query(q): Query<EventsQuery>,
) -> HttpResponse {
    let viewer = match console.viewer(&headers) {
        Ok(v) => v,
        Err(no) => {
            return Failure::new(StatusCode::UNAUTHORIZED, "Not signed in", no.reason())
                .into_response();
        }
    };
    // The first read answers NOT_FOUND or PERMISSION_DENIED as a page does.
    if let Err(s) = console.get_session(&viewer.caller, &uid).await {
        return Failure::from(s).into_response();
    }
    let Ok(permit) = console.inner.live.clone().try_acquire_owned() else {
        return Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            "too many live pages are open; reload later",
        )
        .into_response();
    };
    // A reconnecting EventSource names the last record it got.
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(BUFFER);
    let mut stop = console.inner.stop.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let mut after = q.after.max(resumed).max(0);
        let mut sent_head: Option<(i64, &'static str, &'static str, bool)> = None;
        let mut pause = Duration::ZERO;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = tx.closed() => return,
                changed = stop.changed() => if changed.is_err() || *stop.borrow() { return },
            }
            // The credential may have expired or been revoked since the
            // last tick: nothing more is read for it.
            let Ok(caller) = console.recheck(&viewer) else {
                let _ = tx.try_send(Ok(Event::default().event("signedout").data("")));
                return;
            };
            let started = tokio::time::Instant::now();
            let Ok(s) = console.get_session(&caller, &uid).await else {
                return;
            };
            pause = TICK.max(started.elapsed() * 4);
            if s.last_seq > after {
                let to = s.last_seq.min(after + BATCH as i64);
                let Ok(records) = console.replay(&caller, &uid, after + 1, to, BATCH).await else {
                    return;
                };
                for r in &records {
                    let row = RecordRow::of(r);
                    let Ok(html) = (RowFragment { r: &row }).render() else {
                        return;
                    };
                    let event = Event::default()
                        .event("record")
                        .id(r.seq.to_string())
                        .data(html);
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                    after = r.seq;
                }
                if records.is_empty() {
                    after = to;
                }
            }
            let head = (
                s.last_seq,
                view::exec_state(&s),
                view::compute(&s),
                s.pending_approval.is_some(),
            );
            if sent_head != Some(head) && after >= s.last_seq {
                sent_head = Some(head);
                let json = serde_json::to_string(&Head {
                    last_seq: head.0,
                    exec: head.1,
                    compute: head.2,
                    pending: head.3,
                })
                .unwrap_or_default();
                if tx
                    .send(Ok(Event::default().event("head").data(json)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}
