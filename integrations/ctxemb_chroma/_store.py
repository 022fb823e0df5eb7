"""Chroma's calls and errors, translated: clients, stored collections, their persisted setting."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.errors import (
    BatchSizeExceededError,
    DuplicateIDError,
    InternalError,
    InvalidArgumentError,
    InvalidDimensionException,
    NotFoundError,
)

from ctxemb_core import EmbeddingContract, IndexStamp
from ctxemb_core.errors import CtxembError, InvalidInputError, StoreUnavailableError

# Chroma's refusals of an argument, besides the ValueError/TypeError it raises for most.
_REFUSED = (
    InvalidArgumentError,
    DuplicateIDError,
    BatchSizeExceededError,
    InvalidDimensionException,
    NotFoundError,
    ValueError,
    TypeError,
    OverflowError,  # a number the store cannot hold (limit=-1 on the embedded store)
)

# Chroma's own rule for collection names, checked before the store is asked anything.
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]")


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


def check_client(client: Any) -> ClientAPI:
    if not isinstance(client, ClientAPI):
        raise InvalidInputError(
            f"client must be a chromadb client (PersistentClient, HttpClient or "
            f"ctxemb_chroma.connect()), got {type(client).__name__}"
        )
    return client


def check_name(name: Any) -> str:
    """``name`` if Chroma accepts it as a collection name, else ``InvalidInputError`` saying why."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidInputError(
            f"collection name {name!r} is not one Chroma accepts: 3-512 characters of "
            "a-z A-Z 0-9 . _ -, starting and ending with a letter or digit, no '..'"
        )
    return name


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Chroma's refusals of bad arguments as ``InvalidInputError``, a lost server as
    ``StoreUnavailableError``; ctxemb's own errors and anything unexpected pass unchanged."""
    try:
        yield
    except CtxembError:
        raise
    except _REFUSED as exc:
        if "Could not connect" in str(exc):
            raise StoreUnavailableError(f"{what}: the Chroma server is gone ({exc})") from exc
        raise InvalidInputError(f"{what}: Chroma refused it: {exc}") from exc
    except (ConnectionError, TimeoutError) as exc:
        raise StoreUnavailableError(f"{what}: the store cannot be reached ({exc})") from exc
    except InternalError as exc:
        raise StoreUnavailableError(
            f"{what}: the Chroma store failed internally ({exc}). An embedded store written by "
            "several processes at once can do this (Chroma does not support it): give "
            "concurrent writers a Chroma server (`chroma run`), then retry"
        ) from exc
    except Exception as exc:
        if "Failed to deserialize" in str(exc):  # the server's word for an argument it refused
            raise InvalidInputError(f"{what}: the Chroma server refused it: {exc}") from exc
        if type(exc).__module__.startswith("httpx"):
            raise StoreUnavailableError(
                f"{what}: the Chroma server cannot be reached ({exc})"
            ) from exc
        raise


def stored_or_none(client: ClientAPI, name: str) -> Collection | None:
    """The collection as the store has it now, unguarded, or ``None`` if there is none."""
    with translated(f"reading collection {name!r}"):
        try:
            return client.get_collection(name, embedding_function=None)
        except NotFoundError:
            return None


def configured_function(raw: Collection) -> tuple[str | None, Mapping[str, Any] | None]:
    """The embedding function Chroma persisted for the collection: its name and contract."""
    setting = (raw.configuration_json or {}).get("embedding_function")
    if not isinstance(setting, Mapping) or setting.get("type") != "known":
        return None, None
    config = setting.get("config")
    contract = config.get("contract") if isinstance(config, Mapping) else None
    return setting.get("name"), contract if isinstance(contract, Mapping) else None


def identity(raw: Collection) -> tuple[Any, ...]:
    """What a guarded call compares to see the collection changed: its identity, its stamp and
    the embedding function Chroma persisted (a raw client's queries embed with that one)."""
    return (raw.id, IndexStamp.metadata_items(raw.metadata), configured_function(raw))


def stored_collection(client: ClientAPI, name: str) -> Collection:
    """The collection as the store has it now, unguarded (for reading its stamp or verifying)."""
    raw = stored_or_none(check_client(client), check_name(name))
    if raw is None:
        raise InvalidInputError(f"collection {name!r} does not exist")
    return raw


def stamped_contract(client: ClientAPI, name: str) -> EmbeddingContract:
    """The contract recorded in a collection's stamp (raises if it has none)."""
    return IndexStamp.from_metadata(stored_collection(client, name).metadata).contract
