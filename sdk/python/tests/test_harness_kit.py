"""Python harnesses served with the kit, routed to the daemon with --harness NAME=HOST:PORT."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest

from agentsessions import AgentSessionsError, Client, pb, text_message
from agentsessions.harness import Parked, ProtocolError, Sink, _Conn, _check_receipt
from agentsessions.v1 import harness_pb2 as hpb
from agentsessions.v1 import harness_pb2_grpc as hpb_grpc

from .harnesses import SEEN


def test_python_harness_model_call_through_the_echo_model(client: Client) -> None:
    s = client.create(harness="py")
    turn = client.exec(s.uid, "hello")
    assert turn.kinds() == [
        "EVENT_EXECUTION_START",
        "EVENT_INPUT",
        "EVENT_MODEL_CALL",
        "EVENT_OUTPUT",
        "EVENT_USAGE",
        "EVENT_END",
    ]
    assert turn.output == "echo:hello"
    assert SEEN[turn.execution_id] == ["start hello history=0", "model echo:hello"]
    usage = turn.records[4].event.usage
    assert (usage.input_tokens, usage.output_tokens) == (5, 10)
    # A second turn sees the first in its history.
    again = client.exec(s.uid, "more")
    assert SEEN[again.execution_id][0].startswith("start more history=")
    assert SEEN[again.execution_id][0] != "start more history=0"


def test_python_harness_gated_call_parks_and_continues_after_approve(client: Client) -> None:
    s = client.create(harness="py")
    turn = client.exec(s.uid, "note buy milk")
    assert turn.pending is not None
    assert turn.pending.tool_call_id == "n1" and turn.pending.execution_id == turn.execution_id
    assert "EVENT_APPROVAL_REQUEST" in turn.kinds()
    assert f"parked {turn.pending.request_seq}" in SEEN[turn.execution_id]
    assert client.get(s.uid).exec_state == "EXEC_AWAITING"

    done = client.approve(s.uid, turn.pending, reason="ok")
    assert done.output == "note written", done.kinds()
    assert done.end is not None and done.end.state == "COMPLETED"
    assert "decided approved=True reason=ok" in SEEN[turn.execution_id]
    result = [r for r in done.records if r.event.kind == pb.EVENT_TOOL_RESULT][0].event.result
    assert not result.is_error and result.approval_request_seq == turn.pending.request_seq
    assert client.get(s.uid).exec_state == "EXEC_COMPLETED"


def test_python_harness_denial_reaches_the_harness(client: Client) -> None:
    s = client.create(harness="py")
    turn = client.exec(s.uid, "note nope")
    done = client.deny(s.uid, turn.pending, reason="no notes")
    assert "decided approved=False reason=no notes" in SEEN[turn.execution_id]
    assert done.output.startswith("note denied"), done.output


def test_python_harness_failure_ends_failed(client: Client) -> None:
    s = client.create(harness="py")
    with pytest.raises(AgentSessionsError) as e:
        client.exec(s.uid, "fail")
    turn = e.value.turn  # type: ignore[attr-defined]
    assert "boom from python" in e.value.details or any(
        "boom from python" in r.event.error.description for r in turn.records
    )


def test_async_python_harness(client: Client) -> None:
    s = client.create(harness="pyasync")
    turn = client.exec(s.uid, "quiet")
    assert turn.output == "echo:quiet\nQUIET"
    assert turn.end is not None and turn.end.state == "COMPLETED"


def test_cancel_raises_inside_a_busy_run(client: Client) -> None:
    s = client.create(harness="py")
    outcome = {}

    def run() -> None:
        try:
            outcome["turn"] = client.exec(s.uid, "wait")
        except AgentSessionsError as e:
            outcome["error"] = e

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(v == ["start wait history=0"] for v in SEEN.values()) and client.get(s.uid).last_seq >= 2:
            break
        time.sleep(0.05)
    client.cancel(s.uid, reason="stop it")
    t.join(30)
    assert "error" in outcome and outcome["error"].code == grpc.StatusCode.CANCELLED
    ex = outcome["error"].turn.execution_id or client.replay(s.uid)[0].event.execution_id
    deadline = time.monotonic() + 10
    while len(SEEN.get(ex, [])) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    # The daemon journals CANCEL + END{CANCELED} itself and then closes the
    # harness's stream (docs/lifecycle.md, Cancel): the run is interrupted.
    assert SEEN[ex][1] in ("canceled stop it", "stopped StreamClosed"), SEEN[ex]
    kinds = [pb.EventKind.Name(r.event.kind) for r in client.replay(s.uid)]
    assert kinds[-1] == "EVENT_END"


# -- the sink's protocol checks, without a daemon --------------------------


def _sink() -> tuple:
    conn = _Conn()
    return Sink("x1", "s1", conn), conn


def _frame(**kw) -> hpb.ControllerFrame:
    kw.setdefault("session", "s1")
    kw.setdefault("execution_id", "x1")
    return hpb.ControllerFrame(**kw)


def test_sink_refuses_a_model_reply_for_another_call_and_sticks() -> None:
    sink, conn = _sink()
    conn.frames.put(_frame(model=hpb.ModelResult(model_call_id="other")))
    with pytest.raises(ProtocolError, match="model result correlation mismatch"):
        sink.model("echo", [])
    with pytest.raises(ProtocolError):
        sink.output("after")  # sticky


def test_sink_refuses_replies_for_another_execution_or_session() -> None:
    sink, conn = _sink()
    conn.frames.put(_frame(execution_id="x2", model=hpb.ModelResult()))
    with pytest.raises(ProtocolError, match="reply for another execution"):
        sink.model("echo", [])
    sink, conn = _sink()
    conn.frames.put(_frame(session="s2", tool=pb.ToolResult(id="c1")))
    with pytest.raises(ProtocolError, match="tool reply for another session"):
        sink.tool_call(pb.ToolCall(id="c1", tool="t", mediation=pb.MEDIATION_CONTROLLER_MEDIATED))


def test_sink_park_must_match_and_then_refuses_everything() -> None:
    sink, conn = _sink()
    conn.frames.put(_frame(park=pb.ApprovalRef(execution_id="x1", tool_call_id="other", request_seq=4)))
    with pytest.raises(ProtocolError, match="park correlation mismatch"):
        sink.tool_call(pb.ToolCall(id="c1", tool="t", mediation=pb.MEDIATION_REQUIRES_APPROVAL))
    sink, conn = _sink()
    ref = pb.ApprovalRef(execution_id="x1", tool_call_id="c1", request_seq=4)
    conn.frames.put(_frame(park=ref))
    with pytest.raises(Parked) as p:
        sink.tool_call(pb.ToolCall(id="c1", tool="t", mediation=pb.MEDIATION_REQUIRES_APPROVAL))
    assert p.value.ref == ref
    with pytest.raises(Parked):
        sink.output("no more")


def test_sink_ungated_result_may_not_carry_approval_fields() -> None:
    sink, conn = _sink()
    conn.frames.put(_frame(tool=pb.ToolResult(id="c1", approval_request_seq=3)))
    with pytest.raises(ProtocolError, match="approval fields"):
        sink.tool_call(pb.ToolCall(id="c1", tool="t", mediation=pb.MEDIATION_CONTROLLER_MEDIATED))
    sink, _ = _sink()
    with pytest.raises(ProtocolError):
        sink.report(pb.ToolResult(id="c1", code=pb.ToolResult.APPROVAL_DENIED))


def test_receipt_outcome_must_match_the_decision() -> None:
    ok = pb.ApprovalResult(tool_call_id="c1", approved=True, request_seq=4)
    _check_receipt(pb.ToolResult(id="c1", approval_request_seq=4, approval_decision_seq=5), ok)
    with pytest.raises(ProtocolError, match="does not bind"):
        _check_receipt(pb.ToolResult(id="c1", approval_request_seq=3, approval_decision_seq=5), ok)
    denied = pb.ApprovalResult(tool_call_id="c1", approved=False, request_seq=4)
    with pytest.raises(ProtocolError, match="contradicts"):
        _check_receipt(pb.ToolResult(id="c1", approval_request_seq=4, approval_decision_seq=5), denied)
    _check_receipt(
        pb.ToolResult(
            id="c1", is_error=True, code=pb.ToolResult.APPROVAL_DENIED, approval_request_seq=4, approval_decision_seq=5
        ),
        denied,
    )


def test_gated_call_needs_a_session_and_an_id() -> None:
    from agentsessions.harness import InvalidRequest

    sink = Sink("x1", "", _Conn())
    with pytest.raises(InvalidRequest, match="outside a session"):
        sink.tool_call(pb.ToolCall(id="c1", tool="t", mediation=pb.MEDIATION_REQUIRES_APPROVAL))


# -- the kit against a scripted host (frames the daemon does not send) ------


def _connect(addr: str, frames: "queue.Queue"):
    channel = grpc.insecure_channel(addr)
    stub = hpb_grpc.HarnessStub(channel)

    def requests():
        while True:
            f = frames.get()
            if f is None:
                return
            yield f

    return channel, stub.Connect(requests())


def test_a_cancel_frame_ends_the_run_canceled(harness_servers) -> None:
    frames: "queue.Queue" = queue.Queue()
    channel, events = _connect(harness_servers["py"], frames)
    start = hpb.Start(inputs=[pb.Message(role="user", parts=[pb.Part(text=pb.TextPart(text="wait"))])])
    frames.put(hpb.ControllerFrame(session="s9", execution_id="cx1", start=start))
    time.sleep(0.3)
    frames.put(hpb.ControllerFrame(session="s9", execution_id="cx1", cancel=hpb.Cancel(reason="enough")))
    got = []
    with pytest.raises(grpc.RpcError) as e:
        for ev in events:
            got.append(ev)
    assert e.value.code() == grpc.StatusCode.CANCELLED
    assert got[-1].kind == pb.EVENT_END and got[-1].end.state == "CANCELED"
    assert got[-1].end.error.description == "enough"
    deadline = time.monotonic() + 5
    while len(SEEN.get("cx1", [])) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert SEEN["cx1"] == ["start wait history=0", "canceled enough"]
    frames.put(None)
    channel.close()


def test_a_park_is_acknowledged_with_the_exact_ref(harness_servers) -> None:
    frames: "queue.Queue" = queue.Queue()
    channel, events = _connect(harness_servers["py"], frames)
    start = hpb.Start(inputs=[pb.Message(role="user", parts=[pb.Part(text=pb.TextPart(text="note x"))])])
    frames.put(hpb.ControllerFrame(session="s9", execution_id="px1", start=start))
    it = iter(events)
    call = next(it)
    assert call.kind == pb.EVENT_MODEL_CALL and call.execution_id == "px1"
    frames.put(
        hpb.ControllerFrame(
            session="s9",
            execution_id="px1",
            model=hpb.ModelResult(model_call_id=call.model.id, message=text_message("assistant", "echo:note x")),
        )
    )
    tool = next(it)
    assert tool.kind == pb.EVENT_TOOL_CALL and tool.tool.id == "n1"
    ref = pb.ApprovalRef(execution_id="px1", tool_call_id="n1", request_seq=41)
    frames.put(hpb.ControllerFrame(session="s9", execution_id="px1", park=ref))
    rest = list(it)  # the stream ends OK after the acknowledgement, with no END
    assert [e.kind for e in rest] == [pb.EVENT_PARKED] and rest[0].parked == ref
    frames.put(None)
    channel.close()


# -- the reused threads -------------------------------------------------------


def test_an_injected_stop_never_outlives_its_run() -> None:
    """A plain run's thread is reused: a stop raised into it ends with the run."""
    from agentsessions.harness import Canceled, _Injector, _Stop

    outcome = {}
    armed, fired = threading.Event(), threading.Event()

    def run() -> None:
        inj = _Injector()
        outcome["inj"] = inj
        inj.arm()
        armed.set()
        try:
            for _ in range(400):
                time.sleep(0.01)
        except Canceled as e:
            outcome["caught"] = e.reason
        finally:
            inj.disarm()
        fired.wait(5)
        inj.fire(_Stop("again"))  # after disarm: a no-op
        try:
            total = 0
            for i in range(200_000):  # plenty of bytecodes for a stray exception to surface
                total += i
            outcome["after"] = total
        except BaseException as e:  # pragma: no cover - the failure being tested for
            outcome["after"] = e

    t = threading.Thread(target=run)
    t.start()
    assert armed.wait(5)
    time.sleep(0.05)
    outcome_inj = outcome["inj"]
    outcome_inj.fire(_Stop("stop"))
    outcome_inj.fire(_Stop("twice"))  # at most once
    fired.set()
    t.join(10)
    assert outcome["caught"] == "stop"
    assert outcome["after"] == sum(range(200_000))


def test_turns_after_a_canceled_run_reuse_its_threads(client: Client, harness_servers) -> None:
    frames: "queue.Queue" = queue.Queue()
    channel, events = _connect(harness_servers["py"], frames)
    start = hpb.Start(inputs=[pb.Message(role="user", parts=[pb.Part(text=pb.TextPart(text="wait"))])])
    frames.put(hpb.ControllerFrame(session="s9", execution_id="rx1", start=start))
    time.sleep(0.2)
    frames.put(hpb.ControllerFrame(session="s9", execution_id="rx1", cancel=hpb.Cancel(reason="done")))
    with pytest.raises(grpc.RpcError):
        list(events)
    frames.put(None)
    channel.close()
    s = client.create(harness="py")
    for i in range(10):
        assert client.exec(s.uid, f"n{i}").output == f"echo:n{i}"
