"""The guard under adversarial use, on the embedded client (and a real server: ``transport``).

Each test is one way an index could lose data, or hold vectors the guard never looked at, or
answer bad input with something other than a ctxemb error. Faults of the *store* (a write that
fails half-way, an interrupt, a server that goes away during the undo) are injected into Chroma's
collection class; the guard itself is never replaced.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import numpy as np
import pytest
from chromadb.api.models.Collection import Collection
from chromadb.utils.embedding_functions import DefaultEmbeddingFunction
from conftest import DOCS, fresh_name

from ctxemb_chroma import ContractEmbeddingFunction, connect, open_collection, verify
from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.errors import (
    ConfigurationMismatchError,
    ContractMismatchError,
    CtxembError,
    DamagedStampError,
    ExistingIdsError,
    ForeignVectorsError,
    IncompleteWriteError,
    InvalidInputError,
    MissingStampError,
    StoreUnavailableError,
)
from ctxemb_core.guard import detection_probability, sample_ranges


@pytest.fixture
def stamped(client, embedder):
    col = open_collection(client, fresh_name(), embedder)
    col.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
    return col


def snapshot(col) -> dict:
    got = col.raw.get(include=["documents", "embeddings", "metadatas"])
    return {
        i: (d, m, np.asarray(e).round(6).tolist())
        for i, d, m, e in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }


@pytest.fixture
def faulty(monkeypatch, stamped):
    """Writes go in chunks of two, and the n-th write call of a kind fails as asked."""
    monkeypatch.setattr(type(stamped.client), "get_max_batch_size", lambda self: 2)
    calls: dict[str, int] = {}

    def arm(method: str, on_call: int, error: BaseException) -> None:
        real = getattr(Collection, method)

        def flaky(self, *args, **kwargs):
            calls[method] = calls.get(method, 0) + 1
            if calls[method] == on_call:
                raise error
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Collection, method, flaky)

    return arm


# -- data loss ---------------------------------------------------------------------------------


@pytest.mark.transport
def test_a_failed_upsert_restores_exactly_the_state_before(stamped, faulty):
    before = snapshot(stamped)
    faulty("upsert", 2, RuntimeError("store failed on the second chunk"))
    with pytest.raises(RuntimeError, match="second chunk"):
        stamped.upsert(
            ["tea", "bike", "new1", "new2"],
            ["Tea replaced.", "Bike replaced.", "A new one.", "Another new one."],
        )
    assert snapshot(stamped) == before  # old texts back, new ids gone, nothing else touched


def test_a_failed_add_deletes_only_what_it_wrote(stamped, faulty):
    before = snapshot(stamped)
    faulty("add", 2, RuntimeError("store failed"))
    with pytest.raises(RuntimeError):
        stamped.add(["n1", "n2", "n3"], ["one", "two", "three"])
    assert snapshot(stamped) == before


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(3)])
def test_an_interrupted_multi_chunk_upsert_leaves_the_collection_as_it_was(
    stamped, faulty, interrupt
):
    before = snapshot(stamped)
    faulty("upsert", 2, interrupt)
    with pytest.raises(type(interrupt)):
        stamped.upsert(list(DOCS), [f"replaced {i}" for i in DOCS])
    assert snapshot(stamped) == before


def test_a_failed_undo_reports_both_errors_and_the_ids(stamped, faulty):
    faulty("upsert", 2, RuntimeError("write broke"))
    faulty("delete", 1, ConnectionError("server went away"))
    with pytest.raises(IncompleteWriteError) as info:
        stamped.upsert(["tea", "x1", "x2"], ["t", "one", "two"])
    err = info.value
    assert "write broke" in str(err.error) and "server went away" in str(err.undo_error)
    assert set(err.ids) == {"tea", "x1", "x2"}
    assert "write broke" in str(err) and "server went away" in str(err)


def test_add_of_an_existing_id_is_refused_whole_before_anything_is_written(stamped):
    before = snapshot(stamped)
    with pytest.raises(ExistingIdsError, match="upsert") as info:
        stamped.add(["brand-new", "tea"], ["A new text.", "A new text for tea."])
    assert info.value.ids == ("tea",)
    assert snapshot(stamped) == before
    assert stamped.add_missing(["brand-new", "tea"], ["A new text.", "ignored"]) == 1
    assert stamped.get(ids=["tea"])["documents"] == [DOCS["tea"]]


# -- bypasses ----------------------------------------------------------------------------------


def test_a_contract_changed_in_chromas_configuration_is_refused_then_repaired(
    stamped, client, base
):
    raw = client.get_collection(stamped.name, embedding_function=None)
    with pytest.raises(ContractMismatchError):  # Chroma persists first, then this is raised
        raw.modify(
            configuration={
                "embedding_function": ContractEmbeddingFunction(base.with_(pooling="cls"))
            }
        )
    with pytest.raises(ConfigurationMismatchError) as info:
        open_collection(client, stamped.name, base)
    assert info.value.fields == ("pooling",)
    assert verify(stamped, base).to_dict()["configuration"] != "match"
    assert not verify(stamped, base).ok
    open_collection(client, stamped.name, base, repair=True)
    assert verify(stamped, base).ok
    theirs = client.get_collection(stamped.name).query(query_texts=["garden pests"], n_results=2)
    assert theirs["ids"] == stamped.query(["garden pests"], n_results=2)["ids"]


def test_a_configuration_replaced_by_another_function_is_reported_as_such(stamped, client, base):
    raw = client.get_collection(stamped.name, embedding_function=None)
    with pytest.raises(ValueError):
        raw.modify(configuration={"embedding_function": DefaultEmbeddingFunction()})
    with pytest.raises(ConfigurationMismatchError, match="'default'") as info:
        open_collection(client, stamped.name, base)
    assert not isinstance(info.value, MissingStampError)
    assert open_collection(client, stamped.name, base, repair=True).count() == len(DOCS)


@pytest.mark.transport
def test_records_with_a_vector_but_no_text_are_foreign(stamped, client, embedder, base):
    raw = client.get_collection(stamped.name, embedding_function=None)
    raw.add(ids=["ghost"], embeddings=embedder.embed_documents(["A plausible vector."]))
    with pytest.raises(ForeignVectorsError) as info:
        open_collection(client, stamped.name, base)
    assert info.value.ids == ("ghost",) and info.value.untexted == 1
    report = verify(stamped, base, all=True, progress=False)
    assert not report.ok and report.reasons == {"ghost": "no text to re-embed"}


def test_vectors_of_the_wrong_length_are_foreign(stamped, client, embedder, base):
    raw = client.get_collection(stamped.name, embedding_function=None)
    scaled = embedder.embed_documents([DOCS["moon"]]) * 1.5  # same angle, not unit length
    raw.upsert(ids=["moon"], embeddings=scaled, documents=[DOCS["moon"]])
    report = verify(stamped, base, all=True, progress=False)
    assert report.bad_ids == ("moon",) and report.reasons["moon"] == "another vector"
    with pytest.raises(ForeignVectorsError):
        open_collection(client, stamped.name, base, sample=len(DOCS))


def _canary_with(md: dict, values: np.ndarray) -> str:
    rows = 2 * len(json.loads(md["ctxemb:probes"]))
    dim = values.shape[-1] if values.ndim else 384
    arr = np.resize(values, (rows, dim)).astype("<f4")
    return "f32le:" + base64.b64encode(arr.tobytes()).decode()


DAMAGE = {
    "nan canary": lambda md: {**md, "ctxemb:canary": _canary_with(md, np.full(384, np.nan))},
    "inf canary": lambda md: {**md, "ctxemb:canary": _canary_with(md, np.full(384, np.inf))},
    "zero canary": lambda md: {**md, "ctxemb:canary": _canary_with(md, np.zeros(384))},
    "no probes": lambda md: {**md, "ctxemb:probes": "[]", "ctxemb:canary": "f32le:"},
    "probes not a list": lambda md: {**md, "ctxemb:probes": '{"a": 1}'},
    "fewer probes than canary rows": lambda md: {
        **md,
        "ctxemb:probes": json.dumps(json.loads(md["ctxemb:probes"])[:3]),
    },
    "duplicate probes": lambda md: {**md, "ctxemb:probes": json.dumps(["a", "a", "b", "c"])},
    "short canary": lambda md: {**md, "ctxemb:canary": md["ctxemb:canary"][:-8]},
    "schema as text": lambda md: {**md, "ctxemb:schema": "1"},
    "schema as bool": lambda md: {**md, "ctxemb:schema": True},
    "fingerprint as number": lambda md: {**md, "ctxemb:fingerprint": 7},
    "contract nested deep": lambda md: {**md, "ctxemb:contract": "[" * 100_000 + "]" * 100_000},
    "canary missing": lambda md: {k: v for k, v in md.items() if k != "ctxemb:canary"},
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_stamp_is_refused_as_damaged_never_passed(stamped, client, base, damage):
    raw = client.get_collection(stamped.name, embedding_function=None)
    md = DAMAGE[damage](dict(raw.metadata))
    raw.modify(metadata=md)
    with pytest.raises(DamagedStampError):
        open_collection(client, stamped.name, base)
    report = verify(client.get_collection(stamped.name, embedding_function=None), base)
    assert not report.ok and report.damaged
    with pytest.raises(DamagedStampError):  # an open collection sees it on its next call
        stamped.query(["tea"], n_results=1)


def test_detection_probability_matches_the_sample_drawn():
    rng_hits = 0
    trials = 4000
    count, size = 200, 16
    for _ in range(trials):
        offsets = {o for a, b in sample_ranges(count, size) for o in range(a, b)}
        rng_hits += 17 in offsets  # one record altered in place, among the older ones
    assert abs(rng_hits / trials - detection_probability(count, size)) < 0.03
    assert detection_probability(count, size) == pytest.approx(8 / 192)
    assert detection_probability(10, 16) == 1.0
    assert detection_probability(count, 0) == 0.0
    assert detection_probability(10_000, 16, altered=100) == pytest.approx(
        1 - (1 - 100 / 9992) ** 8, rel=1e-2
    )


def test_verify_all_finds_what_a_sample_can_miss_and_says_what_it_checked(client, embedder, base):
    col = open_collection(client, fresh_name(), embedder)
    texts = [f"Record number {k} is about topic {k % 7}." for k in range(120)]
    col.add([f"d{k}" for k in range(120)], texts)
    raw = client.get_collection(col.name, embedding_function=None)
    other = Embedder(base.with_(pooling="max"))
    raw.upsert(ids=["d3"], embeddings=other.embed_documents([texts[3]]), documents=[texts[3]])
    sampled = verify(col, base, sample=2)
    assert sampled.mode == "sample" and sampled.sample_size == 2
    assert "probability" in " ".join(sampled.not_checked())
    report = verify(col, base, all=True, progress=False)
    assert report.mode == "all" and report.sample_size == 120 and report.bad_ids == ("d3",)
    d = report.to_dict()
    assert d["detection_probability"] == 1.0 and d["checked"] and d["not_checked"]
    with pytest.raises(ForeignVectorsError):
        open_collection(client, col.name, base, sample=1000)
    assert open_collection(client, col.name, base, sample=0).count() == 120  # canary only


@pytest.mark.transport
def test_a_stamp_replaced_or_removed_after_open_is_seen_on_the_next_call(stamped, client, base):
    raw = client.get_collection(stamped.name, embedding_function=None)
    stamped.query(["tea"], n_results=1)
    other = IndexStamp.from_embedder(Embedder(base.with_(pooling="cls"))).to_metadata()
    raw.modify(metadata=other)
    with pytest.raises(ContractMismatchError):
        stamped.query(["tea"], n_results=1)
    with pytest.raises(ContractMismatchError):
        stamped.add(["z"], ["zz"])
    raw.modify(metadata={"note": "stamp gone"})
    with pytest.raises(MissingStampError):
        stamped.query(["tea"], n_results=1)
    client.delete_collection(stamped.name)
    with pytest.raises(InvalidInputError, match="no longer exists"):
        stamped.query(["tea"], n_results=1)
    # Created again under the same name by another contract: refused, not silently followed.
    open_collection(client, stamped.name, base.with_(normalize=False))
    with pytest.raises(ContractMismatchError):
        stamped.query(["tea"], n_results=1)


# -- bad input and concurrency -----------------------------------------------------------------


@pytest.mark.transport
def test_bad_input_to_every_entry_point_is_a_named_ctxemb_error(stamped, client, base, embedder):
    before = snapshot(stamped)
    calls = [
        (lambda: open_collection(None, "docs", base), "client"),
        (lambda: open_collection(client, None, base), "name"),
        (lambda: open_collection(client, "a", base), "name"),
        (lambda: open_collection(client, "bad name!", base), "name"),
        (lambda: open_collection(client, fresh_name(), None), "contract"),
        (lambda: open_collection(client, fresh_name(), "minilm"), "contract"),
        (lambda: open_collection(client, stamped.name, base, sample=-1), "sample"),
        (lambda: stamped.add(None, ["x"]), "ids"),
        (lambda: stamped.add(["x"], None), "documents"),
        (lambda: stamped.add(["x"], [None]), "documents"),
        (lambda: stamped.add(["x"], [b"bytes"]), "documents"),
        (lambda: stamped.add(["x"], ["ok"], [{}]), "metadatas"),
        (lambda: stamped.add(["x"], ["ok"], [{"a": {"nested": 1}}]), "metadatas"),
        (lambda: stamped.add(["x"], ["ok"], ["not a dict"]), "metadatas"),
        (lambda: stamped.add(["x"], ["lone \ud800 surrogate"]), "texts"),
        (lambda: stamped.upsert(["tea"], [None]), "documents"),
        (lambda: stamped.query(None), "texts"),
        (lambda: stamped.query([]), "texts"),
        (lambda: stamped.query([None]), "texts"),
        (lambda: stamped.query(["\udfff"]), "texts"),
        (lambda: stamped.query(["ok"], n_results=0), "n_results"),
        (lambda: stamped.query(["ok"], n_results="3"), "n_results"),
        (lambda: stamped.query(["ok"], embedder=base), "embedder"),
        (lambda: stamped.query(["ok"], where={"$bogus": 1}), "query"),
        (lambda: stamped.delete(None), "ids"),
        (lambda: stamped.delete([]), "ids"),
        (lambda: stamped.delete("tea"), "ids"),
        (lambda: embedder.embed_documents(None), "texts"),
        (lambda: embedder.embed_query(None), "text"),
        (lambda: verify(stamped, base, sample=-2), "sample"),
        (lambda: verify(stamped, "not a contract"), "contract"),
        (lambda: connect(host="127.0.0.1", port=0), "port"),
    ]
    for call, named in calls:
        with pytest.raises(CtxembError) as info:
            call()
        assert isinstance(info.value, (ValueError, TypeError)), info.value
        assert named in str(info.value), (named, str(info.value))
    assert snapshot(stamped) == before


def test_an_unreachable_server_or_an_impossible_path_is_a_store_error(tmp_path):
    from chroma_server import free_port

    with pytest.raises(StoreUnavailableError, match="chroma run"):
        connect(host="127.0.0.1", port=free_port())
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(StoreUnavailableError, match="is a file"):
        connect(path=str(afile))
    with pytest.raises(StoreUnavailableError):
        connect(path=str(afile / "below" / "a" / "file"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


INDEX_SCRIPT = """
import json, sys
from ctxemb_core import contract_for
from ctxemb_chroma import connect, open_collection
where, name, docs = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
contract = contract_for("sentence-transformers/all-MiniLM-L6-v2")
col = open_collection(connect(**where), name, contract)
added = col.add_missing(list(docs), list(docs.values()))
print(added, col.count())
"""


@pytest.mark.heavy
@pytest.mark.transport
def test_two_processes_create_and_index_one_new_collection_at_once(client):
    name = fresh_name()
    args = [json.dumps(client.ctxemb_where), name, json.dumps(DOCS)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", INDEX_SCRIPT, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    raw = client.get_collection(name, embedding_function=None)
    assert sorted(raw.get(include=[])["ids"]) == sorted(DOCS)
    assert IndexStamp.is_stamped(raw.metadata)


def test_a_read_waits_for_a_segment_another_process_is_writing_and_nothing_else():
    from chromadb.errors import InternalError

    from ctxemb_chroma._store import read_settled

    failures = ["Error creating hnsw segment reader: Nothing found on disk"] * 2
    calls = []

    def read(**kwargs):
        calls.append(kwargs)
        if failures:
            raise InternalError(failures.pop())
        return "read"

    assert read_settled(read, ids=["a"]) == "read"
    assert calls == [{"ids": ["a"]}] * 3

    def broken():
        calls.append("broken")
        raise InternalError("Error executing plan: disk full")

    calls.clear()
    with pytest.raises(InternalError, match="disk full"):
        read_settled(broken)
    assert calls == ["broken"]


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_int8_and_binary_contracts_index_and_search_in_chroma(client, base, precision):
    contract = base.with_(precision=precision)
    col = open_collection(client, fresh_name(), contract)
    col.add(list(DOCS), list(DOCS.values()))
    assert col.query(["how is green tea made"], n_results=1)["ids"][0][0] == "tea"
    assert col.query(["lettuce pests at night"], n_results=1)["ids"][0][0] == "slug"
    raw_query = client.get_collection(col.name).query(query_texts=["tea leaves"], n_results=3)
    assert raw_query["ids"] == col.query(["tea leaves"], n_results=3)["ids"]
    assert verify(col, contract, all=True, progress=False).ok
    open_collection(client, col.name, contract, sample=100)
    raw = client.get_collection(col.name, embedding_function=None)
    wrong = Embedder(base.with_(pooling="max", precision=precision))
    from ctxemb_core.guard import storable

    raw.upsert(
        ids=["bank"],
        embeddings=storable(wrong.embed_documents([DOCS["bank"]]), contract.precision),
        documents=[DOCS["bank"]],
    )
    assert verify(col, contract, all=True, progress=False).bad_ids == ("bank",)
