"""``python -m ctxemb_pgvector.server DIR`` as a user runs it: stopped by a signal, it stops its
server; killed outright, it leaves a server that the next helper adopts and stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # PostgreSQL created, then started twice: ~5 s


def _helper(folder: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ctxemb_pgvector.server", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def _running(folder: Path) -> int | None:
    """The server's pid while it runs (PostgreSQL removes postmaster.pid when it stops)."""
    try:
        return int((folder / "postmaster.pid").read_text().split()[0])
    except FileNotFoundError:
        return None


def _stopped_by(proc: subprocess.Popen[str], signum: int) -> str:
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == 0
    return proc.stderr.read()  # type: ignore[union-attr]


def test_the_helper_stops_its_server_on_sigterm_and_sighup_and_adopts_an_orphan(tmp_path):
    folder = tmp_path / "pgdata"
    procs = [_helper(folder)]
    try:
        dsn = procs[0].stdout.readline().strip()  # type: ignore[union-attr]
        postmaster = _running(folder)
        assert dsn and postmaster
        procs[0].kill()  # a helper that cannot clean up: its server runs on, held by no one
        procs[0].wait(timeout=30)
        assert _running(folder) == postmaster

        procs.append(_helper(folder))
        assert procs[1].stdout.readline().strip() == dsn  # type: ignore[union-attr]
        said = _stopped_by(procs[1], signal.SIGTERM)
        assert f"adopted the server (pid {postmaster})" in said
        assert f"pid {procs[0].pid}" in said
        assert _running(folder) is None

        procs.append(_helper(folder))
        assert procs[2].stdout.readline().strip()  # type: ignore[union-attr]
        said = _stopped_by(procs[2], signal.SIGHUP)
        assert "adopted" not in said
        assert _running(folder) is None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if (pid := _running(folder)) is not None:
            os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown
