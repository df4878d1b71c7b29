"""The client against a real daemon: create/exec/replay/fork/get/list, approvals, errors."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentsessions import (
    AgentSessionsError,
    AsyncClient,
    Client,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    pb,
)
from agentsessions.v1 import session_pb2 as spb


def test_create_exec_replay_get(client: Client) -> None:
    s = client.create(harness="echo", name="demo", labels={"team": "sdk"})
    assert s.uid.startswith("sess-") and s.name == "demo" and s.labels == {"team": "sdk"}
    turn = client.exec(s.uid, "hello world")
    assert turn.output == "echo:hello world"
    assert turn.kinds() == [
        "EVENT_EXECUTION_START",
        "EVENT_INPUT",
        "EVENT_MODEL_CALL",
        "EVENT_OUTPUT",
        "EVENT_END",
    ]
    assert turn.pending is None and turn.end is not None and turn.end.state == "COMPLETED"
    assert turn.session is not None and turn.session.last_seq == 5
    assert [r.seq for r in turn.records] == [1, 2, 3, 4, 5]

    second = client.exec(s.uid, "again", expected_last_seq=5)
    assert second.output == "echo:again" and second.records[0].seq == 6

    records = client.replay(s.uid)
    assert [r.seq for r in records] == list(range(1, 11))
    assert [r.content_hash for r in records[:5]] == [r.content_hash for r in turn.records]
    assert [r.seq for r in client.replay(s.uid, from_seq=8, to_seq=9)] == [8, 9]

    got = client.get(s.uid)
    assert got.uid == s.uid and got.last_seq == 10 and got.exec_state == "EXEC_COMPLETED"


def test_a_finished_turn_fetches_its_session_only_when_read(client: Client) -> None:
    s = client.create(harness="echo")
    fetched = []
    get = client.get
    client.get = lambda uid: fetched.append(uid) or get(uid)  # type: ignore[method-assign]
    turn = client.exec(s.uid, "hi")
    assert turn.output == "echo:hi" and turn.pending is None
    assert fetched == [], "no GetSession for the records or pending of a turn that ended"
    assert turn.session.last_seq == 5 and turn.session.exec_state == "EXEC_COMPLETED"
    assert fetched == [s.uid], "one GetSession, on first read"


def test_exec_stream_yields_session_then_records(client: Client) -> None:
    s = client.create(harness="echo")
    items = list(client.exec_stream(s.uid, [pb.Message(role="user", parts=[pb.Part(text=pb.TextPart(text="x"))])]))
    from agentsessions import Session

    assert isinstance(items[0], Session)
    records = [i for i in items if isinstance(i, pb.LogRecord)]
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]


def test_fork_children_share_the_prefix(client: Client) -> None:
    s = client.create(harness="echo")
    client.exec(s.uid, "one")
    client.exec(s.uid, "two")
    children = client.fork(s.uid, at=5, count=2, names=["a", "b"])
    assert [c.name for c in children] == ["a", "b"]
    for c in children:
        assert c.parent_uid == s.uid and c.fork_seq == 5
        recs = client.replay(c.uid)
        assert [r.seq for r in recs] == [1, 2, 3, 4, 5, 6]
        assert recs[5].event.lifecycle.detail == "parent@5"
        assert recs[4].content_hash == client.replay(s.uid, 5, 5)[0].content_hash
    t = client.exec(children[0].uid, "what if")
    assert t.output == "echo:what if"


def test_list_walks_every_page(client: Client) -> None:
    made = {client.create(harness="echo", project="listing").uid for _ in range(7)}
    seen = [s.uid for s in client.list(project="listing", page_size=3)]
    assert set(seen) == made and len(seen) == 7


def test_suspend_resume_cancel_delete(client: Client) -> None:
    s = client.create(harness="echo")
    client.exec(s.uid, "hi")
    assert client.suspend(s.uid).compute_state == "COMPUTE_COLD"
    assert client.resume(s.uid).compute_state == "COMPUTE_LIVE"
    with pytest.raises(FailedPrecondition):
        client.cancel(s.uid)  # its latest execution completed
    gone = client.delete(s.uid)
    assert gone.uid == s.uid
    with pytest.raises(NotFound) as e:
        client.get(s.uid)
    assert e.value.code == grpc.StatusCode.NOT_FOUND and e.value.method == "GetSession"


def test_typed_errors(client: Client) -> None:
    with pytest.raises(NotFound):
        client.get("sess-doesnotexist")
    with pytest.raises(NotFound):
        client.exec("sess-doesnotexist", "x")
    with pytest.raises(InvalidArgument):
        client.get("")
    s = client.create(harness="echo")
    client.exec(s.uid, "x")
    with pytest.raises(AgentSessionsError) as e:
        client.exec(s.uid, "stale", expected_last_seq=1)
    assert e.value.code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED)
    with pytest.raises(FailedPrecondition):
        client.approve(s.uid)  # nothing pending


def test_approval_approve_completes_the_turn(client: Client, daemon) -> None:
    s = client.create(harness="approval")
    turn = client.exec(s.uid, "remember milk")
    assert turn.pending is not None and turn.pending.tool_call_id == "c1"
    assert turn.kinds()[-3:] == ["EVENT_TOOL_CALL", "EVENT_APPROVAL_REQUEST", "EVENT_LIFECYCLE"]
    assert client.get(s.uid).exec_state == "EXEC_AWAITING"

    done = client.approve(s.uid, turn.pending, reason="fine by me")
    assert done.decision is not None and done.decision.event.approval_result.approved
    assert done.decision.event.approval_result.reason == "fine by me"
    assert done.kinds() == [
        "EVENT_APPROVAL_RESULT",
        "EVENT_TOOL_RESULT",
        "EVENT_OUTPUT",
        "EVENT_END",
        "EVENT_LIFECYCLE",
    ]
    assert done.output == "append_note approved and done"
    assert done.pending is None and done.session is not None and done.session.last_seq == 10
    notes = (daemon.workdir / "notes" / f"{s.uid}.notes").read_text()
    assert "remember milk" in notes


def test_approval_deny_reaches_the_harness(client: Client) -> None:
    s = client.create(harness="approval")
    turn = client.exec(s.uid, "forget milk")
    done = client.deny(s.uid, turn.pending, reason="not today")
    result = [r for r in done.records if r.event.kind == pb.EVENT_TOOL_RESULT][0].event.result
    assert result.is_error and result.code == pb.ToolResult.APPROVAL_DENIED
    assert done.output.startswith("append_note denied")
    assert done.end is not None and done.end.state == "COMPLETED"


def test_async_client(daemon) -> None:
    async def go() -> None:
        async with AsyncClient(daemon.addr) as c:
            s = await c.create(harness="echo", project="async")
            t = await c.exec(s.uid, "async hi")
            assert t.output == "echo:async hi"
            assert len(await c.replay(s.uid)) == 5
            kids = await c.fork(s.uid, at=5)
            assert kids[0].parent_uid == s.uid
            assert s.uid in [x.uid async for x in c.list(project="async")]
            p = await c.create(harness="approval")
            t = await c.exec(p.uid, "async note")
            done = await c.approve(p.uid, t.pending)
            assert done.output == "append_note approved and done"
            with pytest.raises(NotFound):
                await c.get("sess-nope")

    asyncio.run(go())
