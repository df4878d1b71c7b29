//! One turn as a caller sees it: the records it committed, the text it
//! answered with, and the approval it stopped at, if any.

use agentsessions_proto::v1::{
    ApprovalRef, EventKind, ExecUpdate, LogRecord, Session, event, exec_update::Update,
};

/// What an Exec (or the Resume after a decision) came to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// The records the turn committed, in order.
    pub records: Vec<LogRecord>,
    /// The session as the turn left it.
    pub session: Session,
}

impl Turn {
    /// The turn's answer: the text of its last OUTPUT record ("" if none).
    pub fn output(&self) -> String {
        self.records
            .iter()
            .rev()
            .filter_map(|r| r.event.as_ref())
            .filter(|e| e.kind == EventKind::EventOutput as i32)
            .find_map(|e| match &e.body {
                Some(event::Body::Message(m)) => Some(text(m)),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The approval the turn stopped at, when it parked.
    pub fn pending(&self) -> Option<&ApprovalRef> {
        self.session.pending_approval.as_ref()
    }

    /// Adds one streamed update (records and the final session; deltas are
    /// the stream's business, the records carry the same text).
    pub fn take(&mut self, update: ExecUpdate) {
        match update.update {
            Some(Update::Record(r)) => self.records.push(r),
            Some(Update::Session(s)) => self.session = s,
            Some(Update::Delta(_)) | None => {}
        }
    }
}

/// The text parts of a message, joined.
fn text(m: &agentsessions_proto::v1::Message) -> String {
    m.parts
        .iter()
        .filter_map(|p| match &p.part {
            Some(agentsessions_proto::v1::part::Part::Text(t)) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}
