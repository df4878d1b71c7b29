//! The HarnessRegistry admin service.

use agentsessions_proto::v1::{
    GetHarnessRequest, ListHarnessesRequest, RegisterHarnessRequest, RetireHarnessRequest,
};

use super::{Flow, unexpected};
use crate::host::{Cx, EffectId, Outcome, RequestId, Status};

#[allow(dead_code)]
enum Call {
    Register(RegisterHarnessRequest),
    Get(GetHarnessRequest),
    List(ListHarnessesRequest),
    Retire(RetireHarnessRequest),
}

pub(crate) struct RegistryOp {
    request: RequestId,
    #[allow(dead_code)]
    call: Call,
}

impl RegistryOp {
    pub(crate) fn register(request: RequestId, r: RegisterHarnessRequest) -> Self {
        Self {
            request,
            call: Call::Register(r),
        }
    }
    pub(crate) fn get(request: RequestId, r: GetHarnessRequest) -> Self {
        Self {
            request,
            call: Call::Get(r),
        }
    }
    pub(crate) fn list(request: RequestId, r: ListHarnessesRequest) -> Self {
        Self {
            request,
            call: Call::List(r),
        }
    }
    pub(crate) fn retire(request: RequestId, r: RetireHarnessRequest) -> Self {
        Self {
            request,
            call: Call::Retire(r),
        }
    }
    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        cx.reply(
            self.request,
            Err(Status::unimplemented("registry: not yet")),
        );
        Flow::Done
    }
    pub(crate) fn on_outcome(&mut self, _cx: &mut Cx<'_>, _id: EffectId, outcome: Outcome) -> Flow {
        unexpected("registry", &outcome)
    }
}
