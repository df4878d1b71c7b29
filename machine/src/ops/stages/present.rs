//! Presenting a stored session: its row, then (unless it has no records)
//! its journal summarized, rendered as the wire `Session`. Shared by Get and
//! List and by every operation that replies with a session.

use agentsessions_proto::v1::Session;

use crate::ops::stages::cx::Cx;
use crate::ops::stages::expiry;
use crate::ops::stages::flow::unexpected;
use crate::ops::stages::render;
use crate::vocab::shown;
use crate::vocab::{EffectId, Outcome, SessionRow, Status, StoreOutcome};

/// Reads a row and its journal (for the approval projection) and renders
/// it. Shared by Get and List and by operations that reply with a session.
#[derive(Debug, Default)]
pub(crate) struct Render {
    row: Option<SessionRow>,
    get: Option<EffectId>,
    read: Option<EffectId>,
}

/// What a [`Render`] step produced.
pub(crate) enum Rendered {
    Pending,
    NotFound,
    Done(Box<Session>),
    Failed(Status),
}

impl Render {
    /// Starts by reading the row of `uid`.
    pub(crate) fn start(cx: &mut Cx<'_>, uid: &str) -> Self {
        let session = uid.to_owned();
        let get = cx.get_session(&session);
        Self {
            get: Some(get),
            ..Self::default()
        }
    }

    /// Starts from a row already read.
    pub(crate) fn from_row(cx: &mut Cx<'_>, row: SessionRow) -> (Self, Rendered) {
        let mut r = Self::default();
        let step = r.have_row(cx, row);
        (r, step)
    }

    /// True when `id` is one of this render's effects.
    pub(crate) fn owns(&self, id: EffectId) -> bool {
        self.get == Some(id) || self.read == Some(id)
    }

    fn have_row(&mut self, cx: &mut Cx<'_>, row: SessionRow) -> Rendered {
        assert!(
            self.row.is_none() && self.read.is_none(),
            "a render reads one row"
        );
        if row.last_seq == 0 {
            return Rendered::Done(Box::new(render::fresh_session(&row)));
        }
        // The whole journal, summarized: the shell's cache serves it
        // without copying, and the status comes from the summary (records
        // past the row's cursor are ignored, see `render::session_of`).
        self.read = Some(cx.read_journal(&row.uid));
        self.row = Some(row);
        Rendered::Pending
    }

    /// Advances on an outcome this render owns.
    pub(crate) fn on_outcome(
        &mut self,
        cx: &mut Cx<'_>,
        id: EffectId,
        outcome: Outcome,
    ) -> Rendered {
        if self.get == Some(id) {
            self.get = None;
            debug_assert!(self.read.is_none(), "the journal is read after the row");
            return match outcome {
                Outcome::Store(StoreOutcome::Session(Ok(Some(row)))) => self.have_row(cx, row),
                Outcome::Store(StoreOutcome::Session(Ok(None))) => Rendered::NotFound,
                Outcome::Store(StoreOutcome::Session(Err(e))) => {
                    Rendered::Failed(e.status("session"))
                }
                other => unexpected("render", &other),
            };
        }
        assert_eq!(self.read, Some(id));
        assert!(self.get.is_none(), "the row came first");
        self.read = None;
        let row = self.row.take().expect("a read follows a row");
        match outcome {
            Outcome::Store(StoreOutcome::Journal(Ok(journal))) => {
                let core = &mut *cx.core;
                let clock = (&core.config.tools, core.now);
                expiry::observe(&mut core.expiries, clock, &row.uid, &journal);
                match render::session_of(&row, &journal) {
                    Ok(s) => Rendered::Done(Box::new(s)),
                    Err(status) => Rendered::Failed(status),
                }
            }
            Outcome::Store(StoreOutcome::Journal(Err(e))) => {
                Rendered::Failed(e.status(format_args!("session {:?}: read", shown(&row.uid))))
            }
            other => unexpected("render", &other),
        }
    }
}
