"""The tools a store adapter gets from ``StoreTools`` (issue 44): given its facade class and its
driver factory, a store (here the memory driver behind a small facade) has ``open``,
``migrate``, ``eval_path``, ``search``/``shortlist``, ``verify``/``detect``/``restamp`` and
``lexical_folder``, its own keywords taken and a stray one refused with a ``TypeError``.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import Capabilities, IndexFacade, MemoryDriver, MemoryStore
from ctxemb_core.remedy import StoreTerms
from ctxemb_core.store_tools import StoreTools
from ctxemb_core.testing.conformance import tiny_embedder

TERMS = StoreTerms(
    module="ctxemb_memory", open="open_shelf", kind="shelf", records="books", cli_where="-"
)


class GuardedShelf(IndexFacade[MemoryDriver, Any]):
    _driver_type = MemoryDriver
    _terms = TERMS

    @property
    def client(self) -> MemoryStore:
        return self.driver.store

    @classmethod
    def _stored_in(cls, driver: MemoryDriver) -> Any:
        return driver.store.indexes.get(driver.name)


def shelf_driver(
    store: MemoryStore, name: str, *, embedder: Any = None, filters: bool = True
) -> MemoryDriver:
    return MemoryDriver(store, name, Capabilities(filters=filters))


def held(index: Any) -> MemoryDriver:
    if isinstance(index, GuardedShelf):
        return index.driver
    raise InvalidInputError(f"shelf must be a GuardedShelf, got {type(index).__name__}")


@pytest.fixture(scope="module")
def embedder():
    return tiny_embedder()


@pytest.fixture
def tools():
    repaired: list[Any] = []
    tools = StoreTools(
        TERMS,
        facade=GuardedShelf,
        new_driver=shelf_driver,
        driver_of=held,
        query_options=("exact",),
        repair=lambda driver, stamp: repaired.append(stamp) or ["nothing to mend"],
    )
    return tools


def test_open_takes_the_stores_keywords_and_refuses_a_stray_one(tools, embedder):
    store = MemoryStore()
    shelf = tools.open(store, "docs", embedder, filters=True, sample=0)
    assert isinstance(shelf, GuardedShelf) and shelf.repaired == []
    with pytest.raises(TypeError, match=r"open_shelf\(\) got .* 'hnsw'.*'filters'"):
        tools.open(store, "docs", embedder, hnsw=False)
    with pytest.raises(InvalidInputError, match="shelf 'gone' does not exist"):
        tools.open(store, "gone", embedder, create=False)
    # repair=True: the store's own repair runs once the stamp and canary pass.
    assert tools.open(store, "docs", embedder, repair=True).repaired == ["nothing to mend"]


def test_migrate_copies_into_a_new_index_never_onto_its_source(tools, embedder):
    store = MemoryStore()
    source = tools.open(store, "docs", embedder)
    source.add(["a", "b"], ["green tea is steamed", "black tea is rolled"])
    copy = tools.migrate(source, embedder, "copy")
    assert isinstance(copy, GuardedShelf) and copy.ids() == {"a", "b"}
    with pytest.raises(InvalidInputError, match="the target must be a new shelf"):
        tools.migrate(source, embedder, "docs")
    with pytest.raises(TypeError, match=r"migrate\(\) got .* 'schema'"):
        tools.migrate(source, embedder, "other", schema="x")
    with pytest.raises(InvalidInputError, match=r"source must be a guarded index \(ctxemb_memory"):
        tools.migrate(object(), embedder, "other")


def test_search_tools_show_and_check_the_stores_query_keywords(tools, embedder):
    store = MemoryStore()
    shelf = tools.open(store, "docs", embedder)
    assert "exact" in inspect.signature(tools.shortlist).parameters
    assert "schema" not in inspect.signature(tools.search).parameters
    with pytest.raises(TypeError, match=r"shortlist\(\) got .* 'where_document'"):
        tools.shortlist(shelf, "tea", 3, where_document={"$contains": "tea"})
    with pytest.raises(InvalidInputError, match=r"search needs a GuardedShelf \(open_shelf\)"):
        tools.search(object(), "tea", None)


def test_verify_detect_restamp_and_the_lexical_folder(tools, embedder, tmp_path):
    store = MemoryStore()
    shelf = tools.open(store, "docs", embedder)
    shelf.add(["a"], ["green tea is steamed"])
    assert tools.verify(shelf, embedder).ok
    with pytest.raises(InvalidInputError, match="shelf 'gone' does not exist"):
        tools.detect(store, "gone")
    with pytest.raises(TypeError, match=r"restamp\(\) got .* 'schema'"):
        tools.restamp(store, "docs", embedder, schema="x")
    with pytest.raises(InvalidInputError, match="ctxemb_memory has no hybrid index"):
        tools.lexical_folder(store, "docs", tmp_path)
