"""Core's ClaimBook (aliases for a store without transactions, over four calls of claims) on a
store that is not Chroma: the alias conformance suite over in-memory claims, and the claim
rules only a book over claims has (the two newest kept; a claim below the newest taken back)."""

from __future__ import annotations

import threading

import pytest

from ctxemb_core.aliases import ClaimBook, MemoryCatalog, create_alias
from ctxemb_core.index import GuardedIndex, MemoryStore
from ctxemb_core.testing.aliases import CatalogConformance
from ctxemb_core.testing.conformance import tiny_embedder


class MemoryClaims:
    """Claims as a dict under a lock: create-if-absent, list by prefix, read, delete."""

    def __init__(self) -> None:
        self.records: dict[str, str] = {}
        self.lock = threading.Lock()

    def claim(self, key: str, text: str) -> bool:
        with self.lock:
            return self.records.setdefault(key, text) is text

    def keys(self, prefix: str) -> list[str]:
        with self.lock:
            return [k for k in self.records if k.startswith(prefix)]

    def read(self, key: str) -> str | None:
        with self.lock:
            return self.records.get(key)

    def remove(self, key: str) -> None:
        with self.lock:
            self.records.pop(key, None)


def claim_catalog(store: MemoryStore, claims: MemoryClaims) -> MemoryCatalog:
    catalog = MemoryCatalog(store)
    catalog.aliases = ClaimBook(claims)  # type: ignore[assignment]
    return catalog


class TestClaimBookAliases(CatalogConformance):
    @pytest.fixture
    def new_catalog(self):
        store, claims = MemoryStore(), MemoryClaims()
        return lambda: claim_catalog(store, claims)


def test_two_claims_stay_and_one_made_below_the_newest_is_taken_back(monkeypatch):
    claims = MemoryClaims()
    catalog = claim_catalog(MemoryStore(), claims)
    GuardedIndex.open(catalog.driver("docs-v1"), tiny_embedder()).add(["d1"], ["green tea"])
    first = create_alias(catalog, "docs", "docs-v1")
    record = first
    for _ in range(3):
        assert catalog.aliases.swap(record.next("test"), expected=record.generation)
        record = record.next("test")
    kept = ["ctxemb-alias--docs--0000000003", "ctxemb-alias--docs--0000000004"]
    assert sorted(claims.records) == kept
    assert not catalog.aliases.swap(first.next("test"), expected=first.generation)
    # A client far behind: it saw generation 1, and claims 2 after 2 was removed.
    book = catalog.aliases
    seen = iter([1])
    real = book._newest
    monkeypatch.setattr(book, "_newest", lambda name: next(seen, None) or real(name))
    assert not book.swap(first.next("test"), expected=first.generation)
    assert sorted(claims.records) == kept
    assert book.read("docs").generation == 4
