"""Checking a Chroma collection against a contract: on open and on change.

The check on demand, which reports every finding instead of raising, is :mod:`._report`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from ctxemb_chroma._function import ContractEmbeddingFunction
from ctxemb_chroma._store import (
    configured_function,
    read_reloaded,
    read_settled,
    stored_or_none,
    translated,
)
from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.errors import (
    ConfigurationMismatchError,
    InvalidInputError,
    MissingStampError,
    StampError,
    unstamped_remedies,
)
from ctxemb_core.guard import (
    adopt_stamp,
    check_configuration,
    refuse_foreign,
    sample_ranges,
)
from ctxemb_core.verified import (
    MAX_RECORDED,
    OpenCheck,
    load_verified,
    plan_sample,
    save_verified,
)
from ctxemb_core.verified import record_key as verified_key


def sample_records(raw: Collection, size: int) -> tuple[list[str], list[Any], list[Any]]:
    """The newest half and a random half of ``size`` stored records, with text and vector."""
    ids: list[str] = []
    docs: list[Any] = []  # str, or None for a record stored without text
    vecs: list[Any] = []
    for start, stop in sample_ranges(read_settled(raw.count), size):
        got = read_settled(
            raw.get, offset=start, limit=stop - start, include=["documents", "embeddings"]
        )
        ids += got["ids"]
        docs += got["documents"] or [None for _ in got["ids"]]
        vecs += list(got["embeddings"] if got["embeddings"] is not None else [])
    return ids, docs, vecs


def verify_open(
    client: ClientAPI, raw: Collection, embedder: Embedder, sample: int, repair: bool
) -> tuple[IndexStamp, OpenCheck]:
    """Every check of an existing stamped collection; returns its stamp and what was checked
    of its records, or raises."""
    name, contract = configured_function(raw)
    if not IndexStamp.is_stamped(raw.metadata):
        by = (
            f"with another Chroma embedding function ({name!r}: Chroma's own, or a writer "
            "such as Haystack's DocumentWriter)"
            if name not in (None, "ctxemb")
            else "around ctxemb (a plain chromadb or langchain_chroma.Chroma client, say)"
        )
        what = (
            f"collection {raw.name!r} was written {by} and carries no ctxemb stamp, so nothing "
            "proves which contract made its vectors; ctxemb neither reads nor writes it "
            "unstamped. "
        )
        raise MissingStampError(what, remedies=unstamped_remedies(raw.name))
    stamp = IndexStamp.from_metadata(raw.metadata)
    stamp.verify(embedder)
    try:
        check_configuration(stamp, name, contract)
    except ConfigurationMismatchError:
        if not repair:
            raise
        _write_configuration(raw, embedder)
        raw = _reread(client, raw.name)
        check_configuration(stamp, *configured_function(raw))
    if not sample:
        return stamp, OpenCheck(None, 0)
    return stamp, _check_records(client, raw, embedder, sample)


def _check_records(
    client: ClientAPI, raw: Collection, embedder: Embedder, sample: int
) -> OpenCheck:
    # The stamp and canary passed. Which stored records to re-embed depends on what changed
    # since this collection last passed under this contract (ctxemb_core.verified).
    ids: list[str] = read_settled(raw.get, include=[])["ids"]
    key = record_key(client, raw, embedder)
    verified = load_verified(key) if len(ids) <= MAX_RECORDED else None
    chosen, changed = plan_sample(ids, verified, sample)
    if chosen:
        # Ids just listed: one another process wrote after this process loaded the vector
        # segment is readable only through a reloaded view (several processes opening and
        # writing one new embedded store at once).
        got = read_reloaded(client, raw.get, ids=chosen, include=["documents", "embeddings"])
        texts: Any = got["documents"]
        docs = list(texts) if texts else [None] * len(got["ids"])
        vectors = got["embeddings"] if got["embeddings"] is not None else []
        refuse_foreign(embedder, got["ids"], docs, vectors)
    save_verified(key, ids)  # only after every check passed: the state of these ids did
    return OpenCheck(len(ids), len(chosen), changed)


def store_address(client: ClientAPI) -> str:
    """Which store ``client`` reaches: an embedded folder (resolved) or a server's address."""
    settings = client.get_settings()
    if settings.is_persistent:
        return f"embedded:{Path(str(settings.persist_directory)).resolve()}"
    scheme = "https" if settings.chroma_server_ssl_enabled else "http"
    return f"server:{scheme}://{settings.chroma_server_host}:{settings.chroma_server_http_port}"


def record_key(client: ClientAPI, raw: Collection, embedder: Embedder) -> dict[str, str]:
    """What a verification record is kept under: the store, the collection's id (one deleted
    and made again under its name is another), the caller's contract and encoder, the stamp and
    Chroma's persisted embedding setting (a change of any is another key, so a record is never
    used for another contract, another encoder's files or a re-stamped collection)."""
    store = store_address(client)
    stamp = json.dumps(IndexStamp.metadata_items(raw.metadata), default=str)
    setting = json.dumps(configured_function(raw), sort_keys=True, default=str)
    return verified_key(
        store,
        str(raw.id),
        embedder,
        tenant=str(getattr(client, "tenant", "")),
        database=str(getattr(client, "database", "")),
        stamp=hashlib.sha256(stamp.encode()).hexdigest(),
        configuration=hashlib.sha256(setting.encode()).hexdigest(),
    )


def _write_configuration(raw: Collection, embedder: Embedder) -> None:
    # Chroma persists a configuration first and checks it against the function it had after;
    # that check fails when the stored function is another one, after the write is done.
    # Whether it was written is read back and checked by the caller.
    with (
        translated(f"repairing the configuration of {raw.name!r}"),
        contextlib.suppress(ValueError, StampError),
    ):
        raw.modify(configuration={"embedding_function": ContractEmbeddingFunction(embedder)})


def _reread(client: ClientAPI, name: str) -> Collection:
    again = stored_or_none(client, name)
    if again is None:
        raise InvalidInputError(f"collection {name!r} disappeared while it was opened")
    return again


def kept_metadata(raw: Collection) -> dict[str, Any]:
    """The collection's metadata to write back beside a stamp, without Chroma's ``hnsw:`` keys.

    ``modify(metadata=...)`` replaces the whole metadata, and Chroma refuses any that names
    ``hnsw:space`` ("Changing the distance function … is not supported"), even unchanged: a
    collection created with ``metadata={"hnsw:space": "cosine"}`` (as LangChain and tutorials
    make them) could never be stamped. The space lives on in the collection's configuration,
    which is what Chroma searches by and what ctxemb reads.
    """
    return {k: v for k, v in (raw.metadata or {}).items() if not str(k).startswith("hnsw:")}


def adopt(raw: Collection, embedder: Embedder, sample: int) -> IndexStamp:
    """Stamp an unstamped collection once a sample of its records proves it is this contract's."""
    stamp = adopt_stamp(embedder, sample_records(raw, max(sample, 1)), raw.count(), raw.name)
    with translated(f"stamping {raw.name!r}"):
        raw.modify(metadata={**kept_metadata(raw), **stamp.to_metadata()})
    _write_configuration(raw, embedder)
    return stamp
