//! Harness actions the fuzz input chooses, shared by the targets that play
//! a harness. An action becomes an event only when it is sent, so that it
//! can echo what the host sent last (the execution id, the park tuple):
//! a purely random PARKED would almost never match, and the handshake
//! behind a matching one would go unexplored.

use agentsessions_proto::v1::{
    ApprovalRef, ApprovalResult, Event, EventKind, ExecutionStart, HarnessEnd, Mediation,
    ModelCall, ToolCall, ToolResult, Usage, event::Body,
};
use arbitrary::{Result, Unstructured};

use super::draw;
use crate::harness::Reply;
use agentsessions_machine::events;

/// One harness action, turned into an event when it is sent.
///
/// Decoded from a fixed three bytes (tag, two parameters), plus an event
/// for [`Act::Raw`], so that seed inputs can be written by hand.
#[derive(Debug, Clone)]
pub(super) enum Act {
    /// A tool call with id `c<id % 3>` (keyed `k-c<id % 3>` when `keyed`).
    Tool {
        id: u8,
        mediation: u8,
        keyed: bool,
    },
    Model,
    Output,
    Usage,
    /// A result the harness claims for `c<id % 3>`, maybe with receipt fields.
    Report {
        id: u8,
        receipt: bool,
    },
    End {
        completed: bool,
    },
    /// The PARKED acknowledgement of the last park sent.
    Ack,
    /// A PARKED acknowledgement with one part of the tuple wrong.
    Forged {
        what: u8,
        delta: i8,
    },
    /// A host-owned kind: a decision, a request, a start marker.
    HostOwned {
        what: u8,
        approved: bool,
    },
    /// Anything at all, under this execution's id or another.
    Raw {
        own_exec: bool,
        event: Event,
    },
}

impl Act {
    /// Tags: 0 tool, 1 model, 2 output, 3 usage, 4 report, 5 end, 6 ack,
    /// 7 forged, 8 host-owned, 9 raw (mod 10).
    pub(super) fn decode(u: &mut Unstructured<'_>) -> Result<Self> {
        let [tag, a, b]: [u8; 3] = u.arbitrary()?;
        Ok(match tag % 10 {
            0 => Self::Tool {
                id: a,
                mediation: b % 5,
                keyed: b < 128,
            },
            1 => Self::Model,
            2 => Self::Output,
            3 => Self::Usage,
            4 => Self::Report {
                id: a,
                receipt: b % 2 == 1,
            },
            5 => Self::End {
                completed: a % 4 != 0,
            },
            6 => Self::Ack,
            7 => Self::Forged {
                what: a,
                delta: i8::from_le_bytes([b]),
            },
            8 => Self::HostOwned {
                what: a,
                approved: b % 2 == 1,
            },
            _ => Self::Raw {
                own_exec: a % 4 != 0,
                event: draw::event(u, true)?,
            },
        })
    }
}

/// How a harness ends its answer.
#[derive(Debug, Clone, Copy)]
pub(super) enum Then {
    Open,
    Close,
    Fail,
}

impl Then {
    /// One byte: 0 open, 1 close, 2 fail (mod 3).
    pub(super) fn decode(u: &mut Unstructured<'_>) -> Result<Self> {
        Ok(match u.arbitrary::<u8>()? % 3 {
            0 => Self::Open,
            1 => Self::Close,
            _ => Self::Fail,
        })
    }
}

/// One scripted answer to one controller frame.
#[derive(Debug, Clone)]
pub(super) struct Step {
    pub(super) acts: Vec<Act>,
    pub(super) then: Then,
}

impl Step {
    /// A count byte (mod 5), that many actions, then how it ends.
    pub(super) fn decode(u: &mut Unstructured<'_>) -> Result<Self> {
        let n = u.arbitrary::<u8>()? % 5;
        let acts = (0..n).map(|_| Act::decode(u)).collect::<Result<_>>()?;
        Ok(Self {
            acts,
            then: Then::decode(u)?,
        })
    }
}

/// What the puppet harnesses share with the rig.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) plan: std::collections::VecDeque<Step>,
    pub(super) last_exec: String,
    pub(super) last_park: Option<ApprovalRef>,
}

impl Step {
    pub(super) fn reply(&self, s: &Shared) -> Reply {
        let events = self
            .acts
            .iter()
            .take(8)
            .map(|a| a.event(&s.last_exec, s))
            .collect();
        Reply {
            events,
            close: matches!(self.then, Then::Close),
            fail: matches!(self.then, Then::Fail).then(|| "puppet failed".to_owned()),
        }
    }
}

impl Act {
    pub(super) fn gated(id: u8) -> Self {
        Self::Tool {
            id,
            mediation: Mediation::RequiresApproval as u8,
            keyed: true,
        }
    }

    /// The event this action sends on execution `exec`.
    pub(super) fn event(&self, exec: &str, s: &Shared) -> Event {
        let park = s.last_park.clone().unwrap_or_else(|| ApprovalRef {
            execution_id: exec.to_owned(),
            tool_call_id: "c0".into(),
            request_seq: 1,
        });
        let (kind, body) = match self {
            Self::Tool {
                id,
                mediation,
                keyed,
            } => {
                let id = format!("c{}", id % 3);
                let call = ToolCall {
                    idempotency_key: if *keyed {
                        format!("k-{id}")
                    } else {
                        String::new()
                    },
                    id,
                    tool: "write".into(),
                    args: None,
                    mediation: i32::from(mediation % 5),
                };
                (EventKind::EventToolCall, Body::Tool(call))
            }
            Self::Model => {
                let call = ModelCall {
                    model: "echo".into(),
                    id: "m1".into(),
                    messages: vec![events::text_message("user", "hi")],
                    ..ModelCall::default()
                };
                (EventKind::EventModelCall, Body::Model(call))
            }
            Self::Output => (
                EventKind::EventOutput,
                Body::Message(events::assistant_text("out")),
            ),
            Self::Usage => (
                EventKind::EventUsage,
                Body::Usage(Usage {
                    model: "echo".into(),
                    input_tokens: 1,
                    ..Usage::default()
                }),
            ),
            Self::Report { id, receipt } => {
                let result = ToolResult {
                    id: format!("c{}", id % 3),
                    approval_request_seq: i64::from(*receipt) * park.request_seq,
                    ..ToolResult::default()
                };
                (EventKind::EventToolResult, Body::Result(result))
            }
            Self::End { completed } => {
                let state = if *completed { "COMPLETED" } else { "FAILED" };
                let end = HarnessEnd {
                    state: state.into(),
                    error: None,
                };
                (EventKind::EventEnd, Body::End(end))
            }
            Self::Ack => (EventKind::EventParked, Body::Parked(park)),
            Self::Forged { what, delta } => {
                let mut forged = park;
                match what % 3 {
                    0 => forged.execution_id.push('x'),
                    1 => forged.tool_call_id = format!("c{}", (*delta).rem_euclid(3)),
                    _ => forged.request_seq += i64::from(*delta),
                }
                (EventKind::EventParked, Body::Parked(forged))
            }
            Self::HostOwned { what, approved } => match what % 3 {
                0 => (
                    EventKind::EventApprovalResult,
                    Body::ApprovalResult(ApprovalResult {
                        tool_call_id: park.tool_call_id,
                        approved: *approved,
                        reason: "forged".into(),
                        request_seq: park.request_seq,
                    }),
                ),
                1 => return events::approval_request(exec, &park.tool_call_id),
                _ => return events::execution_start(exec, ExecutionStart::default()),
            },
            Self::Raw { own_exec, event } => {
                let mut ev = event.clone();
                if *own_exec {
                    ev.execution_id = exec.to_owned();
                }
                return ev;
            }
        };
        events::event(exec, kind, body)
    }
}
