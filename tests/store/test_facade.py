"""IndexFacade (issue 44): the one base of a store adapter's public index object.

``GuardedCollection`` and ``GuardedTable`` are subclasses; here a small one over the memory
driver shows what a store gets from the base and which hooks it gives: its store's object, its
own batch rules (refused before anything is embedded), its words, the open path.
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxemb_core.errors import ContractMismatchError, InvalidInputError
from ctxemb_core.index import Capabilities, GuardedIndex, IndexFacade, MemoryDriver, MemoryStore
from ctxemb_core.remedy import StoreTerms
from ctxemb_core.testing.conformance import foreign_stamp, tiny_embedder, variants

TERMS = StoreTerms(
    module="ctxemb_memory", open="open_shelf", kind="shelf", records="books", cli_where="-"
)


class ShelfDriver(MemoryDriver):
    """The memory driver of a store that refuses ids with a space in them: its own rule,
    which the guard asks of it before anything is embedded (``check_batch``)."""

    def check_batch(self, ids: list[str], documents: Any, metadatas: Any) -> None:
        bad = [i for i in ids if " " in i]
        if bad:
            raise InvalidInputError(f"id {bad[0]!r}: this store keeps no spaces in ids")


class GuardedShelf(IndexFacade[MemoryDriver, Any]):
    """A facade over the memory driver, in the shelf store's words."""

    _driver_type = MemoryDriver
    _terms = TERMS

    @classmethod
    def _stored_in(cls, driver: MemoryDriver) -> Any:
        return driver.store.indexes.get(driver.name)


@pytest.fixture(scope="module")
def embedder():
    return tiny_embedder()


@pytest.fixture
def store():
    return MemoryStore()


def test_open_creates_then_verifies_and_the_shared_calls_work(store, embedder):
    shelf = GuardedShelf.open(store.driver("docs"), embedder)
    assert shelf.open_check is None and shelf.stored() is not None
    shelf.add(["a", "b"], ["green tea is steamed", "black tea is rolled"])
    assert shelf.add_missing(["b", "c"], ["black tea is rolled", "oolong is bruised"]) == 1
    report = shelf.sync(["a", "c"], ["green tea is pan fired", "oolong is bruised"])
    assert (report.added, report.updated, report.unchanged) == ((), ("a",), 1)
    assert shelf.delete_missing(["a", "c"]) == ["b"]
    again = GuardedShelf.open(store.driver("docs"), embedder)
    assert again.ids() == {"a", "c"} and again.count() == 2
    assert again.open_check is not None and again.contract == embedder.contract


def test_a_missing_index_and_a_stray_option_are_refused_in_the_stores_words(store, embedder):
    with pytest.raises(InvalidInputError, match=r"shelf 'gone' does not exist.*create=False"):
        GuardedShelf.open(store.driver("gone"), embedder, create=False)
    with pytest.raises(TypeError, match="'sampel'"):
        GuardedShelf.open(store.driver("docs"), embedder, sampel=3)  # type: ignore[call-arg]
    assert store.names() == []


def test_a_stamp_of_another_contract_is_refused_before_anything_is_made(store, embedder):
    other = foreign_stamp(variants(embedder.contract)["pooling"])
    with pytest.raises(ContractMismatchError):
        GuardedShelf.open(store.driver("docs"), embedder, stamp=other)
    assert store.names() == []


def test_the_stores_batch_rules_refuse_before_anything_is_written(store, embedder):
    shelf = GuardedShelf.open(ShelfDriver(store, "docs", Capabilities()), embedder)
    for write in (shelf.add, shelf.upsert, shelf.add_missing, shelf.sync):
        with pytest.raises(InvalidInputError, match="no spaces"):
            write(["fine", "not fine"], ["one text", "another text"])
    # The rule is the driver's, so a framework writing through the index meets it too.
    with pytest.raises(InvalidInputError, match="no spaces"):
        shelf.index.add_embedded(
            ["not fine"],
            shelf.embedder.embed_documents(["one text"]),
            ["one text"],
            fingerprint=shelf.contract.fingerprint,
        )
    assert shelf.count() == 0


def test_errors_of_the_shared_calls_are_worded_in_the_stores_terms(store, embedder):
    shelf = GuardedShelf.open(store.driver("docs"), embedder)
    vectors = embedder.embed_documents(["green tea"])
    other = variants(embedder.contract)["pooling"].fingerprint
    with pytest.raises(ContractMismatchError) as err:
        shelf.add_embedded(["a"], vectors, ["green tea"], fingerprint=other)
    assert err.value.terms is TERMS


def test_only_an_index_over_the_declared_driver_is_wrapped(store, embedder):
    class Other(MemoryDriver):
        pass

    class GuardedOther(GuardedShelf):
        _driver_type = Other

    index = GuardedIndex.open(store.driver("docs"), embedder)
    with pytest.raises(InvalidInputError, match="GuardedOther wraps a GuardedIndex over a Other"):
        GuardedOther(index)
    assert GuardedShelf(index).name == "docs"
