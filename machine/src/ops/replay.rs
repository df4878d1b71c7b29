//! Replay (read-only record stream) and ReplayHarness (re-run the harness
//! over the journal with every effect served).

use agentsessions_proto::v1::ReplayRequest;

use super::{Flow, unexpected};
use crate::host::config::REPLAY_PAGE;
use crate::host::{
    Committed, ConnId, Cx, Effect, EffectId, HarnessInput, Outcome, RequestId, Response, Status,
    StreamItem,
};

/// Sessions.Replay: committed records, verbatim, in pages. No validation:
/// an unknown session is an empty stream.
pub(crate) struct ReplayOp {
    request: RequestId,
    req: ReplayRequest,
    next: i64,
    read: Option<EffectId>,
}

impl ReplayOp {
    pub(crate) fn new(request: RequestId, req: ReplayRequest) -> Self {
        Self {
            request,
            next: req.from_seq.max(1),
            req,
            read: None,
        }
    }

    fn read_page(&mut self, cx: &mut Cx<'_>) -> Flow {
        let last = self.next + REPLAY_PAGE - 1;
        let to_seq = if self.req.to_seq > 0 {
            last.min(self.req.to_seq)
        } else {
            last
        };
        if self.req.to_seq > 0 && self.next > self.req.to_seq {
            cx.reply(self.request, Ok(Response::StreamEnd));
            return Flow::Done;
        }
        let (session, from_seq) = (self.req.session.clone(), self.next);
        self.read = Some(cx.request(|id| Effect::ReadLog {
            id,
            session,
            from_seq,
            to_seq,
        }));
        Flow::Continue
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        self.read_page(cx)
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        assert_eq!(self.read.take(), Some(id));
        let records = match outcome {
            Outcome::Log(Ok(r)) => r,
            Outcome::Log(Err(e)) => {
                cx.reply(self.request, Err(Status::internal(format!("read: {e}"))));
                return Flow::Done;
            }
            other => unexpected("replay", &other),
        };
        let full = records.len() as i64 == REPLAY_PAGE;
        for r in records {
            assert!(r.seq >= self.next, "reads come back in seq order");
            self.next = r.seq + 1;
            cx.stream(self.request, StreamItem::Record(Committed::new(r)));
        }
        if full {
            return self.read_page(cx);
        }
        cx.reply(self.request, Ok(Response::StreamEnd));
        Flow::Done
    }
}

/// Re-runs the harness over every completed execution (not yet served).
pub(crate) struct ReplayHarnessOp {
    request: RequestId,
    #[allow(dead_code)]
    session: String,
}

impl ReplayHarnessOp {
    pub(crate) fn new(request: RequestId, session: String) -> Self {
        Self { request, session }
    }
    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        cx.reply(
            self.request,
            Err(Status::unimplemented("replay harness: not yet")),
        );
        Flow::Done
    }
    pub(crate) fn on_outcome(&mut self, _cx: &mut Cx<'_>, _id: EffectId, outcome: Outcome) -> Flow {
        unexpected("replay harness", &outcome)
    }
    pub(crate) fn on_harness(&mut self, _cx: &mut Cx<'_>, _c: ConnId, _i: HarnessInput) -> Flow {
        Flow::Continue
    }
}
