"""The examples under sdk/python/examples, served and driven through a real daemon."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Iterator, Tuple

import pytest

from agentsessions import Client, pb

from .conftest import SDK, Daemon


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SDK / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool_agent = _load("tool_agent")


@pytest.fixture(scope="module")
def agent_addr() -> Iterator[str]:
    server = tool_agent.serve(tool_agent.ToolAgent(), "127.0.0.1:0")
    yield server.address
    server.stop(0)


@pytest.fixture(scope="module")
def open_host(tmp_path_factory: pytest.TempPathFactory, agent_addr: str) -> Iterator[Daemon]:
    """No rule for append_note: the built-in keeps the harness's mediation and runs at once."""
    d = Daemon(tmp_path_factory.mktemp("open"), {"tool-agent": agent_addr})
    yield d
    d.stop()


@pytest.fixture(scope="module")
def gated_host(tmp_path_factory: pytest.TempPathFactory, agent_addr: str) -> Iterator[Daemon]:
    """The host's policy gates append_note, whatever mediation the harness asks for."""
    d = Daemon(
        tmp_path_factory.mktemp("gated"),
        {"tool-agent": agent_addr},
        ["--tool-policy", "append_note=approval"],
    )
    yield d
    d.stop()


def _notes(d: Daemon, uid: str) -> Path:
    return d.workdir / "notes" / f"{uid}.notes"


def _tool_results(c: Client, uid: str):
    return [r.event.result for r in c.replay(uid) if r.event.kind == pb.EVENT_TOOL_RESULT]


def _session(d: Daemon) -> Tuple[Client, str]:
    c = Client(d.addr)
    return c, c.create(harness="tool-agent").uid


def test_tool_agent_runs_an_ungated_catalog_tool_at_once(open_host: Daemon) -> None:
    c, uid = _session(open_host)
    with c:
        turn = c.exec(uid, "buy milk")
        assert turn.kinds() == [
            "EVENT_EXECUTION_START",
            "EVENT_INPUT",
            "EVENT_MODEL_CALL",
            "EVENT_OUTPUT",
            "EVENT_TOOL_CALL",
            "EVENT_TOOL_RESULT",
            "EVENT_OUTPUT",
            "EVENT_END",
        ]
        assert turn.output == 'echo:buy milk\nappend_note ok: note appended {"appended":true}'
        assert turn.pending is None and turn.end.state == "COMPLETED"
        call = [r.event.tool for r in turn.records if r.event.kind == pb.EVENT_TOOL_CALL][0]
        assert call.tool == "append_note" and call.mediation == pb.MEDIATION_CONTROLLER_MEDIATED
        assert call.idempotency_key == f"tool-agent/{turn.execution_id}/note-1"
        assert _notes(open_host, uid).read_text().count("echo:buy milk") == 1


def test_tool_agent_parks_on_the_hosts_gate_and_runs_the_tool_once_approved(gated_host: Daemon) -> None:
    c, uid = _session(gated_host)
    with c:
        turn = c.exec(uid, "buy milk")
        assert turn.pending is not None, turn.kinds()
        assert turn.pending.tool_call_id == "note-1"
        assert "EVENT_APPROVAL_REQUEST" in turn.kinds() and "EVENT_TOOL_RESULT" not in turn.kinds()
        assert c.get(uid).exec_state == "EXEC_AWAITING"
        assert not _notes(gated_host, uid).exists(), "nothing runs before the decision"

        done = c.approve(uid, turn.pending, reason="fine")
        assert done.end is not None and done.end.state == "COMPLETED", done.kinds()
        assert done.output.endswith('append_note ok: note appended {"appended":true}'), done.output
        (receipt,) = _tool_results(c, uid)
        assert not receipt.is_error and receipt.approval_request_seq == turn.pending.request_seq
        # The re-drive got the recorded completion and the tool ran once.
        assert _notes(gated_host, uid).read_text().count("echo:buy milk") == 1
        models = [r for r in c.replay(uid) if r.event.kind == pb.EVENT_MODEL_CALL]
        assert len(models) == 1


def test_tool_agent_reports_a_denial_receipt(gated_host: Daemon) -> None:
    c, uid = _session(gated_host)
    with c:
        turn = c.exec(uid, "sell the car")
        done = c.deny(uid, turn.pending, reason="no")
        assert done.end is not None and done.end.state == "COMPLETED", done.kinds()
        assert "append_note denied: " in done.output, done.output
        (receipt,) = _tool_results(c, uid)
        assert receipt.is_error and receipt.code == pb.ToolResult.APPROVAL_DENIED
        assert not _notes(gated_host, uid).exists()


def test_tool_agent_receipt_line() -> None:
    ok = pb.ToolResult(id="note-1", content=[pb.Part(text=pb.TextPart(text="note appended"))])
    ok.output.update({"appended": True})
    assert tool_agent.describe_receipt(ok) == 'append_note ok: note appended {"appended":true}'
    failed = pb.ToolResult(id="note-1", is_error=True, code=pb.ToolResult.EXECUTOR_ERROR, error="disk full")
    assert tool_agent.describe_receipt(failed) == "append_note failed: disk full"
