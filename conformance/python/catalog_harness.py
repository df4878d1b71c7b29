"""A Python harness (grpcio) that calls one tool of the host's catalog.

The invariant it shows: a harness needs to know nothing of a tool's policy.
The turn's last input is JSON, {"tool": "fs__write_file", "args": {...}};
the harness emits it as an ordinary CONTROLLER_MEDIATED TOOL_CALL, and the
host decides: it runs the call at once, or gates it (a `park` frame, which
the harness acknowledges before closing without END; the Resume after a
decision sends the decision, then the receipt). With the receipt the
harness outputs `ok: TEXT ERROR` or `error: TEXT ERROR` and ends COMPLETED.

Prints `serving py-catalog on 127.0.0.1:PORT` and serves until stdin
closes, so it never outlives its test (tests/python_catalog.rs).
"""

import json
import sys
from concurrent import futures

import grpc
from google.protobuf import struct_pb2

import common_pb2 as common
import harness_pb2 as harness
import harness_pb2_grpc as harness_grpc

NAME = "py-catalog"


def text(parts) -> str:
    return "".join(p.text.text for p in parts if p.HasField("text"))


class Catalog(harness_grpc.HarnessServicer):
    def Describe(self, request, context) -> harness.HarnessDescriptor:
        return harness.HarnessDescriptor(
            id=NAME,
            version="1",
            capabilities=harness.Capabilities(
                resumability=harness.RESUMABILITY_STATELESS_REPLAY, fork_safe=True
            ),
        )

    def Connect(self, frames, context):
        first = next(frames, None)
        if first is None:
            return  # closed before Start: no execution to end
        if first.WhichOneof("frame") != "start":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first frame must be start")
        execution = first.execution_id

        def event(kind, **body):
            return common.Event(execution_id=execution, kind=kind, **body)

        def end(state, why=""):
            return event(
                common.EVENT_END,
                end=common.HarnessEnd(state=state, error=common.Error(description=why) if why else None),
            )

        inputs = first.start.inputs
        ask = json.loads(text(inputs[-1].parts)) if inputs else {}
        args = struct_pb2.Struct()
        args.update(ask.get("args", {}))
        # The same id and key on every run of the execution: a Resume's
        # call is the recorded one.
        call = common.ToolCall(
            id="c1",
            tool=ask.get("tool", ""),
            args=args,
            mediation=common.MEDIATION_CONTROLLER_MEDIATED,
            idempotency_key=f"{NAME}/{execution}/c1",
        )
        yield event(common.EVENT_TOOL_CALL, tool=call)

        frame = next(frames, None)
        kind = frame.WhichOneof("frame") if frame is not None else None
        if kind == "park":
            # The host's policy gated it: acknowledge with the very ref.
            yield event(common.EVENT_PARKED, parked=frame.park)
            return
        if kind == "approval":
            frame = next(frames, None)
            kind = frame.WhichOneof("frame") if frame is not None else None
        if kind != "tool" or frame.tool.id != call.id:
            yield end("FAILED", f"expected the receipt of {call.id}, got {kind}")
            return
        receipt = frame.tool
        verdict = "error" if receipt.is_error else "ok"
        summary = f"{verdict}: {text(receipt.content)} {receipt.error}"
        yield event(
            common.EVENT_OUTPUT,
            message=common.Message(
                role="assistant", parts=[common.Part(text=common.TextPart(text=summary))]
            ),
        )
        yield end("COMPLETED")


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    harness_grpc.add_HarnessServicer_to_server(Catalog(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"serving {NAME} on 127.0.0.1:{port}", flush=True)
    for _ in sys.stdin:
        pass
    server.stop(grace=None)


if __name__ == "__main__":
    main()
