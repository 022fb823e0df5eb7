"""Clients of a Chroma store: an embedded folder (created safely), a server, or in memory."""

from __future__ import annotations

import contextlib
import difflib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._store import translated
from ctxemb_core.errors import InvalidInputError, StoreUnavailableError
from ctxemb_core.guard import check_flag


def connect(
    path: str | os.PathLike[str] | None = None,
    host: str | None = None,
    port: int = 8000,
    *,
    settings: Mapping[str, Any] | None = None,
    memory: bool = False,
    create: bool = True,
) -> ClientAPI:
    """An embedded client on ``path`` (the default ``./chroma``), or a client of a Chroma server.

    ``settings`` are Chroma's client settings (``chromadb.config.Settings`` fields), for
    opening a store another library opened with them; ``memory=True`` is the process's
    in-memory store instead of a folder. ``create=False`` opens an embedded store only if one
    is there: a mistyped path is refused instead of becoming a new, empty store (what a
    command that only reads wants). Close the client when done (``client.close()``, or
    ``with connect(...) as client:``): a server's client holds sockets open until then.

    Raises:
        StoreUnavailableError: the server does not answer, or the folder cannot be used (a file
            stands there, it cannot be created); nothing is left behind.
        InvalidInputError: ``create=False`` and no store at ``path`` (the message names the
            path tried and a neighbouring store's folder, if there is one); a port outside
            1..65535, a host or path that is not a string.
    """
    import chromadb

    options: dict[str, Any] = {}
    if settings:
        from chromadb.config import Settings

        try:
            options["settings"] = Settings(**settings)
        except Exception as exc:
            raise InvalidInputError(f"invalid Chroma client settings {settings!r}: {exc}") from None
    if memory:
        with translated("opening the in-memory store"):
            return chromadb.EphemeralClient(**options)
    if host is not None:
        if not isinstance(host, str) or not host.strip():
            raise InvalidInputError(f"host must be a host name or address, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise InvalidInputError(f"port must be an integer in 1..65535, got {port!r}")
        try:
            return _closing_its_session(chromadb.HttpClient(host=host, port=port, **options))
        except Exception as exc:
            what = (
                f"cannot reach the Chroma server at {host}:{port} ({_reason(exc)}); start it "
                f"with: chroma run --path DIR --host {host} --port {port}"
            )
            raise StoreUnavailableError(
                f"{what} (or connect(path=DIR) to an embedded store instead)",
                cli=f"{what} (or give --path DIR for an embedded store instead)",
            ) from None
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise InvalidInputError(f"path must be a folder path, got {path!r}")
    folder = Path(path or "./chroma").expanduser()
    if folder.exists() and not folder.is_dir():
        raise StoreUnavailableError(f"{str(folder)!r} is a file, not a folder")
    check_flag(create, "create")
    if not create:
        _require_store(folder)
    created = _first_missing(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".ctxemb-write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
        # Processes opening a new store at once race on Chroma's schema migrations ("table
        # collections already exists"): the first to hold the lock creates it, the others open it.
        with _locked(folder / ".ctxemb-open.lock"):
            return chromadb.PersistentClient(path=str(folder), **options)
    except Exception as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)  # only what this call created
        raise StoreUnavailableError(
            f"cannot use {str(folder)!r} as an embedded Chroma store ({exc}); give a folder "
            "you can write to"
        ) from None


def _closing_its_session(client: ClientAPI) -> ClientAPI:
    """``client``, whose ``close()`` also closes its HTTP connections.

    Chroma's ``close()`` stops the systems of the client and of its internal admin client, but
    their HTTP components keep their ``httpx`` sessions, and so their sockets, open until
    garbage collection (a ``ResourceWarning`` per connection). Each session is closed here once
    the last client of its system has let it go.
    """
    from chromadb.api.shared_system_client import SharedSystemClient

    chroma_close = client.close  # type: ignore[attr-defined]
    parts: list[Any] = [client, getattr(client, "_admin_client", None)]
    servers = [(c._identifier, getattr(c, "_server", None)) for c in parts if c is not None]

    def close() -> None:
        chroma_close()
        for identifier, server in servers:
            session = getattr(server, "_session", None)
            if session is not None and identifier not in SharedSystemClient._identifier_to_system:
                session.close()

    client.close = close  # type: ignore[attr-defined]
    return client


#: The file every embedded Chroma store keeps at the top of its folder.
_STORE_FILE = "chroma.sqlite3"


def _require_store(folder: Path) -> None:
    """Refuse a folder that holds no embedded store, naming it and any neighbouring store."""
    if (folder / _STORE_FILE).is_file():
        return
    why = "the folder holds no Chroma store" if folder.is_dir() else "there is no such folder"
    near = _stores_near(folder)
    hint = f"; did you mean {str(near[0])!r}?" if near else ""
    raise InvalidInputError(
        f"no Chroma store at {str(folder)!r}: {why}, and nothing was created{hint} (a store "
        "is created by indexing into it)"
    )


def _stores_near(folder: Path) -> list[Path]:
    """Store folders beside ``folder`` with a similar name, or inside it, closest first; shown
    relative to the working directory when ``folder`` was given that way."""
    here = folder.absolute()
    found: dict[str, Path] = {}
    with contextlib.suppress(OSError):
        for parent in (here.parent, here):
            for child in parent.iterdir() if parent.is_dir() else ():
                if (child / _STORE_FILE).is_file():
                    found[child.name] = child
    close = [found[n] for n in difflib.get_close_matches(folder.name, list(found), cutoff=0.6)]
    ordered = dict.fromkeys([*close, *(p for p in found.values() if p.parent == here)])
    return [p if folder.is_absolute() else Path(os.path.relpath(p)) for p in ordered]


def _reason(exc: BaseException) -> str:
    """The innermost cause of a failed connection, as the operating system said it."""
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    text = str(exc)
    return text.split("] ", 1)[-1].lower() if text.startswith("[Errno") else text or repr(exc)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks; Chroma's own race stays
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _first_missing(folder: Path) -> Path | None:
    missing = None
    for p in [folder, *folder.absolute().parents]:
        if p.exists():
            break
        missing = p
    return missing
