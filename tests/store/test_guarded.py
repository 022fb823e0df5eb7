"""What GuardedIndex does beyond the conformance suite: an open of a store with a write mark reads
only what was written since the last verified open (issue 44, item 8), and a stamp that moves
between the guard's check and a write is verified again before the write goes through."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest

from ctxemb_core.errors import (
    ContractMismatchError,
    ExistingIdsError,
    ForeignVectorsError,
    InvalidInputError,
    StorageMismatchError,
)
from ctxemb_core.guard import OPEN_SAMPLE
from ctxemb_core.index import GuardedIndex, MemoryDriver, MemoryStore, Record
from ctxemb_core.index.driver import Capabilities
from ctxemb_core.remedy import StoreTerms
from ctxemb_core.testing.conformance import foreign_stamp, tiny_embedder, variants


class Counting(MemoryDriver):
    """The memory driver, counting the records each read primitive returns."""

    def __init__(self, store: MemoryStore, name: str, **capabilities: bool) -> None:
        super().__init__(store, name, Capabilities(transactions=True, filters=True, **capabilities))
        self.listed: Counter[str] = Counter()

    def ids(self, offset=0, limit=None):
        got = super().ids(offset, limit)
        self.listed["ids"] += len(got)
        return got

    def count(self):
        self.listed["count calls"] += 1  # a scan in some stores (PostgreSQL's count(*))
        return super().count()

    def page(self, offset, limit, include=frozenset({"vector", "text", "metadata"})):
        self.listed["page calls"] += 1  # an offset is a walk in some stores
        return self._page(offset, limit, include)

    def _page(self, offset, limit, include):
        got = super().page(offset, limit, include)
        self.listed["page"] += len(got)
        return got

    def read(self, ids, include=frozenset({"vector", "text", "metadata"})):
        got = super().read(ids, include)
        self.listed["read"] += len(got)
        return got


@pytest.fixture(scope="module")
def embedder():
    return tiny_embedder()


def filled(embedder, marks: bool, n: int = 3000) -> tuple[MemoryStore, GuardedIndex]:
    store = MemoryStore()
    index = GuardedIndex.open(Counting(store, "docs", marks=marks), embedder)
    index.add([f"d{k}" for k in range(n)], [f"record number {k} about topic" for k in range(n)])
    return store, index


def test_an_open_with_a_write_mark_reads_only_what_was_written_since(embedder):
    store, index = filled(embedder, marks=True)
    GuardedIndex.open(Counting(store, "docs", marks=True), embedder)  # verified, remembered
    quiet = Counting(store, "docs", marks=True)
    check = GuardedIndex.open(quiet, embedder).open_check
    assert check is not None and (check.checked, check.changed) == (0, 0)
    assert sum(quiet.listed.values()) == 0  # no id listed, no record read, none counted: O(1)
    assert check.records is None
    index.add(["one"], ["a single new text"])
    one = Counting(store, "docs", marks=True)
    check = GuardedIndex.open(one, embedder).open_check
    assert check is not None and (check.changed, check.checked) == (1, OPEN_SAMPLE)
    # The new record, then the random others in one read: one count, one page.
    assert (one.listed["read"], one.listed["page calls"], one.listed["count calls"]) == (1, 1, 1)
    index.add([f"new{k}" for k in range(5)], ["fresh text"] * 5)
    after = Counting(store, "docs", marks=True)
    check = GuardedIndex.open(after, embedder).open_check
    assert check is not None and check.changed == 5 and check.checked == OPEN_SAMPLE
    assert after.listed["ids"] == 0 and after.listed["page"] + after.listed["read"] <= 2 * 16
    index.add([f"many{k}" for k in range(100)], ["another fresh text"] * 100)
    many = Counting(store, "docs", marks=True)
    check = GuardedIndex.open(many, embedder).open_check
    assert check is not None and (check.changed, check.checked) == (100, OPEN_SAMPLE)
    assert many.listed["count calls"] == many.listed["page calls"] == 0  # from the 100 alone


def test_an_open_that_met_a_write_in_flight_keeps_the_last_verified_mark(embedder):
    # A store that reports mark 0 while another session writes (PostgreSQL) must not leave 0
    # as the verified mark: the next open would re-read every record written since the start.
    store, _ = filled(embedder, marks=True, n=300)
    GuardedIndex.open(Counting(store, "docs", marks=True), embedder)  # verified, remembered

    class InFlight(Counting):
        def head(self):
            head = super().head()
            return None if head is None else dataclasses.replace(head, mark=0)

    busy = InFlight(store, "docs", marks=True)
    assert GuardedIndex.open(busy, embedder).open_check.changed is None  # it sampled
    quiet = Counting(store, "docs", marks=True)
    check = GuardedIndex.open(quiet, embedder).open_check
    assert (check.changed, check.checked, quiet.listed["read"]) == (0, 0, 0)


def test_an_open_without_a_write_mark_lists_every_id(embedder):
    store, _ = filled(embedder, marks=False)
    GuardedIndex.open(Counting(store, "docs", marks=False), embedder)
    quiet = Counting(store, "docs", marks=False)
    check = GuardedIndex.open(quiet, embedder).open_check
    assert check is not None and (check.checked, check.changed) == (0, 0)
    assert quiet.listed["ids"] == 3000  # what a store without a mark costs: every id


class MovingStamp(MemoryDriver):
    """A driver whose stamp another client rewrites just before the guard's first write."""

    stamp_metadata: dict | None = None

    def write(self, records, *, replace, stamp_version=None):
        if self.stamp_metadata is not None:
            self.store.raw(self.name).set_metadata(self.stamp_metadata)
            self.stamp_metadata = None
        return super().write(records, replace=replace, stamp_version=stamp_version)


def test_a_stamp_rewritten_between_the_check_and_the_write_is_verified_again(embedder):
    store = MemoryStore()
    driver = MovingStamp(store, "docs", Capabilities(transactions=True))
    index = GuardedIndex.open(driver, embedder)
    driver.stamp_metadata = store.raw("docs").metadata()  # the same stamp, written again
    index.add(["a"], ["green tea leaves"])
    assert index.count() == 1
    other = variants(embedder.contract)["pooling"]
    driver.stamp_metadata = foreign_stamp(other).to_metadata()  # another contract's stamp
    with pytest.raises(ContractMismatchError):
        index.add(["b"], ["black tea leaves"])
    assert store.raw("docs").snapshot().keys() == {"a"}


def test_a_store_setting_changed_around_the_guard_is_refused_and_reported(embedder):
    store = MemoryStore()
    index = GuardedIndex.open(store.driver("docs"), embedder)
    index.add(["a"], ["green tea leaves"])
    store.raw("docs").set_space("l2")
    with pytest.raises(StorageMismatchError):
        GuardedIndex.open(store.driver("docs"), embedder)
    with pytest.raises(StorageMismatchError):
        index.query(["green tea"], 1)  # the open index's next call sees it too
    report = index.verify()
    assert not report.ok and report.configuration is not None
    assert "space" in report.configuration
    assert index.verify(sample=0).sample_size == 0


def test_a_damaged_mark_record_is_ignored_and_the_open_samples(embedder, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXEMB_CACHE_DIR", str(tmp_path))
    store, _ = filled(embedder, marks=True, n=100)
    GuardedIndex.open(store.driver("docs"), embedder)  # verified, remembered
    (record,) = (tmp_path / "verified").glob("*.json")
    assert GuardedIndex.open(store.driver("docs"), embedder).open_check.checked == 0
    for edit in ('"mark": 0', '"mark": 99999999'):
        text = record.read_text(encoding="utf-8")
        record.write_text(re.sub(r'"mark": \d+', edit, text), encoding="utf-8")
        check = GuardedIndex.open(store.driver("docs"), embedder).open_check
        assert check.changed is None and check.checked == OPEN_SAMPLE  # its checksum fails


class RacingWriter(MemoryDriver):
    """A driver of batches of 2 whose second part meets an id another writer stored meanwhile."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, "docs", Capabilities(transactions=True, max_batch=2))
        self.parts = 0

    def write(self, records, *, replace, stamp_version=None):
        self.parts += 1
        if self.parts == 2:
            self.store.raw(self.name).write([Record("x", None, "the other writer's", None)])
        return super().write(records, replace=replace, stamp_version=stamp_version)


def test_an_undone_batch_leaves_what_another_writer_stored_meanwhile(embedder):
    store = MemoryStore()
    driver = RacingWriter(store)
    index = GuardedIndex.open(driver, embedder)
    with pytest.raises(ExistingIdsError):
        index.add(["a", "b", "x", "c"], ["green tea", "black tea", "white tea", "oolong tea"])
    held = store.raw("docs").snapshot()
    assert sorted(held) == ["x"] and held["x"][1] == "the other writer's"


# -- what the guard does whatever a driver gets wrong ------------------------------------------


class Overfull(MemoryDriver):
    """A driver whose search returns every record, whatever ``k`` asks."""

    def search(self, vector, k, *, where=None):
        return super().search(vector, self.count(), where=where)


def test_a_query_returns_at_most_n_results_whatever_the_driver_returns(embedder):
    index = GuardedIndex.open(Overfull(MemoryStore(), "docs", Capabilities()), embedder)
    index.add(["a", "b", "c"], ["green tea leaves", "black tea leaves", "the moon"])
    assert [len(m) for m in index.query(["green tea"], 2)] == [2]
    vector = index.query_vectors(["tea"])[0]
    assert len(index.query_vector(vector, 1, fingerprint=index.contract.fingerprint)) == 1


class OffsetBlind(MemoryDriver):
    """A driver whose ``ids`` ignores offset: the guard's listing of every id would never end."""

    def ids(self, offset=0, limit=None):
        return super().ids(0, limit)


def test_a_driver_that_ignores_offset_is_refused_not_listed_forever(embedder, monkeypatch):
    monkeypatch.setattr("ctxemb_core.index.guarded.PAGE", 2)
    index = GuardedIndex.open(OffsetBlind(MemoryStore(), "docs", Capabilities()), embedder)
    index.add(["a", "b", "c"], ["green tea leaves", "black tea leaves", "the moon"])
    with pytest.raises(InvalidInputError, match="must honour offset"):
        index.ids()


def test_a_driver_missing_members_is_refused_naming_them(embedder):
    class Partial:
        capabilities = Capabilities()
        name = "docs"

        def head(self):
            return None

    with pytest.raises(InvalidInputError) as err:
        GuardedIndex.open(Partial(), embedder)
    message = str(err.value)
    assert "got Partial, which lacks" in message
    for member in ("changes", "read", "search", "write", "write_stamp"):
        assert member in message
    assert "head" not in message.split("lacks")[1] and "capabilities" not in message


def test_a_refusal_after_open_is_worded_in_the_driver_terms(embedder):
    store = MemoryStore()
    driver = store.driver("docs")
    driver.terms = StoreTerms.of("mystore", "--my-option")
    index = GuardedIndex.open(driver, embedder)
    store.raw("docs").write([Record("hollow", None, "A record without a vector.")])
    with pytest.raises(ForeignVectorsError) as err:  # a record without a vector, met by a query
        index.query(["green tea"], 3)
    assert "ctxemb_mystore" in str(err.value) and "ctxemb_chroma" not in str(err.value)
