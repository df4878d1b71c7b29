//! Compact renderings of effects, outcomes and harness input: stable
//! digests (for state deduplication and the trace digest) and one-line
//! descriptions (for printed traces).

use agentsessions_machine::events::{self, body};
use agentsessions_machine::vocab::{
    ClientEffect, Effect, HarnessEffect, HarnessInput, HarnessOutcome, Outcome, Request,
    StoreEffect, StoreOutcome, StreamItem,
};

use crate::digest::Fnv;
use crate::world::{Item, What};

/// A compact, stable digest of an outcome (enough to tell states apart).
pub(crate) fn hash_outcome(h: &mut Fnv, o: &Outcome) {
    match o {
        Outcome::Store(StoreOutcome::Appended(Ok(r))) => {
            h.str("appended");
            for x in r {
                h.i64(x.seq).str(&x.content_hash);
            }
        }
        Outcome::Store(StoreOutcome::Appended(Err(e))) => {
            h.str("append-err").str(&format!("{e:?}"));
        }
        Outcome::Store(StoreOutcome::Fence(r)) => {
            h.str("fence").i64(*r.as_ref().unwrap_or(&-1));
        }
        Outcome::Store(StoreOutcome::Journal(Ok(j))) => {
            h.str("journal").u64(j.len() as u64);
            if let Some(last) = j.last() {
                h.str(&last.content_hash);
            }
        }
        Outcome::Store(StoreOutcome::Log(Ok(r))) => {
            h.str("log").u64(r.len() as u64);
            if let Some(last) = r.last() {
                h.str(&last.content_hash);
            }
        }
        Outcome::Store(StoreOutcome::Session(Ok(Some(row)))) => {
            h.str("row").i64(row.last_seq).i64(row.compute_state as i64);
        }
        other => {
            h.str(&format!("{other:?}"));
        }
    }
}

pub(crate) fn hash_input(h: &mut Fnv, i: &HarnessInput) {
    match i {
        HarnessInput::Event(ev) => {
            h.str("ev").i64(i64::from(ev.kind)).str(&ev.execution_id);
            if let Some(m) = body::model(ev) {
                h.str(&format!("{:?}", m.messages));
            }
        }
        HarnessInput::Closed => {
            h.str("closed");
        }
        HarnessInput::Failed(e) => {
            h.str("failed").str(e);
        }
        HarnessInput::Unavailable(e) => {
            h.str("unavailable").str(e);
        }
    }
}

/// Mixes a performed effect into the trace digest.
pub(crate) fn digest_effect(h: &mut Fnv, host: usize, e: &Effect) {
    h.u64(host as u64);
    match e {
        Effect::Store(StoreEffect::Append {
            session,
            expected_last_seq,
            fence,
            events,
            ..
        }) => {
            h.str("append")
                .str(session)
                .i64(*expected_last_seq)
                .i64(*fence);
            for ev in events {
                h.i64(i64::from(ev.kind));
            }
        }
        Effect::Store(StoreEffect::Fork {
            session,
            parent,
            at_seq,
            fence,
            ..
        }) => {
            h.str("fork")
                .str(session)
                .str(parent)
                .i64(*at_seq)
                .i64(*fence);
        }
        Effect::Client(ClientEffect::Stream { request, item }) => {
            h.str("stream").u64(request.0);
            if let StreamItem::Record(r) = item {
                h.str(&r.record().content_hash);
            }
        }
        Effect::Client(ClientEffect::Reply { request, result }) => {
            h.str("reply").u64(request.0).i64(match result {
                Ok(_) => 0,
                Err(s) => s.code as i64,
            });
        }
        Effect::Harness(HarnessEffect::Send { conn, frame, .. }) => {
            h.str("send").u64(conn.0).str(&frame.execution_id);
        }
        other => {
            h.str(other.name()).u64(other.id().map_or(0, |i| i.0));
        }
    }
}

/// A one-line description of an item (for printed traces).
pub fn describe(item: &Item) -> String {
    match &item.what {
        What::Effect(e) => match e {
            Effect::Store(StoreEffect::Append {
                session,
                expected_last_seq,
                fence,
                events,
                ..
            }) => format!(
                "h{} perform Append {session} after={expected_last_seq} fence={fence} [{}]",
                item.host,
                events
                    .iter()
                    .map(|e| events::kind_of(e)
                        .as_str_name()
                        .trim_start_matches("EVENT_"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Effect::Store(StoreEffect::Fork {
                session,
                parent,
                at_seq,
                fence,
                ..
            }) => format!(
                "h{} perform Fork {session} shares {parent}..={at_seq} fence={fence}",
                item.host
            ),
            other => format!("h{} perform {}", item.host, other.name()),
        },
        What::Outcome(id, o, ..) => {
            let what = match o {
                Outcome::Store(StoreOutcome::Appended(Ok(r))) => format!(
                    "Appended seq {}..={}",
                    r.first().map_or(0, |x| x.seq),
                    r.last().map_or(0, |x| x.seq)
                ),
                Outcome::Store(StoreOutcome::Appended(Err(e))) => format!("Append failed {e:?}"),
                Outcome::Store(StoreOutcome::Fence(f)) => format!("Fence {f:?}"),
                other => outcome_name(other).to_owned(),
            };
            format!("h{} deliver #{} {what}", item.host, id.0)
        }
        What::ToolDone(id, session, key, _) => format!(
            "h{} executor records the result of #{} ({session} key {key})",
            item.host, id.0
        ),
        What::Harness(c, i) => match i {
            HarnessInput::Event(ev) => format!(
                "h{} harness conn {} {}",
                item.host,
                c.0,
                events::kind_of(ev).as_str_name()
            ),
            HarnessInput::Closed => format!("h{} harness conn {} closed", item.host, c.0),
            HarnessInput::Failed(e) => format!("h{} harness conn {} failed: {e}", item.host, c.0),
            HarnessInput::Unavailable(e) => {
                format!("h{} harness conn {} unavailable: {e}", item.host, c.0)
            }
        },
    }
}

/// The variant name of an outcome.
pub fn outcome_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Store(StoreOutcome::Appended(_)) => "Appended",
        Outcome::Store(StoreOutcome::LeaseHeld(_)) => "LeaseHeld",
        Outcome::Store(StoreOutcome::Fence(_)) => "Fence",
        Outcome::Store(StoreOutcome::Log(_)) => "Log",
        Outcome::Store(StoreOutcome::Journal(_)) => "Journal",
        Outcome::Store(StoreOutcome::Session(_)) => "Session",
        Outcome::Store(StoreOutcome::Put(_)) => "Put",
        Outcome::Store(StoreOutcome::SessionPage(_)) => "SessionPage",
        Outcome::Store(StoreOutcome::HarnessRow(_)) => "HarnessRow",
        Outcome::Store(StoreOutcome::HarnessRows(_)) => "HarnessRows",
        Outcome::Store(StoreOutcome::Registered(_)) => "Registered",
        Outcome::Store(StoreOutcome::Retired(_)) => "Retired",
        Outcome::Store(StoreOutcome::Reserved(_)) => "Reserved",
        Outcome::Store(StoreOutcome::Deleted(_)) => "Deleted",
        Outcome::Store(StoreOutcome::Stale(_)) => "Stale",
        Outcome::Harness(HarnessOutcome::Described(_)) => "Described",
        Outcome::Runtime(_) => "Runtime",
        Outcome::Harness(HarnessOutcome::Dialed(_)) => "Dialed",
        Outcome::Model(_) => "Model",
        Outcome::Tool(_) => "Tool",
    }
}

/// A client call in one line.
pub fn request_brief(r: &Request) -> String {
    let text = |inputs: &[agentsessions_proto::v1::Message]| {
        inputs
            .iter()
            .map(events::message_text)
            .collect::<Vec<_>>()
            .join(",")
    };
    match r {
        Request::CreateSession(_) => "CreateSession".into(),
        Request::Exec(e) => format!("Exec {} [{}]", e.session, text(&e.inputs)),
        Request::Resume(x) => format!("Resume {}", x.session),
        Request::Suspend(x) => format!("Suspend {}", x.session),
        Request::Approve(a) => format!(
            "Approve {} call={} request_seq={} approved={:?}",
            a.session, a.tool_call_id, a.request_seq, a.approved
        ),
        Request::Fork(f) => format!("Fork {} at={}", f.session, f.at_seq),
        Request::GetSession(g) => format!("GetSession {}", g.uid),
        Request::Replay(x) => format!("Replay {}", x.session),
        Request::ReplayHarness { session } => format!("ReplayHarness {session}"),
        other => format!("{other:?}"),
    }
}
