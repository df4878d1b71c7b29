"""An echo harness in Python (grpcio): one model call per turn.

Generate the stubs, then serve (port 0 picks a free one):

    mkdir -p gen && python -m grpc_tools.protoc -I proto/proto --python_out=gen \
        --grpc_python_out=gen proto/proto/*.proto
    PYTHONPATH=gen python echo_harness.py 9000
    agentsessionsd --harness python-echo=127.0.0.1:9000
"""

import secrets
import sys
from concurrent import futures
from typing import Iterator

import grpc

import common_pb2 as common
import harness_pb2 as harness
import harness_pb2_grpc as harness_grpc


def text(message: common.Message) -> str:
    return "".join(p.text.text for p in message.parts if p.HasField("text"))


class Echo(harness_grpc.HarnessServicer):
    def Describe(self, request, context) -> harness.HarnessDescriptor:
        return harness.HarnessDescriptor(
            id="python-echo",
            version="1",  # keep it while replays stay compatible
            models=["echo"],
            capabilities=harness.Capabilities(
                resumability=harness.RESUMABILITY_STATELESS_REPLAY, fork_safe=True
            ),
        )

    def Connect(
        self, frames: Iterator[harness.ControllerFrame], context
    ) -> Iterator[common.Event]:
        # The host speaks first: one Start per stream, naming the execution.
        first = next(frames, None)
        if first is None or first.WhichOneof("frame") != "start":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first frame must be start")
        execution = first.execution_id
        inputs = first.start.inputs
        last = text(inputs[-1]) if inputs else ""

        # Every model call goes through the host, which journals it and
        # answers with a `model` frame (recorded, on a replay) carrying our id.
        call_id = secrets.token_hex(8)
        prompt = common.Message(role="user", parts=[common.Part(text=common.TextPart(text=last))])
        yield common.Event(
            execution_id=execution,
            kind=common.EVENT_MODEL_CALL,
            model=common.ModelCall(model="echo", id=call_id, messages=[prompt]),
        )
        reply = next(frames, None)
        if reply is None or reply.WhichOneof("frame") != "model":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "expected a model result")
        if reply.model.model_call_id != call_id:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "model result for another call")

        # The host journals the completion as the turn's output; we just end.
        yield common.Event(
            execution_id=execution,
            kind=common.EVENT_END,
            end=common.HarnessEnd(state="COMPLETED"),
        )


def serve(port: int) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    harness_grpc.add_HarnessServicer_to_server(Echo(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, bound


if __name__ == "__main__":
    server, bound = serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(f"serving python-echo on 127.0.0.1:{bound}", flush=True)
    server.wait_for_termination()
