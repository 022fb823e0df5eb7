"""Real ``ctxemb serve`` servers on 127.0.0.1 for tests.

:func:`serving` runs :class:`~ctxemb_core.serve.EmbeddingService` on uvicorn in a thread of the
test process (real HTTP over loopback, the embedder the test already holds); :func:`serve_process`
runs the ``ctxemb serve`` command itself, for what only a process shows (signals, exit codes).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from chroma_server import free_port

REPO = Path(__file__).resolve().parents[1]


def interruptible() -> None:
    """``preexec_fn`` of a child that a test stops with Ctrl-C (SIGINT).

    A process started with SIGINT ignored passes that on to its children, and Python then
    installs no KeyboardInterrupt handler in them (a pytest-xdist worker can be such a
    process, as is a shell's background job): the child would never see the test's Ctrl-C.
    The default disposition here gives the child the behaviour of one run from a terminal.
    """
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_healthy(url: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"ctxemb serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no server at {url} after {timeout}s") from None
            time.sleep(0.05)


@contextlib.contextmanager
def serving(embedder: Any, *, port: int | None = None, **limits: Any) -> Iterator[Any]:
    """Serve ``embedder`` on a free (or the given) port until the block ends; yields the
    service, with ``.url`` set."""
    import uvicorn

    from ctxemb_core.serve import EmbeddingService, ServeLimits
    from ctxemb_core.serve.run import bind

    service = EmbeddingService(embedder, limits=ServeLimits(**limits))
    sock = bind("127.0.0.1", port or 0)
    service.url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # type: ignore[attr-defined]
    config = uvicorn.Config(service, lifespan="on", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_healthy(service.url)  # type: ignore[attr-defined]
        yield service
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def post(url: str, body: Any, *, raw: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    """POST JSON (or ``raw`` bytes) to ``url``; (status, lower-cased headers, parsed body)."""
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, json.loads(exc.read())


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


@contextlib.contextmanager
def serve_process(
    args: Sequence[str], *, cwd: Path, prelude: str = "", timeout: float = 120.0
) -> Iterator[tuple[subprocess.Popen, str]]:
    """Run ``ctxemb serve ARGS --port P`` in a new process; yields (process, url).

    ``prelude`` is Python run before the command (e.g. an import hook refusing torch).
    """
    port = free_port()
    code = prelude + "\nimport sys\nfrom ctxemb_core.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "integrations")]),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    log = open(cwd / f"serve-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", *args, "--port", str(port), "--log-level", "info"],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=interruptible,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout, proc)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        proc.log = (cwd / f"serve-{port}.log").read_text(errors="replace")  # type: ignore[attr-defined]
