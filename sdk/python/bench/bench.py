"""What the Python SDK costs over raw grpcio, measured against a real daemon.

    python sdk/python/bench/bench.py

Two comparisons, each a ratio of p50 latencies taken in one run:

(a) client: ``Client.exec`` of one turn on the built-in ``echo`` harness
    against the same Exec made with the generated stub
    (``SessionsStub.Exec``, the stream iterated to its end).
(b) harness: one turn on a harness written with the kit (``Harness`` +
    ``serve``) against the same turn on a hand-written grpcio Harness
    servicer doing the minimal frame handling (read Start, send MODEL_CALL
    to model ``echo``, read the reply, send OUTPUT + END): the same events.
    Both are routed to the daemon (``--harness kit=… --harness raw=…``) and
    served from one child process of their own; the turn is driven with the
    raw stub for both, so only the harness side differs.

Every call runs on a session of its own, created (untimed) just before it,
the same for both paths of a comparison. The paths run in alternating
blocks (A B, then B A, …) after a warm-up, so drift on the machine hits
both alike.

The daemon is ``$AGENTSESSIONSD``, else ``target/release/agentsessionsd``,
else ``target/debug/agentsessionsd``, on a journal in a temp directory.
Knobs: ``BENCH_ITERS`` (timed calls per path, 300), ``BENCH_WARMUP`` (untimed
calls per path first, 30), ``BENCH_BLOCK`` (calls per block, 25);
``BENCH_STRICT=1`` makes a missed goal exit 1.
"""

from __future__ import annotations

import os
import platform
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Tuple

import grpc

from agentsessions import Client, Harness, serve, text_message
from agentsessions.v1 import common_pb2 as pb
from agentsessions.v1 import harness_pb2 as hpb
from agentsessions.v1 import harness_pb2_grpc as hpb_grpc
from agentsessions.v1 import session_pb2 as spb
from agentsessions.v1 import session_pb2_grpc as spb_grpc

REPO = Path(__file__).resolve().parents[3]
GOAL = 1.2

# -- the two harnesses of (b) -------------------------------------------------


class KitEcho(Harness):
    """The kit's side: one model call on ``echo``, then an output of its own."""

    id, version, models = "kit", "1", ["echo"]

    def run(self, start, sink) -> None:
        text = start.last_input_text
        sink.model("echo", [text_message("user", text)])
        sink.output(text)


class RawEcho(hpb_grpc.HarnessServicer):
    """The same turn with the frames handled by hand (no checks beyond the minimum)."""

    def Describe(self, request, context) -> hpb.HarnessDescriptor:
        return hpb.HarnessDescriptor(
            id="raw",
            version="1",
            models=["echo"],
            capabilities=hpb.Capabilities(resumability=hpb.RESUMABILITY_STATELESS_REPLAY, fork_safe=True),
        )

    def Connect(self, frames: Iterator[hpb.ControllerFrame], context) -> Iterator[pb.Event]:
        first = next(frames, None)
        if first is None or first.WhichOneof("frame") != "start":
            return
        ex = first.execution_id
        inputs = first.start.inputs
        text = "".join(p.text.text for p in inputs[-1].parts) if inputs else ""
        call_id = secrets.token_hex(8)
        yield pb.Event(
            execution_id=ex,
            kind=pb.EVENT_MODEL_CALL,
            model=pb.ModelCall(model="echo", id=call_id, messages=[text_message("user", text)]),
        )
        reply = next(frames, None)
        if reply is None or reply.WhichOneof("frame") != "model" or reply.model.model_call_id != call_id:
            yield pb.Event(
                execution_id=ex,
                kind=pb.EVENT_END,
                end=pb.HarnessEnd(state="FAILED", error=pb.Error(description="expected the model result")),
            )
            return
        yield pb.Event(execution_id=ex, kind=pb.EVENT_OUTPUT, message=text_message("assistant", text))
        yield pb.Event(execution_id=ex, kind=pb.EVENT_END, end=pb.HarnessEnd(state="COMPLETED"))


def serve_harnesses() -> None:
    """Child mode: serve both harnesses, print their ports, serve until stdin closes."""
    kit = serve(KitEcho(), "127.0.0.1:0")
    raw = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    hpb_grpc.add_HarnessServicer_to_server(RawEcho(), raw)
    raw_port = raw.add_insecure_port("127.0.0.1:0")
    raw.start()
    print(f"ports {kit.port} {raw_port}", flush=True)
    for _ in sys.stdin:
        pass
    kit.stop(0)
    raw.stop(0).wait()


# -- processes ----------------------------------------------------------------


def daemon_binary() -> Path:
    env = os.environ.get("AGENTSESSIONSD")
    candidates = [Path(env)] if env else [
        REPO / "target" / "release" / "agentsessionsd",
        REPO / "target" / "debug" / "agentsessionsd",
    ]
    deadline = time.monotonic() + 180  # a relink removes the binary for a moment
    while True:
        for c in candidates:
            if c.is_file() and os.access(c, os.X_OK):
                return c.resolve()
        if time.monotonic() > deadline:
            raise SystemExit(f"no agentsessionsd among {[str(c) for c in candidates]} (set AGENTSESSIONSD)")
        time.sleep(2)


def start_harnesses() -> Tuple[subprocess.Popen, int, int]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-harnesses"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if len(line) != 3 or line[0] != "ports":
        proc.kill()
        raise SystemExit(f"harness child did not start: {line}")
    return proc, int(line[1]), int(line[2])


def start_daemon(binary: Path, workdir: Path, harnesses: Dict[str, str]) -> Tuple[subprocess.Popen, str]:
    args = [str(binary), "--addr", "127.0.0.1:0", "--journal", str(workdir / "journal.db")]
    for name, addr in harnesses.items():
        args += ["--harness", f"{name}={addr}"]
    log = open(workdir / "daemon.log", "wb")
    proc = subprocess.Popen(args, cwd=workdir, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode(errors="replace")
        if not line:
            break
        if line.startswith("agentsessionsd listening on "):
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, line.split()[-1]
    proc.kill()
    raise SystemExit(f"agentsessionsd did not start: {(workdir / 'daemon.log').read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- measuring ----------------------------------------------------------------

Call = Callable[[str], None]  # runs one turn on the given (fresh) session


def measure(new_session: Callable[[str], str], paths: List[Tuple[str, str, Call]], iters: int, warmup: int, block: int) -> Dict[str, List[float]]:
    """Times each path ``iters`` times, in alternating blocks; returns seconds per call."""
    times: Dict[str, List[float]] = {name: [] for name, _, _ in paths}
    for name, harness, call in paths:
        for _ in range(warmup):
            call(new_session(harness))
    order = list(paths)
    while any(len(times[name]) < iters for name, _, _ in paths):
        for name, harness, call in order:
            for _ in range(min(block, iters - len(times[name]))):
                uid = new_session(harness)
                t0 = time.perf_counter()
                call(uid)
                times[name].append(time.perf_counter() - t0)
        order.reverse()
    return times


def pct(xs: List[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def row(name: str, xs: List[float], base: List[float]) -> str:
    p50, p99 = pct(xs, 0.50) * 1e3, pct(xs, 0.99) * 1e3
    if xs is base:
        return f"| {name} | {p50:.2f} | {p99:.2f} | 1.00× (baseline) | | |"
    ratio = pct(xs, 0.50) / pct(base, 0.50)
    met = "yes" if ratio <= GOAL else "no"
    return f"| {name} | {p50:.2f} | {p99:.2f} | {ratio:.2f}× | ≤ {GOAL}× | {met} |"


def main() -> int:
    iters = int(os.environ.get("BENCH_ITERS", "300"))
    warmup = int(os.environ.get("BENCH_WARMUP", "30"))
    block = max(1, int(os.environ.get("BENCH_BLOCK", "25")))
    binary = daemon_binary()

    hproc, kit_port, raw_port = start_harnesses()
    with tempfile.TemporaryDirectory(prefix="sdkbench-") as tmp:
        dproc, addr = start_daemon(
            binary, Path(tmp), {"kit": f"127.0.0.1:{kit_port}", "raw": f"127.0.0.1:{raw_port}"}
        )
        try:
            client = Client(addr)
            channel = grpc.insecure_channel(addr)
            stub = spb_grpc.SessionsStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            inputs = [text_message("user", "hello")]

            def new_session(harness: str) -> str:
                req = spb.CreateSessionRequest(session=spb.Session(harness=harness))
                return stub.CreateSession(req, timeout=60).metadata.uid

            def raw_exec(uid: str) -> None:
                for _ in stub.Exec(spb.ExecRequest(session=uid, inputs=inputs)):
                    pass

            def sdk_exec(uid: str) -> None:
                turn = client.exec(uid, "hello")
                assert turn.output, turn.kinds()

            # One turn each, checked, before anything is timed.
            for h in ("echo", "kit", "raw"):
                turn = client.exec(new_session(h), "hello")
                assert turn.end is not None and turn.end.state == "COMPLETED", (h, turn.kinds())
            kit_kinds = client.exec(new_session("kit"), "hello").kinds()
            raw_kinds = client.exec(new_session("raw"), "hello").kinds()
            assert kit_kinds == raw_kinds, (kit_kinds, raw_kinds)

            a = measure(
                new_session,
                [("raw grpcio Exec (echo)", "echo", raw_exec), ("Client.exec (echo)", "echo", sdk_exec)],
                iters, warmup, block,
            )
            b = measure(
                new_session,
                [("raw-frame harness turn", "raw", raw_exec), ("kit harness turn", "kit", raw_exec)],
                iters, warmup, block,
            )
            client.close()
            channel.close()
        finally:
            stop(dproc)
            assert hproc.stdin is not None
            hproc.stdin.close()
            stop(hproc)

    print(f"# agentsessions Python SDK overhead ({iters} calls per path, warm-up {warmup}, blocks of {block})")
    print()
    print(f"- daemon: {binary.relative_to(REPO) if binary.is_relative_to(REPO) else binary}")
    print(f"- cpus: {os.cpu_count()}; python {platform.python_version()} ({platform.python_implementation()}); "
          f"grpcio {grpc.__version__}; {platform.machine()} {platform.system()}")
    print(f"- events per harness turn: {', '.join(kit_kinds)}")
    print()
    print("| path | p50 ms | p99 ms | ratio (p50) | goal | met |")
    print("| --- | ---: | ---: | ---: | --- | --- |")
    (ra, a_raw), (sa, a_sdk) = list(a.items())
    print(row(ra, a_raw, a_raw))
    print(row(sa, a_sdk, a_raw))
    (rb, b_raw), (kb, b_kit) = list(b.items())
    print(row(rb, b_raw, b_raw))
    print(row(kb, b_kit, b_raw))
    ok = pct(a_sdk, 0.5) / pct(a_raw, 0.5) <= GOAL and pct(b_kit, 0.5) / pct(b_raw, 0.5) <= GOAL
    return 0 if ok or os.environ.get("BENCH_STRICT") != "1" else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve-harnesses"]:
        serve_harnesses()
    else:
        sys.exit(main())
