"""Qdrant's clients, names, point ids and errors, as every part of the adapter speaks them.

Local mode (``QdrantClient(path=...)``) locks its folder for the life of the client: one client
per folder serves this process (:func:`connect` joins it: core's
:class:`~ctxemb_core.index.embedded.FolderClients`), and its calls are serialised
(:func:`calling`: local mode keeps points in Python structures and one SQLite connection). A
ctxemb id becomes the point ``uuid5(POINT_NAMESPACE, id)`` (:func:`point_id`): the same id is
the same point in every process; a point another tool wrote reads as ``str(point id)``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import uuid
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ctxemb_core.errors import InvalidInputError, StoreUnavailableError
from ctxemb_core.index.connecting import check_address, connecting, exclusive, server_key
from ctxemb_core.index.driver_kit import translator
from ctxemb_core.index.embedded import FolderClients, held_elsewhere, store_folder
from ctxemb_core.remedy import StoreTerms
from ctxemb_qdrant._names import API_KEY_ENV, DEFAULT_PATH

__all__ = ["API_KEY_ENV", "DEFAULT_PATH", "POINT_NAMESPACE", "calling", "check_name", "connect"]
__all__ += ["TERMS", "point_id"]

#: The adapter's words, in which its errors' advice names its calls and options.
TERMS = StoreTerms.of("qdrant", "--qdrant-path or --qdrant-url", records="points")

#: The namespace of the uuid5 that makes a ctxemb id a Qdrant point id (fixed: never change it).
POINT_NAMESPACE = uuid.UUID("6a1c3a52-47e0-5d5b-9c1f-0c7e2d0b8a47")
#: What Qdrant refuses in a collection name (server and local mode).
_BAD_CHARS = ("<", ">", ":", '"', "/", "\\", "|", "?", "*", "\0", "\x1f")

translated = translator(
    (
        (RuntimeError, "already accessed by another instance"),
        StoreUnavailableError,
        "{exc} (local mode: one process per folder; close the other client, or run a Qdrant "
        "server for several processes)",
    ),
    ((RuntimeError, "is closed"), StoreUnavailableError, "the Qdrant client was closed ({exc})"),
    (
        (ResponseHandlingException, ConnectionError, TimeoutError, OSError),
        StoreUnavailableError,
        "the Qdrant server cannot be reached ({exc})",
    ),
    (UnexpectedResponse, InvalidInputError, "the Qdrant server refused it: {exc}"),
    ((ValueError, TypeError, KeyError), InvalidInputError, "Qdrant refused it: {exc}"),
)


def check_name(name: Any) -> str:
    """``name`` if Qdrant takes it as a collection name, else ``InvalidInputError`` saying why
    (checked before anything connects or is created)."""
    bad = isinstance(name, str) and next((c for c in _BAD_CHARS if c in name), None)
    size = len(name.encode(errors="replace")) if isinstance(name, str) else 0  # a folder's name
    if not isinstance(name, str) or name in ("", ".", "..") or size > 255 or bad:
        raise InvalidInputError(
            f"collection name {name!r} is not one Qdrant accepts: 1-255 bytes (UTF-8), not '.' or "
            f"'..', none of {' '.join(repr(c) for c in _BAD_CHARS)}"
        )
    return name


@functools.lru_cache(maxsize=1 << 16)  # a write reads its ids' points three times first
def point_id(record_id: str) -> str:
    """The Qdrant point of ctxemb id ``record_id``: ``uuid5(POINT_NAMESPACE, record_id)``."""
    return str(uuid.uuid5(POINT_NAMESPACE, record_id))


def point_ids(record_id: str) -> list[Any]:
    """The points an id may name: its uuid5, and the id itself where it is a point id."""
    found: list[Any] = [point_id(record_id)]
    if record_id.isdigit() and int(record_id) < 2**64:
        found.append(int(record_id))
    with contextlib.suppress(ValueError):
        if len(record_id) == 36 and str(uuid.UUID(record_id)) == record_id:  # no parse: cheap
            found.append(record_id)
    return found


#: One local-mode client per folder in this process.
_FOLDERS: FolderClients[QdrantClient] = FolderClients()


def local_engine(client: QdrantClient) -> Any:
    """The local-mode engine behind ``client`` (``None``: a server's client)."""
    inner = getattr(client, "_client", None)
    return inner if type(inner).__name__ == "QdrantLocal" else None


def calling(client: QdrantClient, what: str) -> contextlib.AbstractContextManager[None]:
    """A block of calls on ``client``: serialised for local mode (one lock per client, core's
    :func:`~ctxemb_core.index.connecting.exclusive`), errors translated."""
    return translated(what, exclusive(client) if local_engine(client) is not None else None)


def collection_info(client: QdrantClient, name: str) -> qm.CollectionInfo | None:
    """Collection (or alias) ``name`` as Qdrant describes it, or ``None``: there is none. One
    call (a server: one request; a missing collection answers 404), made inside :func:`calling`.
    """
    try:
        return client.get_collection(name)
    except ValueError:  # local mode: "Collection ... not found"
        return None
    except UnexpectedResponse as exc:
        if exc.status_code == 404:
            return None
        raise


def store_address(client: QdrantClient) -> str:
    """Which store ``client`` reaches: a folder (resolved), memory, or a server's URL (no key)."""
    local = local_engine(client)
    if local is None:
        return f"server:{getattr(getattr(client, '_client', None), 'rest_uri', '?')}"
    return (
        f"local:{Path(local.location).resolve()}" if local.persistent else f"memory:{id(local):x}"
    )


def is_store(folder: Path) -> bool:
    return (folder / "meta.json").is_file()


def collections_in(folder: Path) -> list[str]:
    with contextlib.suppress(OSError, ValueError, KeyError):
        return sorted(json.loads((folder / "meta.json").read_text())["collections"])
    return []


def connect(
    path: str | os.PathLike[str] | None = None,
    url: str | None = None,
    *,
    api_key: str | None = None,
    memory: bool = False,
    create: bool = True,
    timeout: int = 10,
) -> QdrantClient:
    """A client of local mode in ``path`` (default ``./qdrant``; a folder already open in this
    process is joined), of memory (``memory=True``, or qdrant-client's own spelling, the path
    ``":memory:"``), or of the server at ``url`` (``api_key``:
    its key, by default ``$CTXEMB_QDRANT_API_KEY`` (core's
    :func:`~ctxemb_core.index.connecting.server_key`), never shown; asked
    once for its collections, so a URL where nothing answers is refused here).
    ``create=False`` opens a folder only if it holds a store.

    Raises:
        StoreUnavailableError: the server does not answer; another process holds the folder.
        InvalidInputError: ``create=False`` and no store at ``path``; a malformed address.
    """
    if memory or path == ":memory:":  # never a folder of that name
        with translated("opening an in-memory Qdrant store"):
            return QdrantClient(location=":memory:")
    if url is not None:
        check_address(url, "url", "a Qdrant server's URL (http://host:6333)")
        key = server_key(api_key, API_KEY_ENV)
        bad = (ValueError, TypeError)
        with connecting(
            url, "Qdrant server", "url", malformed=bad, unreachable=(Exception,), secrets=[key]
        ):
            client = QdrantClient(url=url, api_key=key, timeout=timeout, check_compatibility=False)
            client.get_collections()  # refused here when nothing answers
        return client
    checked = store_folder(
        path, DEFAULT_PATH, "Qdrant", is_store, collections_in, create=create, indexes="collections"
    )
    folder = checked.resolve()

    def opened() -> QdrantClient:
        # Refused before local mode reads the folder: it loads every collection first and
        # takes the folder's lock last (leaving that file open on refusal).
        with translated(f"opening the Qdrant folder {str(folder)!r}"):
            if held_elsewhere(folder / ".lock"):
                held = f"Storage folder {folder} is already accessed by another instance"
                raise RuntimeError(held)
            return QdrantClient(path=str(folder), force_disable_check_same_thread=True)

    return _FOLDERS.joined(folder, opened, lambda client: local_engine(client).closed)
