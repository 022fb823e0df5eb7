"""Core's RowBook (aliases as rows of a table, for a store with transactions) on a database that
is not PostgreSQL: the alias conformance suite over SQLite, and a lost swap writing nothing."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest

from ctxemb_core.aliases import MemoryCatalog, RowBook, create_alias
from ctxemb_core.index import GuardedIndex, MemoryStore
from ctxemb_core.testing.aliases import CatalogConformance
from ctxemb_core.testing.conformance import tiny_embedder


class SQLiteRows(RowBook):
    """Aliases in a SQLite table: each statement its own transaction, under one lock."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.lock = threading.Lock()

    def _run(self, query: str, params: tuple[Any, ...] = ()) -> tuple[list[tuple[Any, ...]], int]:
        with self.lock:
            cur = self.conn.execute(query.format(table="ctxemb_aliases"), params)
            return cur.fetchall(), cur.rowcount

    def _exists(self) -> bool:
        rows, _ = self._run("SELECT 1 FROM sqlite_master WHERE name = 'ctxemb_aliases'")
        return bool(rows)

    def _create(self) -> None:
        self._run(
            "CREATE TABLE IF NOT EXISTS {table} (name TEXT PRIMARY KEY, generation INTEGER "
            "NOT NULL, record TEXT NOT NULL, changed TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )


def row_catalog(store: MemoryStore, path: str) -> MemoryCatalog:
    catalog = MemoryCatalog(store)
    catalog.aliases = SQLiteRows(path)  # type: ignore[assignment]
    return catalog


class TestRowBookAliases(CatalogConformance):
    @pytest.fixture
    def new_catalog(self, tmp_path):
        store, path = MemoryStore(), str(tmp_path / "aliases.sqlite3")
        return lambda: row_catalog(store, path)


def test_a_swap_decided_on_an_old_generation_writes_nothing(tmp_path):
    catalog = row_catalog(MemoryStore(), str(tmp_path / "aliases.sqlite3"))
    GuardedIndex.open(catalog.driver("docs-v1"), tiny_embedder()).add(["d1"], ["green tea"])
    first = create_alias(catalog, "docs", "docs-v1")
    book = catalog.aliases
    assert book.swap(first, expected=None) is False  # the row is there: no second insert
    newer = first.next("test")
    assert book.swap(newer, expected=first.generation) is True
    assert book.swap(newer.next("late"), expected=first.generation) is False  # decided on 1
    assert book.read("docs") == newer and book.names() == ["docs"]
