//! The built-in harnesses against the host's own invocation engine
//! (`machine::invocation`) over a real Connect stream: whatever the engine
//! sends, the harness side answers as the engine expects, from a live turn
//! through a park to the decided recovery.

use std::sync::Arc;
use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_machine::invocation::{Action, Ending, Invocation, Mode, Setup};
use agentsessions_machine::journal::approval;
use agentsessions_machine::vocab::{CountingIds, HarnessInput, ModelReply};
use agentsessions_proto::grpc::harness_client::HarnessClient;
use agentsessions_proto::v1::{
    ApprovalRef, ApprovalResult, ControllerFrame, Event, EventKind, ExecutionStart, LogRecord,
    Start, ToolResult, controller_frame::Frame,
};
use agentsessions_proto::wkt::Timestamp;
use agentsessions_shells::harness::builtin;
use agentsessions_shells::harness::serve::{ListenAddr, Listener};
use agentsessions_shells::harness::{Harness, HarnessService};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

const SESSION: &str = "sess-1";
const EXEC: &str = "exec-1";
const WAIT: Duration = Duration::from_secs(10);

/// Runs one invocation of `harness` to its end, performing the engine's
/// actions as a host would, and returns the ending and the journal.
async fn run_turn(
    harness: Arc<dyn Harness>,
    mode: Mode,
    log: Vec<LogRecord>,
    stream: Vec<LogRecord>,
    approvals: Vec<approval::ApprovalState>,
) -> (Ending, Vec<LogRecord>, Vec<String>) {
    let listener = Listener::bind(&ListenAddr::Tcp("127.0.0.1:0".into()))
        .await
        .unwrap();
    let ListenAddr::Tcp(addr) = listener.local_addr().clone() else {
        unreachable!()
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let descriptor = harness.describe();
    let server = tokio::spawn(listener.serve(HarnessService::new(harness), async {
        let _ = stopped.await;
    }));
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HarnessClient::new(channel);

    let head = log.len() as i64;
    let mut inv = Invocation::new(Setup {
        session: SESSION.into(),
        execution_id: EXEC.into(),
        wire_id: EXEC.into(),
        mode,
        legacy: false,
        stream,
        approvals,
        descriptor: Some(descriptor),
        fence: 1,
        head,
        head_hash: None,
        has_executor: true,
        tools: Default::default(),
        budget: None,
    });
    let (tx, rx) = mpsc::channel(8);
    let mut tx = Some(tx);
    let start = ControllerFrame {
        session: SESSION.into(),
        execution_id: EXEC.into(),
        frame: Some(Frame::Start(Start {
            inputs: vec![events::text_message("user", "buy milk")],
            ..Start::default()
        })),
    };
    tx.as_ref().unwrap().send(start).await.unwrap();
    let mut events = client
        .connect(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();

    let mut ids = CountingIds::default();
    let mut log = log;
    let mut outputs = Vec::new();
    let mut pending: Vec<Action> = Vec::new();
    loop {
        while !pending.is_empty() {
            let action = pending.remove(0);
            let mut out = Vec::new();
            match action {
                Action::Append { events, .. } => {
                    let records = events
                        .into_iter()
                        .map(|ev| {
                            let r = record(log.len() as i64 + 1, ev);
                            log.push(r.clone());
                            r
                        })
                        .collect();
                    inv.on_appended(Ok(records), &mut ids, &mut out);
                }
                Action::InvokeModel(call) => {
                    let text = call.messages.last().map(events::message_text);
                    let reply = ModelReply {
                        message: Some(events::assistant_text(&format!(
                            "echo:{}",
                            text.unwrap_or_default()
                        ))),
                        usage: None,
                    };
                    inv.on_model(Ok(reply), &mut ids, &mut out);
                }
                Action::ExecuteTool { call, .. } => {
                    let result = ToolResult {
                        id: call.id,
                        ..ToolResult::default()
                    };
                    inv.on_tool(Ok(result), &mut ids, &mut out);
                }
                Action::Send(frame) => {
                    if let Some(tx) = &tx {
                        tx.send(frame).await.unwrap();
                    }
                }
                Action::Close => tx = None,
                Action::Recorded(_) | Action::InterruptTool => {}
            }
            pending.extend(out);
        }
        if let Some(finish) = inv.finished() {
            outputs.extend(finish.outputs.iter().cloned());
            let ending = finish.ending.clone();
            drop((tx, events));
            let _ = stop.send(());
            tokio::time::timeout(WAIT, server)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            return (ending, log, outputs);
        }
        let input = match tokio::time::timeout(WAIT, events.message())
            .await
            .expect("the harness answers")
        {
            Ok(Some(ev)) => HarnessInput::Event(ev),
            Ok(None) => HarnessInput::Closed,
            Err(status) => HarnessInput::Failed(status.to_string()),
        };
        inv.on_harness(input, &mut ids, &mut pending);
    }
}

/// A committed record whose hashes link seq to seq (`h{seq-1}` → `h{seq}`).
fn record(seq: i64, ev: Event) -> LogRecord {
    LogRecord {
        seq,
        prev_hash: if seq > 1 {
            format!("h{}", seq - 1)
        } else {
            String::new()
        },
        content_hash: format!("h{seq}"),
        fence: 1,
        event: Some(ev),
    }
}

fn kinds(log: &[LogRecord]) -> Vec<EventKind> {
    log.iter()
        .map(|r| events::kind_of(r.event.as_ref().unwrap()))
        .collect()
}

/// EXECUTION_START and the one INPUT, as the host commits them first.
fn turn_header() -> Vec<LogRecord> {
    let start = events::execution_start(
        EXEC,
        ExecutionStart {
            input_count: Some(1),
            ..ExecutionStart::default()
        },
    );
    let input = events::input(EXEC, events::text_message("user", "buy milk"));
    vec![record(1, start), record(2, input)]
}

#[tokio::test]
async fn echo_completes_a_live_turn() {
    let (ending, log, outputs) =
        run_turn(Arc::new(builtin::Echo), Mode::Live, vec![], vec![], vec![]).await;
    assert_eq!(ending, Ending::Completed);
    assert_eq!(
        kinds(&log),
        [
            EventKind::EventModelCall,
            EventKind::EventOutput,
            EventKind::EventEnd
        ]
    );
    assert_eq!(outputs, ["echo:buy milk"]);
}

#[tokio::test]
async fn counter_output_is_journaled() {
    let harness = builtin::build("counter", "").unwrap();
    let (ending, log, _) = run_turn(harness, Mode::Live, vec![], vec![], vec![]).await;
    assert_eq!(ending, Ending::Completed);
    assert_eq!(kinds(&log), [EventKind::EventOutput, EventKind::EventEnd]);
}

#[tokio::test]
async fn approval_parks_then_resumes_to_a_receipt() {
    // Live: the gate is committed and the harness acknowledges the park.
    let (ending, log, _) = run_turn(
        Arc::new(builtin::Approval),
        Mode::Live,
        turn_header(),
        vec![],
        vec![],
    )
    .await;
    assert_eq!(
        ending,
        Ending::Parked(ApprovalRef {
            execution_id: EXEC.into(),
            tool_call_id: "c1".into(),
            request_seq: 4,
        })
    );
    assert_eq!(
        kinds(&log)[2..],
        [EventKind::EventToolCall, EventKind::EventApprovalRequest]
    );

    for approved in [true, false] {
        // A human decides; Resume replays the turn up to the gate.
        let mut decided = log.clone();
        let decision = events::approval_result(
            EXEC,
            ApprovalResult {
                tool_call_id: "c1".into(),
                approved,
                reason: String::new(),
                request_seq: 4,
            },
            None,
            Timestamp::new(1, 0),
        );
        decided.push(record(5, decision));
        let states = approval::scan(&decided, 0).expect("valid gate").states;
        let stream = decided[2..].to_vec();
        let (ending, after, outputs) = run_turn(
            Arc::new(builtin::Approval),
            Mode::Resume,
            decided,
            stream,
            states,
        )
        .await;
        assert_eq!(ending, Ending::Completed, "approved={approved}");
        assert_eq!(
            kinds(&after)[5..],
            [
                EventKind::EventToolResult,
                EventKind::EventOutput,
                EventKind::EventEnd
            ]
        );
        let want = if approved {
            "append_note approved and done"
        } else {
            "append_note denied: "
        };
        assert!(
            outputs.iter().any(|o| o.starts_with(want)),
            "{outputs:?} lacks {want:?}"
        );
    }
}
