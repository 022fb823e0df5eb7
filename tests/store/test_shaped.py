"""ShapedFacade (issue 44): Chroma's result shapes built once in core, over any driver.

``GuardedTable`` is a subclass that searches by its own SQL; here a small one over the memory
driver shows what a store gets with no search of its own: ``query``, ``query_vectors`` and
``get`` in Chroma's shapes, ``include`` checked, records without a vector refused, and a search
whose stamp moved under it verified again and run again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ctxemb_core.errors import (
    ContractMismatchError,
    ForeignVectorsError,
    InvalidInputError,
    StampError,
    StampMovedError,
)
from ctxemb_core.index import MemoryDriver, MemoryStore, Record
from ctxemb_core.index.shaped import ShapedFacade
from ctxemb_core.testing.conformance import foreign_stamp, tiny_embedder, variants

TEXTS = ["green tea is steamed", "black tea is rolled", "oolong is bruised"]


class GuardedShelf(ShapedFacade[MemoryDriver, Any]):
    _driver_type = MemoryDriver

    @classmethod
    def _stored_in(cls, driver: MemoryDriver) -> Any:
        return driver.store.indexes.get(driver.name)


@pytest.fixture(scope="module")
def embedder():
    return tiny_embedder()


@pytest.fixture
def shelf(embedder):
    shelf = GuardedShelf.open(MemoryStore().driver("docs"), embedder)
    shelf.add(["a", "b", "c"], TEXTS, [{"kind": "green"}, {"kind": "black"}, None])
    return shelf


def test_query_returns_chromas_shape_nearest_first(shelf):
    found = shelf.query(["green tea is steamed", "oolong"], n_results=2)
    assert sorted(found) == ["distances", "documents", "ids", "metadatas"]
    assert len(found["ids"]) == 2 and found["ids"][0][0] == "a"
    assert found["documents"][0][0] == TEXTS[0] and found["metadatas"][0][0]["kind"] == "green"
    assert found["distances"][0] == sorted(found["distances"][0])
    only = shelf.query("green tea", n_results=1, include=["embeddings"], where={"kind": "black"})
    assert only["ids"] == [["b"]] and only["embeddings"][0].shape == (1, shelf.contract.output_dim)


def test_query_vectors_and_get(shelf, embedder):
    vectors = shelf.index.query_vectors(["black tea"])
    assert shelf.query_vectors(vectors, 1, include=[])["ids"] == [["b"]]
    assert shelf.get(include=["documents"]) == {"ids": ["a", "b", "c"], "documents": TEXTS}
    assert shelf.get(["c", "a"], include=[])["ids"] == ["c", "a"]
    assert shelf.get(limit=1, offset=1)["ids"] == ["b"]
    got = shelf.get(["a"], include=["embeddings"])["embeddings"]
    assert got.shape == (1, embedder.contract.output_dim)


@pytest.mark.parametrize(
    "include", ["documents", ["distance"], ["documents", "vectors"]], ids=["str", "typo", "mixed"]
)
def test_a_bad_include_is_refused_before_anything_is_embedded(shelf, include):
    with pytest.raises(InvalidInputError, match="include"):
        shelf.query(["tea"], include=include)
    with pytest.raises(InvalidInputError, match="include"):
        shelf.get(include=["distances"])  # a get has no distances


def test_an_unknown_option_and_a_filter_on_get_are_refused(shelf):
    with pytest.raises(TypeError, match="exact"):
        shelf.query(["tea"], exact=True)  # PostgreSQL's option, not every store's
    with pytest.raises(InvalidInputError, match="where"):
        shelf.get(where={"kind": "green"})


def test_a_record_without_a_vector_is_refused_never_ranked(shelf):
    shelf.driver.store.raw("docs").write([Record("x", None, "no vector", None)])
    with pytest.raises(ForeignVectorsError):
        shelf.query(["tea"], n_results=5)


def test_a_stamp_replaced_by_another_contracts_is_refused_on_query(shelf, embedder):
    shelf.driver.store.raw("docs").set_metadata(
        foreign_stamp(variants(embedder.contract)["pooling"]).to_metadata()
    )
    with pytest.raises(ContractMismatchError):
        shelf.query(["tea"])


def test_a_search_whose_stamp_keeps_moving_is_refused(shelf):
    calls: list[Any] = []

    def moving(*args: Any) -> Any:
        calls.append(args)
        raise StampMovedError("moved")

    shelf._search = moving  # type: ignore[method-assign]
    with pytest.raises(StampError, match="keeps changing"):
        shelf.query_vectors(np.zeros((1, shelf.contract.output_dim), np.float32))
    assert len(calls) == 3
