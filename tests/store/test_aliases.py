"""Aliases over the reference in-memory store (issue 45): the alias conformance suite, and what
only the reference can show (a record damaged in the store, a lost compare-and-swap)."""

from __future__ import annotations

import pytest

from ctxemb_core.aliases import AliasedIndex, MemoryCatalog, begin_upgrade
from ctxemb_core.errors import AliasMovedError, DamagedAliasError
from ctxemb_core.index import MemoryStore
from ctxemb_core.testing.aliases import CatalogConformance


class TestMemoryAliases(CatalogConformance):
    @pytest.fixture
    def new_catalog(self):
        store = MemoryStore()
        return lambda: MemoryCatalog(store)

    def test_a_damaged_record_is_a_typed_error(self, catalog, old):
        catalog.aliases.tamper("docs", '{"schema": 1, "name": "docs", "generation": "x"}')
        with pytest.raises(DamagedAliasError, match="docs"):
            AliasedIndex.open(catalog, "docs", old)

    def test_a_lost_race_is_alias_moved_and_writes_nothing(self, catalog, new, monkeypatch):
        before = catalog.aliases.read("docs")
        monkeypatch.setattr(catalog.aliases, "swap", lambda record, expected: False)
        with pytest.raises(AliasMovedError, match="another client"):
            begin_upgrade(catalog, "docs", new)
        monkeypatch.undo()
        assert catalog.aliases.read("docs") == before
