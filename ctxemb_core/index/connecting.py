"""Reaching a store over the network: where it is, checked, and a failed connection said without
its secrets, the same for every store a client connects to.

PostgreSQL is reached by a connection string, a Chroma server by host and port, a Qdrant server
by a URL that may hold an API key. What a caller gives is checked before anything is asked of the
network, and a refusal shows the address with its password masked
(:func:`ctxemb_core.redact.redact_dsn`) and the client library's reason scrubbed of every secret
the address holds or the caller gives beside it (:func:`ctxemb_core.redact.scrub`), its
innermost cause as the system said it. A server's key, where the store takes one, is the one
given, else its environment variable's (:func:`server_key`).

Example:
    >>> check_server("127.0.0.1", 8000)
    ('127.0.0.1', 8000)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ctxemb_core.errors import InvalidInputError, StoreUnavailableError
from ctxemb_core.redact import redact_dsn, scrub, secrets_in

__all__ = [
    "check_address",
    "check_server",
    "connecting",
    "exclusive",
    "reason",
    "serialised",
    "server_key",
]


def check_server(host: Any, port: Any) -> tuple[str, int]:
    """``(host, port)`` of a server, or ``InvalidInputError``: a host that is not a non-empty
    string, a port outside 1..65535 (a ``bool`` is not a port)."""
    if not isinstance(host, str) or not host.strip():
        raise InvalidInputError(f"host must be a host name or address, got {host!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidInputError(f"port must be an integer in 1..65535, got {port!r}")
    return host, port


def check_address(address: Any, name: str, what: str) -> str:
    """``address`` (``name``: the parameter, ``what``: what it must be, e.g. "a PostgreSQL
    connection string") if it is a non-empty string; the refusal shows no other value."""
    if not isinstance(address, str) or not address.strip():
        shown = repr(address) if isinstance(address, str) else type(address).__name__
        raise InvalidInputError(f"{name} must be {what}, got {shown}")
    return address


def server_key(given: str | None, env: str) -> str | None:
    """The key a store's server is sent: ``given`` if given, else ``$env`` (empty: none). The
    one rule every path to the server follows; the key is never written into a message (give
    it to :func:`connecting` as a secret)."""
    if given is not None:
        return given
    return os.environ.get(env) or None


def reason(exc: BaseException) -> str:
    """The innermost cause of a failed connection, as the operating system said it."""
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    text = str(exc)
    return text.split("] ", 1)[-1].lower() if text.startswith("[Errno") else text or repr(exc)


@contextlib.contextmanager
def connecting(
    address: str,
    store: str,
    name: str,
    *,
    malformed: tuple[type[BaseException], ...] = (),
    unreachable: tuple[type[BaseException], ...] = (),
    secrets: Sequence[str | None] = (),
) -> Iterator[None]:
    """A block that connects to ``store`` at ``address``: the client's refusal of the address
    (``malformed``) raised as ``InvalidInputError``, a server that cannot be reached
    (``unreachable``) as ``StoreUnavailableError``, each naming ``address`` masked and the
    client's words scrubbed of its secrets (``$PGPASSWORD``-style ones included) and of
    ``secrets`` (those given beside the address: an API key)."""
    hidden = [*secrets_in(address), *(s for s in secrets if s)]
    try:
        yield
    except malformed as exc:
        why = scrub(str(exc).strip(), hidden)
        shown = scrub(redact_dsn(address), hidden)  # a key written into the URL too
        raise InvalidInputError(f"{name} {shown!r} is not a {store} address: {why}") from None
    except unreachable as exc:
        why = scrub(str(exc).strip(), hidden)
        shown = scrub(redact_dsn(address), hidden)  # a key written into the URL too
        raise StoreUnavailableError(f"{store} at {shown!r} cannot be reached: {why}") from None


#: One lock per connection (see :func:`exclusive`), forgotten with the connection.
_locks: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_locks_lock = threading.Lock()


def exclusive(conn: Any) -> threading.RLock:
    """The lock every guarded use of connection ``conn`` holds, so that threads sharing one
    connection take turns: the same for every store whose connection runs one transaction at
    a time (PostgreSQL's).

    Two threads each opening a transaction on such a connection would nest one inside the
    other (psycopg makes the second a savepoint), and the first to finish commits or rolls back
    the other's work with its own; a plain read of one thread would run inside the other's open
    transaction and see what may yet be rolled back. Held around each call of a driver, an
    alias book and a lexical side, and around each transaction, the lock makes the calls of
    threads sharing a connection run one after another, each whole. It is re-entrant: a call
    made inside another's transaction by the same thread goes on. For calls that should run at
    the same time, give each thread its own connection (or a pool).
    """
    lock = _locks.get(conn)  # made once: a store's every call asks for it again
    if lock is not None:
        return lock
    with _locks_lock:
        lock = _locks.get(conn)
        if lock is None:
            lock = _locks[conn] = threading.RLock()
        return lock


def serialised(cls: type) -> type:
    """``cls`` with each public method (its own and those it inherits, such as
    :class:`~ctxemb_core.index.driver_kit.TransactionalDriver`'s ``write``) holding
    :func:`exclusive` of ``self.conn`` while it runs."""
    for name in dir(cls):
        member = inspect.getattr_static(cls, name)
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, _holding(member))
    return cls


def _holding(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def holding(self: Any, *args: Any, **kwargs: Any) -> Any:
        with exclusive(self.conn):
            return method(self, *args, **kwargs)

    return holding
