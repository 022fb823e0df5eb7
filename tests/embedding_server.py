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
def serving(
    embedder: Any, *, port: int | None = None, name: str | None = None, **limits: Any
) -> Iterator[Any]:
    """Serve ``embedder`` on a free (or the given) port until the block ends; yields the
    service, with ``.url`` set (``name``: the model id it answers to)."""
    import uvicorn

    from ctxemb_core.serve import EmbeddingService, ServeLimits
    from ctxemb_core.serve.run import bind

    service = EmbeddingService(embedder, name=name, limits=ServeLimits(**limits))
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


# -- what stands between a client and its servers ------------------------------------------------


def nginx_binary() -> str | None:
    """nginx (Debian's nginx-light, installed by scripts/setup.sh where apt can), if any."""
    import shutil

    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
    )


@contextlib.contextmanager
def nginx(upstreams: Sequence[str], workdir: Path) -> Iterator[str]:
    """A real nginx on a free 127.0.0.1 port in front of ``upstreams`` (``http://host:port``),
    with a default ``upstream`` block: round robin, a new choice for every request, over
    keep-alive connections. Yields its URL."""
    binary = nginx_binary()
    if binary is None:
        import pytest

        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    servers = "".join(f"    server {u.split('://', 1)[1]};\n" for u in upstreams)
    temp = "".join(
        f"  {kind}_temp_path {workdir / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf = workdir / "nginx.conf"
    conf.write_text(
        f"{user}worker_processes 1;\ndaemon off;\npid {workdir / 'nginx.pid'};\n"
        f"error_log {workdir / 'error.log'} warn;\nevents {{ worker_connections 256; }}\n"
        f"http {{\n  access_log off;\n{temp}  upstream replicas {{\n{servers}"
        "    keepalive 32;\n  }\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n"
        "      proxy_pass http://replicas;\n      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n    }\n  }\n}\n'
    )
    proc = subprocess.Popen(
        [binary, "-p", str(workdir), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, 30, proc)  # type: ignore[arg-type]
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class ConnectionBalancer:
    """A TCP proxy on 127.0.0.1 that sends each new connection to the next backend in turn,
    for as long as it lives (as a Kubernetes Service does). ``url``; ``close()`` stops it."""

    def __init__(self, backends: Sequence[str]) -> None:
        import itertools
        import socket

        self._targets = itertools.cycle(
            [(u.split("://", 1)[1].split(":")[0], int(u.rsplit(":", 1)[1])) for u in backends]
        )
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(next(self._targets))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: Any, target: Any) -> None:
        import socket

        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, target):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._listener.close()


class HttpProxy:
    """An HTTP/1.1 keep-alive proxy on 127.0.0.1 in front of ``backend``.

    ``cache=True``: a response cache keyed by method, path and body bytes (what a caching
    gateway does). ``keep_alive=False``: every connection is closed after one answer.
    ``tamper``: called with the parsed request and response bodies of every ``/embeddings``
    POST; it may rewrite the response's ``data`` (the backend's headers are kept).
    """

    def __init__(
        self, backend: str, *, cache: bool = False, tamper: Any = None, keep_alive: bool = True
    ) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.backend = backend
        self.cached: dict[tuple[str, str, bytes], tuple[int, list[tuple[str, str]], bytes]] = {}
        self.hits = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0: the connection is closed after every answer.
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                key = (self.command, self.path, body)
                if cache and key in proxy.cached:
                    proxy.hits += 1
                    status, headers, payload = proxy.cached[key]
                else:
                    status, headers, payload = proxy._ask(self.command, self.path, body, self)
                    if cache and status == 200:
                        proxy.cached[key] = (status, headers, payload)
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.tamper = tamper
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def _ask(
        self, method: str, path: str, body: bytes, handler: Any
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {k: v for k, v in handler.headers.items() if k.lower() in ("content-type",)}
        request = urllib.request.Request(
            self.backend + path, data=body or None, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                status, found, payload = r.status, list(r.headers.items()), r.read()
        except urllib.error.HTTPError as exc:
            status, found, payload = exc.code, list(exc.headers.items()), exc.read()
        kept = [
            (k, v)
            for k, v in found
            if k.lower() not in ("content-length", "connection", "transfer-encoding", "date")
        ]
        if self.tamper is not None and path.endswith("/embeddings") and status == 200:
            answer = json.loads(payload)
            self.tamper(json.loads(body), answer)
            payload = json.dumps(answer).encode()
        return status, kept, payload

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def vectors_of(answer: dict) -> list[list[float]]:
    """The float vectors of an embeddings response (``float`` or ``base64`` encoded)."""
    import base64

    import numpy as np

    out = []
    for item in answer["data"]:
        value = item["embedding"]
        if isinstance(value, str):
            value = np.frombuffer(base64.b64decode(value), dtype="<f4").tolist()
        out.append(value)
    return out


@contextlib.contextmanager
def raw_server(handle: Any) -> Iterator[str]:
    """A TCP server on 127.0.0.1 whose every connection is given to ``handle(socket)`` in a
    thread (for servers no HTTP library would write: trickling, echoing). Yields its URL."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
