//! Fork: branch a session at a seq into N children.

use agentsessions_proto::v1::ForkRequest;

use super::{Flow, unexpected};
use crate::host::{Cx, EffectId, Outcome, RequestId, Status};

pub(crate) struct ForkOp {
    request: RequestId,
    #[allow(dead_code)]
    req: ForkRequest,
}

impl ForkOp {
    pub(crate) fn new(request: RequestId, req: ForkRequest) -> Self {
        Self { request, req }
    }
    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        cx.reply(self.request, Err(Status::unimplemented("fork: not yet")));
        Flow::Done
    }
    pub(crate) fn on_outcome(&mut self, _cx: &mut Cx<'_>, _id: EffectId, outcome: Outcome) -> Flow {
        unexpected("fork", &outcome)
    }
}
