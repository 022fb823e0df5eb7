"""Secrets kept out of everything ctxemb prints, raises or logs: a connection string's password.

A DSN is shown only through :func:`redact_dsn`, which keeps what tells one database from another
(user, host, port, database, options) and masks the password, in both of libpq's forms:

- the URL form ``postgresql://user:secret@host:5432/db?sslpassword=secret``;
- the key=value form ``host=h user=u password=secret`` (also quoted: ``password='a b'``).

Text that ctxemb did not write (a driver's error message) is passed through :func:`scrub` with
the secrets :func:`secrets_in` finds, so that a password echoed by a library is masked too.
``PGPASSWORD`` (libpq's password variable) is one of those secrets whenever it is set.

Example:
    >>> redact_dsn("postgresql://rag:s3cret@db:5432/rag")
    'postgresql://rag:***@db:5432/rag'
    >>> redact_dsn("host=db user=rag password='s3 cret'")
    'host=db user=rag password=***'
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import unquote

__all__ = ["MASK", "PASSWORD_ENV", "redact_dsn", "scrub", "secrets_in"]

#: What a secret is replaced with.
MASK = "***"
#: Environment variables whose values are passwords (libpq's).
PASSWORD_ENV = ("PGPASSWORD",)
#: Secrets shorter than this are masked where ctxemb knows their place (the DSN's password
#: field) but not searched for in free text: every "a" of a message is not a leak.
_SHORTEST_SEARCHED = 4

_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>.*)$", re.DOTALL)
# A key=value pair whose key names a password: its value quoted (backslash escapes) or bare.
_KEYWORD = re.compile(
    r"(?P<key>\b(?:ssl)?password\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|[^\s]*)", re.IGNORECASE
)
_QUERY = re.compile(r"(?P<key>[?&](?:ssl)?password=)(?P<value>[^&#]*)", re.IGNORECASE)


def _userinfo(rest: str) -> tuple[str, str] | None:
    """The URL's ``user:password`` part and what follows the ``@``, or ``None``."""
    authority = rest.split("?", 1)[0]
    at = authority.rfind("@")  # a password may hold a raw '@'; the host never does
    if at < 0:
        return None
    return rest[:at], rest[at + 1 :]


def redact_dsn(dsn: object, mask: str = MASK) -> str:
    """``dsn`` with every password replaced by ``mask`` (anything not a string: its type); an
    empty password (``user:@host``) holds nothing to hide and stays as it is."""
    if not isinstance(dsn, str):
        return f"<{type(dsn).__name__}>"
    url = _URL.match(dsn.strip())
    if url is not None:
        rest = url["rest"]
        parts = _userinfo(rest)
        if parts is not None:
            info, after = parts
            user, colon, password = info.partition(":")
            rest = f"{user}{colon}{mask if password else ''}@{after}"
        rest = _QUERY.sub(lambda m: m["key"] + mask, rest)
        return url["scheme"] + rest
    return _KEYWORD.sub(lambda m: m["key"] + mask, dsn)


def secrets_in(*texts: object, environment: bool = True) -> list[str]:
    """The passwords written in ``texts`` (DSNs, command-line words) and, with ``environment``,
    the values of :data:`PASSWORD_ENV`: raw and percent-decoded, longest first."""
    found: set[str] = set()
    for text in texts:
        if not isinstance(text, str):
            continue
        url = _URL.match(text.strip())
        if url is not None:
            parts = _userinfo(url["rest"])
            if parts is not None and ":" in parts[0]:
                found.add(parts[0].partition(":")[2])
            found.update(m["value"] for m in _QUERY.finditer(url["rest"]))
        for m in _KEYWORD.finditer(text):
            value = m["value"]
            if value.startswith("'"):
                value = re.sub(r"\\(.)", r"\1", value.strip("'"))
            found.add(value)
    if environment:
        found.update(os.environ.get(name, "") for name in PASSWORD_ENV)
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret (of at least four characters) replaced by :data:`MASK`."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _SHORTEST_SEARCHED:
            text = text.replace(secret, MASK)
    return text
