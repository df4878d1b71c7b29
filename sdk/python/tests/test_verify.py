"""The auditor's verifier: agreement with agentctl on daemon journals, replay streams and the Go fixtures."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from agentsessions import Client, pb
from agentsessions.gojson import go_event
from agentsessions.verify import content_hash, verify_path

from .conftest import GO_FIXTURES, Daemon, agentctl, copy_journal

GOLDEN = "551bd146050c8d630b0c3b999a4445f3792a470db9bca443d8d4a67706283fcc"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agentsessions", "verify", *args], capture_output=True, text=True, timeout=120
    )


def journal_verify(path: Path) -> Tuple[int, str]:
    r = subprocess.run(
        [str(agentctl()), "journal", "verify", str(path)], capture_output=True, text=True, timeout=120
    )
    return r.returncode, r.stdout + r.stderr


def counts(text: str) -> Tuple[int, int]:
    m = re.search(r"verified: (\d+) sessions, (\d+) records", text)
    assert m, text
    return int(m.group(1)), int(m.group(2))


def test_golden_vector() -> None:
    ev = pb.Event(
        execution_id="exec-1",
        schema_version=1,
        kind=pb.EVENT_OUTPUT,
        message=pb.Message(role="assistant", parts=[pb.Part(text=pb.TextPart(text="hello"))]),
        actor=pb.IdentityRef(principal="agent://a", issuer="entra", subject="sub-1"),
    )
    ev.ts.seconds = 1700000000
    assert content_hash("", 1, ev) == GOLDEN
    start = pb.Event(execution_id="exec-default", kind=pb.EVENT_EXECUTION_START)
    start.execution_start.input_count = 0
    assert content_hash("", 1, start) == "b09cbff45d5a30990c3b72be8b06af6bc509d5a29a849aab5fd42153ef10ec65"


def _populate(c: Client) -> List[str]:
    """Sessions of every shape: turns, a decided approval, forks, a fork of a fork, a deleted parent."""
    a = c.create(harness="echo", name="a")
    c.exec(a.uid, "one")
    c.exec(a.uid, "two")
    b = c.create(harness="approval")
    t = c.exec(b.uid, "note it")
    c.approve(b.uid, t.pending, reason="fine")
    child = c.fork(a.uid, at=5)[0]
    c.exec(child.uid, "branch")
    grandchild = c.fork(child.uid, at=7)[0]
    c.exec(grandchild.uid, "deeper")
    gone = c.create(harness="echo")
    c.exec(gone.uid, "short-lived")
    orphan = c.fork(gone.uid, at=5)[0]
    c.delete(gone.uid)
    c.exec(orphan.uid, "survives its parent")
    c.suspend(a.uid)
    c.resume(a.uid)
    return [a.uid, b.uid, child.uid, grandchild.uid, orphan.uid]


def test_verifier_agrees_with_agentctl_on_a_daemon_journal(fresh_daemon: Daemon, tmp_path: Path) -> None:
    with Client(fresh_daemon.addr) as c:
        uids = _populate(c)
        replay = fresh_daemon.agentctl("--json", "replay", "--session", uids[3])
        assert replay.returncode == 0, replay.stderr
    for uid in uids:
        r = fresh_daemon.agentctl("verify", "--session", uid)
        assert r.returncode == 0 and "chain verified" in r.stdout, r.stderr
    fresh_daemon.stop()

    report = verify_path(str(fresh_daemon.journal))
    assert report.ok, [s.problem for s in report.sessions if s.problem]
    code, text = journal_verify(fresh_daemon.journal)
    assert code == 0, text
    assert counts(text) == (len(report.sessions), report.records)
    assert set(uids) <= {s.session for s in report.sessions}

    out = cli(str(fresh_daemon.journal))
    assert out.returncode == 0 and f"verified: {len(report.sessions)} sessions" in out.stdout

    # The same chain as an `agentctl replay --json` stream, and one edited line.
    stream = tmp_path / "replay.jsonl"
    stream.write_text(replay.stdout)
    r = verify_path(str(stream))
    assert r.ok and r.records == len(replay.stdout.splitlines())
    lines = replay.stdout.splitlines()
    rec = json.loads(lines[3])
    rec["event"]["message"]["parts"][0]["text"]["text"] = "forged"
    lines[3] = json.dumps(rec)
    stream.write_text("\n".join(lines) + "\n")
    bad = verify_path(str(stream)).first_bad
    assert bad is not None and bad.problem is not None
    assert (bad.problem.seq, bad.problem.reason) == (4, "mismatch")


def _tamper_blob(db_path: Path, session: str, seq: int) -> None:
    db = sqlite3.connect(db_path)
    (blob,) = db.execute("SELECT event FROM events WHERE session=? AND seq=?", (session, seq)).fetchone()
    ev = pb.Event.FromString(blob)
    ev.message.parts[0].text.text += " (edited)"
    db.execute(
        "UPDATE events SET event=? WHERE session=? AND seq=?", (ev.SerializeToString(deterministic=True), session, seq)
    )
    db.commit()
    db.close()


def test_verifier_names_the_first_bad_record_of_a_tampered_copy(fresh_daemon: Daemon, tmp_path: Path) -> None:
    with Client(fresh_daemon.addr) as c:
        s = c.create(harness="echo")
        c.exec(s.uid, "one")
        c.exec(s.uid, "two")
        other = c.create(harness="echo")
        c.exec(other.uid, "untouched")
    fresh_daemon.stop()
    copy = copy_journal(fresh_daemon.journal, tmp_path / "tampered.db")
    _tamper_blob(copy, s.uid, 4)  # the first turn's OUTPUT
    _tamper_blob(copy, s.uid, 9)  # a later one: not the first bad record

    report = verify_path(str(copy))
    bad = {r.session: r for r in report.sessions}
    assert bad[other.uid].ok
    problem = bad[s.uid].problem
    assert problem is not None and (problem.seq, problem.reason, problem.kind) == (4, "mismatch", "EVENT_OUTPUT")
    out = cli(str(copy))
    assert out.returncode == 3
    assert f"session {s.uid}: content_hash mismatch at seq 4" in out.stderr

    code, text = journal_verify(copy)
    assert code == 3 and "content_hash mismatch at seq 4" in text and s.uid in text, text
    embedded = subprocess.run(
        [str(agentctl()), "--journal", str(copy), "verify", "--session", s.uid],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert embedded.returncode == 3 and "content_hash mismatch at seq 4" in embedded.stderr, embedded.stderr
    # Both recompute the same hash for the edited record.
    assert problem.computed in embedded.stderr

    # A broken link is named as such.
    copy2 = copy_journal(fresh_daemon.journal, tmp_path / "relinked.db")
    db = sqlite3.connect(copy2)
    db.execute("UPDATE events SET prev_hash=? WHERE session=? AND seq=6", ("0" * 64, s.uid))
    db.commit()
    db.close()
    problem = {r.session: r for r in verify_path(str(copy2)).sessions}[s.uid].problem
    assert problem is not None and (problem.seq, problem.reason) == (6, "link")
    code, text = journal_verify(copy2)
    assert code == 3 and "seq 6" in text, text


# -- the Go fixtures ---------------------------------------------------------------

needs_fixtures = pytest.mark.skipif(not GO_FIXTURES.is_dir(), reason=f"no Go fixtures at {GO_FIXTURES}")


def _fixture_journal(tmp_path: Path, name: str, files: Dict[str, list]) -> Path:
    """A SQLite journal (the daemon's own schema) holding Go fixture records as event blobs."""
    path = tmp_path / name
    made = subprocess.run(
        [str(agentctl()), "--journal", str(path), "list"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    db = sqlite3.connect(path)
    for i, (fname, records) in enumerate(sorted(files.items())):
        uid = f"sess-go{i:02d}"
        db.execute(
            "INSERT INTO sessions(session, fence, project, harness, created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (uid, max(r["Fence"] for r in records), "default", "echo", i + 1, i + 1),
        )
        for r in records:
            blob = go_event(r["Event"]).SerializeToString(deterministic=True)
            db.execute(
                "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES (?,?,?,?,?,?)",
                (uid, r["Seq"], r["PrevHash"], r["Hash"], r["Fence"], blob),
            )
    db.commit()
    db.close()
    return path


@needs_fixtures
def test_go_fixtures_verify_and_agree_with_agentctl(tmp_path: Path) -> None:
    files = {p.name: json.loads(p.read_text()) for p in sorted(GO_FIXTURES.glob("*.json"))}
    assert len(files) >= 9
    total = 0
    for name in files:
        report = verify_path(str(GO_FIXTURES / name))
        assert report.ok, (name, report.sessions[0].problem)
        total += report.records
    assert total == sum(len(v) for v in files.values())

    journal = _fixture_journal(tmp_path, "go.db", files)
    report = verify_path(str(journal))
    assert report.ok
    code, text = journal_verify(journal)
    assert code == 0, text
    assert counts(text) == (len(files), total)

    out = cli(*[str(GO_FIXTURES / n) for n in files])
    assert out.returncode == 0, out.stderr


@needs_fixtures
def test_a_tampered_go_fixture_is_named_by_both(tmp_path: Path) -> None:
    records = json.loads((GO_FIXTURES / "completed.json").read_text())
    records[2]["Event"]["Message"]["Parts"][0]["Text"]["Text"] = "echo:HELLO"
    forged = tmp_path / "completed-forged.json"
    forged.write_text(json.dumps(records, indent=2))
    bad = verify_path(str(forged)).first_bad
    assert bad is not None and bad.problem is not None and (bad.problem.seq, bad.problem.reason) == (3, "mismatch")
    out = cli(str(forged))
    assert out.returncode == 3 and "content_hash mismatch at seq 3" in out.stderr

    journal = _fixture_journal(tmp_path, "forged.db", {"completed.json": records})
    code, text = journal_verify(journal)
    assert code == 3 and "content_hash mismatch at seq 3" in text, text
    assert bad.problem.computed in text or "seq 3" in text
