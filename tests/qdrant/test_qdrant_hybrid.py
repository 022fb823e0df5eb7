"""A hybrid index over Qdrant: the dense side a guarded collection, the lexical side core's
transactional store beside the local-mode folder; fused queries, writes reaching both sides, a
write around it refused, and an alias over it upgraded with both sides switched together."""

from __future__ import annotations

import pytest
from conftest import DOCS

import ctxemb_qdrant
from ctxemb_core import Embedder
from ctxemb_core.aliases import (
    AliasedIndex,
    Encoders,
    begin_upgrade,
    create_alias,
    cutover,
    read_alias,
    retire,
)
from ctxemb_core.errors import HybridMismatchError, InvalidInputError, OutOfStepError
from ctxemb_core.hybrid import LexicalContract
from ctxemb_core.testing.conformance import tiny_embedder
from ctxemb_qdrant._hybrid import LEXICAL_FOLDER, MARK_KEY

QUERY = "how is green tea made"


@pytest.fixture(scope="module")
def old() -> Embedder:
    return tiny_embedder()


@pytest.fixture
def client(tmp_path):
    return ctxemb_qdrant.connect(tmp_path / "qdrant")


def test_a_hybrid_collection_keeps_both_sides_in_step(client, old, tmp_path):
    hybrid = ctxemb_qdrant.open_hybrid(client, "docs", old, lexical=LexicalContract(k1=1.2))
    hybrid.sync(list(DOCS), list(DOCS.values()))
    assert (tmp_path / "qdrant" / LEXICAL_FOLDER / "docs").is_dir()
    assert client.get_collection("docs").config.metadata[MARK_KEY]
    hits = hybrid.query(QUERY, 3)
    assert hits[0].lexical_rank == 1 and hits[0].dense_rank is not None
    hybrid.add(["kettle"], ["A kettle boils water for green tea."])
    assert any(h.id == "kettle" and h.lexical_rank for h in hybrid.query("kettle", 3))
    hybrid.delete(["kettle"])
    assert "kettle" not in hybrid.lexical.ids() and hybrid.verify()["ok"]
    with pytest.raises(HybridMismatchError, match=r"lexical\.k1"):
        ctxemb_qdrant.open_hybrid(client, "docs", old, lexical=LexicalContract(k1=0.9))
    # A point written around the hybrid index (its dense side only) is refused, named.
    dense = ctxemb_qdrant.open_collection(client, "docs", old)
    dense.add(["stray"], ["written around the lexical side"])
    with pytest.raises(OutOfStepError, match="stray"):
        ctxemb_qdrant.open_hybrid(client, "docs", old)


def test_a_store_without_a_folder_needs_one_named(old, tmp_path):
    memory = ctxemb_qdrant.connect(memory=True)
    with pytest.raises(InvalidInputError, match="lexical_path"):
        ctxemb_qdrant.open_hybrid(memory, "docs", old)
    named = ctxemb_qdrant.open_hybrid(memory, "docs", old, lexical_path=tmp_path / "lx")
    named.sync(list(DOCS), list(DOCS.values()))
    assert named.query(QUERY, 1)[0].lexical_rank == 1


def test_an_alias_over_a_hybrid_collection_upgrades_both_sides(client, old, tmp_path):
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = ctxemb_qdrant.catalog(client)
    hybrid = catalog.open_hybrid("docs-v1", old)
    hybrid.sync(list(DOCS), list(DOCS.values()))
    create_alias(catalog, "docs", "docs-v1")
    aliased = AliasedIndex.open(catalog, "docs", Encoders(old, new))
    begin_upgrade(catalog, "docs", new, lexical=LexicalContract(k1=0.9, stemmer="none"))
    shadow = read_alias(catalog, "docs").shadow
    aliased.upsert(["kettle"], ["A kettle boils water for green tea."])  # both, both sides
    assert "kettle" in set(catalog.lexical(shadow.index).ids())
    cutover(catalog, "docs", Encoders(old, new), sample=4)
    found = aliased.hybrid_search("kettle boils", 1)
    assert found.index == shadow.index and found.hits[0].id == "kettle"
    retire(catalog, "docs")
    assert not catalog.exists("docs-v1") and not catalog.lexical("docs-v1").exists()
    assert not (tmp_path / "qdrant" / LEXICAL_FOLDER / "docs-v1").exists()  # its folder too
