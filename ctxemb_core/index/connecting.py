"""Reaching a store over the network: where it is, checked, and a failed connection said without
its secrets, the same for every store a client connects to.

PostgreSQL is reached by a connection string, a Chroma server by host and port, a Qdrant server
by a URL that may hold an API key. What a caller gives is checked before anything is asked of the
network, and a refusal shows the address with its password masked
(:func:`ctxemb_core.redact.redact_dsn`) and the client library's reason scrubbed of every secret
the address holds (:func:`ctxemb_core.redact.scrub`), its innermost cause as the system said it.

Example:
    >>> check_server("127.0.0.1", 8000)
    ('127.0.0.1', 8000)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ctxemb_core.errors import InvalidInputError, StoreUnavailableError
from ctxemb_core.redact import redact_dsn, scrub, secrets_in

__all__ = ["check_address", "check_server", "connecting", "reason"]


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
) -> Iterator[None]:
    """A block that connects to ``store`` at ``address``: the client's refusal of the address
    (``malformed``) raised as ``InvalidInputError``, a server that cannot be reached
    (``unreachable``) as ``StoreUnavailableError``, each naming ``address`` masked and the
    client's words scrubbed of its secrets (``$PGPASSWORD``-style ones included)."""
    try:
        yield
    except malformed as exc:
        why = scrub(str(exc).strip(), secrets_in(address))
        shown = redact_dsn(address)
        raise InvalidInputError(f"{name} {shown!r} is not a {store} address: {why}") from None
    except unreachable as exc:
        why = scrub(str(exc).strip(), secrets_in(address))
        shown = redact_dsn(address)
        raise StoreUnavailableError(f"{store} at {shown!r} cannot be reached: {why}") from None
