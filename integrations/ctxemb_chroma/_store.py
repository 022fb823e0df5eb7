"""Chroma's calls and errors, translated: clients, stored collections, their persisted setting."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.models.CollectionCommon import CollectionCommon
from chromadb.errors import (
    BatchSizeExceededError,
    DuplicateIDError,
    InternalError,
    InvalidArgumentError,
    InvalidDimensionException,
    NotFoundError,
)
from chromadb.types import Collection as CollectionModel

from ctxemb_chroma._embedded import collections_in, embedded_folder, folder_bindings, is_store
from ctxemb_core.errors import InvalidInputError, StoreUnavailableError
from ctxemb_core.index.driver_kit import translator
from ctxemb_core.index.embedded import missing_index
from ctxemb_core.validate import check_instance

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


def check_client(client: Any) -> ClientAPI:
    what = "a chromadb client (PersistentClient, HttpClient or ctxemb_chroma.connect())"
    return check_instance(client, ClientAPI, "client", what)


def check_name(name: Any) -> str:
    """``name`` if Chroma accepts it as a collection name, else ``InvalidInputError``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidInputError(
            f"collection name {name!r} is not one Chroma accepts: 3-512 characters of "
            "a-z A-Z 0-9 . _ -, starting and ending with a letter or digit, no '..'"
        )
    return name


T = TypeVar("T")

#: An embedded store's words for a view older than the folder (``read_settled``).
_UNWRITTEN_SEGMENT = "Nothing found on disk"
_STALE_VIEW = (_UNWRITTEN_SEGMENT, "Error finding id")


def _tried(read: Callable[..., T], settling: tuple[str, ...], tries: int, kwargs: Any) -> T:
    for attempt in range(tries):
        try:
            return read(**kwargs)
        except InternalError as exc:
            if not any(m in str(exc) for m in settling) or attempt == tries - 1:
                raise
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def read_settled(read: Callable[..., T], **kwargs: Any) -> T:
    """``read(**kwargs)``, a read, tried again while this process's view of the folder is
    stale (``docs/chroma.md``, "Several processes on one folder")."""
    bindings = folder_bindings(getattr(read, "__self__", None))
    try:
        return _tried(read, (_UNWRITTEN_SEGMENT,), 3 if bindings else 8, kwargs)
    except InternalError as exc:
        if bindings is None or not any(m in str(exc) for m in _STALE_VIEW):
            raise
    bindings.start()  # new bindings from the folder
    return _tried(read, _STALE_VIEW, 8, kwargs)


#: Chroma's errors in ctxemb's tree; anything else passes unchanged.
translated = translator(
    ((_REFUSED, "Could not connect"), StoreUnavailableError, "the Chroma server is gone ({exc})"),
    (_REFUSED, InvalidInputError, "Chroma refused it: {exc}"),
    ((ConnectionError, TimeoutError), StoreUnavailableError, "the store cannot be reached ({exc})"),
    (
        InternalError,
        StoreUnavailableError,
        "the Chroma store failed internally ({exc}). An embedded store written by several "
        "processes at once can do this (Chroma does not support it): give concurrent writers a "
        "Chroma server (`chroma run`), then retry",
    ),
    # The server's word for an argument it refused.
    (
        (Exception, "Failed to deserialize"),
        InvalidInputError,
        "the Chroma server refused it: {exc}",
    ),
    (
        (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, httpx.CookieConflict),
        StoreUnavailableError,
        "the Chroma server cannot be reached ({exc})",
    ),
)


def store_address(client: ClientAPI) -> str:
    """Which store ``client`` reaches: an embedded folder (resolved) or a server's address."""
    settings = client.get_settings()
    if settings.is_persistent:
        return f"embedded:{Path(str(settings.persist_directory)).resolve()}"
    scheme = "https" if settings.chroma_server_ssl_enabled else "http"
    return f"server:{scheme}://{settings.chroma_server_host}:{settings.chroma_server_http_port}"


def stored_or_none(client: ClientAPI, name: str) -> Collection | None:
    """The collection as the store has it now, unguarded, or ``None`` if there is none."""
    with translated(f"reading collection {name!r}"):
        try:
            return client.get_collection(name, embedding_function=None)
        except NotFoundError:
            return None


def configured_function(
    raw: CollectionCommon[Any] | CollectionModel,
) -> tuple[str | None, Mapping[str, Any] | None]:
    """The embedding function Chroma persisted for the collection: its name and contract."""
    setting = (raw.configuration_json or {}).get("embedding_function")
    if not isinstance(setting, Mapping) or setting.get("type") != "known":
        return None, None
    config = setting.get("config")
    contract = config.get("contract") if isinstance(config, Mapping) else None
    return setting.get("name"), contract if isinstance(contract, Mapping) else None


def missing_collection(client: ClientAPI, name: str, python: str = "") -> InvalidInputError:
    """The error for a missing collection, with core's ``missing_index`` hints."""
    names: list[str] = []
    with contextlib.suppress(Exception):  # only a hint: a store that cannot list gets none
        names = [str(getattr(c, "name", c)) for c in client.list_collections()]
    folder = embedded_folder(client)
    return missing_index("collection", name, names, folder, is_store, collections_in, python)


def kept_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """A collection's metadata to write back beside a stamp, without ``hnsw:`` keys (docs)."""
    return {k: v for k, v in (metadata or {}).items() if not str(k).startswith("hnsw:")}
