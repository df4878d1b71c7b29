"""Typed errors: one exception class per gRPC status code.

Every failed call raises a subclass of :class:`AgentSessionsError`; its
``code`` is the :class:`grpc.StatusCode` the daemon answered with and
``details`` the daemon's message, so callers can either catch a class
(``except NotFound``) or switch on ``err.code``.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

__all__ = [
    "AgentSessionsError",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
    "from_rpc_error",
]


class AgentSessionsError(Exception):
    """A call the daemon refused or that failed on the way.

    Attributes:
        code: the gRPC status code.
        details: the status message.
        method: the RPC that failed (e.g. ``"GetSession"``), when known.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        details: str = "",
        *,
        code: Optional[grpc.StatusCode] = None,
        method: str = "",
    ) -> None:
        if code is not None:
            self.code = code
        self.details = details
        self.method = method
        prefix = f"{method}: " if method else ""
        super().__init__(f"{prefix}{self.code.name}: {details}")

    @property
    def retryable(self) -> bool:
        """Whether the code says "try again" (ABORTED or UNAVAILABLE)."""
        return self.code in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE)


class Cancelled(AgentSessionsError):
    """CANCELLED: the call or its turn was canceled."""

    code = grpc.StatusCode.CANCELLED


class Unknown(AgentSessionsError):
    """UNKNOWN."""

    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(AgentSessionsError):
    """INVALID_ARGUMENT."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(AgentSessionsError):
    """DEADLINE_EXCEEDED."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(AgentSessionsError):
    """NOT_FOUND: no such session (or it was deleted)."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(AgentSessionsError):
    """ALREADY_EXISTS."""

    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(AgentSessionsError):
    """PERMISSION_DENIED."""

    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(AgentSessionsError):
    """RESOURCE_EXHAUSTED."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(AgentSessionsError):
    """FAILED_PRECONDITION: not in this state."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(AgentSessionsError):
    """ABORTED: refused with the journal unchanged; retry."""

    code = grpc.StatusCode.ABORTED


class OutOfRange(AgentSessionsError):
    """OUT_OF_RANGE."""

    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(AgentSessionsError):
    """UNIMPLEMENTED."""

    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(AgentSessionsError):
    """INTERNAL."""

    code = grpc.StatusCode.INTERNAL


class Unavailable(AgentSessionsError):
    """UNAVAILABLE: try again later."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(AgentSessionsError):
    """DATA_LOSS."""

    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(AgentSessionsError):
    """UNAUTHENTICATED."""

    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[grpc.StatusCode, Type[AgentSessionsError]] = {
    cls.code: cls
    for cls in (
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        DataLoss,
        Unauthenticated,
    )
}


def from_rpc_error(err: grpc.RpcError, method: str = "") -> AgentSessionsError:
    """The typed exception for a failed grpcio call."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code, AgentSessionsError)
    return cls(details or "", code=code, method=method)
