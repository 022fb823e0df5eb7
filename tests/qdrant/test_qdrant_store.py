"""Qdrant's own cases beyond the conformance suite: what a plain ``qdrant-client`` does around
the guard, what ``update_collection`` can change, the errors of a locked folder, a server that
is not there, a name or a payload Qdrant refuses, precision, other processes and a SIGKILL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import fresh_name
from qdrant_client import models as qm
from qdrant_raw import RawQdrant

import ctxemb_qdrant
from ctxemb_core import Embedder
from ctxemb_core.errors import (
    DamagedStampError,
    ForeignVectorsError,
    InvalidInputError,
    StoreUnavailableError,
)
from ctxemb_core.index import GuardedIndex, verify_driver
from ctxemb_core.index.driver import Record
from ctxemb_core.testing.conformance import DOCS, QUERY, DriverConformance, tiny_embedder
from ctxemb_qdrant import QdrantDriver, connect, point_id


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("qdrant-store")


@pytest.fixture(scope="module")
def qclient(folder):
    client = connect(folder)
    yield client
    client.close()


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return tiny_embedder()


@pytest.fixture
def docs(qclient, embedder):
    """A collection holding DOCS, opened once since (so the next open compares with it)."""
    driver = QdrantDriver(qclient, fresh_name())
    index = GuardedIndex.open(driver, embedder)
    index.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
    GuardedIndex.open(driver, embedder)
    return index


def _foreign(embedder: Embedder) -> list[float]:
    rng = np.random.default_rng(7)
    return rng.normal(size=embedder.contract.output_dim).astype(np.float32).tolist()


# -- a plain qdrant-client around the guard ----------------------------------------------------


def test_an_upsert_of_other_vectors_is_caught_on_the_next_open(docs, qclient, embedder):
    point = qm.PointStruct(
        id=point_id("tea"),
        vector=_foreign(embedder),
        payload={"page_content": DOCS["tea"], "metadata": {"n": 0}, "ctxemb_id": "tea"},
    )
    qclient.upsert(docs.name, [point])
    with pytest.raises(ForeignVectorsError) as err:
        GuardedIndex.open(docs.driver, docs.embedder)
    assert err.value.ids == ("tea",)


def test_an_upsert_of_other_vectors_over_the_last_record_is_caught(docs, qclient, embedder):
    # The last record in the store's order has nowhere to move: its broken seal, not its
    # place, says it was written around ctxemb.
    last = docs.driver.ids()[-1]
    RawQdrant(qclient, docs.name).write([Record(last, _foreign(embedder), DOCS[last], {})])
    with pytest.raises(ForeignVectorsError) as err:
        GuardedIndex.open(docs.driver, docs.embedder)
    assert err.value.ids == (last,)


def test_a_record_written_around_ctxemb_stays_checked_until_it_is_proven(docs, qclient, embedder):
    # A plain client writes the right vector (a co-writer of the same model): the next open
    # checks and seals it; a second plain write of other vectors is caught again.
    raw = RawQdrant(qclient, docs.name)
    (vector,) = embedder.embed_documents([DOCS["tea"]])
    raw.write([Record("tea", vector, DOCS["tea"], {})])
    assert GuardedIndex.open(docs.driver, docs.embedder).open_check.changed == 1
    assert GuardedIndex.open(docs.driver, docs.embedder).open_check.changed == 0
    raw.write([Record("tea", _foreign(embedder), DOCS["tea"], {})])
    with pytest.raises(ForeignVectorsError) as err:
        GuardedIndex.open(docs.driver, docs.embedder)
    assert err.value.ids == ("tea",)


def test_a_payload_edit_moves_the_record_to_be_checked_first(docs, qclient):
    qclient.set_payload(docs.name, {"page_content": "Oil the chain."}, points=[point_id("tea")])
    with pytest.raises(ForeignVectorsError) as err:
        GuardedIndex.open(docs.driver, docs.embedder)
    assert err.value.ids == ("tea",)


def test_an_upsert_copying_the_whole_payload_is_found_by_verify_all(docs, qclient, embedder):
    # The limit: a client that copies ctxemb's payload keys (write sequence and check) keeps
    # the record in place; the open compares ids and order only, verify re-embeds everything.
    (stored,) = qclient.retrieve(docs.name, [point_id("bike")], with_payload=True)
    point = qm.PointStruct(id=point_id("bike"), vector=_foreign(embedder), payload=stored.payload)
    qclient.upsert(docs.name, [point])
    assert GuardedIndex.open(docs.driver, docs.embedder).count() == len(DOCS)
    report = verify_driver(docs.driver, docs.embedder, all=True)
    assert report.bad_ids == ("bike",)


def test_a_deletion_around_the_guard_is_seen_and_a_sync_restores_it(docs, qclient):
    qclient.delete(docs.name, points_selector=qm.PointIdsList(points=[point_id("moon")]))
    reopened = GuardedIndex.open(docs.driver, docs.embedder)
    assert sorted(reopened.driver.ids()) == sorted(set(DOCS) - {"moon"})
    done = reopened.sync(list(DOCS), list(DOCS.values()))
    assert done.added == ("moon",) and reopened.count() == len(DOCS)
    qclient.delete_collection(docs.name)
    with pytest.raises(InvalidInputError):
        docs.query([QUERY], 1)


def test_metadata_edited_is_refused_and_other_keys_are_left_alone(docs, qclient):
    qclient.update_collection(docs.name, metadata={"owner": "search team"})
    assert docs.query([QUERY], 1)[0][0].id == "tea"  # not the stamp: nothing to refuse
    qclient.update_collection(docs.name, metadata={"ctxemb:fingerprint": "0" * 64})
    with pytest.raises(DamagedStampError):
        docs.query([QUERY], 1)
    with pytest.raises(DamagedStampError):
        GuardedIndex.open(docs.driver, docs.embedder)


def test_what_update_collection_can_change_moves_the_stamp_version(docs, qclient):
    # Local mode applies metadata only (it drops quantization, HNSW and on-disk changes); a
    # server applies them all, and each is in the version the guard compares on every call.
    info = qclient.get_collection(docs.name)
    version = docs.driver._version(info)
    config = info.config
    changed = [
        config.model_copy(
            update={
                "quantization_config": qm.BinaryQuantization(binary=qm.BinaryQuantizationConfig())
            }
        ),
        config.model_copy(update={"hnsw_config": config.hnsw_config.model_copy(update={"m": 8})}),
        config.model_copy(
            update={
                "params": config.params.model_copy(
                    update={"vectors": config.params.vectors.model_copy(update={"on_disk": True})}
                )
            }
        ),
    ]
    for new in changed:
        assert docs.driver._version(info.model_copy(update={"config": new})) != version


# -- refused, nothing written ---------------------------------------------------------------


def test_a_name_qdrant_refuses_is_refused_before_anything_is_made(qclient, embedder):
    before = [c.name for c in qclient.get_collections().collections]
    for name in ("a/b", "", "..", "x" * 256, "what?", "é" * 128):  # a folder name of 256 bytes
        with pytest.raises(InvalidInputError):
            ctxemb_qdrant.open_collection(qclient, name, embedder)
    assert [c.name for c in qclient.get_collections().collections] == before


@pytest.mark.parametrize("value", [float("nan"), 2**70, {"deep": float("inf")}])
def test_a_payload_qdrant_cannot_store_is_refused_whole(docs, value):
    with pytest.raises(InvalidInputError):
        docs.add(["fresh", "other"], ["A fresh text.", "Another."], [{"n": 9}, {"bad": value}])
    assert docs.count() == len(DOCS) and sorted(docs.driver.ids()) == sorted(DOCS)


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_a_url_with_nothing_listening_is_unavailable_and_keeps_its_key():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(StoreUnavailableError) as err:
        connect(url=f"http://127.0.0.1:{port}", api_key="s3cret-api-key", timeout=2)
    assert "s3cret" not in str(err.value) and str(port) in str(err.value)


def test_memory_and_each_precision_read_back_as_the_contract_rounds(embedder):
    client = connect(memory=True)
    for precision in ("float16", "int8", "binary"):
        other = Embedder(embedder.contract.with_(precision=precision))
        index = GuardedIndex.open(QdrantDriver(client, precision), other)
        index.add(list(DOCS), list(DOCS.values()))
        records = DriverConformance.records(other, DOCS)
        want = {r.id: np.asarray(r.vector, np.float32).tobytes() for r in records}
        got = {r.id: r.vector.tobytes() for r in index.driver.read(list(DOCS))}
        assert got == want
        assert index.query([QUERY], 1)[0][0].id == "tea"
        datatype = client.get_collection(precision).config.params.vectors.datatype
        assert datatype.value == ("float16" if precision == "float16" else "float32")
    client.close()


# -- other processes ------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys
    from ctxemb_core.index import GuardedIndex
    from ctxemb_core.testing.conformance import tiny_embedder
    from ctxemb_qdrant import QdrantDriver, connect

    folder, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    index = GuardedIndex.open(QdrantDriver(connect(folder), name), tiny_embedder())
    ids = [f"d{k}" for k in range(count)]
    texts = [f"Record number {k} is about topic {k % 7}." for k in range(count)]
    for start in range(0, count, 20):
        index.sync(ids[start : start + 20], texts[start : start + 20])
        print(start + 20, flush=True)
    sys.stdin.readline()  # holds the folder until told to go
    """
)


def _child(folder, name: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(folder), name, str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_another_process_holds_the_folder_then_its_index_opens_here(tmp_path, embedder):
    child = _child(tmp_path, "docs", 40)
    try:
        assert child.stdout is not None
        while child.stdout.readline().strip() != "40":
            assert child.poll() is None
        with pytest.raises(StoreUnavailableError) as err:
            connect(tmp_path)
        assert "another" in str(err.value)
    finally:
        child.communicate("go\n", timeout=60)
    client = connect(tmp_path)
    index = GuardedIndex.open(QdrantDriver(client, "docs"), embedder)
    assert index.count() == 40 and verify_driver(index.driver, embedder, all=True).ok
    client.close()


def test_a_process_killed_mid_index_leaves_each_id_once_after_a_re_run(tmp_path, embedder):
    child = _child(tmp_path, "docs", 300)
    assert child.stdout is not None
    while int(child.stdout.readline().strip() or 0) < 100:
        assert child.poll() is None
    os.kill(child.pid, signal.SIGKILL)
    child.communicate(timeout=30)  # reaped, its pipes closed
    rerun = _child(tmp_path, "docs", 300)
    rerun.communicate("go\n", timeout=120)
    assert rerun.returncode == 0
    client = connect(tmp_path)
    driver = QdrantDriver(client, "docs")
    ids = driver.ids()
    assert len(ids) == len(set(ids)) == 300 == driver.count()
    assert verify_driver(driver, embedder, all=True).ok
    client.close()


def test_a_search_among_given_ids_only(qclient, embedder):
    # What an evaluation's pair search asks: the one record's distance, whatever is nearer.
    docs = ctxemb_qdrant.open_collection(qclient, fresh_name(), embedder)
    docs.add(list(DOCS), list(DOCS.values()))
    found = docs.query([QUERY], n_results=3, ids=["bike", "absent"], include=["distances"])
    assert found["ids"] == [["bike"]] and len(found["distances"][0]) == 1
    with pytest.raises(TypeError):
        docs.query([QUERY], n_results=1, exact=True)  # another store's option


@pytest.mark.parametrize(
    "point", [lambda k: k + 1, lambda k: f"00000000-0000-0000-0000-{k + 1:012d}"]
)
def test_an_adopted_point_under_its_own_id_is_replaced_not_doubled(qclient, embedder, point):
    # A collection a plain client wrote (int or uuid point ids, no ctxemb id in the payload):
    # once adopted, an upsert of one of its ids replaces that record, it does not add a second.
    name = fresh_name()
    texts = list(DOCS.values())
    params = qm.VectorParams(size=embedder.contract.output_dim, distance=qm.Distance.COSINE)
    qclient.create_collection(name, vectors_config=params)
    points = [
        qm.PointStruct(id=point(k), vector=v.tolist(), payload={"page_content": t, "metadata": {}})
        for k, (t, v) in enumerate(zip(texts, embedder.embed_documents(texts), strict=True))
    ]
    qclient.upsert(name, points)
    docs = ctxemb_qdrant.open_collection(qclient, name, embedder, adopt=True)
    first = str(point(0))
    docs.upsert([first], ["Oil the bicycle chain."])
    assert docs.count() == len(texts) == len(docs.driver.ids())
    assert docs.get(ids=[first])["documents"] == ["Oil the bicycle chain."]


@pytest.mark.parametrize("which", [0, -1])
def test_an_adopted_point_upserted_around_the_guard_is_caught(qclient, embedder, which):
    # Points a plain client wrote carry no seal; adopting seals them as they are, so a later
    # plain upsert of other vectors (the first or the last point by id) is seen on the next open.
    name = fresh_name()
    texts = list(DOCS.values())
    params = qm.VectorParams(size=embedder.contract.output_dim, distance=qm.Distance.COSINE)
    qclient.create_collection(name, vectors_config=params)
    vectors = embedder.embed_documents(texts)
    qclient.upsert(
        name,
        [
            qm.PointStruct(id=k + 1, vector=v.tolist(), payload={"page_content": t})
            for k, (t, v) in enumerate(zip(texts, vectors, strict=True))
        ],
    )
    ctxemb_qdrant.open_collection(qclient, name, embedder, adopt=True)
    ctxemb_qdrant.open_collection(qclient, name, embedder)  # the verified state, recorded
    assert ctxemb_qdrant.open_collection(qclient, name, embedder).open_check.changed == 0
    point = range(1, len(texts) + 1)[which]
    changed = {"page_content": texts[point - 1]}
    qclient.upsert(name, [qm.PointStruct(id=point, vector=_foreign(embedder), payload=changed)])
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_qdrant.open_collection(qclient, name, embedder)
    assert err.value.ids == (str(point),)


def test_qdrant_clients_own_spelling_of_memory_makes_no_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    client = connect(":memory:")
    assert client._client.__class__.__name__ == "QdrantLocal"  # local mode, in memory
    assert list(tmp_path.iterdir()) == []  # not a folder called ":memory:"
    client.close()
