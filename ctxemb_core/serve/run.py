"""Run :class:`~ctxemb_core.serve.app.EmbeddingService` on uvicorn.

uvicorn (the ASGI server of the encode project, on h11 or httptools) is the one dependency the
server adds: an embeddings API is five routes, so the service is a plain ASGI application and
needs no web framework. Shutdown is uvicorn's graceful one: on SIGTERM or Ctrl-C it stops
accepting, lets every request in flight finish (the batcher drains its queue), then exits —
0 after SIGTERM, and the command exits 130 after Ctrl-C.
"""

from __future__ import annotations

import errno
import signal
import socket
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ctxemb_core.errors import InvalidInputError, MissingDependencyError
from ctxemb_core.serve.app import EmbeddingService
from ctxemb_core.serve.limits import ServeLimits

if TYPE_CHECKING:
    from ctxemb_core.embedder import Embedder

__all__ = ["bind", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or an error that says what holds it."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidInputError(f"port must be 0-65535, got {port!r}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidInputError(f"cannot listen on host {host!r}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidInputError(
                f"port {port} on {host} is in use (another server?); choose another with --port"
            ) from None
        raise InvalidInputError(f"cannot listen on {host}:{port}: {exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(
    embedder: Embedder | Mapping[str, Embedder],
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    name: str | None = None,
    limits: ServeLimits | None = None,
    log_level: str = "info",
    announce: Any = None,
) -> None:
    """Serve ``embedder``'s contract until SIGTERM or Ctrl-C (then re-raised as
    :class:`KeyboardInterrupt`).

    Args:
        embedder: the contract's embedder (not a remote one), or a mapping of model ids to
            embedders: several contracts on one server, one model id each.
        host: the interface (``127.0.0.1``: this machine only, unless told otherwise).
        port: the port (0: any free one; ``announce`` is told which).
        name: the model id clients send (default: the contract's model name); with one
            embedder only.
        limits: request limits and batching.
        log_level: uvicorn's log level.
        announce: called with ``(service, host, port)`` once the socket listens.

    Raises:
        MissingDependencyError: uvicorn is not installed (``pip install 'ctxemb[serve]'``).
        InvalidInputError: the port is taken or the host cannot be listened on.
    """
    try:
        import uvicorn
    except ImportError:
        raise MissingDependencyError(
            "ctxemb serve runs on uvicorn, which is not installed: pip install 'ctxemb[serve]'"
        ) from None
    service = EmbeddingService(embedder, name=name, limits=limits)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        service,
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=60,
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    if announce is not None:
        announce(service, host, bound)
    # uvicorn re-raises the signal that stopped it once it has shut down; SIGTERM then means
    # a clean exit after the drain (exit 0), Ctrl-C a KeyboardInterrupt (the CLI's 130).
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
    if not server.started:
        print("ctxemb serve: the server did not start (see the log above)", file=sys.stderr)
