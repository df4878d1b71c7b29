//! Tool calls over the wire: the approval park, decisions and receipts,
//! and the refusal of forged approval fields.

use std::sync::Arc;

use agentsessions_proto::v1::{
    ApprovalRef, ApprovalResult, EventKind, HarnessDescriptor, Mediation, ToolCall, ToolResult,
    controller_frame::Frame, event::Body, tool_result::Code,
};
use agentsessions_shells::harness::builtin;
use agentsessions_shells::harness::{Harness, HarnessError, Sink, StartInfo};
use tonic::transport::Channel;

use super::{Conn, EXEC, HarnessClient, Served, frame, start_with, user};

async fn approval_start(client: &mut HarnessClient<Channel>) -> Conn {
    Conn::start(client, vec![user("buy milk")]).await
}

async fn approval_call(conn: &mut Conn) -> ToolCall {
    let call = conn.tool_call().await;
    assert_eq!(call.id, "c1");
    assert_eq!(call.tool, "append_note");
    assert_eq!(call.mediation, Mediation::RequiresApproval as i32);
    assert_eq!(call.idempotency_key, format!("approval/{EXEC}/c1"));
    let text = call
        .args
        .as_ref()
        .and_then(|a| a.fields.get("text"))
        .cloned();
    assert_eq!(text, Some(pbjson_types::Value::from("buy milk".to_owned())));
    call
}

fn decision(approved: bool, seq: i64) -> Frame {
    Frame::Approval(ApprovalResult {
        tool_call_id: "c1".into(),
        approved,
        reason: String::new(),
        request_seq: seq,
    })
}

fn receipt(is_error: bool, code: Code, request_seq: i64, decision_seq: i64) -> Frame {
    Frame::Tool(ToolResult {
        id: "c1".into(),
        is_error,
        error: if is_error { "no".into() } else { String::new() },
        code: code as i32,
        approval_request_seq: request_seq,
        approval_decision_seq: decision_seq,
        ..ToolResult::default()
    })
}

#[tokio::test]
async fn approval_park_is_acknowledged_without_end() {
    let served = Served::tcp(Arc::new(builtin::Approval)).await;
    let mut client = served.client().await;
    let mut conn = approval_start(&mut client).await;
    approval_call(&mut conn).await;
    let park = ApprovalRef {
        execution_id: EXEC.into(),
        tool_call_id: "c1".into(),
        request_seq: 7,
    };
    conn.send(Frame::Park(park.clone())).await;
    let ev = conn.event().await;
    assert_eq!(ev.kind, EventKind::EventParked as i32);
    assert_eq!(ev.body, Some(Body::Parked(park)));
    conn.closed().await;
    served.shutdown().await;
}

#[tokio::test]
async fn approval_park_must_match_the_call() {
    let served = Served::tcp(Arc::new(builtin::Approval)).await;
    let mut client = served.client().await;
    for bad in [
        ApprovalRef {
            execution_id: EXEC.into(),
            tool_call_id: "c2".into(),
            request_seq: 7,
        },
        ApprovalRef {
            execution_id: "exec-2".into(),
            tool_call_id: "c1".into(),
            request_seq: 7,
        },
        ApprovalRef {
            execution_id: EXEC.into(),
            tool_call_id: "c1".into(),
            request_seq: 0,
        },
    ] {
        let mut conn = approval_start(&mut client).await;
        approval_call(&mut conn).await;
        conn.send(Frame::Park(bad)).await;
        assert!(conn.failed().await.contains("park correlation mismatch"));
    }
    served.shutdown().await;
}

#[tokio::test]
async fn approval_decision_then_receipt_completes() {
    let served = Served::tcp(Arc::new(builtin::Approval)).await;
    let mut client = served.client().await;

    let mut conn = approval_start(&mut client).await;
    approval_call(&mut conn).await;
    conn.send(decision(true, 7)).await;
    conn.send(receipt(false, Code::Unspecified, 7, 9)).await;
    assert_eq!(conn.output().await, "append_note approved and done");
    conn.end("COMPLETED").await;
    conn.closed().await;

    let mut conn = approval_start(&mut client).await;
    approval_call(&mut conn).await;
    conn.send(decision(false, 7)).await;
    conn.send(receipt(true, Code::ApprovalDenied, 7, 9)).await;
    assert_eq!(conn.output().await, "append_note denied: no");
    conn.end("COMPLETED").await;

    let mut conn = approval_start(&mut client).await;
    approval_call(&mut conn).await;
    conn.send(decision(true, 7)).await;
    conn.send(receipt(true, Code::ExecutorError, 7, 9)).await;
    assert_eq!(conn.output().await, "append_note approved but failed: no");
    conn.end("COMPLETED").await;
    served.shutdown().await;
}

#[tokio::test]
async fn receipts_inconsistent_with_the_decision_fail() {
    let served = Served::tcp(Arc::new(builtin::Approval)).await;
    let mut client = served.client().await;
    let cases = [
        // approve, yet denied
        (
            decision(true, 7),
            receipt(true, Code::ApprovalDenied, 7, 9),
            "contradicts",
        ),
        // approve, yet a legacy failure code
        (
            decision(true, 7),
            receipt(true, Code::Unspecified, 7, 9),
            "contradicts",
        ),
        // deny, yet success
        (
            decision(false, 7),
            receipt(false, Code::Unspecified, 7, 9),
            "contradicts",
        ),
        // deny, yet an executor error
        (
            decision(false, 7),
            receipt(true, Code::ExecutorError, 7, 9),
            "contradicts",
        ),
        // bound to another request, or to no decision
        (
            decision(true, 7),
            receipt(false, Code::Unspecified, 6, 9),
            "does not bind",
        ),
        (
            decision(true, 7),
            receipt(false, Code::Unspecified, 7, 0),
            "does not bind",
        ),
        // the decision itself is malformed
        (
            decision(true, 0),
            receipt(false, Code::Unspecified, 0, 9),
            "approval correlation",
        ),
        // a second decision instead of the receipt
        (
            decision(true, 7),
            decision(true, 7),
            "receipt after a decision",
        ),
    ];
    for (d, r, want) in cases {
        let mut conn = approval_start(&mut client).await;
        approval_call(&mut conn).await;
        conn.send(d).await;
        conn.send(r).await;
        let got = conn.failed().await;
        assert!(got.contains(want), "{got:?} lacks {want:?}");
    }

    // A receipt that names another call.
    let mut conn = approval_start(&mut client).await;
    approval_call(&mut conn).await;
    conn.send(decision(true, 7)).await;
    let Frame::Tool(mut r) = receipt(false, Code::Unspecified, 7, 9) else {
        unreachable!()
    };
    r.id = "c9".into();
    conn.send(Frame::Tool(r)).await;
    assert!(conn.failed().await.contains("tool result correlation"));

    // A gated call answered straight with a receipt: no decision, no park.
    let mut conn = approval_start(&mut client).await;
    approval_call(&mut conn).await;
    conn.send(receipt(false, Code::Unspecified, 0, 0)).await;
    assert!(
        conn.failed()
            .await
            .contains("expected an approval decision or park")
    );

    // A tool reply for another session.
    let mut conn = approval_start(&mut client).await;
    approval_call(&mut conn).await;
    let mut f = frame(decision(true, 7));
    f.session = "sess-2".into();
    conn.tx.send(f).await.unwrap();
    assert!(conn.failed().await.contains("another session"));
    served.shutdown().await;
}

#[tokio::test]
async fn approval_calls_need_a_session() {
    let served = Served::tcp(Arc::new(builtin::Approval)).await;
    let mut client = served.client().await;
    let mut first = frame(start_with(vec![user("x")], vec![], b""));
    first.session.clear();
    let mut conn = Conn::open(&mut client, first).await;
    // Refused before anything is sent: no TOOL_CALL reaches the host.
    assert!(
        conn.failed()
            .await
            .contains("approval call outside a session")
    );
    served.shutdown().await;
}

/// Runs one CONTROLLER_MEDIATED call and outputs the result's error text;
/// with `report` it first reports a result carrying approval fields.
struct Mediated {
    report: bool,
}

#[tonic::async_trait]
impl Harness for Mediated {
    fn describe(&self) -> HarnessDescriptor {
        HarnessDescriptor {
            id: "mediated".into(),
            ..HarnessDescriptor::default()
        }
    }

    async fn run(&self, _start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        if self.report {
            sink.report(ToolResult {
                id: "r1".into(),
                approval_decision_seq: 3,
                ..ToolResult::default()
            })
            .await?;
        }
        let result = sink
            .tool_call(ToolCall {
                id: "t1".into(),
                tool: "write".into(),
                args: None,
                mediation: Mediation::ControllerMediated as i32,
                idempotency_key: "k1".into(),
            })
            .await?;
        sink.output(&format!("result {}", result.error)).await
    }
}

#[tokio::test]
async fn ungated_results_with_approval_fields_are_refused() {
    let served = Served::tcp(Arc::new(Mediated { report: false })).await;
    let mut client = served.client().await;

    let mut conn = Conn::start(&mut client, vec![]).await;
    assert_eq!(conn.tool_call().await.id, "t1");
    conn.send(Frame::Tool(ToolResult {
        id: "t1".into(),
        error: "ok".into(),
        ..ToolResult::default()
    }))
    .await;
    assert_eq!(conn.output().await, "result ok");
    conn.end("COMPLETED").await;

    for forged in [
        ToolResult {
            id: "t1".into(),
            approval_request_seq: 3,
            ..ToolResult::default()
        },
        ToolResult {
            id: "t1".into(),
            is_error: true,
            code: Code::ApprovalDenied as i32,
            ..ToolResult::default()
        },
    ] {
        let mut conn = Conn::start(&mut client, vec![]).await;
        conn.tool_call().await;
        conn.send(Frame::Tool(forged)).await;
        assert!(conn.failed().await.contains("carries approval fields"));
    }
    served.shutdown().await;

    // The harness's own report is refused before it is sent.
    let served = Served::tcp(Arc::new(Mediated { report: true })).await;
    let mut client = served.client().await;
    let mut conn = Conn::start(&mut client, vec![]).await;
    assert!(conn.failed().await.contains("carries approval fields"));
    served.shutdown().await;
}

/// Ignores a park and tries to go on; with `swallow` it then reports
/// success, otherwise a failure of its own.
struct Stubborn {
    swallow: bool,
}

#[tonic::async_trait]
impl Harness for Stubborn {
    fn describe(&self) -> HarnessDescriptor {
        builtin::Approval.describe()
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let call = builtin::Approval::call(&start.execution_id, "x");
        let parked = sink.tool_call(call).await.expect_err("parks");
        assert!(matches!(parked, HarnessError::Parked(_)));
        // The park is sticky: nothing else gets out.
        assert_eq!(sink.output("after").await, Err(parked));
        if self.swallow {
            Ok(())
        } else {
            Err(HarnessError::failed("gave up"))
        }
    }
}

#[tokio::test]
async fn a_park_joined_with_another_failure_is_not_acknowledged() {
    for swallow in [true, false] {
        let served = Served::tcp(Arc::new(Stubborn { swallow })).await;
        let mut client = served.client().await;
        let mut conn = Conn::start(&mut client, vec![]).await;
        conn.tool_call().await;
        conn.send(Frame::Park(ApprovalRef {
            execution_id: EXEC.into(),
            tool_call_id: "c1".into(),
            request_seq: 4,
        }))
        .await;
        if swallow {
            assert_eq!(conn.event().await.kind, EventKind::EventParked as i32);
            conn.closed().await;
        } else {
            // Neither PARKED nor END: just the failed stream.
            let status = conn.next().await.expect_err("fails");
            assert_eq!(status.message(), "gave up");
        }
        served.shutdown().await;
    }
}
