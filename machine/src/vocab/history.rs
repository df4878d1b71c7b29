//! The prior events a harness starts an execution from, shared with the
//! journal they came from rather than copied.
//!
//! Invariant: cloning is O(1) (the records are reference-counted in a
//! persistent vector), so a turn at seq 10 000 hands its harness the same
//! few words a turn at seq 10 does. A Start frame's `history` stays empty
//! inside the machine; the shell that sends it delivers this value beside
//! it: by reference to an in-process harness, encoded onto the wire for a
//! remote one ([`History::attach`]).

use std::fmt;
use std::sync::Arc;

use agentsessions_proto::v1::controller_frame::Frame;
use agentsessions_proto::v1::{ControllerFrame, Event, LogRecord};
use imbl::Vector;

/// See the module docs.
#[derive(Clone, Default)]
pub struct History {
    /// Journal records; every record a store holds carries its event.
    records: Vector<Arc<LogRecord>>,
}

impl History {
    /// The history of shared journal records (seq order).
    pub fn from_shared(records: Vector<Arc<LogRecord>>) -> Self {
        debug_assert!(
            records
                .iter()
                .zip(records.iter().skip(1))
                .all(|(a, b)| a.seq < b.seq),
            "a journal's records come in seq order"
        );
        Self { records }
    }

    /// A history of owned events (a frame read off the wire, a projection).
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> Self {
        let records = events
            .into_iter()
            .map(|event| {
                Arc::new(LogRecord {
                    event: Some(event),
                    ..LogRecord::default()
                })
            })
            .collect();
        Self { records }
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when there is no prior event.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The events in order, borrowed.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Event> + '_ {
        self.records.iter().filter_map(|r| r.event.as_ref())
    }

    /// The events copied out (what a wire frame must own).
    pub fn to_vec(&self) -> Vec<Event> {
        self.iter().cloned().collect()
    }

    /// Puts `history` into `frame` when it is a Start whose history was
    /// left empty for delivery: the wire form, for a performer that must
    /// own the events (a gRPC stream, a scripted test harness).
    pub fn attach(frame: &mut ControllerFrame, history: Option<&History>) {
        let (Some(Frame::Start(start)), Some(history)) = (frame.frame.as_mut(), history) else {
            return;
        };
        debug_assert!(start.history.is_empty(), "a Start carries one history");
        start.history = history.to_vec();
    }
}

impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for History {
    // The events would bury every trace that prints an effect.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "History({} events)", self.len())
    }
}
