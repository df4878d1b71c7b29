"""Client options: bearer tokens against a daemon run with --auth, retries, the README's examples."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import grpc
import pytest

from agentsessions import Client, RetryPolicy
from agentsessions.errors import AgentSessionsError, Unauthenticated, Unavailable

from .conftest import SDK, Daemon


def test_token_is_sent_on_every_call(tmp_path: Path) -> None:
    token = "sdk-test-token"
    auth = tmp_path / "auth.toml"
    auth.write_text(
        "[[api_key]]\n"
        'principal = "sdk"\n'
        f'sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
        'roles = ["default:admin"]\n'
    )
    d = Daemon(tmp_path, extra=["--auth", str(auth)])
    try:
        with Client(d.addr, token=token) as c:
            s = c.create(harness="echo")
            assert c.exec(s.uid, "authorized").output == "echo:authorized"
            assert [x.uid for x in c.list()] == [s.uid]
        with Client(d.addr) as anonymous, pytest.raises(Unauthenticated):
            anonymous.get(s.uid)
        with Client(d.addr, token="wrong") as wrong, pytest.raises(AgentSessionsError) as e:
            wrong.get(s.uid)
        assert e.value.code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
    finally:
        d.stop()


def test_unavailable_reads_are_retried_then_raised() -> None:
    policy = RetryPolicy(attempts=3, initial=0.2, maximum=0.2)
    with Client("127.0.0.1:1", timeout=5, retry=policy) as c:
        started = time.monotonic()
        with pytest.raises(Unavailable) as e:
            c.get("sess-x")
        # Two pauses of 0.1..0.2 s between the three attempts.
        assert time.monotonic() - started >= 0.2
        assert e.value.retryable and e.value.method == "GetSession"
        started = time.monotonic()
        with pytest.raises(Unavailable):
            c.create(harness="echo")  # not retried: its outcome would be unknown
        assert time.monotonic() - started < 0.2


def test_readme_examples_are_short_and_compile() -> None:
    text = (SDK / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        assert len(block.strip().splitlines()) < 20, block
        compile(block, "README.md", "exec")
    assert "pip install ./sdk/python" in text


def test_readme_harness_runs_against_the_daemon(tmp_path: Path) -> None:
    text = (SDK / "README.md").read_text()
    block = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "class Notes" in b][0]
    block = block.replace('"127.0.0.1:9000"', '"127.0.0.1:0"').replace("server.wait()", "")
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    server = scope["server"]
    d = Daemon(tmp_path, {"notes": server.address})
    try:
        with Client(d.addr) as c:
            s = c.create(harness="notes")
            turn = c.exec(s.uid, "buy milk")
            assert turn.pending is not None and turn.output == "echo:buy milk"
            done = c.approve(s.uid, turn.pending)
            assert done.output == "noted", done.kinds()
            s2 = c.create(harness="notes")
            t2 = c.exec(s2.uid, "sell milk")
            assert c.deny(s2.uid, t2.pending, reason="no").output == "denied"
    finally:
        d.stop()
        server.stop(0)
