//! Target `harness_stream`: arbitrary harness frames on a live
//! [`Invocation`], in all three modes.
//!
//! The rig plays the host around one invocation exactly as `ops::run`
//! does (one outstanding action, a closed connection delivers nothing
//! more) over an in-memory store, and lets the input choose the harness's
//! frames, their interleaving with completions, and append, model and tool
//! failures (including an append that committed but reported failure).
//!
//! The first run is Live on a fresh turn. Its journal then feeds a Replay
//! of the turn when it completed, or — possibly cut short, as a crash would
//! leave it, and possibly with a decision added for its gate — a Resume
//! set up as the Resume operation sets one up.
//!
//! Checked on every action: appended batches come from this execution,
//! carry only kinds the sink writes (never a harness-sent START, decision,
//! park or lifecycle record), a request only right after its gated call,
//! receipt fields only on a receipt backed by committed evidence; the chain
//! verifies and the approval scan accepts the journal after every append;
//! the model is invoked with the request whose hash was journaled; a tool
//! executes only its committed intent, and a gated one only after an
//! approving decision; Replay appends and invokes nothing.

use agentsessions_proto::v1::{
    ApprovalRef, ApprovalResult, Capabilities, ControllerFrame, Event, EventKind, ExecutionStart,
    HarnessDescriptor, LogRecord, Mediation, Resumability, ToolResult, controller_frame::Frame,
    tool_result::Code,
};
use arbitrary::{Result, Unstructured};

use super::acts::{Act, Shared};
use super::draw;
use crate::MemStore;
use agentsessions_machine::chain;
use agentsessions_machine::error::TurnError;
use agentsessions_machine::events::{self, body};
use agentsessions_machine::inputhash;
use agentsessions_machine::invocation::{Action, Ending, Invocation, Mode, Setup};
use agentsessions_machine::journal::{approval, executions};
use agentsessions_machine::vocab::{
    AppendError, CountingIds, HarnessInput, ModelFailure, ModelReply, ToolFailure,
};

const SESSION: &str = "sess-fuzz";
const EXEC: &str = "00000000000000e1";

/// Most harness frames and completions in one run.
const MAX_STEPS: usize = 96;

/// The target body.
pub fn harness_stream(data: &[u8]) {
    // Out of data is the only error; it just ends the input.
    let _ = run(&mut Unstructured::new(data));
}

/// One harness frame.
#[derive(Debug)]
enum Input {
    Act(Act),
    /// An arbitrary event under this execution's id (or not).
    Raw {
        own_exec: bool,
    },
    Closed,
    Failed,
    /// A deadline or cancellation from outside.
    Abort,
}

impl Input {
    /// A tag byte: 0..=9 an action (its tag), 10 raw, 11 closed, 12 failed,
    /// 13 abort (mod 14).
    fn decode(u: &mut Unstructured<'_>) -> Result<Self> {
        let tag: u8 = u.arbitrary()?;
        Ok(match tag % 14 {
            10 => Self::Raw {
                own_exec: u.arbitrary()?,
            },
            11 => Self::Closed,
            12 => Self::Failed,
            13 => Self::Abort,
            _ => Self::Act(Act::decode(u)?),
        })
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    // The header: what follows the live run (0 nothing, 1 replay, 2
    // resume), the harness (flags 1: needs memory snapshots) and the host
    // (flags 2: no tool executor), and the number of inputs.
    let [follow, flags, inputs]: [u8; 3] = u.arbitrary()?;
    let (follow, memory, has_executor) = (follow % 3, flags & 1 != 0, flags & 2 == 0);
    let inputs = i64::from(inputs % 3);
    let mut store = MemStore::new();
    let start = ExecutionStart {
        input_count: Some(inputs),
        harness: "h".into(),
        harness_version: "1".into(),
        ..ExecutionStart::default()
    };
    let mut batch = vec![events::execution_start(EXEC, start)];
    batch.extend((0..inputs).map(|_| events::input(EXEC, events::text_message("user", "hi"))));
    store
        .append(SESSION, 0, 1, &batch, 0)
        .expect("the turn header appends");
    let setup = Setup {
        session: SESSION.into(),
        execution_id: EXEC.into(),
        wire_id: EXEC.into(),
        mode: Mode::Live,
        legacy: false,
        stream: Vec::new(),
        approvals: Vec::new(),
        descriptor: Some(descriptor(memory)),
        fence: 1,
        head: head(&store),
        head_hash: None,
        has_executor,
        tools: Default::default(),
        budget: None,
    };
    let mut rig = Rig::new(store, setup);
    rig.drive(u)?;
    let Some(setup) = (match follow {
        0 => None,
        1 => replay_setup(&rig.store, memory, has_executor),
        _ => resume_setup(u, &mut rig.store, memory, has_executor)?,
    }) else {
        return Ok(());
    };
    let mut rig = Rig::new(rig.store, setup);
    rig.drive(u)
}

fn descriptor(memory: bool) -> HarnessDescriptor {
    let resumability = if memory {
        Resumability::RequiresMemorySnapshot
    } else {
        Resumability::StatelessReplay
    };
    HarnessDescriptor {
        id: "h".into(),
        version: "1".into(),
        capabilities: Some(Capabilities {
            resumability: resumability as i32,
            ..Capabilities::default()
        }),
        ..HarnessDescriptor::default()
    }
}

fn head(store: &MemStore) -> i64 {
    store.records(SESSION).last().map_or(0, |r| r.seq)
}

/// The Replay the host would run for the turn, if it completed.
fn replay_setup(store: &MemStore, memory: bool, has_executor: bool) -> Option<Setup> {
    let log = &*store.records(SESSION);
    let projection = executions::project(log).ok()?;
    let scan = approval::scan(log, 0).ok()?;
    let exec = executions::replay_selection(&projection)
        .into_iter()
        .find(|e| e.id == EXEC)?;
    Some(Setup {
        session: SESSION.into(),
        execution_id: EXEC.into(),
        wire_id: EXEC.into(),
        mode: Mode::Replay,
        legacy: false,
        stream: exec.stream.iter().map(|&i| log[i].clone()).collect(),
        approvals: scan.for_execution(EXEC).cloned().collect(),
        descriptor: Some(descriptor(memory)),
        fence: 0,
        head: head(store),
        head_hash: None,
        has_executor,
        tools: Default::default(),
        budget: None,
    })
}

/// The Resume the host would run after an optional crash cut and an
/// optional decision, following the Resume operation's checks in order.
fn resume_setup(
    u: &mut Unstructured<'_>,
    store: &mut MemStore,
    memory: bool,
    has_executor: bool,
) -> Result<Option<Setup>> {
    // Cut byte: keep `1 + cut % len` records. Decision byte: 1 decide an
    // undecided gate, 2 approve it.
    let [cut, decide]: [u8; 2] = u.arbitrary()?;
    let len = store.records(SESSION).len();
    store.truncate(SESSION, 1 + usize::from(cut) % len.max(1));
    let Ok(scan) = approval::scan(&store.records(SESSION), 0) else {
        return Ok(None);
    };
    let gate = scan.selected().filter(|s| !s.has_receipt()).cloned();
    if let Some(g) = &gate {
        if g.inherited || g.request.is_none() {
            // Refused, or repaired by the operation before any run.
            return Ok(None);
        }
        if g.decision.is_none() {
            if decide & 1 == 0 {
                // Waiting for a human: the host runs nothing.
                return Ok(None);
            }
            let decision = ApprovalResult {
                tool_call_id: g.call.id.clone(),
                approved: decide & 2 != 0,
                reason: "fuzz".into(),
                request_seq: g.request_seq().unwrap_or_default(),
            };
            let ev = events::approval_result(&g.execution_id, decision, None, Default::default());
            store
                .append(SESSION, scan.head, 2, &[ev], 0)
                .expect("a decision appends at the scanned head");
        }
    }
    let log = &*store.records(SESSION);
    let (Ok(scan), Ok(projection)) = (approval::scan(log, 0), executions::project(log)) else {
        return Ok(None);
    };
    if executions::resume_invocation(log).is_err() {
        return Ok(None);
    }
    let Ok(Some(exec)) = executions::select_pending(log, &projection) else {
        return Ok(None);
    };
    if executions::check_inherited_intent(log, &exec).is_err() {
        return Ok(None);
    }
    let approvals: Vec<_> = scan.for_execution(&exec.id).cloned().collect();
    if !approvals.is_empty() && memory {
        return Ok(None);
    }
    Ok(Some(Setup {
        session: SESSION.into(),
        execution_id: exec.id.clone(),
        wire_id: exec.id.clone(),
        mode: Mode::Resume,
        legacy: false,
        stream: exec.stream.iter().map(|&i| log[i].clone()).collect(),
        approvals,
        descriptor: Some(descriptor(memory)),
        fence: 2,
        head: head(store),
        head_hash: None,
        has_executor,
        tools: Default::default(),
        budget: None,
    }))
}

/// What the rig owes the invocation.
#[derive(Debug)]
enum Owed {
    Append(i64, Vec<Event>),
    Model,
    Tool(agentsessions_proto::v1::ToolCall),
}

struct Rig {
    inv: Invocation,
    store: MemStore,
    ids: CountingIds,
    owed: Option<Owed>,
    /// The connection is closed: the host routes nothing more to the run.
    closed: bool,
    /// What the harness has seen, for acknowledgements that echo it.
    seen: Shared,
}

impl Rig {
    fn new(store: MemStore, setup: Setup) -> Self {
        let seen = Shared {
            last_exec: setup.wire_id.clone(),
            ..Shared::default()
        };
        Self {
            inv: Invocation::new(setup),
            store,
            ids: CountingIds::starting_at(1 << 32),
            owed: None,
            closed: false,
            seen,
        }
    }

    fn mode(&self) -> Mode {
        self.inv.setup().mode
    }

    /// Runs until the invocation finishes or the input ends. While an
    /// action is owed on an open connection, a schedule byte chooses: 3
    /// (mod 4) lets the next harness frame in first, anything else answers
    /// the action. Once the connection is closed no frame can arrive, so
    /// the action is answered without reading one.
    fn drive(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        for _ in 0..MAX_STEPS {
            if u.is_empty() || (self.inv.finished().is_some() && self.owed.is_none()) {
                break;
            }
            let complete = match &self.owed {
                Some(_) => self.closed || u.arbitrary::<u8>()? % 4 != 3,
                None => false,
            };
            let mut out = Vec::new();
            if complete {
                self.complete(u, &mut out)?;
            } else if self.closed {
                break;
            } else {
                let input = Input::decode(u)?;
                self.deliver(u, input, &mut out)?;
            }
            self.apply(out);
        }
        if let Some(finish) = self.inv.finished() {
            self.check_finish(&finish.ending);
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        u: &mut Unstructured<'_>,
        input: Input,
        out: &mut Vec<Action>,
    ) -> Result<()> {
        let harness = match input {
            Input::Act(act) => HarnessInput::Event(act.event(&self.seen.last_exec, &self.seen)),
            Input::Raw { own_exec } => {
                let mut ev = draw::event(u, true)?;
                if own_exec {
                    ev.execution_id = self.seen.last_exec.clone();
                }
                HarnessInput::Event(ev)
            }
            Input::Closed => HarnessInput::Closed,
            Input::Failed => HarnessInput::Failed("stream reset".into()),
            Input::Abort => {
                self.inv.abort(TurnError::DeadlineExceeded, out);
                return Ok(());
            }
        };
        self.inv.on_harness(harness, &mut self.ids, out);
        Ok(())
    }

    /// Answers the outstanding action; one byte chooses a failure: 13, 14,
    /// 15 (mod 16) fail an append (fenced, failed, committed but reported
    /// failed), 7 (mod 8) fails a model or tool call.
    fn complete(&mut self, u: &mut Unstructured<'_>, out: &mut Vec<Action>) -> Result<()> {
        match self.owed.take().expect("something is owed") {
            Owed::Append(expected, events) => {
                let result = match u.arbitrary::<u8>()? % 16 {
                    13 => Err(AppendError::Fenced { current: 99 }),
                    14 => Err(AppendError::Failed("disk full".into())),
                    15 => {
                        // Committed, but the answer was lost.
                        let _ = self.store.append(SESSION, expected, 2, &events, 0);
                        Err(AppendError::Failed("connection reset".into()))
                    }
                    _ => self.store.append(SESSION, expected, 2, &events, 0),
                };
                self.check_journal();
                self.inv.on_appended(result, &mut self.ids, out);
            }
            Owed::Model => {
                let roll = u.arbitrary::<u8>()? % 8;
                let result = if roll == 7 {
                    Err(ModelFailure::unavailable("provider down"))
                } else if roll == 6 {
                    Err(ModelFailure::other("invalid response body"))
                } else {
                    Ok(ModelReply {
                        message: Some(events::assistant_text("echo")),
                        usage: None,
                    })
                };
                self.inv.on_model(result, &mut self.ids, out);
            }
            Owed::Tool(call) => {
                let result = match u.arbitrary::<u8>()? % 8 {
                    7 => Err(ToolFailure::Error("executor down".to_owned())),
                    // A run an earlier incarnation left unfinished.
                    6 => Err(ToolFailure::Unfinished),
                    _ => Ok(ToolResult {
                        id: call.id,
                        ..ToolResult::default()
                    }),
                };
                self.inv.on_tool(result, &mut self.ids, out);
            }
        }
        Ok(())
    }

    /// Takes the invocation's actions as `ops::run` does, checking each.
    fn apply(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Append {
                    expected_last_seq,
                    events,
                    ..
                } => {
                    assert_ne!(self.mode(), Mode::Replay, "replay never appends");
                    self.check_batch(&events);
                    self.owe(Owed::Append(expected_last_seq, events));
                }
                Action::InvokeModel(request) => {
                    assert_ne!(self.mode(), Mode::Replay, "replay never invokes");
                    self.check_model(&request);
                    self.owe(Owed::Model);
                }
                Action::ExecuteTool { intent, call, .. } => {
                    assert_ne!(self.mode(), Mode::Replay, "replay never executes");
                    self.check_tool(intent.record(), &call);
                    self.owe(Owed::Tool(call));
                }
                Action::InterruptTool => {
                    assert!(
                        matches!(self.owed, Some(Owed::Tool(_))),
                        "an interrupt names the outstanding tool call"
                    );
                }
                Action::Send(frame) => self.sent(&frame),
                Action::Close => self.closed = true,
                Action::Recorded(record) => {
                    let log = self.store.records(SESSION);
                    let stored = usize::try_from(record.record().seq - 1)
                        .ok()
                        .and_then(|i| log.get(i));
                    assert_eq!(stored, Some(record.record()), "recorded means committed");
                }
            }
        }
    }

    fn owe(&mut self, owed: Owed) {
        assert!(self.owed.is_none(), "one outstanding action at a time");
        self.owed = Some(owed);
    }

    fn sent(&mut self, frame: &ControllerFrame) {
        assert!(!self.closed, "nothing is sent on a closed connection");
        assert_eq!(frame.execution_id, self.inv.setup().wire_id);
        if let Some(Frame::Park(park)) = &frame.frame {
            self.seen.last_park = Some(park.clone());
        }
    }

    /// An append batch holds only what the sink writes for this execution.
    fn check_batch(&self, batch: &[Event]) {
        assert!(!batch.is_empty(), "an append carries events");
        let exec = &self.inv.setup().execution_id;
        for (i, ev) in batch.iter().enumerate() {
            assert_eq!(&ev.execution_id, exec, "appended under this execution");
            match events::kind_of(ev) {
                EventKind::EventModelCall => {
                    let mc = body::model(ev).expect("a model call has its body");
                    assert!(mc.messages.is_empty(), "the journal keeps only the hash");
                    assert_eq!(mc.input_hash.len(), 64, "the input hash is recorded");
                }
                EventKind::EventApprovalRequest => {
                    let request = body::approval(ev).expect("a request has its body");
                    let call = i
                        .checked_sub(1)
                        .and_then(|j| batch.get(j))
                        .and_then(body::tool);
                    assert!(
                        call.is_some_and(|c| c.id == request.tool_call_id
                            && c.mediation == Mediation::RequiresApproval as i32),
                        "a request is appended with its gated call"
                    );
                }
                EventKind::EventToolResult => {
                    let r = body::result(ev).expect("a result has its body");
                    self.check_receipt(r);
                }
                EventKind::EventOutput
                | EventKind::EventToolCall
                | EventKind::EventUsage
                | EventKind::EventEnd
                | EventKind::EventError => {}
                other => panic!("the sink appended a {} record", other.as_str_name()),
            }
        }
    }

    /// Receipt fields only on a receipt backed by the committed request and
    /// decision for the same call.
    fn check_receipt(&self, r: &ToolResult) {
        let receipt = r.approval_request_seq != 0
            || r.approval_decision_seq != 0
            || r.code == Code::ApprovalDenied as i32;
        if !receipt {
            return;
        }
        let log = &*self.store.records(SESSION);
        let at = |seq: i64| {
            usize::try_from(seq - 1)
                .ok()
                .and_then(|i| log.get(i))
                .and_then(|rec| rec.event.as_ref())
        };
        let request = at(r.approval_request_seq).and_then(body::approval);
        assert!(
            request.is_some_and(|q| q.tool_call_id == r.id),
            "a receipt names its request"
        );
        let decision = at(r.approval_decision_seq).and_then(body::approval_result);
        assert!(
            decision.is_some_and(|d| d.tool_call_id == r.id
                && d.request_seq == r.approval_request_seq
                && d.approved == (r.code != Code::ApprovalDenied as i32)),
            "a receipt names the decision it carries out"
        );
    }

    /// The model gets the request whose hash was journaled: by the append
    /// just made, or (a Resume re-drive) by the trailing recorded call.
    fn check_model(&self, request: &agentsessions_proto::v1::ModelCall) {
        let exec = &self.inv.setup().execution_id;
        let log = self.store.records(SESSION);
        let recorded = log
            .iter()
            .rev()
            .filter_map(|r| r.event.as_ref())
            .filter(|e| &e.execution_id == exec)
            .find_map(body::model)
            .expect("a model call follows its durable MODEL_CALL");
        let hash = inputhash::input_hash(&inputhash::from_model_call(request))
            .expect("a journaled request has a hash");
        assert_eq!(
            hash, recorded.input_hash,
            "the invoked request is the hashed one"
        );
    }

    /// A tool runs only as its committed intent; a gated one only approved.
    fn check_tool(&self, intent: &LogRecord, call: &agentsessions_proto::v1::ToolCall) {
        let log = &*self.store.records(SESSION);
        let stored = usize::try_from(intent.seq - 1)
            .ok()
            .and_then(|i| log.get(i));
        assert_eq!(stored, Some(intent), "the executed intent is committed");
        let ev = intent.event.as_ref().expect("an intent has an event");
        assert_eq!(
            body::tool(ev),
            Some(call),
            "the executed call is the intent"
        );
        if call.mediation != Mediation::RequiresApproval as i32 {
            return;
        }
        let approved = log.iter().any(|r| {
            r.event.as_ref().is_some_and(|e| {
                e.execution_id == ev.execution_id
                    && body::approval_result(e).is_some_and(|d| {
                        d.tool_call_id == call.id && d.approved && d.request_seq > intent.seq
                    })
            })
        });
        assert!(approved, "a gated call executes only after approval");
    }

    /// The journal is one a correct host could have written.
    fn check_journal(&self) {
        let log = &*self.store.records(SESSION);
        if let Err(e) = chain::verify(log) {
            panic!("the chain broke: {e}");
        }
        if let Err(e) = approval::scan(log, 0) {
            panic!("the sink wrote evidence the scan rejects: {e}");
        }
    }

    fn check_finish(&self, ending: &Ending) {
        if let Ending::Parked(ApprovalRef {
            tool_call_id,
            request_seq,
            ..
        }) = ending
        {
            let log = self.store.records(SESSION);
            let request = usize::try_from(request_seq - 1)
                .ok()
                .and_then(|i| log.get(i))
                .and_then(|r| r.event.as_ref())
                .and_then(body::approval);
            assert!(
                request.is_some_and(|q| &q.tool_call_id == tool_call_id),
                "a park names a committed request"
            );
        }
    }
}
