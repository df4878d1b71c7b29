//! Placement: admit a harness, provision compute, connect, fence.
//!
//! The steps, in order, each an effect: Describe the route (bounded) and
//! gate it (descriptor id, then CanPlace); create or restore an incarnation;
//! dial its address; for backends whose address may serve a different
//! harness than the one admission saw, describe the turn's own connection
//! and gate again; mint a fence. A refusal at any step provisions nothing
//! further and journals nothing; a failure after the dial closes it.

use std::collections::BTreeSet;

use agentsessions_proto::v1::{HarnessDescriptor, Resumability, SnapshotRef};

use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::unexpected;
use crate::vocab::shown;
use crate::vocab::{
    ConnId, Effect, EffectId, HarnessEffect, HarnessFailure, HarnessOutcome, Outcome, Route,
    RuntimeCall, RuntimeOp, RuntimeReply, Status, StoreOutcome,
};

/// How compute is obtained.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Provision {
    /// Only describe and gate (Fork admission, approval-free checks).
    AdmitOnly,
    /// A fresh incarnation (Exec).
    Create,
    /// Restore from a snapshot (Resume).
    Restore(SnapshotRef),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Describe(EffectId),
    Provision(EffectId),
    Dial(EffectId),
    Recheck(EffectId),
    Fence(EffectId),
    Ready,
}

/// Progress of a placement.
pub(crate) enum Placed {
    Pending,
    Ready,
    Failed(Status),
}

/// One placement in progress. See the module docs.
#[derive(Debug)]
pub(crate) struct Placement {
    pub(crate) harness: String,
    pub(crate) route: Route,
    session: String,
    provision: Provision,
    mint_fence: bool,
    step: Step,
    /// The descriptor of the harness the turn will talk to.
    pub(crate) descriptor: Option<HarnessDescriptor>,
    /// The turn's connection, once dialed.
    pub(crate) conn: Option<ConnId>,
    /// The minted fence (0 when none was asked for).
    pub(crate) fence: i64,
}

/// Maps a Describe failure: outages are UNAVAILABLE, anything else INTERNAL.
pub(crate) fn describe_error(harness: &str, e: &HarnessFailure) -> Status {
    match e {
        HarnessFailure::Unavailable(m) => {
            let (harness, m) = (shown(harness), shown(m));
            Status::unavailable(format!("harness {harness:?} unavailable: {m}"))
        }
        HarnessFailure::Timeout => Status::unavailable(format!(
            "harness {:?} did not answer Describe in time",
            shown(harness)
        )),
        HarnessFailure::Other { code, message } => Status::internal(format!(
            "harness {:?} describe failed (code {code}): {}",
            shown(harness),
            shown(message)
        )),
    }
}

/// The admission gate: identity before capabilities.
pub(crate) fn gate(harness: &str, route: &Route, d: &HarnessDescriptor) -> Result<(), Status> {
    if !route.descriptor_id.is_empty() && route.descriptor_id != d.id {
        return Err(Status::failed_precondition(format!(
            "expected descriptor id {:?}, the harness reports {:?}",
            shown(&route.descriptor_id),
            shown(&d.id)
        )));
    }
    if needs_memory(d) && !route.backend.memory_snapshot() {
        return Err(Status::failed_precondition(format!(
            "harness {:?} needs REQUIRES_MEMORY_SNAPSHOT but the runtime provides MemorySnapshot=false",
            shown(harness)
        )));
    }
    Ok(())
}

/// The model gate: every model the descriptor names is one this host
/// serves (`served` None: all are).
pub(crate) fn models_gate(
    harness: &str,
    d: &HarnessDescriptor,
    served: Option<&BTreeSet<String>>,
) -> Result<(), Status> {
    let Some(served) = served else {
        return Ok(());
    };
    match d.models.iter().find(|m| !served.contains(m.as_str())) {
        None => Ok(()),
        Some(missing) => Err(Status::failed_precondition(format!(
            "harness {:?} uses model {:?}, which this host does not serve (serves {}); start the daemon with --model {:?}",
            shown(harness),
            shown(missing),
            served_list(served),
            shown(missing),
        ))),
    }
}

/// The served ids for a message, bounded so a long list stays short.
fn served_list(served: &BTreeSet<String>) -> String {
    const SHOWN: usize = 8;
    let mut out: Vec<String> = served
        .iter()
        .take(SHOWN)
        .map(|m| format!("{:?}", shown(m)))
        .collect();
    if served.len() > SHOWN {
        out.push(format!("and {} more", served.len() - SHOWN));
    }
    debug_assert!(out.len() <= SHOWN + 1, "a long list stays short");
    out.join(", ")
}

/// True for a harness that must be resumed from a memory snapshot.
pub(crate) fn needs_memory(d: &HarnessDescriptor) -> bool {
    d.capabilities
        .as_ref()
        .is_some_and(|c| c.resumability == Resumability::RequiresMemorySnapshot as i32)
}

impl Placement {
    /// Starts placing `session` on route `harness`.
    pub(crate) fn start(
        cx: &mut Cx<'_>,
        harness: String,
        route: Route,
        session: &str,
        provision: Provision,
        mint_fence: bool,
    ) -> Self {
        assert!(
            provision != Provision::AdmitOnly || !mint_fence,
            "admission alone mints no fence"
        );
        let timeout_ms = cx.config().describe_timeout_ms;
        let (h, backend) = (harness.clone(), route.backend.clone());
        let id = cx.request(|id| {
            Effect::Harness(HarnessEffect::Describe {
                id,
                harness: h,
                backend,
                conn: None,
                timeout_ms,
            })
        });
        Self {
            harness,
            route,
            session: session.to_owned(),
            provision,
            mint_fence,
            step: Step::Describe(id),
            descriptor: None,
            conn: None,
            fence: 0,
        }
    }

    /// True when `id` is the effect this placement waits for.
    pub(crate) fn owns(&self, id: EffectId) -> bool {
        matches!(self.step,
            Step::Describe(x) | Step::Provision(x) | Step::Dial(x) | Step::Recheck(x) | Step::Fence(x)
            if x == id)
    }

    /// Advances on an outcome this placement owns.
    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Placed {
        assert!(self.owns(id), "placement got an outcome it did not ask for");
        let result = self.advance(cx, outcome);
        if let Err(status) = &result {
            if let Some(conn) = self.conn.take() {
                cx.close(conn);
            }
            return Placed::Failed(status.clone());
        }
        if self.step == Step::Ready {
            assert!(self.descriptor.is_some(), "a ready placement was described");
            assert!(
                !self.mint_fence || self.fence > 0,
                "a ready placement holds the fence it minted"
            );
            debug_assert_eq!(
                self.conn.is_some(),
                self.provision != Provision::AdmitOnly,
                "only a provisioned placement dials"
            );
            Placed::Ready
        } else {
            Placed::Pending
        }
    }

    fn advance(&mut self, cx: &mut Cx<'_>, outcome: Outcome) -> Result<(), Status> {
        match (self.step, outcome) {
            (Step::Describe(_), Outcome::Harness(HarnessOutcome::Described(r))) => {
                debug_assert!(self.descriptor.is_none() && self.conn.is_none());
                let d = r.map_err(|e| describe_error(&self.harness, &e))?;
                gate(&self.harness, &self.route, &d)?;
                // Only a turn calls models: Fork and Replay admit a harness
                // whatever models it names.
                if self.provision != Provision::AdmitOnly {
                    models_gate(&self.harness, &d, cx.config().models.as_ref())?;
                }
                self.descriptor = Some(d);
                let op = match &self.provision {
                    Provision::AdmitOnly => {
                        self.step = Step::Ready;
                        return Ok(());
                    }
                    Provision::Create => RuntimeOp::Create {
                        session: self.session.clone(),
                    },
                    Provision::Restore(snapshot) => RuntimeOp::Restore {
                        snapshot: snapshot.clone(),
                    },
                };
                let (harness, backend) = (self.harness.clone(), self.route.backend.clone());
                self.step = Step::Provision(cx.request(|id| {
                    Effect::Runtime(RuntimeCall {
                        id,
                        harness,
                        backend,
                        op,
                    })
                }));
            }
            (Step::Provision(_), Outcome::Runtime(r)) => {
                let address = match r {
                    Ok(RuntimeReply::Incarnation { address }) => address,
                    Ok(other) => {
                        return Err(Status::internal(format!(
                            "runtime returned {other:?} where an incarnation was expected"
                        )));
                    }
                    Err(e) => return Err(Status::internal(format!("runtime: {e}"))),
                };
                assert!(self.conn.is_none(), "one dial per placement");
                let conn = cx.new_conn();
                self.conn = Some(conn);
                let (harness, backend) = (self.harness.clone(), self.route.backend.clone());
                self.step = Step::Dial(cx.request(|id| {
                    Effect::Harness(HarnessEffect::Dial {
                        id,
                        harness,
                        backend,
                        address,
                        conn,
                    })
                }));
            }
            (Step::Dial(_), Outcome::Harness(HarnessOutcome::Dialed(r))) => {
                r.map_err(|e| Status::internal(format!("dial harness: {e:?}")))?;
                assert!(self.conn.is_some(), "a dial has its connection");
                if self.route.backend.describes_live_harness() {
                    let timeout_ms = cx.config().describe_timeout_ms;
                    let (harness, backend, conn) =
                        (self.harness.clone(), self.route.backend.clone(), self.conn);
                    self.step = Step::Recheck(cx.request(|id| {
                        Effect::Harness(HarnessEffect::Describe {
                            id,
                            harness,
                            backend,
                            conn,
                            timeout_ms,
                        })
                    }));
                } else {
                    self.fence_or_ready(cx);
                }
            }
            (Step::Recheck(_), Outcome::Harness(HarnessOutcome::Described(r))) => {
                assert!(
                    self.conn.is_some(),
                    "a recheck describes the dialed harness"
                );
                let d = r.map_err(|e| describe_error(&self.harness, &e))?;
                gate(&self.harness, &self.route, &d)?;
                models_gate(&self.harness, &d, cx.config().models.as_ref())?;
                self.descriptor = Some(d);
                self.fence_or_ready(cx);
            }
            (Step::Fence(_), Outcome::Store(StoreOutcome::Fence(r))) => {
                self.fence = r.map_err(|e| e.status("mint fence"))?;
                assert!(self.fence > 0, "fences start at 1");
                self.step = Step::Ready;
            }
            (_, other) => unexpected("placement", &other),
        }
        Ok(())
    }

    fn fence_or_ready(&mut self, cx: &mut Cx<'_>) {
        assert!(self.conn.is_some(), "fenced only once connected");
        assert_eq!(self.fence, 0, "a placement mints one fence");
        if self.mint_fence {
            self.step = Step::Fence(cx.mint_fence(&self.session));
        } else {
            self.step = Step::Ready;
        }
    }
}
