"""The driver conformance suite against Chroma, embedded and on a real server; and the two
openers over one collection: what the driver creates, ``open_collection`` opens under the same
contract and refuses under another, and the other way round (one stamp format)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import chromadb
import numpy as np
import pytest
from chromadb.api import ClientAPI
from chromadb.errors import NotFoundError
from conftest import fresh_name

from ctxemb_chroma import ChromaDriver, open_collection
from ctxemb_chroma._function import ContractEmbeddingFunction
from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.errors import (
    ConfigurationMismatchError,
    ContractMismatchError,
    StampError,
    StoreUnavailableError,
)
from ctxemb_core.index import GuardedIndex
from ctxemb_core.index.driver import Record
from ctxemb_core.migrate import COPY_TOLERANCE
from ctxemb_core.testing.conformance import (
    DOCS,
    QUERY,
    DriverConformance,
    tiny_embedder,
    variants,
)


class RawChroma:
    """A user's own Chroma client of one collection, around the guard (the suite's
    ``RawAccess``): writes with ``embedding_function=None``, so Chroma embeds nothing."""

    def __init__(self, client: ClientAPI, name: str) -> None:
        self.client = client
        self.name = name

    def _raw(self) -> Any:
        return self.client.get_collection(self.name, embedding_function=None)

    def create(self, metadata: Mapping[str, Any] | None = None) -> None:
        """An unstamped collection as a plain client makes one; with a stamp in ``metadata``,
        made the documented raw way (a ctxemb function of the stamp's contract beside it)."""
        if IndexStamp.is_stamped(metadata):
            contract = IndexStamp.from_metadata(metadata).contract
            function: Any = ContractEmbeddingFunction(contract)
            self.client.create_collection(
                self.name, metadata=dict(metadata or {}), embedding_function=function
            )
        else:
            self.client.create_collection(
                self.name, metadata=dict(metadata or {}) or None, embedding_function=None
            )

    def write(self, records: Sequence[Record]) -> None:
        if any(r.vector is None for r in records):
            # Chroma keeps no record without a vector: its upsert would embed the text with
            # Chroma's default function (a model download) instead.
            raise ValueError("Chroma stores no record without a vector")
        self._raw().upsert(
            ids=[r.id for r in records],
            embeddings=[np.asarray(r.vector, dtype=np.float32) for r in records],
            documents=[r.text for r in records],  # type: ignore[misc]
            metadatas=[None if r.metadata is None else dict(r.metadata) for r in records],  # type: ignore[misc]
        )

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        # Chroma replaces a collection's metadata whole but refuses an empty one: a stamp
        # removed leaves another key.
        self._raw().modify(metadata=dict(metadata) or {"note": "no ctxemb stamp"})

    def drop(self) -> None:
        with contextlib.suppress(NotFoundError, ValueError):
            self.client.delete_collection(self.name)

    @contextlib.contextmanager
    def failing_writes(self, after: int, error: BaseException | None = None) -> Iterator[None]:
        """Chroma's writes (add and upsert, every client of this process) fail once ``after``
        records of them reached the store: the first records of the failing call are written."""
        error = error or StoreUnavailableError("chroma: the write failed (armed by a test)")
        api = type(self.client._server)  # type: ignore[attr-defined]
        left = [after]
        real = {m: getattr(api, m) for m in ("_add", "_upsert")}

        def failing(method: str) -> Callable[..., Any]:
            def write(server: Any, *args: Any, **kwargs: Any) -> Any:
                if left[0] is None:
                    return real[method](server, *args, **kwargs)
                count = len(kwargs["ids"])
                if count <= left[0]:
                    left[0] -= count
                    return real[method](server, *args, **kwargs)
                part = {
                    k: v[: left[0]] if k in _COLUMNS and v is not None else v
                    for k, v in kwargs.items()
                }
                left[0] = None  # fired: disarmed
                if part["ids"]:
                    real[method](server, *args, **part)
                raise error

            return write

        for method in real:
            setattr(api, method, failing(method))
        try:
            yield
        finally:
            for method, function in real.items():
                setattr(api, method, function)


_COLUMNS = frozenset({"ids", "embeddings", "metadatas", "documents", "uris"})


# Clients of the server, built once for the module: a client is ~50 ms of CPU to make (it asks
# the server its version, tenant and database), and httpx clients are safe across threads.
_SERVER_CLIENTS: dict[int, list[ClientAPI]] = {}
_HANDLES = 6  # as many as the suite's concurrency test opens at once


def _server_clients(port: int) -> list[ClientAPI]:
    if port not in _SERVER_CLIENTS:
        made = [chromadb.HttpClient(host="127.0.0.1", port=port) for _ in range(_HANDLES)]
        _SERVER_CLIENTS[port] = made
    return _SERVER_CLIENTS[port]


@pytest.fixture(scope="module")
def _embedded(tmp_path_factory: pytest.TempPathFactory) -> ClientAPI:
    return chromadb.PersistentClient(path=str(tmp_path_factory.mktemp("chroma-conformance")))


@pytest.fixture
def client(request: pytest.FixtureRequest, _embedded: ClientAPI) -> ClientAPI:
    """conftest's ``client`` (embedded, or the session's server for a ``transport`` test), one
    per store for this module: each test uses fresh collection names."""
    if request.param == "embedded":
        return _embedded
    return _server_clients(request.getfixturevalue("server"))[0]


def _handle(client: ClientAPI) -> Callable[[], ClientAPI]:
    """A client per driver handle: on a server one of the module's (a connection each, in
    turn); the embedded store's client otherwise (Chroma shares one system per folder in a
    process anyway)."""
    settings = client.get_settings()
    if settings.is_persistent:
        return lambda: client
    turn = itertools.cycle(_server_clients(int(settings.chroma_server_http_port or 0)))
    return lambda: next(turn)


@pytest.mark.transport
class TestChromaDriver(DriverConformance):
    """Every guarantee of the suite, on an embedded store and on a real server."""

    #: What Chroma itself refuses to hold (the suite checks the refusal instead).
    unstorable: ClassVar[frozenset[str]] = frozenset({"no vector", "another width"})
    #: Chroma re-normalises a cosine collection's vectors on write (float32 rounding).
    vector_tolerance: ClassVar[float] = COPY_TOLERANCE

    @pytest.fixture
    def name(self) -> str:
        return fresh_name()

    @pytest.fixture
    def new_driver(self, client, name):
        connect = _handle(client)
        return lambda: ChromaDriver(connect(), name)

    @pytest.fixture
    def raw(self, client, name):
        return RawChroma(client, name)


# -- one stamp format: the driver and open_collection over one collection ----------------------


@pytest.fixture
def embedder() -> Embedder:
    return tiny_embedder()


def _filled(index: Any) -> None:
    index.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])


@pytest.mark.transport
def test_a_collection_the_driver_creates_is_the_one_open_collection_creates(client, embedder):
    by_driver, by_open = fresh_name(), fresh_name()
    _filled(GuardedIndex.open(ChromaDriver(client, by_driver, embedder=embedder), embedder))
    open_collection(client, by_open, embedder).add(list(DOCS), list(DOCS.values()))
    made = {n: client.get_collection(n, embedding_function=None) for n in (by_driver, by_open)}
    assert made[by_driver].metadata == made[by_open].metadata  # the stamp, and nothing else
    assert made[by_driver].configuration_json == made[by_open].configuration_json

    opened = open_collection(client, by_driver, embedder)
    assert opened.query([QUERY], n_results=1)["ids"][0] == ["tea"]
    opened.add(["fresh"], ["A fresh text."])
    index = GuardedIndex.open(ChromaDriver(client, by_open), embedder)
    assert index.query([QUERY], 1)[0][0].id == "tea"
    index.add(["fresh"], ["A fresh text."])
    assert GuardedIndex.open(ChromaDriver(client, by_driver), embedder).count() == len(DOCS) + 1
    assert open_collection(client, by_open, embedder).count() == len(DOCS) + 1


@pytest.mark.parametrize("field", ["pooling", "document_prefix", "model"])
def test_another_contract_is_refused_whichever_opener_made_the_collection(client, embedder, field):
    other = Embedder(variants(embedder.contract)[field])
    by_driver, by_open = fresh_name(), fresh_name()
    _filled(GuardedIndex.open(ChromaDriver(client, by_driver), embedder))
    open_collection(client, by_open, embedder).add(list(DOCS), list(DOCS.values()))
    with pytest.raises(ContractMismatchError) as err:
        open_collection(client, by_driver, other)
    assert field in err.value.fields
    with pytest.raises(ContractMismatchError) as err:
        GuardedIndex.open(ChromaDriver(client, by_open), other)
    assert field in err.value.fields
    with pytest.raises(ContractMismatchError):  # Chroma's own fetch, through ctxemb's function
        client.get_collection(by_driver, embedding_function=ContractEmbeddingFunction(other))
    for name in (by_driver, by_open):
        assert client.get_collection(name, embedding_function=None).count() == len(DOCS)


# -- what Chroma does not do by itself -----------------------------------------------------------


def test_a_replacing_write_replaces_records_whole(client, embedder):
    driver = ChromaDriver(client, fresh_name())
    GuardedIndex.open(driver, embedder)
    v = np.full(embedder.contract.output_dim, 0.25, dtype=np.float32)
    driver.write(
        [Record("a", v, "Text a.", {"keep": 1, "drop": 2}), Record("b", v, "Text b.", {"x": 1})],
        replace=False,
    )
    # Chroma's upsert merges metadata and keeps a document it is not given: replaced whole here.
    driver.write(
        [Record("a", v, "Text a2.", {"keep": 3}), Record("b", v, None, {"y": 2})], replace=True
    )
    got = {r.id: (r.text, r.metadata) for r in driver.read(["b", "a"])}
    assert got == {"a": ("Text a2.", {"keep": 3}), "b": (None, {"y": 2})}
    assert [r.id for r in driver.read(["b", "a", "absent"])] == ["b", "a"]  # the order given


def test_a_filter_of_several_keys_is_every_pair(client, embedder):
    driver = ChromaDriver(client, fresh_name())
    index = GuardedIndex.open(driver, embedder)
    metas = [{"n": k % 2, "kind": "odd" if k % 2 else "even", "k": k} for k in range(len(DOCS))]
    index.add(list(DOCS), list(DOCS.values()), metas)
    both = index.query([QUERY], 5, where={"n": 1, "kind": "odd"})[0]
    assert sorted(m.id for m in both) == ["bike", "slugs"]
    assert index.query([QUERY], 5, where={"n": 1, "kind": "even"})[0] == []
    assert driver.delete(where={"n": 0, "k": 2}) == ["moon"]
    assert driver.delete(["tea", "bike"], where={"n": 0}) == ["tea"]
    assert sorted(index.ids()) == ["bank", "bike", "slugs"]


def test_the_persisted_function_changed_around_ctxemb_is_refused_by_both_openers(client, embedder):
    name = fresh_name()
    index = GuardedIndex.open(ChromaDriver(client, name), embedder)
    _filled(index)
    other = Embedder(variants(embedder.contract)["pooling"])
    raw = client.get_collection(name, embedding_function=None)
    # Chroma saves the new configuration, then the old function refuses the change (too late).
    with contextlib.suppress(ValueError, StampError):
        raw.modify(configuration={"embedding_function": ContractEmbeddingFunction(other)})
    # One path, one error: the setting of a store that embeds queries itself.
    with pytest.raises(ConfigurationMismatchError):
        index.query([QUERY], 1)  # the open handle sees the setting move
    with pytest.raises(ConfigurationMismatchError) as info:
        GuardedIndex.open(ChromaDriver(client, name), embedder)
    assert info.value.fields == ("pooling",)
    with pytest.raises(ConfigurationMismatchError):
        open_collection(client, name, embedder)
    open_collection(client, name, embedder, repair=True)  # the adapter's repair writes it back
    assert GuardedIndex.open(ChromaDriver(client, name), embedder).count() == len(DOCS)
