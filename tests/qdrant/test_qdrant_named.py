"""Named vectors as Qdrant's in-place upgrade: a vector per contract in one collection, each
with its own stamp, added, backfilled and switched; each opens through core's guard."""

from __future__ import annotations

import pytest
from qdrant_client import QdrantClient, models

from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import ContractMismatchError, InvalidInputError, MissingStampError
from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.conformance import tiny_embedder
from ctxemb_qdrant._named import (
    VECTORS_KEY,
    NamedVectorView,
    add_named_vector,
    backfill_named,
    serving_vector,
    switch_named,
    vector_stamps,
)

TEXTS = [f"document {k} about green tea and {k % 5} kettles" for k in range(24)]


@pytest.fixture(scope="module")
def old() -> Embedder:
    return tiny_embedder()


@pytest.fixture(scope="module")
def new(old) -> Embedder:
    return Embedder(old.contract.with_(truncate_dim=8))


@pytest.fixture
def client(old) -> QdrantClient:
    """A collection of 24 points (text and metadata in the driver's payload), vector ``v1``
    backfilled under the old contract."""
    client = QdrantClient(location=":memory:")
    client.create_collection("docs", vectors_config={}, metadata={"owner": "team"})
    client.upsert(
        "docs",
        [
            models.PointStruct(
                id=k, vector={}, payload={"page_content": t, "metadata": {"k": k % 2}}
            )
            for k, t in enumerate(TEXTS)
        ],
    )
    add_named_vector(client, "docs", "v1", old)
    assert backfill_named(client, "docs", "v1", old) == len(TEXTS)
    switch_named(client, "docs", "v1")
    return client


def test_an_in_place_upgrade_adds_backfills_and_switches_keeping_the_old_vector(client, old, new):
    add_named_vector(client, "docs", "v2", new)
    assert set(vector_stamps(client, "docs")) == {"v1", "v2"}
    with pytest.raises(InvalidInputError, match="backfill it"):
        switch_named(client, "docs", "v2")  # nothing backfilled yet: still serving v1
    assert serving_vector(client, "docs") == "v1"

    assert backfill_named(client, "docs", "v2", new) == len(TEXTS)
    assert backfill_named(client, "docs", "v2", new) == 0  # resumable: nothing left
    assert switch_named(client, "docs", "v2") == "v1"
    assert serving_vector(client, "docs") == "v2"

    # Each vector opens under its own contract only, its stamp and records verified.
    v2 = GuardedIndex.open(NamedVectorView(client, "docs", "v2"), new)
    v1 = GuardedIndex.open(NamedVectorView(client, "docs", "v1"), old)
    assert v2.count() == v1.count() == len(TEXTS)
    assert len(v2.query("green tea kettles", 3, where={"k": 1})[0]) == 3
    (best,) = v1.query(TEXTS[7], 1)[0]
    assert best.score == pytest.approx(1.0, abs=1e-5)  # a text finds its own vector
    with pytest.raises(ContractMismatchError):
        GuardedIndex.open(NamedVectorView(client, "docs", "v2"), old)
    # The old vector and the payload were kept; other metadata too.
    point = client.retrieve("docs", [3], with_vectors=True)[0]
    assert set(point.vector) == {"v1", "v2"} and point.payload["page_content"] == TEXTS[3]
    assert client.get_collection("docs").config.metadata["owner"] == "team"


def test_a_text_changed_around_the_backfill_is_embedded_again(client, new):
    add_named_vector(client, "docs", "v2", new)
    backfill_named(client, "docs", "v2", new)
    client.set_payload("docs", {"page_content": "a new text about tea"}, points=[5])
    assert backfill_named(client, "docs", "v2", new) == 1


def test_bad_input_is_refused_and_writes_nothing(client, old, new):
    before = client.get_collection("docs").config.metadata
    with pytest.raises(InvalidInputError, match="another contract"):
        add_named_vector(client, "docs", "v1", new)
    with pytest.raises(InvalidInputError, match="does not exist"):
        add_named_vector(client, "nope", "v2", new)
    with pytest.raises(MissingStampError):
        backfill_named(client, "docs", "v9", new)
    with pytest.raises(ContractMismatchError):
        backfill_named(client, "docs", "v1", new)
    view = GuardedIndex.open(NamedVectorView(client, "docs", "v1"), old)
    with pytest.raises(InvalidInputError, match="named vector"):
        view.add(["x"], ["tea"])
    assert client.get_collection("docs").config.metadata == before
    assert set(before[VECTORS_KEY]) == {"v1"}


def test_a_vector_written_around_the_guard_is_caught_on_open(client, old):
    client.update_vectors("docs", [models.PointVectors(id=23, vector={"v1": [0.25] * 16})])
    from ctxemb_core.errors import ForeignVectorsError

    with pytest.raises(ForeignVectorsError):
        GuardedIndex.open(NamedVectorView(client, "docs", "v1"), old, sample=len(TEXTS))


def test_a_collection_ctxemb_made_serves_the_switched_vector_and_rolls_back(old, new):
    # The in-place path on what open_collection makes (its unnamed vector): adding the named
    # vector leaves the old index readable and writable through the guard until the switch;
    # after it, an ordinary open under the new contract serves the new vector, one under the
    # old contract is refused with the way back; the switch back works the same way.
    import ctxemb_qdrant  # the upgrade's functions are the package's own too

    client = QdrantClient(location=":memory:")
    docs = ctxemb_qdrant.open_collection(client, "docs", old)
    docs.add([f"d{k}" for k in range(6)], TEXTS[:6])
    before = docs.query([TEXTS[2]], n_results=3)["ids"]
    ctxemb_qdrant.add_named_vector(client, "docs", "v2", new)
    assert docs.query([TEXTS[2]], n_results=3)["ids"] == before
    docs.add(["d6"], [TEXTS[6]])
    assert ctxemb_qdrant.backfill_named(client, "docs", "v2", new) == 7
    assert ctxemb_qdrant.switch_named(client, "docs", "v2") is None

    served = ctxemb_qdrant.open_collection(client, "docs", new)
    assert isinstance(served, ctxemb_qdrant.GuardedQdrantCollection)
    assert served.count() == 7 and served.stamp.contract == new.contract
    assert served.query([TEXTS[6]], n_results=1)["ids"] == [["d6"]]
    assert len(served.get(include=["embeddings"])["embeddings"][0]) == 8  # v2's width
    with pytest.raises(ContractMismatchError) as refused:
        ctxemb_qdrant.open_collection(client, "docs", old)
    assert "now serves vector 'v2'" in str(refused.value)
    assert "switch_named(client, 'docs', '')" in str(refused.value)
    with pytest.raises(ContractMismatchError, match="now serves vector 'v2'"):
        docs.count()  # an index opened before the switch is refused on its next call
    served.add(["d7"], [TEXTS[7]])  # written through the guard into v2
    assert ctxemb_qdrant.stamped_contract(client, "docs") == new.contract

    # Rollback: the old vector lacks d7 (written after the switch) until it is backfilled.
    with pytest.raises(InvalidInputError, match="backfill it"):
        ctxemb_qdrant.switch_named(client, "docs", "")
    assert ctxemb_qdrant.backfill_named(client, "docs", "", old) >= 1
    assert ctxemb_qdrant.switch_named(client, "docs", "") == "v2"
    back = ctxemb_qdrant.open_collection(client, "docs", old)
    assert back.count() == 8 and back.query([TEXTS[7]], n_results=1)["ids"] == [["d7"]]
    with pytest.raises(ContractMismatchError, match="switch_named\\(client, 'docs', 'v2'\\)"):
        ctxemb_qdrant.open_collection(client, "docs", new)


def test_every_store_command_serves_the_switched_vector(tmp_path, old, new, capsys, monkeypatch):
    import json

    import ctxemb_qdrant
    from ctxemb_core.cli import main

    folder = tmp_path / "q"
    client = ctxemb_qdrant.connect(folder)
    docs = ctxemb_qdrant.open_collection(client, "docs", old)
    docs.add([f"d{k}" for k in range(8)], TEXTS[:8])
    ctxemb_qdrant.add_named_vector(client, "docs", "v2", new)
    ctxemb_qdrant.backfill_named(client, "docs", "v2", new)
    ctxemb_qdrant.switch_named(client, "docs", "v2")
    served = ctxemb_qdrant.open_collection(client, "docs", new).query([TEXTS[5]], n_results=3)
    monkeypatch.chdir(old.model_path.parent)  # the stamp names the model by its folder's name
    store = ("--store", "qdrant", "--qdrant-path", str(folder), "--collection", "docs")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = run("query", *store, "--json", "-k", "3", TEXTS[5])
    assert code == 0 and [r["id"] for r in json.loads(out)["results"]] == served["ids"][0], err
    code, out, err = run("verify", *store, "--all")
    assert code == 0 and json.loads(out)["ok"], err
    code, out, err = run("query", *store, "--model", old.model_path.name, TEXTS[5])
    assert code == 2 and "now serves vector 'v2'" in err
    code, out, err = run("migrate", *store, "--to", "docs2")
    assert code == 0, err
    code, out, err = run("alias", *store, "create", "docs-live")
    assert code == 0, err
    again = ctxemb_qdrant.connect(folder)
    copied = ctxemb_qdrant.open_collection(again, "docs2", new, create=False)
    assert copied.count() == 8 and copied.stamp.contract == new.contract
