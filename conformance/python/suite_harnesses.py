"""The conformance suite's Python harness peers (grpcio).

Serves, each on its own 127.0.0.1 port (port 0: the OS picks):

- py-echo: one model call shaped like the suite's conf-echo (model "echo",
  the last input as one user message), then END COMPLETED;
- py-approval: one REQUIRES_APPROVAL `append_note` call like conf-approval;
  parks when the host says so, and once decided outputs the receipt's outcome;
- py-fail: END FAILED "boom", then a failed status;
- py-doc: the documented harness, echo_harness.py, imported as it stands.

Protocol with the suite (one line each, stdout): `serving <name> on <addr>`
per harness, then `ready`; `start <json>` per Start, `receipt <json>` per
tool receipt, `held <json>` at a hold. Commands on stdin: `hold` arms a hold
(acknowledged with `armed`): the next run that reaches its hold point stops
there until the host goes away. EOF on stdin stops the process, so it never
outlives the suite.
"""

import json
import secrets
import sys
import threading
import time
from concurrent import futures
from typing import Iterator, Optional

import grpc
from google.protobuf import struct_pb2

# The stubs of the agentsessions package (sdk/python), which the documented
# harness (echo_harness.py, on its kit) loads too: one process holds one copy
# of the agentsessions.v1 descriptors.
import echo_harness
from agentsessions.v1 import common_pb2 as common
from agentsessions.v1 import harness_pb2 as harness
from agentsessions.v1 import harness_pb2_grpc as harness_grpc

ECHO, APPROVAL, FAIL, DOC = "py-echo", "py-approval", "py-fail", "py-doc"

_out = threading.Lock()

# The provider model id conformance hosts serve (conformance/src/env.rs
# MODEL): hosts route a call by the id it names, and the suite counts the
# fake provider's requests.
MODEL = "gpt-test"


def say(line: str) -> None:
    with _out:
        print(line, flush=True)


def report(tag: str, payload: dict) -> None:
    say(f"{tag} {json.dumps(payload, sort_keys=True)}")


def text(message: common.Message) -> str:
    return "".join(p.text.text for p in message.parts if p.HasField("text"))


class Control:
    """The hold switch the suite flips over stdin."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed = False

    def arm(self) -> None:
        with self._lock:
            self._armed = True

    def take(self) -> bool:
        with self._lock:
            armed, self._armed = self._armed, False
            return armed


class Failed(Exception):
    """Ends the run with END FAILED and this text."""


class Canceled(Exception):
    """The host sent Cancel with this reason."""


class Stream:
    """One Connect stream: its envelope and the host frames still to come."""

    def __init__(self, frames: Iterator[harness.ControllerFrame], first: harness.ControllerFrame):
        self.frames = frames
        self.session = first.session
        self.execution = first.execution_id

    def event(self, kind: int, **body) -> common.Event:
        return common.Event(execution_id=self.execution, kind=kind, **body)

    def expect(self, *kinds: str, tool_reply: bool = False) -> harness.ControllerFrame:
        frame = next(self.frames, None)
        if frame is None:
            raise Failed("host closed the stream")
        kind = frame.WhichOneof("frame")
        if kind == "cancel":
            raise Canceled(frame.cancel.reason)
        if frame.execution_id != self.execution:
            raise Failed("reply for another execution")
        if tool_reply and frame.session != self.session:
            raise Failed("tool reply for another session")
        if kind not in kinds:
            raise Failed(f"expected {' or '.join(kinds)}, got {kind}")
        return frame


def end(stream: Stream, state: str, error: Optional[common.Error] = None) -> common.Event:
    return stream.event(common.EVENT_END, end=common.HarnessEnd(state=state, error=error))


class SuiteHarness(harness_grpc.HarnessServicer):
    def __init__(self, name: str, control: Control) -> None:
        self.name = name
        self.control = control

    def Describe(self, request, context) -> harness.HarnessDescriptor:
        tools = []
        if self.name == APPROVAL:
            tools = [
                harness.ToolSpec(
                    name="append_note",
                    description="Appends a note",
                    mediation=common.MEDIATION_REQUIRES_APPROVAL,
                )
            ]
        return harness.HarnessDescriptor(
            id=self.name,
            version="1",
            models=[MODEL],
            tools=tools,
            capabilities=harness.Capabilities(
                resumability=harness.RESUMABILITY_STATELESS_REPLAY,
                fork_safe=True,
                streaming=True,
            ),
        )

    def Connect(self, frames, context) -> Iterator[common.Event]:
        first = next(frames, None)
        if first is None:
            return  # closed before Start: no execution to end
        if first.WhichOneof("frame") != "start" or not first.execution_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first frame must be start")
        stream = Stream(frames, first)
        start = first.start
        report(
            "start",
            {
                "harness": self.name,
                "execution_id": stream.execution,
                "session": stream.session,
                "inputs": [text(m) for m in start.inputs],
                "history_kinds": [common.EventKind.Name(e.kind) for e in start.history],
                "history_texts": [text(e.message) for e in start.history if e.HasField("message")],
                "resume_from_seq": start.resume_from_seq,
            },
        )
        last = text(start.inputs[-1]) if start.inputs else ""
        run = {ECHO: self.echo, APPROVAL: self.approval, FAIL: self.fail}[self.name]
        try:
            yield from run(stream, last, context)
        except Canceled as e:
            yield end(stream, "CANCELED", common.Error(code=grpc.StatusCode.CANCELLED.value[0], description=str(e)))
            context.set_code(grpc.StatusCode.CANCELLED)
            context.set_details(str(e))
        except Failed as e:
            yield end(stream, "FAILED", common.Error(description=str(e)))
            context.set_code(grpc.StatusCode.UNKNOWN)
            context.set_details(str(e))
        except grpc.RpcError:
            return  # the host went away mid-run: nothing more to send

    def held(self, stream: Stream, context) -> bool:
        """The hold point: when armed, waits until the host is gone."""
        if not self.control.take():
            return False
        report("held", {"harness": self.name, "execution_id": stream.execution})
        while context.is_active():
            time.sleep(0.05)
        return True

    def echo(self, stream: Stream, last: str, context) -> Iterator[common.Event]:
        call_id = secrets.token_hex(8)
        prompt = common.Message(role="user", parts=[common.Part(text=common.TextPart(text=last))])
        yield stream.event(
            common.EVENT_MODEL_CALL,
            model=common.ModelCall(model=MODEL, id=call_id, messages=[prompt]),
        )
        if stream.expect("model").model.model_call_id != call_id:
            raise Failed("model result correlation mismatch")
        # OUTPUT is durable before the host answers, so a hold here leaves
        # the turn with MODEL_CALL and OUTPUT but no END.
        if self.held(stream, context):
            return
        yield end(stream, "COMPLETED")

    def approval(self, stream: Stream, last: str, context) -> Iterator[common.Event]:
        if not stream.session:
            raise Failed("approval call outside a session")
        args = struct_pb2.Struct()
        args.update({"text": last})
        call = common.ToolCall(
            id="c1",
            tool="append_note",
            args=args,
            mediation=common.MEDIATION_REQUIRES_APPROVAL,
            idempotency_key=f"{self.name}/{stream.execution}/c1",
        )
        yield stream.event(common.EVENT_TOOL_CALL, tool=call)
        frame = stream.expect("park", "approval", tool_reply=True)
        if frame.WhichOneof("frame") == "park":
            park = frame.park
            if park.execution_id != stream.execution or park.tool_call_id != call.id or park.request_seq <= 0:
                raise Failed("park correlation mismatch")
            # Acknowledge with the very tuple, then close without END.
            yield stream.event(common.EVENT_PARKED, parked=park)
            return
        decision = frame.approval
        if decision.tool_call_id != call.id or decision.request_seq <= 0:
            raise Failed("approval correlation mismatch")
        receipt = stream.expect("tool", tool_reply=True).tool
        check_receipt(receipt, decision, call.id)
        report(
            "receipt",
            {
                "execution_id": stream.execution,
                "id": receipt.id,
                "is_error": receipt.is_error,
                "code": receipt.code,
                "error": receipt.error,
                "approval_request_seq": receipt.approval_request_seq,
                "approval_decision_seq": receipt.approval_decision_seq,
                "approved": decision.approved,
                "decision_request_seq": decision.request_seq,
            },
        )
        if self.held(stream, context):
            return
        summary = f"tool error ({receipt.code}): {receipt.error}" if receipt.is_error else "tool ok"
        yield stream.event(
            common.EVENT_OUTPUT,
            message=common.Message(role="assistant", parts=[common.Part(text=common.TextPart(text=summary))]),
        )
        yield end(stream, "COMPLETED")

    def fail(self, stream: Stream, last: str, context) -> Iterator[common.Event]:
        raise Failed("boom")
        yield  # a generator, like the others


def check_receipt(receipt: common.ToolResult, decision: common.ApprovalResult, call_id: str) -> None:
    """The receipt must name the call, bind to the decision and agree with it."""
    if receipt.id != call_id:
        raise Failed("tool result correlation mismatch")
    if receipt.approval_request_seq != decision.request_seq or receipt.approval_decision_seq <= 0:
        raise Failed("receipt does not bind to the decision")
    ok = common.ToolResult.CODE_UNSPECIFIED
    if decision.approved:
        consistent = (not receipt.is_error and receipt.code == ok) or (
            receipt.is_error and receipt.code == common.ToolResult.EXECUTOR_ERROR
        )
    else:
        consistent = receipt.is_error and receipt.code == common.ToolResult.APPROVAL_DENIED
    if not consistent:
        raise Failed("receipt outcome contradicts the decision")


def main() -> None:
    control = Control()
    servers = []
    for name in (ECHO, APPROVAL, FAIL):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        harness_grpc.add_HarnessServicer_to_server(SuiteHarness(name, control), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        say(f"serving {name} on 127.0.0.1:{port}")
    doc, port = echo_harness.serve(0)
    servers.append(doc)
    say(f"serving {DOC} on 127.0.0.1:{port}")
    say("ready")
    for line in sys.stdin:
        if line.strip() == "hold":
            control.arm()
            say("armed")
    for server in servers:
        server.stop(grace=None)


if __name__ == "__main__":
    main()
