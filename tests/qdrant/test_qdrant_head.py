"""The head a query compares, read cheaply and never stale: local mode reads ``get_collection``
again only when the collection's state (its object, metadata, vector configuration) changed;
every change a plain ``qdrant-client`` can make between two queries is still caught."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import fresh_name
from qdrant_raw import RawQdrant

import ctxemb_qdrant
from ctxemb_core.errors import DamagedStampError, ForeignVectorsError, InvalidInputError
from ctxemb_core.index.driver import Record
from ctxemb_core.testing.conformance import DOCS, QUERY, tiny_embedder
from ctxemb_qdrant import QdrantDriver, connect


@pytest.fixture(scope="module")
def qclient(tmp_path_factory: pytest.TempPathFactory):
    client = connect(tmp_path_factory.mktemp("qdrant-head"))
    yield client
    client.close()


@pytest.fixture(scope="module")
def embedder():
    return tiny_embedder()


@pytest.fixture
def docs(qclient, embedder):
    col = ctxemb_qdrant.open_collection(qclient, fresh_name(), embedder)
    col.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
    return col


def _vector(col) -> np.ndarray:
    return col.index.embedder.embed_queries([QUERY])


@pytest.fixture
def reads(qclient, monkeypatch):
    """How often ``get_collection`` is called (the call that counts every point)."""
    calls: list[str] = []
    real = qclient.get_collection

    def counted(name, **kwargs):
        calls.append(name)
        return real(name, **kwargs)

    monkeypatch.setattr(qclient, "get_collection", counted)
    return calls


def test_an_unchanged_collection_is_not_described_again_between_queries(docs, reads):
    first = docs.query_vectors(_vector(docs), 1)["ids"]
    reads.clear()
    assert docs.query_vectors(_vector(docs), 1)["ids"] == first
    assert reads == []


def test_a_metadata_edit_between_two_queries_is_read_and_refused(docs, qclient, reads):
    docs.query_vectors(_vector(docs), 1)
    qclient.update_collection(docs.name, metadata={"owner": "search team"})  # not the stamp
    reads.clear()
    assert docs.query_vectors(_vector(docs), 1)["ids"] == [["tea"]]
    assert reads == [docs.name]  # read again: the state moved
    qclient.update_collection(docs.name, metadata={"ctxemb:fingerprint": "0" * 64})
    with pytest.raises(DamagedStampError):
        docs.query_vectors(_vector(docs), 1)


def test_a_value_of_another_type_is_a_change(docs, qclient):
    docs.query_vectors(_vector(docs), 1)
    schema = qclient.get_collection(docs.name).config.metadata["ctxemb:schema"]
    assert schema is not True and schema == 1  # True == 1 in Python; not to the stamp
    qclient.update_collection(docs.name, metadata={"ctxemb:schema": True})
    with pytest.raises(DamagedStampError):
        docs.query_vectors(_vector(docs), 1)


def test_a_collection_made_again_between_two_queries_is_another(docs, qclient, embedder):
    docs.query_vectors(_vector(docs), 1)
    raw = RawQdrant(qclient, docs.name, embedder.contract.output_dim)
    stamp = {k: v for k, v in qclient.get_collection(docs.name).config.metadata.items()}
    stamp.pop("ctxemb_identity")
    raw.drop()
    raw.create(stamp)  # the stamp copied onto a new collection of other vectors
    rng = np.random.default_rng(3)
    foreign = [Record(i, rng.normal(size=embedder.contract.output_dim), t) for i, t in DOCS.items()]
    raw.write(foreign)
    with pytest.raises(ForeignVectorsError):
        docs.query_vectors(_vector(docs), 1)
    raw.drop()
    with pytest.raises(InvalidInputError):
        docs.query_vectors(_vector(docs), 1)


def test_the_live_state_sees_nested_edits_and_is_none_without_a_local_collection(
    qclient, docs, reads
):
    driver = docs.driver
    qclient.update_collection(docs.name, metadata={"deep": {"a": [1, 2]}})
    driver.head()
    reads.clear()
    driver.head()
    assert reads == []  # held: the live state (core's ObjectDriver._live) is unchanged
    qclient.update_collection(docs.name, metadata={"deep": {"a": [1, 2.0]}})  # 2 == 2.0
    driver.head()
    assert reads == [docs.name]
    assert QdrantDriver(connect(memory=True), docs.name)._live() is None


def test_a_named_vector_s_collection_made_again_is_another(embedder):
    from qdrant_client import QdrantClient, models

    from ctxemb_core.index import GuardedIndex
    from ctxemb_qdrant._named import NamedVectorView, add_named_vector, backfill_named

    client = QdrantClient(location=":memory:")
    payloads = [{"page_content": t, "metadata": {"n": k}} for k, t in enumerate(DOCS.values())]
    client.create_collection("docs", vectors_config={})
    client.upsert(
        "docs", [models.PointStruct(id=k, vector={}, payload=p) for k, p in enumerate(payloads)]
    )
    add_named_vector(client, "docs", "v1", embedder)
    backfill_named(client, "docs", "v1", embedder)
    index = GuardedIndex.open(NamedVectorView(client, "docs", "v1"), embedder)
    assert index.query([QUERY], 1)[0][0].text == DOCS["tea"]
    metadata = dict(client.get_collection("docs").config.metadata)
    metadata.pop("ctxemb_identity")  # a plain client copies the stamps, not ctxemb's nonce
    client.delete_collection("docs")
    width = embedder.contract.output_dim
    params = models.VectorParams(size=width, distance=models.Distance.DOT)
    client.create_collection("docs", vectors_config={"v1": params}, metadata=metadata)
    rng = np.random.default_rng(5)
    foreign = [
        models.PointStruct(id=k, vector={"v1": rng.normal(size=width).tolist()}, payload=p)
        for k, p in enumerate(payloads)
    ]
    client.upsert("docs", foreign)
    with pytest.raises(ForeignVectorsError):
        index.query([QUERY], 1)
