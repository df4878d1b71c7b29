"""The harness kit: write an agent loop in Python and serve it to ``agentsessionsd``.

Subclass :class:`Harness`, implement ``run(self, start, sink)`` (a plain or an
``async`` method), and :func:`serve` it::

    class Shout(Harness):
        id = "shout"
        def run(self, start, sink):
            sink.output(start.last_input_text.upper())

    server = serve(Shout(), "127.0.0.1:0")   # server.port is the bound port
    # agentsessionsd --harness shout=127.0.0.1:<port>

Every host callback goes through the :class:`Sink`, which enforces the
Connect protocol exactly as the Rust SDK does (``shells/src/harness/sink.rs``):

* replies must name the stream's execution; tool replies also its session;
* a model reply must carry the call's id, a receipt the call's id;
* a ``park`` must match the execution and the call with ``request_seq > 0``;
  the sink then raises :class:`Parked`, which ``run`` lets propagate (or
  returns after), and the kit acknowledges the park with one EVENT_PARKED
  carrying the very same ApprovalRef and closes without END;
* a decided ``approval`` (matching call, ``request_seq > 0``) must be followed
  by a receipt bound to it whose outcome the decision allows;
* a result for an ungated call (and anything passed to :meth:`Sink.report`)
  may not carry approval fields or APPROVAL_DENIED.

Once a request is on the wire every failure sticks: later sink calls raise the
same error and END reports it. After a park the sink refuses everything.

``run``'s outcome becomes the stream's last event: returning → END COMPLETED;
raising → END FAILED with the exception's text, then a failed status; a Cancel
frame from the host → END CANCELED (:class:`Canceled` is raised inside ``run``:
from any waiting sink call, and, for a plain ``run``, asynchronously wherever
the thread is; an ``async`` run is cancelled as an asyncio task). When the
host drops the call instead, :class:`StreamClosed` is raised the same way and
nothing more is sent; this is how ``agentsessionsd`` stops a remote harness
whose turn ``Sessions.Cancel`` ended (it journals CANCEL and END{CANCELED}
itself, then closes the stream; docs/lifecycle.md, *Cancel*).
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import json
import queue
import secrets
import threading
from concurrent import futures
from dataclasses import dataclass, field
from typing import (
    Any,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import grpc

from .types import message_text, text_message, to_struct
from .v1 import common_pb2 as pb
from .v1 import harness_pb2 as hpb
from .v1 import harness_pb2_grpc as hpb_grpc

__all__ = [
    "Harness",
    "Start",
    "Sink",
    "AsyncSink",
    "ModelRequest",
    "HarnessError",
    "Parked",
    "ProtocolError",
    "InvalidRequest",
    "StreamClosed",
    "Canceled",
    "Failed",
    "HarnessServer",
    "serve",
    "tool_spec",
    "tool_call",
    "STATELESS_REPLAY",
    "REQUIRES_MEMORY_SNAPSHOT",
    "IN_HARNESS_REPORTED",
    "CONTROLLER_MEDIATED",
    "REQUIRES_APPROVAL",
]

STATELESS_REPLAY = hpb.RESUMABILITY_STATELESS_REPLAY
REQUIRES_MEMORY_SNAPSHOT = hpb.RESUMABILITY_REQUIRES_MEMORY_SNAPSHOT
IN_HARNESS_REPORTED = pb.MEDIATION_IN_HARNESS_REPORTED
CONTROLLER_MEDIATED = pb.MEDIATION_CONTROLLER_MEDIATED
REQUIRES_APPROVAL = pb.MEDIATION_REQUIRES_APPROVAL


# -- errors -----------------------------------------------------------------


class HarnessError(Exception):
    """Base of the kit's errors."""


class Parked(HarnessError):
    """The host parked a REQUIRES_APPROVAL call; let it propagate out of ``run``.

    ``ref`` is the host's ApprovalRef, acknowledged byte for byte.
    """

    def __init__(self, ref: pb.ApprovalRef) -> None:
        self.ref = ref
        super().__init__(f"parked on approval request {ref.request_seq} of call {ref.tool_call_id!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Parked) and other.ref == self.ref

    def __hash__(self) -> int:
        return hash((self.ref.execution_id, self.ref.tool_call_id, self.ref.request_seq))


class ProtocolError(HarnessError):
    """The host broke the Connect protocol (correlation, session or receipt). Sticky."""

    def __init__(self, text: str) -> None:
        super().__init__(f"protocol: {text}")


class InvalidRequest(HarnessError):
    """The harness asked for something the protocol cannot carry; nothing was sent."""

    def __init__(self, text: str) -> None:
        super().__init__(f"invalid request: {text}")


class StreamClosed(HarnessError):
    """The host half-closed (or went away) while the harness waited for an answer."""

    def __init__(self) -> None:
        super().__init__("stream closed")


class Canceled(HarnessError):
    """The host sent Cancel; ``reason`` is its text."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(f"canceled: {reason}")


class Failed(HarnessError):
    """The harness's own failure; its text becomes END's description verbatim."""


# -- inputs -----------------------------------------------------------------


@dataclass
class Start:
    """What the host sent to begin one execution."""

    execution_id: str
    session: str
    config: bytes
    history: List[pb.Event]
    inputs: List[pb.Message]
    identity: Optional[hpb.IdentityContext]
    resume_from_seq: int

    @property
    def last_input_text(self) -> str:
        """The text of the last input message ("" without inputs)."""
        return message_text(self.inputs[-1]) if self.inputs else ""

    def config_json(self) -> Any:
        """The config parsed as JSON (None when empty)."""
        return json.loads(self.config) if self.config else None


@dataclass
class ModelRequest:
    """A completion request; the host hashes it into the journal, so build it deterministically."""

    model: str
    messages: List[pb.Message] = field(default_factory=list)
    params: Dict[str, str] = field(default_factory=dict)
    tools: List[pb.ToolDefinition] = field(default_factory=list)
    tool_choice: Optional[pb.ToolChoice] = None


def tool_spec(name: str, mediation: Any = CONTROLLER_MEDIATED, description: str = "") -> hpb.ToolSpec:
    """A descriptor entry for a tool the harness calls."""
    return hpb.ToolSpec(name=name, description=description, mediation=mediation)


def tool_call(
    id: str,
    tool: str,
    args: Optional[Mapping[str, Any]] = None,
    *,
    mediation: Any = CONTROLLER_MEDIATED,
    idempotency_key: str = "",
) -> pb.ToolCall:
    """A ToolCall with ``args`` as a Struct."""
    call = pb.ToolCall(id=id, tool=tool, mediation=mediation, idempotency_key=idempotency_key)
    st = to_struct(args)
    if st is not None:
        call.args.CopyFrom(st)
    return call


# -- the harness ------------------------------------------------------------


class Harness:
    """Base class of a harness: set the class attributes and implement :meth:`run`.

    Attributes:
        id: the descriptor id.
        version: replay-compatibility version; keep it while replays stay compatible.
        resumability: ``STATELESS_REPLAY`` (default) or ``REQUIRES_MEMORY_SNAPSHOT``.
        models: model ids the harness names (the host refuses ids nothing serves).
        tools: ToolSpecs (see :func:`tool_spec`), or ``(name, mediation)`` pairs.
        fork_safe: whether forks of its sessions may run it.
        streaming: whether it streams output.
    """

    id: str = ""
    version: str = "1"
    resumability: Any = STATELESS_REPLAY
    models: Sequence[str] = ()
    tools: Sequence[Union[hpb.ToolSpec, Tuple[str, Any]]] = ()
    fork_safe: bool = True
    streaming: bool = False

    def describe(self) -> hpb.HarnessDescriptor:
        """The descriptor served by Describe (built from the attributes)."""
        specs = []
        for t in self.tools:
            if isinstance(t, hpb.ToolSpec):
                specs.append(t)
            else:
                name, mediation = t
                specs.append(tool_spec(name, mediation))
        return hpb.HarnessDescriptor(
            id=self.id or type(self).__name__.lower(),
            version=self.version,
            models=list(self.models),
            tools=specs,
            capabilities=hpb.Capabilities(
                resumability=self.resumability,
                fork_safe=self.fork_safe,
                streaming=self.streaming,
            ),
        )

    def run(self, start: Start, sink: Any) -> Any:  # pragma: no cover - abstract
        """One execution. May be ``async def``; then ``sink`` is an :class:`AsyncSink`."""
        raise NotImplementedError


# -- one Connect stream -----------------------------------------------------

_CLOSED = object()  # the host half-closed
_WAKE = object()  # a stop happened; wake a waiting sink call


class _Stop:
    def __init__(self, reason: Optional[str]) -> None:
        self.reason = reason  # None: the host is gone

    def error(self) -> HarnessError:
        return StreamClosed() if self.reason is None else Canceled(self.reason)


class _Final:
    """The last item of the out queue: an optional status after the events."""

    def __init__(self, code: Optional[grpc.StatusCode] = None, details: str = "") -> None:
        self.code = code
        self.details = details


class Sink:
    """The host callbacks of one execution (blocking; calls are sequential)."""

    def __init__(self, execution_id: str, session: str, conn: "_Conn") -> None:
        self._execution_id = execution_id
        self._session = session
        self._conn = conn
        self._parked: Optional[pb.ApprovalRef] = None
        self._failed: Optional[HarnessError] = None

    @property
    def execution_id(self) -> str:
        """The execution this sink serves."""
        return self._execution_id

    @property
    def session(self) -> str:
        """The session uid from the Start envelope ("" when the host sent none)."""
        return self._session

    # -- calls --

    def model(
        self,
        request: Union[ModelRequest, str, None] = None,
        messages: Optional[Sequence[pb.Message]] = None,
        *,
        params: Optional[Mapping[str, str]] = None,
        tools: Optional[Sequence[pb.ToolDefinition]] = None,
        tool_choice: Optional[pb.ToolChoice] = None,
    ) -> hpb.ModelResult:
        """Asks the host for a completion and waits for it.

        Pass a :class:`ModelRequest`, or the model id and messages. The host
        records the completion as the turn's output: don't :meth:`output` it too.
        """
        self._check()
        if not isinstance(request, ModelRequest):
            request = ModelRequest(
                model=request or "",
                messages=list(messages or []),
                params=dict(params or {}),
                tools=list(tools or []),
                tool_choice=tool_choice,
            )
        call_id = secrets.token_hex(8)
        call = pb.ModelCall(
            model=request.model,
            params=dict(request.params),
            id=call_id,
            messages=list(request.messages),
            tools=list(request.tools),
        )
        if request.tool_choice is not None:
            call.tool_choice.CopyFrom(request.tool_choice)
        self._emit(pb.EVENT_MODEL_CALL, model=call)
        return self._stick(lambda: self._await_model(call_id))

    def output(self, text: str) -> None:
        """Streams assistant text of the harness's own."""
        self._check()
        self._emit(pb.EVENT_OUTPUT, message=text_message("assistant", text))

    def report(self, result: pb.ToolResult) -> None:
        """Reports the result of a tool the harness ran itself (IN_HARNESS_REPORTED)."""
        self._check()
        _reject_approval_fields(result)
        self._emit(pb.EVENT_TOOL_RESULT, result=result)

    def usage(
        self,
        usage: Optional[pb.Usage] = None,
        *,
        model: str = "",
        input_tokens: int = 0,
        output_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> None:
        """Reports token usage (a Usage message, or its fields as keywords)."""
        self._check()
        if usage is None:
            usage = pb.Usage(
                model=model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                reasoning_tokens=reasoning_tokens,
            )
        self._emit(pb.EVENT_USAGE, usage=usage)

    def tool_call(self, call: pb.ToolCall) -> pb.ToolResult:
        """Asks the host to run a CONTROLLER_MEDIATED or REQUIRES_APPROVAL call; returns the receipt.

        Raises :class:`Parked` when the host parks a gated call.
        """
        return self.tool_call_decided(call)[0]

    def tool_call_decided(self, call: pb.ToolCall) -> Tuple[pb.ToolResult, Optional[pb.ApprovalResult]]:
        """Like :meth:`tool_call`, also returning the host's decision of a gated call."""
        self._check()
        gated = call.mediation == REQUIRES_APPROVAL
        if gated:
            if not self._session:
                raise InvalidRequest("approval call outside a session")
            if not call.id:
                raise InvalidRequest("approval call without an id")
        self._emit(pb.EVENT_TOOL_CALL, tool=call)
        return self._stick(lambda: self._await_reply(call.id, gated))

    # -- replies --

    def _await_model(self, call_id: str) -> hpb.ModelResult:
        frame = self._await_frame()
        kind = frame.WhichOneof("frame")
        if kind != "model":
            raise _unexpected("a model result", kind)
        if frame.model.model_call_id != call_id:
            raise ProtocolError("model result correlation mismatch")
        return frame.model

    def _await_reply(self, call_id: str, gated: bool) -> Tuple[pb.ToolResult, Optional[pb.ApprovalResult]]:
        frame = self._await_tool_frame()
        kind = frame.WhichOneof("frame")
        if kind == "tool" and not gated:
            _check_result_id(frame.tool, call_id)
            _reject_approval_fields(frame.tool)
            return frame.tool, None
        if kind == "park":
            park = frame.park
            if park.execution_id != self._execution_id or park.tool_call_id != call_id or park.request_seq <= 0:
                raise ProtocolError("park correlation mismatch")
            self._parked = park
            raise Parked(park)
        if kind != "approval":
            raise _unexpected("an approval decision or park" if gated else "a tool result", kind)
        decision = frame.approval
        if decision.tool_call_id != call_id or decision.request_seq <= 0:
            raise ProtocolError("approval correlation mismatch")
        frame = self._await_tool_frame()
        kind = frame.WhichOneof("frame")
        if kind != "tool":
            raise _unexpected("the receipt after a decision", kind)
        result = frame.tool
        _check_result_id(result, call_id)
        _check_receipt(result, decision)
        return result, decision

    def _await_tool_frame(self) -> hpb.ControllerFrame:
        frame = self._await_frame()
        if frame.session != self._session:
            raise ProtocolError("tool reply for another session")
        return frame

    def _await_frame(self) -> hpb.ControllerFrame:
        item = self._conn.frames.get()
        # A frame that raced a stop loses: the harness must not act on it.
        self._check()
        if item is _CLOSED or item is _WAKE:
            raise StreamClosed()
        assert isinstance(item, hpb.ControllerFrame)
        if item.execution_id != self._execution_id:
            raise ProtocolError("reply for another execution")
        return item

    # -- state --

    def _check(self) -> None:
        if self._parked is not None:
            raise Parked(self._parked)
        if self._failed is not None:
            raise self._failed
        stop = self._conn.stop
        if stop is not None:
            raise stop.error()

    def _stick(self, fn: Any) -> Any:
        try:
            return fn()
        except Parked:
            raise
        except HarnessError as e:
            if self._failed is None:
                self._failed = e
            raise

    def _emit(self, kind: Any, **body: Any) -> None:
        ev = pb.Event(execution_id=self._execution_id, kind=kind, **body)
        if not self._conn.send(ev):
            err = self._conn.stop.error() if self._conn.stop is not None else StreamClosed()
            if self._failed is None and not isinstance(err, Canceled):
                self._failed = err
            raise err


class AsyncSink:
    """The awaitable face of a :class:`Sink`, handed to ``async def run``."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink

    @property
    def execution_id(self) -> str:
        return self._sink.execution_id

    @property
    def session(self) -> str:
        return self._sink.session

    async def model(self, *args: Any, **kw: Any) -> hpb.ModelResult:
        """See :meth:`Sink.model`."""
        return await asyncio.to_thread(self._sink.model, *args, **kw)

    async def output(self, text: str) -> None:
        """See :meth:`Sink.output`."""
        self._sink.output(text)

    async def report(self, result: pb.ToolResult) -> None:
        """See :meth:`Sink.report`."""
        self._sink.report(result)

    async def usage(self, *args: Any, **kw: Any) -> None:
        """See :meth:`Sink.usage`."""
        self._sink.usage(*args, **kw)

    async def tool_call(self, call: pb.ToolCall) -> pb.ToolResult:
        """See :meth:`Sink.tool_call`."""
        return await asyncio.to_thread(self._sink.tool_call, call)

    async def tool_call_decided(self, call: pb.ToolCall) -> Tuple[pb.ToolResult, Optional[pb.ApprovalResult]]:
        """See :meth:`Sink.tool_call_decided`."""
        return await asyncio.to_thread(self._sink.tool_call_decided, call)


def _unexpected(wanted: str, got: Optional[str]) -> ProtocolError:
    return ProtocolError(f"expected {wanted}, got {got or 'an empty frame'}")


def _check_result_id(result: pb.ToolResult, call_id: str) -> None:
    if result.id != call_id:
        raise ProtocolError("tool result correlation mismatch")


def _reject_approval_fields(result: pb.ToolResult) -> None:
    if (
        result.approval_request_seq != 0
        or result.approval_decision_seq != 0
        or result.code == pb.ToolResult.APPROVAL_DENIED
    ):
        raise ProtocolError("ungated tool result carries approval fields")


def _check_receipt(result: pb.ToolResult, decision: pb.ApprovalResult) -> None:
    if result.approval_request_seq != decision.request_seq or result.approval_decision_seq <= 0:
        raise ProtocolError("receipt does not bind to the decision")
    if decision.approved:
        ok = (not result.is_error and result.code == pb.ToolResult.CODE_UNSPECIFIED) or (
            result.is_error and result.code == pb.ToolResult.EXECUTOR_ERROR
        )
    else:
        ok = result.is_error and result.code == pb.ToolResult.APPROVAL_DENIED
    if not ok:
        raise ProtocolError("receipt outcome contradicts the decision")


class _Conn:
    """The plumbing of one Connect stream: frames in, events out, the stop."""

    def __init__(self) -> None:
        self.frames: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self.out: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self.stop: Optional[_Stop] = None
        self.lock = threading.Lock()
        self.on_stop: List[Any] = []

    def send(self, ev: pb.Event) -> bool:
        with self.lock:
            if self.stop is not None:
                return False
            self.out.put(ev)
            return True

    def halt(self, stop: _Stop) -> None:
        with self.lock:
            if self.stop is not None:
                return
            self.stop = stop
            self.out.put(stop)
            hooks = list(self.on_stop)
        self.frames.put(_WAKE)
        for hook in hooks:
            try:
                hook(stop)
            except Exception:
                pass

    def pump(self, frames: Iterator[hpb.ControllerFrame]) -> None:
        try:
            for frame in frames:
                if frame.WhichOneof("frame") == "cancel":
                    self.halt(_Stop(frame.cancel.reason))
                    return
                self.frames.put(frame)
        except Exception:
            self.halt(_Stop(None))
            return
        self.frames.put(_CLOSED)


class _Threads:
    """Reusable daemon threads for the per-stream pump and run.

    A job goes to an idle thread, else to a new one: never queued, so no
    stream waits for another's. A thread idle for ``idle`` seconds exits.
    Reuse saves a thread start (and its handshake) per execution.
    """

    def __init__(self, name: str, idle: float = 30.0) -> None:
        self._name = name
        self._idle_for = idle
        self._lock = threading.Lock()
        self._idle: List["queue.SimpleQueue[Any]"] = []

    def submit(self, fn: Any, *args: Any) -> None:
        with self._lock:
            if self._idle:
                self._idle.pop().put((fn, args))
                return
        inbox: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        inbox.put((fn, args))
        threading.Thread(target=self._work, args=(inbox,), daemon=True, name=self._name).start()

    def _work(self, inbox: "queue.SimpleQueue[Any]") -> None:
        while True:
            try:
                fn, args = inbox.get(timeout=self._idle_for)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                continue  # a job was handed over just now
            try:
                fn(*args)
            except BaseException:
                pass  # jobs report their own outcome
            with self._lock:
                self._idle.append(inbox)


class _Injector:
    """Raises a stop's error asynchronously in a plain run's thread, at most once.

    The thread is reused afterwards, so :meth:`disarm` (called by that thread
    when the run is over) makes sure nothing injected survives it.
    """

    def __init__(self) -> None:
        self.tid = threading.get_ident()
        self.lock = threading.Lock()
        self.armed = False
        self.fired = False

    def arm(self) -> None:
        with self.lock:
            self.armed = True

    def fire(self, stop: _Stop) -> None:
        with self.lock:
            if not self.armed or self.fired:
                return
            self.fired = True
            # An exception class is all CPython can inject, so the reason
            # rides on a one-off subclass.
            err = stop.error()
            cls = type(type(err).__name__, (type(err),), {"__init__": _reraiser(err)})
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.tid), ctypes.py_object(cls))

    def disarm(self) -> None:
        # The injected error may surface at any bytecode until it is cleared
        # here (under the lock, so no other can follow); if it surfaces in
        # this loop, it is spent and the loop runs again.
        while True:
            try:
                with self.lock:
                    self.armed = False
                    if self.fired:
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.tid), None)
                return
            except BaseException:
                continue


def _reraiser(err: HarnessError) -> Any:
    def init(self: HarnessError) -> None:
        self.__dict__.update(err.__dict__)
        self.args = err.args

    return init


def _end(execution_id: str, state: str, error: Optional[pb.Error] = None) -> pb.Event:
    end = pb.HarnessEnd(state=state)
    if error is not None:
        end.error.CopyFrom(error)
    return pb.Event(execution_id=execution_id, kind=pb.EVENT_END, end=end)


def _describe_failure(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__


class _Servicer(hpb_grpc.HarnessServicer):
    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.is_async = inspect.iscoroutinefunction(harness.run)
        self.threads = _Threads("harness-kit")

    def Describe(self, request: hpb.DescribeRequest, context: grpc.ServicerContext) -> hpb.HarnessDescriptor:
        return self.harness.describe()

    def Connect(
        self, frames: Iterator[hpb.ControllerFrame], context: grpc.ServicerContext
    ) -> Iterator[pb.Event]:
        # The host speaks first: read Start before sending anything.
        try:
            first = next(frames, None)
        except Exception:
            return
        if first is None:
            return
        if first.WhichOneof("frame") != "start":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first frame must be start")
        if not first.execution_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "start without an execution id")
        st = first.start
        start = Start(
            execution_id=first.execution_id,
            session=first.session,
            config=bytes(st.config),
            history=list(st.history),
            inputs=list(st.inputs),
            identity=st.identity if st.HasField("identity") else None,
            resume_from_seq=st.resume_from_seq,
        )
        conn = _Conn()
        # The host dropping the call (it closes a canceled turn's stream
        # that way) stops the run, as does a broken transport.
        context.add_callback(lambda: conn.halt(_Stop(None)))
        sink = Sink(start.execution_id, start.session, conn)
        self.threads.submit(conn.pump, frames)
        self.threads.submit(self._run, start, sink, conn)
        while True:
            item = conn.out.get()
            if isinstance(item, pb.Event):
                yield item
            elif isinstance(item, _Final):
                if item.code is not None:
                    context.set_code(item.code)
                    context.set_details(item.details)
                return
            elif isinstance(item, _Stop):
                if item.reason is None:
                    return  # the host is gone: nothing more to send
                # Canceled: END{CANCELED} now, whatever the run is doing.
                yield _end(
                    start.execution_id,
                    "CANCELED",
                    pb.Error(code=grpc.StatusCode.CANCELLED.value[0], description=item.reason),
                )
                context.set_code(grpc.StatusCode.CANCELLED)
                context.set_details(item.reason)
                return

    def _run(self, start: Start, sink: Sink, conn: _Conn) -> None:
        try:
            error = self._call_run(start, sink, conn)
        except BaseException as e:  # a stray injected Canceled after run returned
            error = e
        if conn.stop is not None:
            return  # the stream's end is already decided
        out = conn.out
        parked = sink._parked
        if parked is not None:
            if error is None or (isinstance(error, Parked) and error.ref == parked):
                out.put(pb.Event(execution_id=start.execution_id, kind=pb.EVENT_PARKED, parked=parked))
                out.put(_Final())
            else:
                # A park joined with another failure: acknowledge nothing.
                out.put(_Final(grpc.StatusCode.UNKNOWN, _describe_failure(error)))
            return
        failure: Optional[BaseException] = sink._failed or error
        if failure is None:
            out.put(_end(start.execution_id, "COMPLETED"))
            out.put(_Final())
        elif isinstance(failure, Canceled):
            out.put(
                _end(
                    start.execution_id,
                    "CANCELED",
                    pb.Error(code=grpc.StatusCode.CANCELLED.value[0], description=failure.reason),
                )
            )
            out.put(_Final(grpc.StatusCode.CANCELLED, failure.reason))
        else:
            text = _describe_failure(failure)
            out.put(_end(start.execution_id, "FAILED", pb.Error(code=0, description=text)))
            # As the reference does, the stream also fails after the END.
            out.put(_Final(grpc.StatusCode.UNKNOWN, text))

    def _call_run(self, start: Start, sink: Sink, conn: _Conn) -> Optional[BaseException]:
        if self.is_async:
            return asyncio.run(self._run_async(start, sink, conn))
        # A plain run busy outside the sink gets the stop's error raised in
        # its thread.
        injector = _Injector()
        with conn.lock:
            conn.on_stop.append(injector.fire)
            injector.arm()
        try:
            try:
                self.harness.run(start, sink)
                return None
            except BaseException as e:
                return e
        finally:
            injector.disarm()

    async def _run_async(self, start: Start, sink: Sink, conn: _Conn) -> Optional[BaseException]:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(self.harness.run(start, AsyncSink(sink)))  # type: ignore[arg-type]

        def interrupt(stop: _Stop) -> None:
            loop.call_soon_threadsafe(task.cancel)

        with conn.lock:
            conn.on_stop.append(interrupt)
        if conn.stop is not None:
            task.cancel()
        try:
            await task
            return None
        except asyncio.CancelledError:
            return Canceled(conn.stop.reason or "") if conn.stop is not None else StreamClosed()
        except BaseException as e:
            return e


class HarnessServer:
    """A running harness server (see :func:`serve`)."""

    def __init__(self, server: grpc.Server, host: str, port: int) -> None:
        self._server = server
        self.host = host
        self.port = port

    @property
    def address(self) -> str:
        """``host:port`` to hand to ``agentsessionsd --harness NAME=…``."""
        return f"{self.host}:{self.port}"

    def stop(self, grace: Optional[float] = None) -> None:
        """Stops serving; open streams get ``grace`` seconds."""
        self._server.stop(grace).wait()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the server stops."""
        return self._server.wait_for_termination(timeout)

    def __enter__(self) -> "HarnessServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    harness: Harness,
    addr: str = "127.0.0.1:0",
    *,
    max_workers: int = 32,
    credentials: Optional[grpc.ServerCredentials] = None,
) -> HarnessServer:
    """Serves ``harness`` (Describe + Connect) on ``addr``; port 0 picks a free one.

    Returns the started server; ``.port`` is the bound port, ``.stop()`` stops it.
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
    hpb_grpc.add_HarnessServicer_to_server(_Servicer(harness), server)
    if credentials is not None:
        port = server.add_secure_port(addr, credentials)
    else:
        port = server.add_insecure_port(addr)
    if port == 0 and not addr.startswith("unix:"):
        raise OSError(f"cannot listen on {addr}")
    server.start()
    host = addr.rsplit(":", 1)[0] if ":" in addr and not addr.startswith("unix:") else addr
    return HarnessServer(server, host or "0.0.0.0", port)
