"""Fixtures: a real agentsessionsd on a free port with a temp journal, and Python harnesses routed to it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from agentsessions import Client, serve

from .harnesses import AsyncPy, SyncPy

SDK = Path(__file__).resolve().parent.parent
REPO = SDK.parent.parent
GO_FIXTURES = Path(os.environ.get("GO_FIXTURES_DIR", REPO.parent / "shared" / "fixtures" / "go-v0.1.2"))


def _binary(env: str, name: str) -> Path:
    """$ENV, else target/debug/NAME; waits out a relink that briefly removes it."""
    # Resolved now: the daemon runs in a temp dir, where a relative path would not.
    path = Path(os.environ.get(env) or REPO / "target" / "debug" / name).absolute()
    deadline = time.monotonic() + 180
    while not (path.is_file() and os.access(path, os.X_OK)):
        if time.monotonic() > deadline:
            pytest.fail(f"{path} not found (set {env})")
        time.sleep(2)
    return path


def agentsessionsd() -> Path:
    return _binary("AGENTSESSIONSD", "agentsessionsd")


def agentctl() -> Path:
    return _binary("AGENTCTL", "agentctl")


class Daemon:
    """One agentsessionsd process; ``addr`` is where it listens."""

    def __init__(self, workdir: Path, harnesses: Optional[Dict[str, str]] = None, extra: List[str] = ()) -> None:
        self.workdir = workdir
        self.journal = workdir / "journal.db"
        args = [str(agentsessionsd()), "--addr", "127.0.0.1:0", "--journal", str(self.journal)]
        for name, addr in (harnesses or {}).items():
            args += ["--harness", f"{name}={addr}"]
        args += list(extra)
        self.log = open(workdir / "daemon.log", "wb")
        self.proc = subprocess.Popen(
            args, cwd=workdir, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL
        )
        self.addr = self._await_addr()
        # Keep draining stdout so the daemon never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _await_addr(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode(errors="replace")
            if not line:
                break
            if line.startswith("agentsessionsd listening on "):
                return line.split()[-1]
        self.stop()
        raise RuntimeError(f"agentsessionsd did not start: {(self.workdir / 'daemon.log').read_text()[-2000:]}")

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def agentctl(self, *args: str, server: bool = True, check: bool = False) -> subprocess.CompletedProcess:
        cmd = [str(agentctl())] + (["--server", self.addr] if server else []) + list(args)
        return subprocess.run(cmd, cwd=self.workdir, capture_output=True, text=True, timeout=120, check=check)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def harness_servers() -> Iterator[Dict[str, str]]:
    """The test harnesses, served with the kit before the daemon starts."""
    servers = {"py": serve(SyncPy()), "pyasync": serve(AsyncPy())}
    yield {name: s.address for name, s in servers.items()}
    for s in servers.values():
        s.stop(0)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory, harness_servers: Dict[str, str]) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("daemon"), harness_servers)
    yield d
    d.stop()


@pytest.fixture()
def fresh_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon of the test's own (for journals the test inspects offline)."""
    d = Daemon(tmp_path)
    yield d
    d.stop()


@pytest.fixture()
def client(daemon: Daemon) -> Iterator[Client]:
    with Client(daemon.addr) as c:
        yield c


def python() -> str:
    return sys.executable


def copy_journal(src: Path, dst: Path) -> Path:
    """Copies a (stopped daemon's) SQLite journal with its WAL side files."""
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(src) + suffix)
        if p.exists():
            shutil.copy2(p, str(dst) + suffix)
    return dst
