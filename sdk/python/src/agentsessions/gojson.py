"""Reading a Go host's journal JSON (``[]eventlog.Record``, the v0.1.2 fixtures).

The Go host serialises records with Go field names (``Seq``, ``PrevHash``,
``Hash``, ``Event{ExecutionID, Timestamp, Kind, Message, ...}``) and string
enums (``"OUTPUT"``). Its content hashes are taken over the proto form the Go
host derives from that domain event, so this module rebuilds exactly that
``agentsessions.v1.Event``:

* ``Kind`` gets the ``EVENT_`` prefix (an unknown kind is left unset);
* the zero time (year 1) is not emitted as ``ts``;
* ``actor`` only when one of its fields is non-empty;
* only the first non-null body is carried, in the order Message, ModelCall,
  ToolCall, Result, Approval, ApprovalResult, Usage, Lifecycle, End, Err,
  ExecutionStart;
* a body that is present is emitted even when empty; ``InputCount`` keeps its
  presence (null = absent, 0 = present);
* Go byte slices are base64 text; maps become ``Struct`` values.
"""

from __future__ import annotations

import base64
from typing import Any, Dict, Iterable, List, Optional

from google.protobuf import timestamp_pb2

from .v1 import common_pb2 as pb

__all__ = ["go_event", "chain"]


def _s(d: Optional[Dict[str, Any]], key: str) -> str:
    v = (d or {}).get(key)
    return v if isinstance(v, str) else ""


def _i(d: Optional[Dict[str, Any]], key: str) -> int:
    v = (d or {}).get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _b(d: Optional[Dict[str, Any]], key: str) -> bool:
    return bool((d or {}).get(key))


def _bytes(d: Optional[Dict[str, Any]], key: str) -> bytes:
    v = (d or {}).get(key)
    return base64.b64decode(v) if isinstance(v, str) and v else b""


def _enum(enum: Any, prefix: str, name: str) -> Any:
    full = prefix + name if name else ""
    try:
        return int(enum.Value(full)) if full else 0
    except ValueError:
        return 0


def _struct(target: Any, value: Any) -> None:
    if isinstance(value, dict):
        target.update(value)
        target.SetInParent()


def _parts(parts: Optional[Iterable[Dict[str, Any]]], out: Any) -> None:
    for p in parts or []:
        part = out.add()
        if p.get("Text") is not None:
            part.text.text = _s(p["Text"], "Text")
            part.text.SetInParent()
        elif p.get("File") is not None:
            f = p["File"]
            part.file.mime = _s(f, "MIME")
            data = _bytes(f, "Bytes")
            if data:
                part.file.bytes = data
            elif _s(f, "URI"):
                part.file.uri = _s(f, "URI")
            part.file.name = _s(f, "Name")
            part.file.digest = _s(f, "Digest")
            part.file.SetInParent()
        elif p.get("Data") is not None:
            _struct(part.data.data, p["Data"])
            part.data.SetInParent()
        elif p.get("Reasoning") is not None:
            r = p["Reasoning"]
            x = part.reasoning
            x.provider = _s(r, "Provider")
            x.model_id = _s(r, "ModelID")
            opaque = _bytes(r, "Opaque")
            if opaque:
                x.opaque_bytes = opaque
            elif _s(r, "OpaqueURI"):
                x.opaque_uri = _s(r, "OpaqueURI")
            _parts(r.get("Summary"), x.summary)
            x.item_id = _s(r, "ItemID")
            x.ordinal = _i(r, "Ordinal")
            x.validity_scope = _s(r, "ValidityScope")
            x.opaque_digest = _s(r, "OpaqueDigest")
            x.SetInParent()
        elif p.get("ToolCall") is not None:
            _tool_call(p["ToolCall"], part.tool_call)
        elif p.get("ToolResult") is not None:
            _tool_result(p["ToolResult"], part.tool_result)


def _tool_call(c: Dict[str, Any], out: pb.ToolCall) -> None:
    out.id = _s(c, "ID")
    out.tool = _s(c, "Tool")
    if c.get("Args") is not None:
        _struct(out.args, c["Args"])
    out.mediation = _enum(pb.Mediation, "MEDIATION_", _s(c, "Mediation"))
    out.idempotency_key = _s(c, "IdempotencyKey")
    out.SetInParent()


def _tool_result(r: Dict[str, Any], out: pb.ToolResult) -> None:
    out.id = _s(r, "ID")
    if r.get("Output") is not None:
        _struct(out.output, r["Output"])
    out.output_uri = _s(r, "OutputURI")
    out.output_digest = _s(r, "OutputDigest")
    out.is_error = _b(r, "IsError")
    out.error = _s(r, "Error")
    _parts(r.get("Content"), out.content)
    out.code = _i(r, "Code")  # type: ignore[assignment]
    out.approval_request_seq = _i(r, "ApprovalRequestSeq")
    out.approval_decision_seq = _i(r, "ApprovalDecisionSeq")
    out.SetInParent()


def _error(e: Dict[str, Any], out: pb.Error) -> None:
    out.code = _i(e, "Code")
    out.description = _s(e, "Description")
    out.SetInParent()


def go_event(e: Dict[str, Any]) -> pb.Event:
    """The ``agentsessions.v1.Event`` the Go host hashes for one of its domain events."""
    ev = pb.Event()
    ev.execution_id = _s(e, "ExecutionID")
    ts = _s(e, "Timestamp")
    if ts and not ts.startswith("0001-01-01T00:00:00"):
        t = timestamp_pb2.Timestamp()
        t.FromJsonString(ts)
        ev.ts.CopyFrom(t)
    ev.schema_version = _i(e, "SchemaVersion")
    ev.kind = _enum(pb.EventKind, "EVENT_", _s(e, "Kind"))
    actor = e.get("Actor") or {}
    if any(_s(actor, k) for k in ("Principal", "Issuer", "Subject")):
        ev.actor.principal = _s(actor, "Principal")
        ev.actor.issuer = _s(actor, "Issuer")
        ev.actor.subject = _s(actor, "Subject")
    if e.get("Message") is not None:
        m = e["Message"]
        ev.message.role = _s(m, "Role")
        _parts(m.get("Parts"), ev.message.parts)
        ev.message.SetInParent()
    elif e.get("ModelCall") is not None:
        m = e["ModelCall"]
        ev.model.model = _s(m, "Model")
        for k, v in (m.get("Params") or {}).items():
            ev.model.params[k] = v
        ev.model.input_hash = _s(m, "InputHash")
        ev.model.id = _s(m, "ID")
        ev.model.SetInParent()
    elif e.get("ToolCall") is not None:
        _tool_call(e["ToolCall"], ev.tool)
    elif e.get("Result") is not None:
        _tool_result(e["Result"], ev.result)
    elif e.get("Approval") is not None:
        a = e["Approval"]
        ev.approval.tool_call_id = _s(a, "ToolCallID")
        ev.approval.reason = _s(a, "Reason")
        ev.approval.SetInParent()
    elif e.get("ApprovalResult") is not None:
        a = e["ApprovalResult"]
        ev.approval_result.tool_call_id = _s(a, "ToolCallID")
        ev.approval_result.approved = _b(a, "Approved")
        ev.approval_result.reason = _s(a, "Reason")
        ev.approval_result.request_seq = _i(a, "RequestSeq")
        ev.approval_result.SetInParent()
    elif e.get("Usage") is not None:
        u = e["Usage"]
        ev.usage.model = _s(u, "Model")
        ev.usage.input_tokens = _i(u, "InputTokens")
        ev.usage.output_tokens = _i(u, "OutputTokens")
        ev.usage.reasoning_tokens = _i(u, "ReasoningTokens")
        ev.usage.SetInParent()
    elif e.get("Lifecycle") is not None:
        lc = e["Lifecycle"]
        ev.lifecycle.kind = _enum(pb.Lifecycle.Kind, "LIFECYCLE_", _s(lc, "Kind"))
        ev.lifecycle.detail = _s(lc, "Detail")
        snap = lc.get("Snapshot")
        if snap is not None:
            ev.lifecycle.snapshot_local = _s(snap, "Local")
            ev.lifecycle.snapshot_external_uri = _s(snap, "ExternalURI")
            ev.lifecycle.snapshot_memory = _b(snap, "Memory")
            ev.lifecycle.snapshot_sealed = _b(snap, "Sealed")
        ev.lifecycle.SetInParent()
    elif e.get("End") is not None:
        end = e["End"]
        ev.end.state = _s(end, "State")
        if end.get("Error") is not None:
            _error(end["Error"], ev.end.error)
        ev.end.SetInParent()
    elif e.get("Err") is not None:
        _error(e["Err"], ev.error)
    elif e.get("ExecutionStart") is not None:
        x = e["ExecutionStart"]
        ev.execution_start.config = _bytes(x, "Config")
        ev.execution_start.resume_from_seq = _i(x, "ResumeFromSeq")
        if x.get("InputCount") is not None:
            ev.execution_start.input_count = _i(x, "InputCount")
        ev.execution_start.harness = _s(x, "Harness")
        ev.execution_start.harness_version = _s(x, "HarnessVersion")
        ev.execution_start.SetInParent()
    return ev


def chain(name: str, records: List[Dict[str, Any]]) -> "Any":
    """A :class:`agentsessions.verify.Chain` of Go records."""
    from .verify import Chain

    out = Chain(name)
    for r in records:
        try:
            event, error = go_event(r.get("Event") or {}), ""
        except Exception as e:  # a record the conversion cannot read
            event, error = None, f"decode: {e}"
        out.records.append((_i(r, "Seq"), _s(r, "PrevHash"), _s(r, "Hash"), event, error))
    return out
