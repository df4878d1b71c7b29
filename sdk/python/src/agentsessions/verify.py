"""An auditor's verifier of the hash chain, independent of the daemon's code.

For every record it recomputes::

    content_hash = hex(sha256(JCS({"event": proto3-JSON(event),
                                   "prev_hash": <previous content_hash, "" at seq 1>,
                                   "seq": "<seq as a decimal string>"})))

where proto3-JSON uses proto field names, enum names and omits unpopulated
fields (``google.protobuf.json_format``), and JCS is RFC 8785 (the ``rfc8785``
package). Seqs must run from 1 without a gap, each ``prev_hash`` must be the
previous record's stored ``content_hash``, and each stored hash must equal the
recomputed one, in lowercase hex.

Inputs (:func:`load`):

* a SQLite journal file (the daemon's, or a Go host's): every session of the
  ``sessions`` table, a fork child's prefix read through ``session_prefixes``;
* the output of ``agentctl replay --json`` (one LogRecord per line) or a JSON
  array of LogRecords;
* a Go host's ``[]eventlog.Record`` JSON (the v0.1.2 fixtures), converted with
  the Go host's domain-to-proto rules.

Command line: ``python -m agentsessions verify JOURNAL...``; exit 0 when every
chain verifies, 3 when one does not (naming its first bad record), 2 when an
input cannot be read.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sqlite3
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import rfc8785
from google.protobuf import json_format

from .v1 import common_pb2 as pb

__all__ = [
    "Problem",
    "SessionReport",
    "Report",
    "Chain",
    "event_json",
    "canonical_record",
    "content_hash",
    "check_chain",
    "load",
    "verify_path",
    "main",
]

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_BROKEN = 3


# -- the canonical form ------------------------------------------------------


def event_json(event: pb.Event) -> Dict[str, Any]:
    """The proto3-JSON form of ``event``: proto field names, enum names, defaults omitted."""
    return json_format.MessageToDict(event, preserving_proto_field_name=True)


def canonical_record(prev_hash: str, seq: int, event: pb.Event) -> bytes:
    """The RFC 8785 bytes a record's content hash is taken over."""
    return rfc8785.dumps({"event": event_json(event), "prev_hash": prev_hash, "seq": str(seq)})


def content_hash(prev_hash: str, seq: int, event: pb.Event) -> str:
    """The record's content hash: 64 lowercase hex characters."""
    return hashlib.sha256(canonical_record(prev_hash, seq, event)).hexdigest()


# -- results -------------------------------------------------------------------


@dataclass
class Problem:
    """The first bad record of a chain."""

    seq: int
    reason: str  # gap | link | undecodable | mismatch
    message: str
    stored: str = ""
    computed: str = ""
    kind: str = ""

    def __str__(self) -> str:
        return self.message


@dataclass
class Chain:
    """One session's records as read from an input (``event`` None when its bytes did not decode)."""

    session: str
    records: List[Tuple[int, str, str, Optional[pb.Event], str]] = field(default_factory=list)
    # (seq, prev_hash, content_hash, event, decode error)


@dataclass
class SessionReport:
    session: str
    records: int
    problem: Optional[Problem] = None

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass
class Report:
    """The verdict over every chain of an input."""

    source: str
    sessions: List[SessionReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.sessions)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.sessions)

    @property
    def first_bad(self) -> Optional[SessionReport]:
        """The first session (in input order) whose chain broke."""
        for s in self.sessions:
            if not s.ok:
                return s
        return None


def check_chain(chain: Chain) -> SessionReport:
    """Verifies one chain from genesis; stops at its first bad record."""
    prev = ""
    expected = 1
    count = 0
    for seq, prev_hash, stored, event, decode_error in chain.records:
        kind = pb.EventKind.Name(event.kind) if event is not None and event.kind in pb.EventKind.values() else ""
        if seq != expected:
            return SessionReport(
                chain.session,
                count,
                Problem(seq, "gap", f"sequence gap: seq {expected} is missing (next record is seq {seq})", kind=kind),
            )
        if prev_hash != prev:
            return SessionReport(
                chain.session,
                count,
                Problem(
                    seq,
                    "link",
                    f"prev_hash mismatch at seq {seq}: it does not link to the content_hash of seq {seq - 1}",
                    kind=kind,
                ),
            )
        computed = ""
        error = decode_error
        if event is None and not error:
            error = "missing event"
        if not error:
            try:
                computed = content_hash(prev_hash, seq, event)  # type: ignore[arg-type]
            except Exception as e:  # no canonical form (e.g. a non-finite number)
                error = str(e) or type(e).__name__
        if error:
            return SessionReport(
                chain.session, count, Problem(seq, "undecodable", f"undecodable event at seq {seq}: {error}")
            )
        if computed != stored:
            return SessionReport(
                chain.session,
                count,
                Problem(
                    seq,
                    "mismatch",
                    f"content_hash mismatch at seq {seq}: stored {stored}, recomputed {computed}",
                    stored=stored,
                    computed=computed,
                    kind=kind,
                ),
            )
        prev = stored
        expected = seq + 1
        count += 1
    return SessionReport(chain.session, count)


# -- inputs ------------------------------------------------------------------------


def _decode(blob: bytes) -> Tuple[Optional[pb.Event], str]:
    try:
        return pb.Event.FromString(bytes(blob)), ""
    except Exception as e:
        return None, f"decode: {e}"


def _has_table(db: sqlite3.Connection, name: str) -> bool:
    row = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone()
    return row is not None


def load_sqlite(path: str, sessions: Optional[Sequence[str]] = None) -> Iterator[Chain]:
    """Every session's chain in a SQLite journal, fork prefixes resolved."""
    db = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
    try:
        if not _has_table(db, "events"):
            raise ValueError(f"{path}: not a journal (no events table)")
        if _has_table(db, "sessions"):
            uids = [r[0] for r in db.execute("SELECT session FROM sessions ORDER BY session")]
        else:
            uids = [r[0] for r in db.execute("SELECT DISTINCT session FROM events ORDER BY session")]
        if sessions:
            wanted = set(sessions)
            uids = [u for u in uids if u in wanted]
        prefixes = _has_table(db, "session_prefixes")
        rows_sql = (
            "SELECT seq, prev_hash, hash, event FROM events WHERE session = ? AND seq > ? AND seq <= ? ORDER BY seq"
        )
        for uid in uids:
            chain = Chain(uid)
            after = 0
            spans = (
                db.execute(
                    "SELECT first_seq, last_seq, owner FROM session_prefixes WHERE session = ? ORDER BY first_seq",
                    (uid,),
                ).fetchall()
                if prefixes
                else []
            )
            # A fork child's prefix is stored once, under the sessions that wrote it.
            for _first, last, owner in spans:
                if last <= after:
                    continue
                for seq, prev, stored, blob in db.execute(rows_sql, (owner, after, last)):
                    chain.records.append((seq, prev, stored, *_decode(blob)))
                    after = seq
            for seq, prev, stored, blob in db.execute(rows_sql, (uid, after, 2**63 - 1)):
                chain.records.append((seq, prev, stored, *_decode(blob)))
            yield chain
    finally:
        db.close()


def _log_record_chain(session: str, items: Iterable[Any]) -> Chain:
    chain = Chain(session)
    for item in items:
        rec = pb.LogRecord()
        try:
            json_format.ParseDict(item, rec)
        except Exception as e:
            seq = int(item.get("seq", 0)) if isinstance(item, dict) else 0
            chain.records.append((seq, str(item.get("prev_hash", "")), str(item.get("content_hash", "")), None, f"decode: {e}"))
            continue
        chain.records.append((rec.seq, rec.prev_hash, rec.content_hash, rec.event if rec.HasField("event") else None, ""))
    return chain


def load_json(path: str, text: Optional[str] = None) -> Iterator[Chain]:
    """A replay stream (JSON lines or an array of LogRecords) or a Go host's record array."""
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    stripped = text.lstrip()
    name = os.path.basename(path)
    if stripped.startswith("["):
        items = json.loads(text)
        if items and isinstance(items[0], dict) and "Seq" in items[0]:
            from . import gojson

            yield gojson.chain(name, items)
            return
        yield _log_record_chain(name, items)
        return
    items = [json.loads(line) for line in text.splitlines() if line.strip()]
    yield _log_record_chain(name, items)


def load(path: str, sessions: Optional[Sequence[str]] = None) -> Iterator[Chain]:
    """The chains of ``path`` ("-" reads a JSON stream from stdin)."""
    if path == "-":
        yield from load_json("<stdin>", sys.stdin.read())
        return
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(b"SQLite format 3"):
        yield from load_sqlite(path, sessions)
    else:
        yield from load_json(path)


def verify_path(path: str, sessions: Optional[Sequence[str]] = None) -> Report:
    """Verifies every chain of one input."""
    report = Report(path)
    for chain in load(path, sessions):
        report.sessions.append(check_chain(chain))
    return report


# -- command line --------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m agentsessions verify JOURNAL...``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m agentsessions verify",
        description="Recompute every record's content hash (proto3-JSON + RFC 8785) and check the chain links.",
    )
    parser.add_argument("journals", nargs="+", metavar="JOURNAL", help="SQLite journal, replay --json output, Go record JSON, or -")
    parser.add_argument("--session", action="append", help="only this session (SQLite; repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per input")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only failures")
    args = parser.parse_args(argv)
    code = EXIT_OK
    for path in args.journals:
        try:
            report = verify_path(path, args.session)
        except (OSError, ValueError, sqlite3.Error) as e:
            print(f"agentsessions verify: {path}: {e}", file=sys.stderr)
            code = max(code, EXIT_BAD_INPUT)
            continue
        if args.json:
            bad = report.first_bad
            out: Dict[str, Any] = {
                "journal": path,
                "verified": report.ok,
                "sessions": len(report.sessions),
                "records": report.records,
            }
            if bad is not None and bad.problem is not None:
                out.update(session=bad.session, seq=bad.problem.seq, error=bad.problem.message)
            print(json.dumps(out))
        for s in report.sessions:
            if s.problem is not None:
                print(f"{path}: session {s.session}: {s.problem.message}", file=sys.stderr)
            elif not args.quiet and not args.json:
                print(f"session {s.session} chain verified ({s.records} records)")
        if report.ok:
            if not args.json and not args.quiet:
                print(f"verified: {len(report.sessions)} sessions, {report.records} records")
        else:
            bad = report.first_bad
            assert bad is not None and bad.problem is not None
            if not args.json:
                print(f"FAILED: first bad record: session {bad.session} seq {bad.problem.seq}")
            code = max(code, EXIT_BROKEN)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
