"""A migration stopped half-way is never served as the whole, and a migration run again ends with
exactly the source's records: core's :func:`ctxemb_core.index.migrate_index`, over any driver."""

from __future__ import annotations

import pytest

from ctxemb_core.errors import (
    ContractMismatchError,
    InvalidInputError,
    StoreUnavailableError,
    UnfinishedCopyError,
)
from ctxemb_core.index import GuardedIndex, MemoryDriver, MemoryStore, migrate_index, restamp_index
from ctxemb_core.index.driver import Capabilities
from ctxemb_core.testing.conformance import tiny_embedder, variants

TEXTS = {f"d{k:02d}": f"record number {k} about tea and rivers" for k in range(30)}


class Failing(MemoryDriver):
    """The memory driver, whose writes fail after ``fail_after`` of them (a lost server)."""

    fail_after: int | None = None

    def __init__(self, store: MemoryStore, name: str) -> None:
        super().__init__(store, name, Capabilities(transactions=True, filters=True, marks=True))
        self.writes = 0

    def write(self, records, *, replace, stamp_version):
        self.writes += 1
        if self.fail_after is not None and self.writes > self.fail_after:
            raise StoreUnavailableError("the store went away")
        return super().write(records, replace=replace, stamp_version=stamp_version)


@pytest.fixture(scope="module")
def embedder():
    return tiny_embedder()


@pytest.fixture
def source(embedder):
    index = GuardedIndex.open(MemoryStore().driver("docs"), embedder)
    index.add(list(TEXTS), list(TEXTS.values()), [{"k": k} for k in range(len(TEXTS))])
    return index


def _stopped(source: GuardedIndex, writes: int) -> tuple[MemoryStore, Failing]:
    """A migration of ``source`` into a new store's 'copy' that stops after ``writes`` writes."""
    store = MemoryStore()
    target = Failing(store, "copy")
    target.fail_after = writes
    with pytest.raises(StoreUnavailableError):
        migrate_index(source, target, batch=10)
    return store, target


def test_a_copy_stopped_half_way_is_refused_until_a_migration_finishes_it(source, embedder):
    store, target = _stopped(source, 2)
    assert 0 < store.driver("copy").count() < len(TEXTS)  # part of it is there, stamped
    for opening in (
        lambda: GuardedIndex.open(store.driver("copy"), embedder),
        lambda: GuardedIndex.open(store.driver("copy"), embedder, create=False, sample=0),
        lambda: restamp_index(store.driver("copy"), embedder),
    ):
        with pytest.raises(UnfinishedCopyError) as refused:
            opening()
        said = str(refused.value)
        assert "'copy' is an unfinished copy of 'docs'" in said and "migrate" in said
        assert refused.value.index == "copy" and "'docs'" in refused.value.source
    assert "--to copy" in refused.value.message_for("cli")
    # Run again, the same migration takes it up and finishes it: then anyone opens it.
    target.fail_after = None
    done = migrate_index(source, target, batch=10)
    assert done.stamp.copying is None and sorted(done.ids()) == sorted(TEXTS)
    reopened = GuardedIndex.open(store.driver("copy"), embedder)
    assert reopened.count() == len(TEXTS) and reopened.stamp.copying is None


def test_another_source_cannot_take_up_an_unfinished_copy(source, embedder):
    store, _ = _stopped(source, 1)
    other = GuardedIndex.open(MemoryStore().driver("docs"), embedder)
    other.add(["x"], ["another text"])
    with pytest.raises(UnfinishedCopyError):
        migrate_index(other, store.driver("copy"))


def test_a_migration_run_again_ends_with_exactly_the_sources_records(source, embedder):
    store = MemoryStore()
    migrate_index(source, store.driver("copy"))
    source.upsert(["d01"], ["an edited text about kilns"], [{"k": "edited"}])
    source.add(["new"], ["a new text"])
    source.delete(["d02"])
    again = migrate_index(source, store.driver("copy"))
    got = {r.id: r for r in store.driver("copy").read([*sorted(TEXTS), "new"])}
    assert set(got) == (set(TEXTS) - {"d02"}) | {"new"}
    assert got["d01"].text == "an edited text about kilns" and got["d01"].metadata["k"] == "edited"
    assert sorted(again.ids()) == sorted(source.ids())


def test_the_source_itself_is_never_the_target(source, embedder):
    store = source.driver.store
    for target in (source.driver, store.driver("docs")):  # the same, or a new handle on it
        with pytest.raises(InvalidInputError, match="the target must be a new index"):
            migrate_index(source, target, variants(embedder.contract)["document_prefix"])
    assert sorted(source.ids()) == sorted(TEXTS)


def test_a_target_of_another_contract_is_refused_with_a_new_name_not_a_restamp(source, embedder):
    store = MemoryStore()
    other = variants(embedder.contract)["query_prefix"]
    GuardedIndex.open(store.driver("taken"), other).add(["x"], ["their own text"])
    with pytest.raises(ContractMismatchError) as refused:
        migrate_index(source, store.driver("taken"))
    said, cli = str(refused.value), refused.value.message_for("cli")
    assert refused.value.fields == ("query_prefix",)
    assert "the target 'taken' already holds an index of another contract" in said
    assert "give migrate another new name" in said and "give another --to" in cli
    assert "restamp" not in said + cli  # the advice of a mismatch with one's own index
    assert store.driver("taken").count() == 1  # nothing written
