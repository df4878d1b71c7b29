"""Clients of the Sessions service: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both speak gRPC to a running ``agentsessionsd``::

    with Client("127.0.0.1:8080") as c:
        s = c.create(harness="echo")
        print(c.exec(s.uid, "hello").output)   # echo:hello

Failed calls raise :mod:`agentsessions.errors` exceptions. ABORTED (the
daemon refused with the journal unchanged) and UNAVAILABLE are retried with
exponential backoff only where a retry cannot repeat an effect: reads,
Approve (a retry returns the same decision), an Exec that carries
``expected_last_seq`` and has not committed anything yet, and, for ABORTED
only, every other call.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import (
    Any,
    AsyncIterator,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import grpc
import grpc.aio

from . import errors
from .types import Input, Session, Turn, to_config, to_messages
from .v1 import common_pb2 as pb
from .v1 import session_pb2 as spb
from .v1 import session_pb2_grpc as spb_grpc
from .v1 import tools_pb2 as tpb
from .v1 import tools_pb2_grpc as tpb_grpc

__all__ = ["Client", "AsyncClient", "ExecUpdate", "RetryPolicy"]

T = TypeVar("T")

#: One item of :meth:`Client.exec_stream`: a committed record, an ephemeral
#: output chunk, or the session (first and last frame).
ExecUpdate = Union[pb.LogRecord, spb.Delta, Session]

_RETRY_ALWAYS = (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE)
_RETRY_REFUSED = (grpc.StatusCode.ABORTED,)


class RetryPolicy:
    """Exponential backoff with jitter for retryable codes.

    Args:
        attempts: total tries (1 disables retries).
        initial: first pause, seconds.
        maximum: longest pause, seconds.
    """

    def __init__(self, attempts: int = 5, initial: float = 0.05, maximum: float = 2.0) -> None:
        self.attempts = max(1, attempts)
        self.initial = initial
        self.maximum = maximum

    def pause(self, attempt: int) -> float:
        """Seconds to wait before try number ``attempt + 1`` (attempt >= 1)."""
        base = min(self.maximum, self.initial * (2 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)


def _read_file(path: Optional[str]) -> Optional[bytes]:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _target(addr: str) -> Tuple[str, bool]:
    """The grpc target and whether the address itself asks for TLS."""
    for scheme, tls in (("https://", True), ("http://", False)):
        if addr.startswith(scheme):
            return addr[len(scheme):].rstrip("/"), tls
    return addr, False


def _credentials(
    tls_ca: Optional[str], tls_cert: Optional[str], tls_key: Optional[str]
) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read_file(tls_ca),
        private_key=_read_file(tls_key),
        certificate_chain=_read_file(tls_cert),
    )


def _session_request(
    harness: str,
    name: str,
    project: str,
    labels: Optional[Mapping[str, str]],
    model: str,
    annotations: Optional[Mapping[str, str]],
) -> spb.CreateSessionRequest:
    return spb.CreateSessionRequest(
        session=spb.Session(
            metadata=pb.ResourceMetadata(project=project, name=name),
            harness=harness,
            model=model,
            labels=dict(labels or {}),
            annotations=dict(annotations or {}),
        )
    )


def _exec_request(
    uid: str,
    inputs: Input,
    config: Any,
    harness: str,
    expected_last_seq: Optional[int],
    resume_from_seq: int,
    deadline_unix: int,
) -> spb.ExecRequest:
    req = spb.ExecRequest(
        session=uid,
        inputs=to_messages(inputs),
        harness=harness,
        config=to_config(config),
        resume_from_seq=resume_from_seq,
        deadline_unix=deadline_unix,
    )
    if expected_last_seq is not None:
        req.expected_last_seq = expected_last_seq
    return req


def _approve_request(
    uid: str,
    pending: pb.ApprovalRef,
    approved: bool,
    reason: str,
    identity: Optional[pb.IdentityRef],
) -> spb.ApproveRequest:
    req = spb.ApproveRequest(
        session=uid,
        execution_id=pending.execution_id,
        tool_call_id=pending.tool_call_id,
        request_seq=pending.request_seq,
        approved=approved,
        reason=reason,
    )
    if identity is not None:
        req.identity.CopyFrom(identity)
    return req


def _fork_request(
    uid: str,
    at: int,
    count: int,
    names: Optional[Sequence[str]],
    labels: Optional[Mapping[str, str]],
) -> spb.ForkRequest:
    return spb.ForkRequest(
        session=uid,
        at_seq=at,
        count=count,
        child_names=list(names or []),
        labels=dict(labels or {}),
    )


def _unwrap(update: spb.ExecUpdate) -> Optional[ExecUpdate]:
    which = update.WhichOneof("update")
    if which == "record":
        return update.record
    if which == "delta":
        return update.delta
    if which == "session":
        return Session(update.session)
    return None


def _collect(turn: Turn, item: ExecUpdate) -> None:
    if isinstance(item, Session):
        turn.session = item
    elif isinstance(item, pb.LogRecord):
        turn.records.append(item)
    else:
        turn.deltas.append(item)


def _no_pending(uid: str) -> errors.FailedPrecondition:
    return errors.FailedPrecondition(f"session {uid} has no pending approval", method="Approve")


class Client:
    """A blocking client of one daemon.

    Args:
        addr: ``host:port`` (or ``https://host:port`` for TLS).
        token: bearer credential (API key or JWT) sent on every call.
        tls_ca: PEM file of the CA that signed the server's certificate; TLS on.
        tls_cert: PEM client certificate for mTLS (with ``tls_key``).
        tls_key: PEM private key of ``tls_cert``.
        timeout: deadline in seconds of unary calls (streams have none
            unless the call passes one).
        retry: the backoff for retryable failures.
        options: extra grpc channel options.
    """

    def __init__(
        self,
        addr: str,
        token: Optional[str] = None,
        tls_ca: Optional[str] = None,
        *,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        timeout: Optional[float] = 60.0,
        retry: Optional[RetryPolicy] = None,
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        target, tls = _target(addr)
        if tls or tls_ca or tls_cert:
            self._channel = grpc.secure_channel(
                target, _credentials(tls_ca, tls_cert, tls_key), options=list(options)
            )
        else:
            self._channel = grpc.insecure_channel(target, options=list(options))
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sessions = spb_grpc.SessionsStub(self._channel)
        self._tools = tpb_grpc.ToolsStub(self._channel)

    # -- plumbing ---------------------------------------------------------

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(
        self,
        method: str,
        fn: Callable[..., T],
        request: Any,
        retry_on: Sequence[grpc.StatusCode] = _RETRY_REFUSED,
        timeout: Optional[float] = None,
    ) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(
                    request,
                    timeout=timeout if timeout is not None else self.timeout,
                    metadata=self._metadata,
                )
            except grpc.RpcError as e:
                if e.code() in retry_on and attempt < self.retry.attempts:
                    time.sleep(self.retry.pause(attempt))
                    continue
                raise errors.from_rpc_error(e, method) from None

    # -- sessions ---------------------------------------------------------

    def create(
        self,
        harness: str = "",
        name: str = "",
        project: str = "",
        labels: Optional[Mapping[str, str]] = None,
        *,
        model: str = "",
        annotations: Optional[Mapping[str, str]] = None,
    ) -> Session:
        """Creates a session (empty ``harness``: the daemon's default)."""
        req = _session_request(harness, name, project, labels, model, annotations)
        return Session(self._unary("CreateSession", self._sessions.CreateSession, req))

    def get(self, uid: str) -> Session:
        """One session's metadata, with any pending approval."""
        req = spb.GetSessionRequest(uid=uid)
        return Session(self._unary("GetSession", self._sessions.GetSession, req, _RETRY_ALWAYS))

    def list(self, project: str = "", page_size: int = 0) -> Iterator[Session]:
        """Every session of ``project`` ("" = the daemon's default), newest first, across all pages."""
        token = ""
        while True:
            req = spb.ListSessionsRequest(project=project, page_size=page_size, page_token=token)
            page = self._unary("ListSessions", self._sessions.ListSessions, req, _RETRY_ALWAYS)
            for s in page.sessions:
                yield Session(s)
            token = page.next_page_token
            if not token:
                return

    def delete(self, uid: str) -> Session:
        """Deletes a session for good; returns it as it was just before."""
        req = spb.DeleteSessionRequest(uid=uid)
        return Session(self._unary("DeleteSession", self._sessions.DeleteSession, req))

    def suspend(self, uid: str) -> Session:
        """Suspends the session (compute goes cold)."""
        req = spb.SuspendRequest(session=uid)
        return Session(self._unary("Suspend", self._sessions.Suspend, req))

    def resume(self, uid: str, *, timeout: Optional[float] = None) -> Session:
        """Resumes the session, re-driving a decided or interrupted turn to its end."""
        req = spb.ResumeRequest(session=uid)
        return Session(self._unary("Resume", self._sessions.Resume, req, timeout=timeout))

    def cancel(self, uid: str, execution_id: str = "", reason: str = "") -> Session:
        """Cancels the execution in flight (running, parked or interrupted) for good."""
        req = spb.CancelRequest(session=uid, execution_id=execution_id, reason=reason)
        return Session(self._unary("Cancel", self._sessions.Cancel, req))

    def fork(
        self,
        uid: str,
        at: int = 0,
        count: int = 1,
        names: Optional[Sequence[str]] = None,
        *,
        labels: Optional[Mapping[str, str]] = None,
    ) -> List[Session]:
        """Forks ``count`` children off ``uid`` at seq ``at`` (0 = head)."""
        req = _fork_request(uid, at, count, names, labels)
        resp = self._unary("Fork", self._sessions.Fork, req)
        return [Session(c) for c in resp.children]

    def tools(self) -> List[tpb.CatalogEntry]:
        """The host's tool catalog, sorted by name."""
        resp = self._unary("ListTools", self._tools.ListTools, tpb.ListToolsRequest(), _RETRY_ALWAYS)
        return list(resp.tools)

    # -- records ----------------------------------------------------------

    def replay_iter(self, uid: str, from_seq: int = 1, to_seq: int = 0) -> Iterator[pb.LogRecord]:
        """Streams the session's committed records (no model or harness calls).

        A retryable failure mid-stream continues after the last record seen.
        """
        next_seq = max(1, from_seq)
        attempt = 0
        while True:
            req = spb.ReplayRequest(session=uid, from_seq=next_seq, to_seq=to_seq)
            try:
                for r in self._sessions.Replay(req, metadata=self._metadata):
                    attempt = 0
                    next_seq = r.seq + 1
                    yield r
                return
            except grpc.RpcError as e:
                attempt += 1
                if e.code() in _RETRY_ALWAYS and attempt < self.retry.attempts:
                    time.sleep(self.retry.pause(attempt))
                    continue
                raise errors.from_rpc_error(e, "Replay") from None

    def replay(self, uid: str, from_seq: int = 1, to_seq: int = 0) -> List[pb.LogRecord]:
        """The session's records ``from_seq..to_seq`` (0 = through the head)."""
        return list(self.replay_iter(uid, from_seq, to_seq))

    def exec_stream(
        self,
        uid: str,
        inputs: Input,
        config: Any = None,
        *,
        harness: str = "",
        expected_last_seq: Optional[int] = None,
        resume_from_seq: int = 0,
        timeout: Optional[float] = None,
    ) -> Iterator[ExecUpdate]:
        """Runs one turn, yielding each committed record, output delta and session frame as it arrives.

        ``inputs`` is a text, a Message, or a list of them; ``config`` bytes,
        text or a JSON-able dict. With ``expected_last_seq`` the first append
        is a compare-and-swap, which also makes retrying a failed start safe.
        """
        deadline = int(time.time() + timeout) + 1 if timeout else 0
        req = _exec_request(uid, inputs, config, harness, expected_last_seq, resume_from_seq, deadline)
        safe = expected_last_seq is not None
        attempt = 0
        while True:
            committed = False
            try:
                for update in self._sessions.Exec(req, timeout=timeout, metadata=self._metadata):
                    item = _unwrap(update)
                    if item is None:
                        continue
                    if isinstance(item, pb.LogRecord):
                        committed = True
                    yield item
                return
            except grpc.RpcError as e:
                attempt += 1
                if safe and not committed and e.code() in _RETRY_ALWAYS and attempt < self.retry.attempts:
                    time.sleep(self.retry.pause(attempt))
                    continue
                raise errors.from_rpc_error(e, "Exec") from None

    def exec(
        self,
        uid: str,
        inputs: Input,
        config: Any = None,
        *,
        harness: str = "",
        expected_last_seq: Optional[int] = None,
        resume_from_seq: int = 0,
        timeout: Optional[float] = None,
    ) -> Turn:
        """Runs one turn to its end (or its park) and returns what it committed.

        ``turn.session`` of a turn that ran to its END is fetched on first
        read (one GetSession); ``turn.pending`` of such a turn is None
        without a call. If the turn fails, the raised error carries the partial turn as
        ``err.turn``.
        """
        turn = Turn()
        fresh = False
        try:
            for item in self.exec_stream(
                uid,
                inputs,
                config,
                harness=harness,
                expected_last_seq=expected_last_seq,
                resume_from_seq=resume_from_seq,
                timeout=timeout,
            ):
                _collect(turn, item)
                fresh = isinstance(item, Session)
        except errors.AgentSessionsError as e:
            e.turn = turn  # type: ignore[attr-defined]
            raise
        if not fresh:
            # The daemon sends a closing Session frame only after a park;
            # a finished turn's stream ends with its last record. The
            # session after it is fetched when first asked for, so a caller
            # that only wants the records pays no extra round trip.
            turn.fetch_session_later(lambda: self.get(uid))
        return turn

    # -- approvals --------------------------------------------------------

    def decide(
        self,
        uid: str,
        pending: Optional[pb.ApprovalRef],
        approved: bool,
        reason: str = "",
        *,
        resume: bool = True,
        identity: Optional[pb.IdentityRef] = None,
    ) -> Turn:
        """Commits a decision on a gated tool call, then (by default) resumes the turn.

        ``pending`` names the request (``Turn.pending`` or ``Session.pending``);
        None decides whatever the session waits for. Returns the decision
        record plus every record the resume committed, and the session after.
        """
        if pending is None:
            pending = self.get(uid).pending
            if pending is None:
                raise _no_pending(uid)
        req = _approve_request(uid, pending, approved, reason, identity)
        resp = self._unary("Approve", self._sessions.Approve, req, _RETRY_ALWAYS)
        turn = Turn(session=Session(resp.session), decision=resp.decision)
        turn.records.append(resp.decision)
        if not resume:
            return turn
        decided_at = resp.session.last_seq or resp.decision.seq
        after = self.resume(uid)
        turn.session = after
        if after.last_seq > decided_at:
            turn.records.extend(self.replay_iter(uid, decided_at + 1, after.last_seq))
        return turn

    def approve(
        self, uid: str, pending: Optional[pb.ApprovalRef] = None, reason: str = "", **kw: Any
    ) -> Turn:
        """Approves the gated call ``pending`` and resumes: the tool runs once, the turn continues."""
        return self.decide(uid, pending, True, reason, **kw)

    def deny(
        self, uid: str, pending: Optional[pb.ApprovalRef] = None, reason: str = "", **kw: Any
    ) -> Turn:
        """Denies the gated call ``pending`` and resumes: the harness gets a denial receipt."""
        return self.decide(uid, pending, False, reason, **kw)


class AsyncClient:
    """The asyncio twin of :class:`Client` (same methods, awaitable)."""

    def __init__(
        self,
        addr: str,
        token: Optional[str] = None,
        tls_ca: Optional[str] = None,
        *,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        timeout: Optional[float] = 60.0,
        retry: Optional[RetryPolicy] = None,
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        target, tls = _target(addr)
        if tls or tls_ca or tls_cert:
            self._channel = grpc.aio.secure_channel(
                target, _credentials(tls_ca, tls_cert, tls_key), options=list(options)
            )
        else:
            self._channel = grpc.aio.insecure_channel(target, options=list(options))
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sessions = spb_grpc.SessionsStub(self._channel)
        self._tools = tpb_grpc.ToolsStub(self._channel)

    async def close(self) -> None:
        """Closes the channel."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _unary(
        self,
        method: str,
        fn: Callable[..., Any],
        request: Any,
        retry_on: Sequence[grpc.StatusCode] = _RETRY_REFUSED,
        timeout: Optional[float] = None,
    ) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await fn(
                    request,
                    timeout=timeout if timeout is not None else self.timeout,
                    metadata=self._metadata,
                )
            except grpc.RpcError as e:
                if e.code() in retry_on and attempt < self.retry.attempts:
                    await asyncio.sleep(self.retry.pause(attempt))
                    continue
                raise errors.from_rpc_error(e, method) from None

    async def create(
        self,
        harness: str = "",
        name: str = "",
        project: str = "",
        labels: Optional[Mapping[str, str]] = None,
        *,
        model: str = "",
        annotations: Optional[Mapping[str, str]] = None,
    ) -> Session:
        """See :meth:`Client.create`."""
        req = _session_request(harness, name, project, labels, model, annotations)
        return Session(await self._unary("CreateSession", self._sessions.CreateSession, req))

    async def get(self, uid: str) -> Session:
        """See :meth:`Client.get`."""
        req = spb.GetSessionRequest(uid=uid)
        return Session(await self._unary("GetSession", self._sessions.GetSession, req, _RETRY_ALWAYS))

    async def list(self, project: str = "", page_size: int = 0) -> AsyncIterator[Session]:
        """See :meth:`Client.list` (an async iterator)."""
        token = ""
        while True:
            req = spb.ListSessionsRequest(project=project, page_size=page_size, page_token=token)
            page = await self._unary("ListSessions", self._sessions.ListSessions, req, _RETRY_ALWAYS)
            for s in page.sessions:
                yield Session(s)
            token = page.next_page_token
            if not token:
                return

    async def delete(self, uid: str) -> Session:
        """See :meth:`Client.delete`."""
        req = spb.DeleteSessionRequest(uid=uid)
        return Session(await self._unary("DeleteSession", self._sessions.DeleteSession, req))

    async def suspend(self, uid: str) -> Session:
        """See :meth:`Client.suspend`."""
        return Session(await self._unary("Suspend", self._sessions.Suspend, spb.SuspendRequest(session=uid)))

    async def resume(self, uid: str, *, timeout: Optional[float] = None) -> Session:
        """See :meth:`Client.resume`."""
        req = spb.ResumeRequest(session=uid)
        return Session(await self._unary("Resume", self._sessions.Resume, req, timeout=timeout))

    async def cancel(self, uid: str, execution_id: str = "", reason: str = "") -> Session:
        """See :meth:`Client.cancel`."""
        req = spb.CancelRequest(session=uid, execution_id=execution_id, reason=reason)
        return Session(await self._unary("Cancel", self._sessions.Cancel, req))

    async def fork(
        self,
        uid: str,
        at: int = 0,
        count: int = 1,
        names: Optional[Sequence[str]] = None,
        *,
        labels: Optional[Mapping[str, str]] = None,
    ) -> List[Session]:
        """See :meth:`Client.fork`."""
        resp = await self._unary("Fork", self._sessions.Fork, _fork_request(uid, at, count, names, labels))
        return [Session(c) for c in resp.children]

    async def tools(self) -> List[tpb.CatalogEntry]:
        """See :meth:`Client.tools`."""
        resp = await self._unary("ListTools", self._tools.ListTools, tpb.ListToolsRequest(), _RETRY_ALWAYS)
        return list(resp.tools)

    async def replay_iter(self, uid: str, from_seq: int = 1, to_seq: int = 0) -> AsyncIterator[pb.LogRecord]:
        """See :meth:`Client.replay_iter`."""
        next_seq = max(1, from_seq)
        attempt = 0
        while True:
            req = spb.ReplayRequest(session=uid, from_seq=next_seq, to_seq=to_seq)
            try:
                async for r in self._sessions.Replay(req, metadata=self._metadata):
                    attempt = 0
                    next_seq = r.seq + 1
                    yield r
                return
            except grpc.RpcError as e:
                attempt += 1
                if e.code() in _RETRY_ALWAYS and attempt < self.retry.attempts:
                    await asyncio.sleep(self.retry.pause(attempt))
                    continue
                raise errors.from_rpc_error(e, "Replay") from None

    async def replay(self, uid: str, from_seq: int = 1, to_seq: int = 0) -> List[pb.LogRecord]:
        """See :meth:`Client.replay`."""
        return [r async for r in self.replay_iter(uid, from_seq, to_seq)]

    async def exec_stream(
        self,
        uid: str,
        inputs: Input,
        config: Any = None,
        *,
        harness: str = "",
        expected_last_seq: Optional[int] = None,
        resume_from_seq: int = 0,
        timeout: Optional[float] = None,
    ) -> AsyncIterator[ExecUpdate]:
        """See :meth:`Client.exec_stream`."""
        deadline = int(time.time() + timeout) + 1 if timeout else 0
        req = _exec_request(uid, inputs, config, harness, expected_last_seq, resume_from_seq, deadline)
        safe = expected_last_seq is not None
        attempt = 0
        while True:
            committed = False
            try:
                async for update in self._sessions.Exec(req, timeout=timeout, metadata=self._metadata):
                    item = _unwrap(update)
                    if item is None:
                        continue
                    if isinstance(item, pb.LogRecord):
                        committed = True
                    yield item
                return
            except grpc.RpcError as e:
                attempt += 1
                if safe and not committed and e.code() in _RETRY_ALWAYS and attempt < self.retry.attempts:
                    await asyncio.sleep(self.retry.pause(attempt))
                    continue
                raise errors.from_rpc_error(e, "Exec") from None

    async def exec(
        self,
        uid: str,
        inputs: Input,
        config: Any = None,
        *,
        harness: str = "",
        expected_last_seq: Optional[int] = None,
        resume_from_seq: int = 0,
        timeout: Optional[float] = None,
    ) -> Turn:
        """See :meth:`Client.exec`."""
        turn = Turn()
        fresh = False
        try:
            async for item in self.exec_stream(
                uid,
                inputs,
                config,
                harness=harness,
                expected_last_seq=expected_last_seq,
                resume_from_seq=resume_from_seq,
                timeout=timeout,
            ):
                _collect(turn, item)
                fresh = isinstance(item, Session)
        except errors.AgentSessionsError as e:
            e.turn = turn  # type: ignore[attr-defined]
            raise
        if not fresh:
            # The daemon sends a closing Session frame only after a park;
            # a finished turn's stream ends with its last record.
            turn.session = await self.get(uid)
        return turn

    async def decide(
        self,
        uid: str,
        pending: Optional[pb.ApprovalRef],
        approved: bool,
        reason: str = "",
        *,
        resume: bool = True,
        identity: Optional[pb.IdentityRef] = None,
    ) -> Turn:
        """See :meth:`Client.decide`."""
        if pending is None:
            pending = (await self.get(uid)).pending
            if pending is None:
                raise _no_pending(uid)
        req = _approve_request(uid, pending, approved, reason, identity)
        resp = await self._unary("Approve", self._sessions.Approve, req, _RETRY_ALWAYS)
        turn = Turn(session=Session(resp.session), decision=resp.decision)
        turn.records.append(resp.decision)
        if not resume:
            return turn
        decided_at = resp.session.last_seq or resp.decision.seq
        after = await self.resume(uid)
        turn.session = after
        if after.last_seq > decided_at:
            turn.records.extend(await self.replay(uid, decided_at + 1, after.last_seq))
        return turn

    async def approve(
        self, uid: str, pending: Optional[pb.ApprovalRef] = None, reason: str = "", **kw: Any
    ) -> Turn:
        """See :meth:`Client.approve`."""
        return await self.decide(uid, pending, True, reason, **kw)

    async def deny(
        self, uid: str, pending: Optional[pb.ApprovalRef] = None, reason: str = "", **kw: Any
    ) -> Turn:
        """See :meth:`Client.deny`."""
        return await self.decide(uid, pending, False, reason, **kw)
