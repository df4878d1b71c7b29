"""agentsessions: a Python SDK for agentsessionsd (durable agent sessions).

* :class:`Client` / :class:`AsyncClient` drive sessions over gRPC.
* :class:`Harness`, :class:`Sink` and :func:`serve` write and serve a harness.
* :mod:`agentsessions.verify` re-verifies journals' hash chains
  (``python -m agentsessions verify JOURNAL``).

The generated protobuf modules are ``agentsessions.v1.*_pb2``.
"""

from .client import AsyncClient, Client, ExecUpdate, RetryPolicy
from .errors import (
    Aborted,
    AgentSessionsError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from .harness import (
    CONTROLLER_MEDIATED,
    IN_HARNESS_REPORTED,
    REQUIRES_APPROVAL,
    REQUIRES_MEMORY_SNAPSHOT,
    STATELESS_REPLAY,
    AsyncSink,
    Canceled,
    Failed,
    Harness,
    HarnessError,
    HarnessServer,
    ModelRequest,
    Parked,
    ProtocolError,
    Sink,
    Start,
    serve,
    tool_call,
    tool_spec,
)
from .types import Session, Turn, message_text, text_message
from .v1 import common_pb2 as pb

__version__ = "0.1.0"

__all__ = [
    "Client",
    "AsyncClient",
    "ExecUpdate",
    "RetryPolicy",
    "Session",
    "Turn",
    "text_message",
    "message_text",
    "AgentSessionsError",
    "NotFound",
    "InvalidArgument",
    "FailedPrecondition",
    "Aborted",
    "Unavailable",
    "Harness",
    "Start",
    "Sink",
    "AsyncSink",
    "ModelRequest",
    "HarnessError",
    "Parked",
    "ProtocolError",
    "Canceled",
    "Failed",
    "HarnessServer",
    "serve",
    "tool_call",
    "tool_spec",
    "STATELESS_REPLAY",
    "REQUIRES_MEMORY_SNAPSHOT",
    "IN_HARNESS_REPORTED",
    "CONTROLLER_MEDIATED",
    "REQUIRES_APPROVAL",
    "pb",
]
