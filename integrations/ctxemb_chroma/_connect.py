"""Clients of a Chroma store: an embedded folder (created safely), a server, or in memory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chromadb.api import ClientAPI
from chromadb.config import Settings

from ctxemb_chroma._embedded import (
    STORE_FILE,
    SequenceMarks,
    collections_in,
    is_store,
    joinable,
    opened_on,
    shared_system,
)
from ctxemb_chroma._store import translated
from ctxemb_core.errors import InvalidInputError, StoreUnavailableError
from ctxemb_core.guard import check_flag
from ctxemb_core.index.connecting import check_server, reason
from ctxemb_core.index.embedded import opening_folder, store_folder


def connect(
    path: str | os.PathLike[str] | None = None,
    host: str | None = None,
    port: int = 8000,
    *,
    settings: Mapping[str, Any] | Settings | None = None,
    memory: bool = False,
    create: bool = True,
) -> ClientAPI:
    """An embedded client on ``path`` (default ``./chroma``), a server's, or (``memory=True``)
    the in-memory store; ``create=False``: no new store (``docs/chroma.md``, "Connecting").

    Raises:
        StoreUnavailableError: the server does not answer, or the folder cannot be used.
        InvalidInputError: ``create=False`` and no store at ``path``, a bad port, host or path,
            or ``settings`` other than those of the client already open on the folder.
    """
    import chromadb

    options: dict[str, Any] = {}
    if settings:
        try:
            given = settings if isinstance(settings, Settings) else Settings(**settings)
            options["settings"] = given.model_copy()  # Chroma's clients change what they get
        except Exception as exc:
            raise InvalidInputError(f"invalid Chroma client settings {settings!r}: {exc}") from None
    if memory:
        with translated("opening the in-memory store"):
            return chromadb.EphemeralClient(**options)
    if host is not None:
        check_server(host, port)
        try:
            return _closing_its_session(chromadb.HttpClient(host=host, port=port, **options))
        except Exception as exc:
            what = (
                f"cannot reach the Chroma server at {host}:{port} ({reason(exc)}); start it "
                f"with: chroma run --path DIR --host {host} --port {port}"
            )
            raise StoreUnavailableError(
                f"{what} (or connect(path=DIR) to an embedded store instead)",
                cli=f"{what} (or give --path DIR for an embedded store instead)",
            ) from None
    check_flag(create, "create")
    folder = store_folder(
        path, "./chroma", "Chroma", is_store, collections_in, create=create, indexes="collections"
    )
    # The spelling as given: Chroma keys systems by it (docs/chroma.md, "Several processes").
    spelling = os.path.expanduser(os.fspath(path or "./chroma"))
    try:
        # New-store migrations race between processes: the lock's holder creates (docs).
        with opening_folder(folder):
            name, shared = shared_system(spelling)
            if shared is not None:
                options["settings"] = joinable(shared, options.get("settings"), name)

            def make() -> ClientAPI:
                return chromadb.PersistentClient(path=name, **options)

            client = make() if shared else SequenceMarks.new_view(Path(folder) / STORE_FILE, make)
            opened_on(client, spelling)
            return client
    except InvalidInputError:
        raise
    except Exception as exc:
        raise StoreUnavailableError(
            f"cannot use {str(folder)!r} as an embedded Chroma store ({exc}); give a folder "
            "you can write to"
        ) from None


def _closing_its_session(client: ClientAPI) -> ClientAPI:
    """``client``, whose ``close()`` also closes the ``httpx`` sessions Chroma's leaves open."""
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
