"""The guard under a second round of adversarial use, embedded (and on a server: ``transport``).

Each test is a variation the first round (``test_reliability.py``) did not try. Faults of the
*store* are injected into Chroma's classes; the guard itself is never replaced.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import numpy as np
import pytest
from chromadb.api.models.Collection import Collection
from conftest import DOCS, MINILM, fresh_name

from ctxemb_chroma import (
    ContractEmbeddingFunction,
    connect,
    migrate,
    open_collection,
    stamped_contract,
    stored_collection,
    verify,
)
from ctxemb_core import Embedder, IndexStamp, contract_for
from ctxemb_core.documents import TEXT_KEY, text_digest
from ctxemb_core.errors import (
    ConfigurationMismatchError,
    ContractMismatchError,
    CtxembError,
    DamagedStampError,
    EncoderDriftError,
    ExistingIdsError,
    ForeignVectorsError,
    IncompleteWriteError,
    InvalidInputError,
    MissingStampError,
    StoreUnavailableError,
)


@pytest.fixture
def stamped(client, embedder):
    col = open_collection(client, fresh_name(), embedder)
    metas = [{"n": k} if k % 2 else None for k in range(len(DOCS))]
    col.add(list(DOCS), list(DOCS.values()), metas)
    return col


def snapshot(col) -> dict:
    got = col.stored().get(include=["documents", "embeddings", "metadatas"])
    return {
        i: (d, m, np.asarray(e).round(6).tolist())
        for i, d, m, e in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }


@pytest.fixture
def small_batches(monkeypatch, client):
    """Chroma's own batch limit is 2, for the guard and for Chroma's checks alike."""
    server = type(client._server)
    monkeypatch.setattr(server, "get_max_batch_size", lambda self: 2)
    if "Rust" in server.__name__:  # the embedded store checks its own limit in Rust
        real_add, real_upsert, real_delete = Collection.add, Collection.upsert, Collection.delete

        def limited(real):
            def call(self, *args, **kwargs):
                ids = kwargs.get("ids", args[0] if args else None)
                if ids is not None and len(ids) > 2:
                    raise ValueError(f"Batch size {len(ids)} exceeds maximum batch size 2")
                return real(self, *args, **kwargs)

            return call

        monkeypatch.setattr(Collection, "add", limited(real_add))
        monkeypatch.setattr(Collection, "upsert", limited(real_upsert))
        monkeypatch.setattr(Collection, "delete", limited(real_delete))


def fail_on(monkeypatch, method: str, on_call: int, error: BaseException) -> None:
    real = getattr(Collection, method)
    calls = [0]

    def flaky(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == on_call:
            raise error
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Collection, method, flaky)


# -- data loss ---------------------------------------------------------------------------------


def test_undo_restores_metadata_exactly_even_where_chroma_merges_it(stamped, monkeypatch):
    # Chroma's upsert merges a record's metadata keys; an undo by upsert alone would keep the
    # failed write's keys, and give a record that had no metadata the failed write's.
    before = snapshot(stamped)
    monkeypatch.setattr(type(stamped.client), "get_max_batch_size", lambda self: 2)
    fail_on(monkeypatch, "upsert", 2, RuntimeError("second chunk failed"))
    with pytest.raises(RuntimeError, match="second chunk"):
        stamped.upsert(
            ["tea", "bike", "moon"],
            ["Tea replaced.", "Bike replaced.", "Moon replaced."],
            [{"extra": 1}, {"n": 99, "more": "x"}, {"z": True}],
        )
    assert snapshot(stamped) == before


@pytest.mark.transport
def test_undo_of_a_batch_larger_than_chromas_limit_is_chunked_too(
    stamped, small_batches, monkeypatch
):
    before = snapshot(stamped)
    fail_on(monkeypatch, "upsert", 4, RuntimeError("fourth chunk failed"))
    ids = [*DOCS, "new1", "new2", "new3"]
    with pytest.raises(RuntimeError, match="fourth chunk"):
        stamped.upsert(ids, [f"replaced {i}" for i in ids])
    assert snapshot(stamped) == before


@pytest.mark.transport
def test_a_failed_add_over_the_limit_deletes_its_new_ids_in_chunks(
    stamped, small_batches, monkeypatch
):
    before = snapshot(stamped)
    fail_on(monkeypatch, "add", 3, RuntimeError("third chunk failed"))
    ids = [f"n{k}" for k in range(7)]
    with pytest.raises(RuntimeError, match="third chunk"):
        stamped.add(ids, [f"new text {k}" for k in range(7)])
    assert snapshot(stamped) == before


def test_a_failed_add_keeps_an_id_another_writer_stored_meanwhile(
    stamped, client, small_batches, monkeypatch
):
    # The undo puts back what the failed write touched: "n4", in a chunk it never reached,
    # is the other writer's (the adapter's own undo deleted every id the batch named).
    theirs = client.get_collection(stamped.name, embedding_function=None)
    vector = stamped.embedder.embed_documents(["Their text."])
    real, calls = Collection.add, [0]

    def add(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:
            real(theirs, ids=["n4"], embeddings=vector, documents=["Their text."])
            raise RuntimeError("second chunk failed")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "add", add)
    ids = [f"n{k}" for k in range(6)]
    with pytest.raises(RuntimeError, match="second chunk"):
        stamped.add(ids, [f"new text {k}" for k in range(6)])
    assert theirs.get(ids=ids, include=["documents"])["documents"] == ["Their text."]


def test_an_interrupt_inside_the_embedding_step_writes_nothing(stamped, monkeypatch):
    before = snapshot(stamped)
    writes: list[str] = []
    for method in ("add", "upsert", "delete"):
        real = getattr(Collection, method)
        monkeypatch.setattr(
            Collection, method, lambda self, *a, _m=method, _r=real, **k: writes.append(_m)
        )

    def interrupted(self, texts):
        raise KeyboardInterrupt

    monkeypatch.setattr(Embedder, "embed_documents", interrupted)
    with pytest.raises(KeyboardInterrupt):
        stamped.upsert(["tea", "fresh"], ["Tea replaced.", "A fresh one."])
    with pytest.raises(KeyboardInterrupt):
        stamped.add(["fresh"], ["A fresh one."])
    assert writes == []
    monkeypatch.undo()
    assert snapshot(stamped) == before


def test_an_undo_that_fails_reports_both_and_is_an_incomplete_write(stamped, monkeypatch):
    monkeypatch.setattr(type(stamped.client), "get_max_batch_size", lambda self: 2)
    fail_on(monkeypatch, "add", 2, KeyboardInterrupt())
    fail_on(monkeypatch, "delete", 1, ConnectionError("server went away"))
    with pytest.raises(IncompleteWriteError) as info:
        stamped.add(["n1", "n2", "n3"], ["one", "two", "three"])
    assert isinstance(info.value.error, KeyboardInterrupt)
    assert "server went away" in str(info.value)


@pytest.mark.parametrize(
    "bad", [{"": 1}, {"#x": 1}, {"$and": 1}, {"k": None}, {"f": float("nan")}, {"i": 2**70}]
)
def test_metadata_chroma_refuses_only_while_writing_is_refused_before_any_chunk(
    stamped, monkeypatch, bad
):
    # Found on a real store: Chroma's validate_metadata passes these, its store refuses them
    # (the server more of them than the embedded store): a later chunk would fail mid-write.
    before = snapshot(stamped)
    monkeypatch.setattr(type(stamped.client), "get_max_batch_size", lambda self: 2)
    with pytest.raises(InvalidInputError, match=r"metadatas\[2\]"):
        stamped.upsert(["tea", "bike", "fresh"], ["t", "b", "f"], [{"a": 1}, {"b": 2}, bad])
    assert snapshot(stamped) == before


def test_add_of_an_existing_id_names_every_existing_id_and_writes_nothing(stamped):
    before = snapshot(stamped)
    with pytest.raises(ExistingIdsError) as info:
        stamped.add(["x1", "moon", "x2", "tea"], ["a", "b", "c", "d"])
    assert set(info.value.ids) == {"moon", "tea"} and "upsert" in str(info.value)
    assert snapshot(stamped) == before


# -- bypasses ----------------------------------------------------------------------------------


def _forged(md: dict, scale: float = 1.0, noise: float = 0.0) -> dict:
    raw = base64.b64decode(md["ctxemb:canary"][len("f32le:") :])
    canary = np.frombuffer(raw, dtype="<f4").copy()
    canary = canary * scale + np.random.default_rng(0).normal(0, noise, canary.shape)
    encoded = base64.b64encode(canary.astype("<f4").tobytes()).decode()
    return {**md, "ctxemb:canary": "f32le:" + encoded}


@pytest.mark.parametrize(("scale", "noise"), [(1.0, 0.05), (1.1, 0.0), (-1.0, 0.0)])
def test_a_forged_canary_of_the_right_shape_is_refused_on_open_on_call_and_in_verify(
    stamped, client, base, scale, noise
):
    stamped.query(["tea"], n_results=1)
    raw = client.get_collection(stamped.name, embedding_function=None)
    raw.modify(metadata=_forged(dict(raw.metadata), scale, noise))
    with pytest.raises(EncoderDriftError):
        stamped.query(["tea"], n_results=1)
    with pytest.raises(EncoderDriftError):
        stamped.add(["fresh"], ["A fresh one."])
    with pytest.raises(EncoderDriftError):
        open_collection(client, stamped.name, base)
    report = verify(stamped, base)
    assert not report.ok and report.canary_cosine is not None and report.canary_cosine < 0.9995


def test_probes_no_tokenizer_can_encode_are_a_damaged_stamp(stamped, client, base):
    raw = client.get_collection(stamped.name, embedding_function=None)
    md = dict(raw.metadata)
    probes = json.loads(md["ctxemb:probes"])
    probes[0] = "lone \ud800 surrogate"
    raw.modify(metadata={**md, "ctxemb:probes": json.dumps(probes)})
    with pytest.raises(DamagedStampError):
        open_collection(client, stamped.name, base)
    with pytest.raises(DamagedStampError):
        stamped.query(["tea"], n_results=1)
    report = verify(stamped, base)
    assert not report.ok and report.damaged


def test_a_configuration_changed_after_open_is_seen_on_the_next_call(stamped, client, base):
    stamped.query(["tea"], n_results=1)
    raw = client.get_collection(stamped.name, embedding_function=None)
    with pytest.raises(ContractMismatchError):  # Chroma persists it first, then ctxemb raises
        raw.modify(
            configuration={
                "embedding_function": ContractEmbeddingFunction(base.with_(pooling="cls"))
            }
        )
    with pytest.raises(ConfigurationMismatchError):
        stamped.query(["tea"], n_results=1)
    with pytest.raises(ConfigurationMismatchError):
        stamped.add(["fresh"], ["A fresh one."])


def test_a_foreign_querier_must_reproduce_the_canary(stamped, base, monkeypatch):
    other = Embedder(base)
    real = Embedder.embed_float

    def skewed(self, texts, role, **options):  # same contract on paper, other vectors in fact
        out = real(self, texts, role, **options)
        return out if self is not other else np.roll(out, 1, axis=1)

    monkeypatch.setattr(Embedder, "embed_float", skewed)
    monkeypatch.setattr(Embedder, "embed_queries", lambda self, t: skewed(self, t, "query"))
    with pytest.raises(EncoderDriftError):
        stamped.query(["tea"], n_results=1, embedder=other)


@pytest.mark.parametrize("precision", ["float16"])
def test_float16_contracts_index_search_and_verify(client, base, precision):
    contract = base.with_(precision=precision)
    col = open_collection(client, fresh_name(), contract)
    col.add(list(DOCS), list(DOCS.values()))
    assert col.query(["how is green tea made"], n_results=1)["ids"][0][0] == "tea"
    assert verify(col, contract, all=True, progress=False).ok
    open_collection(client, col.name, contract, sample=100)
    with pytest.raises(CtxembError):
        open_collection(client, col.name, base)


def test_verify_on_an_unstamped_collection_says_it_is_unstamped(client, base, embedder):
    raw = client.create_collection(fresh_name(), embedding_function=None)
    raw.add(ids=["a"], documents=["x"], embeddings=embedder.embed_documents(["x"]))
    report = verify(raw, base)
    assert not report.ok and not report.stamped
    assert not any("present" in line for line in report.checked())
    assert any("stamp" in line for line in report.not_checked())
    d = report.to_dict()
    assert d["ok"] is False and json.dumps(d)


def test_verify_all_on_a_damaged_stamp_still_checks_records(stamped, client, base):
    raw = client.get_collection(stamped.name, embedding_function=None)
    raw.modify(metadata={**dict(raw.metadata), "ctxemb:canary": "f32le:AAAA"})
    report = verify(stamped, base, all=True, progress=False)
    assert not report.ok and report.damaged and report.sample_size == len(DOCS)


# -- queries and reads -------------------------------------------------------------------------


@pytest.mark.transport
@pytest.mark.parametrize(
    "include",
    [["documents"], ["embeddings"], ["metadatas", "distances"], [], ["documents", "embeddings"]],
)
def test_query_with_include_variants_and_a_where_filter(stamped, embedder, include):
    hits = stamped.query(["how is green tea made"], n_results=2, include=include)
    assert hits["ids"][0][0] == "tea"
    if "embeddings" in include:
        np.testing.assert_allclose(
            hits["embeddings"][0][0], embedder.embed_documents([DOCS["tea"]])[0], atol=1e-5
        )
    filtered = stamped.query(["green tea"], n_results=5, where={"n": {"$gte": 1}})
    assert "tea" not in filtered["ids"][0] and set(filtered["ids"][0]) <= {"bike", "slug", "river"}


def test_delete_by_where_filter_or_by_ids(stamped):
    stamped.delete(where={"n": 1})
    assert "bike" not in stamped.ids()
    stamped.delete(["tea"])
    assert stamped.ids() == set(DOCS) - {"bike", "tea"}


@pytest.mark.transport
def test_bad_input_to_the_remaining_entry_points_is_a_named_ctxemb_error(stamped, client, base):
    before = snapshot(stamped)
    calls = [
        (lambda: stamped.get(bogus=1), "get"),
        (lambda: stamped.get(include=["bogus"]), "get"),
        (lambda: stamped.get(limit=-1), "get"),
        (lambda: stamped.query(["ok"], include=["bogus"]), "query"),
        (lambda: stamped.query(["ok"], query_embeddings=[[0.0] * 384]), "query"),
        (lambda: stamped.delete([1, 2]), "ids"),
        (lambda: stamped.delete(["tea", 3]), "ids"),
        (lambda: stamped.delete(["tea", "tea"]), "ids"),
        (lambda: stamped.delete(), "delete"),
        (lambda: stamped.delete(where={}), "where"),
        (lambda: migrate(None, base, fresh_name()), "source"),
        (lambda: migrate(stamped, None, fresh_name()), "contract"),
        (lambda: migrate(stamped, base, "bad name!"), "name"),
        (lambda: migrate(stamped, base, None), "name"),
        (lambda: migrate(stamped, base, fresh_name(), batch_size=0), "batch_size"),
        (lambda: migrate(stamped, base, fresh_name(), client="nope"), "client"),
        (lambda: migrate(stamped, base, stamped.name), "target"),
        (lambda: verify(None, base), "collection"),
        (lambda: verify(stamped, base, all="yes"), "all"),
        (lambda: verify(stamped, base, sample=1.5), "sample"),
        (lambda: stamped_contract(None, stamped.name), "client"),
        (lambda: stamped_contract(client, None), "name"),
        (lambda: stamped_contract(client, fresh_name()), "does not exist"),
        (lambda: stored_collection(client, "x"), "name"),
        (lambda: connect(path=5), "path"),
        (lambda: connect(host=""), "host"),
        (lambda: connect(host="127.0.0.1", port="8000"), "port"),
        (lambda: connect(host="127.0.0.1", port=True), "port"),
        (lambda: open_collection(client, fresh_name(), base, sample=True), "sample"),
        (lambda: open_collection(client, fresh_name(), base, create="yes"), "create"),
        (lambda: open_collection(client, fresh_name(), base, adopt=None), "adopt"),
        (lambda: open_collection(client, fresh_name(), base, repair=1), "repair"),
    ]
    for call, named in calls:
        with pytest.raises(CtxembError) as info:
            call()
        assert isinstance(info.value, (ValueError, TypeError)), info.value
        assert named in str(info.value), (named, str(info.value))
    assert snapshot(stamped) == before


def test_stamped_contract_of_an_unstamped_or_damaged_collection(client, stamped, base):
    assert stamped_contract(client, stamped.name) == base
    name = fresh_name()
    client.create_collection(name, embedding_function=None)
    with pytest.raises(MissingStampError):
        stamped_contract(client, name)
    raw = client.get_collection(stamped.name, embedding_function=None)
    raw.modify(metadata={**dict(raw.metadata), "ctxemb:fingerprint": "sha256:" + "0" * 64})
    with pytest.raises(DamagedStampError):
        stamped_contract(client, stamped.name)


def test_migrate_refuses_a_target_of_another_contract_and_never_touches_the_source(
    stamped, client, base
):
    before = snapshot(stamped)
    target = open_collection(client, fresh_name(), base.with_(pooling="cls"))
    with pytest.raises(CtxembError):
        migrate(stamped, base.with_(truncate_dim=128), target.name)
    copy = migrate(stamped, base.with_(truncate_dim=128), fresh_name(), progress=False)
    assert copy.ids() == set(DOCS)
    # The metadata copied along, and the text digest of the text re-embedded in the copy.
    got = copy.get(ids=["bike"], include=["metadatas", "documents"])
    assert got["metadatas"] == [{"n": 1, TEXT_KEY: text_digest(got["documents"][0])}]
    assert snapshot(stamped) == before
    assert isinstance(IndexStamp.from_metadata(copy.stored().metadata), IndexStamp)


OPEN_SCRIPT = """
import json, sys
from ctxemb_core import contract_for
from ctxemb_chroma import connect, open_collection
path, name, tag = sys.argv[1], sys.argv[2], sys.argv[3]
contract = contract_for("sentence-transformers/all-MiniLM-L6-v2")
col = open_collection(connect(path=path), name, contract, sample=4)
col.add_missing([tag + "-a", "shared"], ["A text of " + tag + ".", "The shared text."])
print(col.count())
"""


@pytest.mark.heavy
def test_processes_opening_one_new_embedded_store_at_once_all_succeed(tmp_path):
    # Seen on a real run: Chroma's schema migrations race on a new folder and one process died
    # with "table collections already exists".
    store = tmp_path / "new-store"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_SCRIPT, str(store), "docs", f"p{k}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    col = open_collection(connect(path=store), "docs", contract_for(MINILM), sample=100)
    assert col.ids() == {"p0-a", "p1-a", "p2-a", "shared"}


RAW_ADD = """
import json, sys
import chromadb
path, name, records = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
col = chromadb.PersistentClient(path=path).get_collection(name)
col.add(ids=[r[0] for r in records], documents=[r[1] for r in records],
        embeddings=[r[2] for r in records])
"""


def _raw_add_from_another_process(path, name, records) -> None:
    """``records`` ([id, text, vector]) added by a plain chromadb client in another process."""
    args = [str(path), name, json.dumps(records)]
    subprocess.run([sys.executable, "-c", RAW_ADD, *args], check=True, timeout=120)


def test_an_open_reads_what_another_process_wrote_after_this_one_loaded_the_store(
    tmp_path, embedder
):
    # Chroma's embedded mode loads a vector segment into a process once and never reloads it:
    # a record another process adds later is listed, its vector unreadable here ("Error
    # finding id", for good), and a query misses it. Processes opening one new store at once
    # met it now and then, as a failed open.
    client = connect(path=tmp_path)
    name = fresh_name()
    col = open_collection(client, name, embedder)
    col.add(["tea"], [DOCS["tea"]])
    assert col.query(["tea"], n_results=1)["ids"] == [["tea"]]  # the segment is loaded here
    text = "A record another process added."
    _raw_add_from_another_process(
        tmp_path, name, [["theirs", text, embedder.embed_documents([text])[0].tolist()]]
    )
    again = open_collection(client, name, embedder, sample=100)
    assert again.ids() == {"tea", "theirs"}
    # The reloaded view is the client's own: its queries find the other process's record too.
    assert again.query([text], n_results=1)["ids"] == [["theirs"]]
    assert col.query([text], n_results=1)["ids"] == [["theirs"]]


def test_an_open_reads_what_another_process_wrote_after_this_one_read_the_store_empty(
    tmp_path, embedder
):
    # This process read the new collection's vector segment before any file of it existed; once
    # another process wrote the files, every read of a vector here said "Nothing found on disk"
    # for as long as the process lived (a CI run's two processes creating one collection failed
    # on it). Waiting did not help; the open reads the folder afresh.
    client = connect(path=tmp_path)
    name = fresh_name()
    col = open_collection(client, name, embedder)
    assert col.query(["tea"], n_results=1)["ids"] == [[]]  # read empty: no segment files yet
    text = "A record another process added."
    _raw_add_from_another_process(
        tmp_path, name, [["theirs", text, embedder.embed_documents([text])[0].tolist()]]
    )
    again = open_collection(client, name, embedder, sample=100)
    assert again.ids() == {"theirs"}
    assert again.query([text], n_results=1)["ids"] == [["theirs"]]
    assert col.get(ids=["theirs"], include=["embeddings"])["ids"] == ["theirs"]


def test_a_foreign_vector_another_process_wrote_after_this_one_loaded_the_store_is_refused(
    tmp_path, embedder
):
    client = connect(path=tmp_path)
    name = fresh_name()
    col = open_collection(client, name, embedder)
    col.add(["tea"], [DOCS["tea"]])
    col.query(["tea"], n_results=1)
    foreign = np.random.default_rng(0).normal(size=embedder.contract.dimension)
    foreign /= np.linalg.norm(foreign)
    _raw_add_from_another_process(tmp_path, name, [["theirs", "Raw text.", foreign.tolist()]])
    with pytest.raises(ForeignVectorsError, match="theirs"):
        open_collection(client, name, embedder, sample=100)


RAW_UPDATE = """
import json, sys
import chromadb
path, name, key, vector = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
chromadb.PersistentClient(path=path).get_collection(name).update(ids=[key], embeddings=[vector])
"""


def test_a_vector_another_process_rewrote_in_place_is_refused_by_the_next_open(tmp_path, embedder):
    # No error says this view is stale: it still held the record's old vector, so the open
    # passed it and recorded the file's mark, which covers the rewrite. Every later open, a
    # fresh process's sharing the cache folder too, then took the record as verified and
    # served the other vector. The view is made again before what it read is vouched for.
    client = connect(path=tmp_path)
    name = fresh_name()
    col = open_collection(client, name, embedder)
    col.add(list(DOCS), list(DOCS.values()))
    assert open_collection(client, name, embedder, sample=2).open_check is not None  # recorded
    col.query(["tea"], n_results=1)  # the vectors are loaded here
    foreign = np.random.default_rng(0).normal(size=embedder.contract.dimension)
    foreign /= np.linalg.norm(foreign)
    args = [str(tmp_path), name, "tea", json.dumps(foreign.tolist())]
    subprocess.run([sys.executable, "-c", RAW_UPDATE, *args], check=True, timeout=120)
    with pytest.raises(ForeignVectorsError, match="tea"):
        open_collection(client, name, embedder, sample=2)
    got = col.get(ids=["tea"], include=["embeddings"])["embeddings"][0]
    assert np.allclose(got, foreign, atol=1e-6)  # this process reads what the folder holds


RAW_REMAKE = """
import json, sys
import chromadb
path, name, metadata = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = chromadb.PersistentClient(path=path)
client.delete_collection(name)
client.create_collection(name, metadata=metadata)
"""


def test_a_collection_another_process_made_again_is_refused_by_the_next_query(tmp_path, embedder):
    # Between two commits to the store's file an embedded head is not read again; a
    # collection dropped and made again elsewhere is a commit, so the next call reads it.
    client = connect(path=tmp_path)
    name = fresh_name()
    col = open_collection(client, name, embedder)
    col.add(list(DOCS), list(DOCS.values()))
    for _ in range(3):
        assert col.query(["tea"], n_results=1)["ids"] == [["tea"]]
    foreign = {"made": "elsewhere"}
    args = [str(tmp_path), name, json.dumps(foreign)]
    subprocess.run([sys.executable, "-c", RAW_REMAKE, *args], check=True, timeout=120)
    with pytest.raises(MissingStampError):
        col.query(["tea"], n_results=1)
    with pytest.raises(MissingStampError):
        col.add(["fresh"], ["A fresh one."])


def test_an_embedded_head_is_read_again_only_after_a_commit_to_the_store(
    tmp_path, embedder, monkeypatch
):
    client = connect(path=tmp_path)
    name = fresh_name()
    col = open_collection(client, name, embedder)
    col.add(list(DOCS), list(DOCS.values()))
    col.query(["tea"], n_results=1)
    reads = []
    real = type(client).get_collection

    def counted(self, *args, **kwargs):
        reads.append(args[:1])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(client), "get_collection", counted)
    for _ in range(5):
        assert col.query(["tea"], n_results=1)["ids"] == [["tea"]]
    assert reads == []  # nothing committed since: the head this object read holds
    # A write by another client of the folder, in this process: the next head reads again.
    other = connect(path=tmp_path).get_collection(name, embedding_function=None)
    other.modify(metadata={**dict(other.metadata or {}), "note": "raw"})
    col.query(["tea"], n_results=1)
    assert len(reads) >= 1
    settled = len(reads)
    col.query(["tea"], n_results=1)
    assert len(reads) == settled


@pytest.mark.transport
def test_an_internal_failure_of_the_store_is_a_store_error_that_says_what_to_do(
    stamped, monkeypatch
):
    from chromadb.errors import InternalError

    # A failure no waiting or reloading mends (a stale view of another process's writes is
    # read afresh instead: see the tests above).
    failure = InternalError("Error executing plan: database disk image is malformed")
    fail_on(monkeypatch, "get", 1, failure)
    with pytest.raises(StoreUnavailableError, match="chroma run"):
        stamped.get(ids=["tea"])
    assert stamped.get(ids=["tea"])["documents"] == [DOCS["tea"]]
