"""Clients of a Chroma store: an embedded folder (created safely), a server, or in memory."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._store import translated
from ctxemb_core.errors import InvalidInputError, StoreUnavailableError


def connect(
    path: str | os.PathLike[str] | None = None,
    host: str | None = None,
    port: int = 8000,
    *,
    settings: Mapping[str, Any] | None = None,
    memory: bool = False,
) -> ClientAPI:
    """An embedded client on ``path`` (the default ``./chroma``), or a client of a Chroma server.

    ``settings`` are Chroma's client settings (``chromadb.config.Settings`` fields), for
    opening a store another library opened with them; ``memory=True`` is the process's
    in-memory store instead of a folder.

    Raises:
        StoreUnavailableError: the server does not answer, or the folder cannot be used (a file
            stands there, it cannot be created); nothing is left behind.
        InvalidInputError: a port outside 1..65535, a host or path that is not a string.
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
            return chromadb.HttpClient(host=host, port=port, **options)
        except Exception as exc:
            raise StoreUnavailableError(
                f"cannot reach a Chroma server at {host}:{port} ({exc}); start one with "
                f"`chroma run --path DIR --host {host} --port {port}`, or use --path for an "
                "embedded store"
            ) from None
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise InvalidInputError(f"path must be a folder path, got {path!r}")
    folder = Path(path or "./chroma").expanduser()
    if folder.exists() and not folder.is_dir():
        raise StoreUnavailableError(f"--path {str(folder)!r} is a file, not a folder")
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
