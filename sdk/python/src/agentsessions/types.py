"""Plain result types shared by the sync and asyncio clients."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from google.protobuf import struct_pb2

from .v1 import common_pb2 as pb
from .v1 import session_pb2 as spb

__all__ = [
    "Session",
    "Turn",
    "Input",
    "text_message",
    "message_text",
    "to_messages",
    "to_config",
    "to_struct",
]

#: What ``exec`` accepts as input: one text, one Message, or a sequence of them.
Input = Union[str, pb.Message, Sequence[Union[str, pb.Message]], None]


def text_message(role: str, text: str) -> pb.Message:
    """A Message with one text part."""
    return pb.Message(role=role, parts=[pb.Part(text=pb.TextPart(text=text))])


def message_text(message: pb.Message) -> str:
    """The concatenated text parts of a Message."""
    return "".join(p.text.text for p in message.parts if p.HasField("text"))


def to_messages(inputs: Input, role: str = "user") -> List[pb.Message]:
    """Normalises ``exec`` input into a list of Messages (text → user message)."""
    if inputs is None:
        return []
    if isinstance(inputs, (str, pb.Message)):
        inputs = [inputs]
    out: List[pb.Message] = []
    for item in inputs:
        if isinstance(item, str):
            out.append(text_message(role, item))
        elif isinstance(item, pb.Message):
            out.append(item)
        else:
            raise TypeError(f"input must be str or Message, not {type(item).__name__}")
    return out


def to_config(config: Union[bytes, str, Mapping[str, Any], None]) -> bytes:
    """Turn config as the opaque bytes the host journals (a dict becomes JSON)."""
    if config is None:
        return b""
    if isinstance(config, bytes):
        return config
    if isinstance(config, str):
        return config.encode("utf-8")
    return json.dumps(dict(config), separators=(",", ":"), sort_keys=True).encode("utf-8")


def to_struct(value: Optional[Mapping[str, Any]]) -> Optional[struct_pb2.Struct]:
    """A ``google.protobuf.Struct`` from a JSON-like mapping (None stays None)."""
    if value is None:
        return None
    s = struct_pb2.Struct()
    s.update(dict(value))
    return s


@dataclass(frozen=True)
class Session:
    """A session's metadata as the daemon returned it.

    ``proto`` is the raw ``agentsessions.v1.Session`` message; the properties
    are shortcuts into it.
    """

    proto: spb.Session

    @property
    def uid(self) -> str:
        """The server-assigned id (``sess-…``)."""
        return self.proto.metadata.uid

    @property
    def name(self) -> str:
        return self.proto.metadata.name

    @property
    def project(self) -> str:
        return self.proto.metadata.project

    @property
    def harness(self) -> str:
        return self.proto.harness

    @property
    def model(self) -> str:
        return self.proto.model

    @property
    def last_seq(self) -> int:
        """The seq of the session's last committed record (0 when empty)."""
        return self.proto.last_seq

    @property
    def exec_state(self) -> str:
        """The execution axis, e.g. ``"EXEC_COMPLETED"`` or ``"EXEC_AWAITING"``."""
        return spb.ExecState.Name(self.proto.exec_state)

    @property
    def compute_state(self) -> str:
        """The compute axis, e.g. ``"COMPUTE_LIVE"`` or ``"COMPUTE_COLD"``."""
        return spb.ComputeState.Name(self.proto.compute_state)

    @property
    def pending(self) -> Optional[pb.ApprovalRef]:
        """The unresolved approval request, if the session waits for one."""
        if self.proto.HasField("pending_approval"):
            return self.proto.pending_approval
        return None

    @property
    def parent_uid(self) -> str:
        return self.proto.parent_uid

    @property
    def fork_seq(self) -> int:
        return self.proto.fork_seq

    @property
    def labels(self) -> Dict[str, str]:
        return dict(self.proto.labels)

    @property
    def annotations(self) -> Dict[str, str]:
        return dict(self.proto.annotations)

    def __repr__(self) -> str:
        return (
            f"Session(uid={self.uid!r}, name={self.name!r}, harness={self.harness!r}, "
            f"last_seq={self.last_seq}, exec_state={self.exec_state}, "
            f"compute_state={self.compute_state})"
        )


class Turn:
    """What one turn (an Exec, or an approve/deny and the resume after it) committed.

    Attributes:
        session: the session as it was at the end (its ``pending`` says
            whether the turn parked on an approval). A turn that ran to its
            END ends its Exec stream without a closing Session frame; then
            :meth:`Client.exec` fetches the session (GetSession) the first
            time this attribute is read, not before.
        records: the committed records, in seq order.
        deltas: the ephemeral output chunks streamed with them (never journaled).
        decision: for approve/deny, the committed APPROVAL_RESULT record.
    """

    def __init__(
        self,
        session: Optional[Session] = None,
        records: Optional[List[pb.LogRecord]] = None,
        deltas: Optional[List[spb.Delta]] = None,
        decision: Optional[pb.LogRecord] = None,
    ) -> None:
        self._session = session
        self._fetch: Optional[Callable[[], Session]] = None
        self.records: List[pb.LogRecord] = records if records is not None else []
        self.deltas: List[spb.Delta] = deltas if deltas is not None else []
        self.decision = decision

    @property
    def session(self) -> Optional[Session]:
        if self._fetch is not None:
            fetch, self._fetch = self._fetch, None
            self._session = fetch()
        return self._session

    @session.setter
    def session(self, value: Optional[Session]) -> None:
        self._session = value
        self._fetch = None

    def fetch_session_later(self, fetch: Callable[[], Session]) -> None:
        """Makes :attr:`session` come from ``fetch()``, called on first read."""
        self._fetch = fetch

    def __repr__(self) -> str:
        return (
            f"Turn(execution_id={self.execution_id!r}, kinds={self.kinds()!r}, "
            f"decision={'yes' if self.decision is not None else 'no'})"
        )

    @property
    def output(self) -> str:
        """The assistant text of the turn's OUTPUT records, joined by newlines."""
        texts = [
            message_text(r.event.message)
            for r in self.records
            if r.event.kind == pb.EVENT_OUTPUT and r.event.HasField("message")
        ]
        return "\n".join(t for t in texts if t)

    @property
    def pending(self) -> Optional[pb.ApprovalRef]:
        """The approval the turn parked on, or None."""
        if self._fetch is not None and self.end is not None:
            return None  # it ran to its END: nothing waits (no GetSession needed)
        session = self.session
        return session.pending if session is not None else None

    @property
    def end(self) -> Optional[pb.HarnessEnd]:
        """The turn's END body, if it ended (None when it parked or failed)."""
        for r in reversed(self.records):
            if r.event.kind == pb.EVENT_END:
                return r.event.end
        return None

    @property
    def execution_id(self) -> str:
        """The execution the turn ran (the first record that names one)."""
        for r in self.records:
            if r.event.execution_id:
                return r.event.execution_id
        return ""

    def kinds(self) -> List[str]:
        """The records' kinds by name (handy in tests and logs)."""
        return [pb.EventKind.Name(r.event.kind) for r in self.records]


def kinds_of(records: Iterable[pb.LogRecord]) -> List[str]:
    """The kinds of ``records`` by name."""
    return [pb.EventKind.Name(r.event.kind) for r in records]
