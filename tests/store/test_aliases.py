"""Aliases and a model upgrade without downtime, over the reference in-memory store (issue 45):
the alias record, readers that switch index and encoder together, writes kept in step on every
index an upgrade involves, gates, cutover, rollback and retire, and bad input refused with
nothing changed."""

from __future__ import annotations

import pytest

from ctxemb_core import Embedder
from ctxemb_core.aliases import (
    AliasedIndex,
    AliasRecord,
    AliasState,
    Encoders,
    MemoryCatalog,
    QualityGate,
    backfill,
    begin_upgrade,
    check_gates,
    create_alias,
    cutover,
    plan_upgrade,
    retire,
    rollback,
)
from ctxemb_core.documents import TEXT_KEY
from ctxemb_core.errors import (
    AliasConflictError,
    AliasMovedError,
    AliasStateError,
    DamagedAliasError,
    GateFailedError,
    InvalidInputError,
    MissingStampError,
    NoEncoderError,
    UnknownAliasError,
)
from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.conformance import tiny_embedder

TEXTS = [f"document {k} about green tea and {k % 7} kettles" for k in range(40)]
IDS = [f"d{k}" for k in range(40)]


@pytest.fixture(scope="module")
def old() -> Embedder:
    return tiny_embedder()


@pytest.fixture(scope="module")
def new(old: Embedder) -> Embedder:
    return Embedder(old.contract.with_(truncate_dim=8))


@pytest.fixture
def catalog(old: Embedder) -> MemoryCatalog:
    catalog = MemoryCatalog()
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(IDS, TEXTS)
    create_alias(catalog, "docs", "docs-v1")
    return catalog


def digests(catalog: MemoryCatalog, index: str, embedder: Embedder) -> dict[str, str]:
    opened = GuardedIndex.open(catalog.driver(index), embedder, create=False, sample=0)
    return {r.id: r.metadata[TEXT_KEY] for r in opened.page(0, 1000, ("metadata",))}


def test_an_alias_records_its_target_and_contract_in_the_store(catalog, old):
    record = catalog.aliases.read("docs")
    assert (
        record.target.index == "docs-v1" and record.target.fingerprint == old.contract.fingerprint
    )
    assert (record.generation, record.state) == (1, AliasState.SERVING)
    assert AliasRecord.from_json(record.to_json(), "docs") == record
    assert create_alias(catalog, "docs", "docs-v1") == record  # again: nothing changes


def test_bad_alias_input_is_refused_and_changes_nothing(catalog, old, new):
    before = catalog.aliases.read("docs")
    with pytest.raises(UnknownAliasError, match="docs"):
        AliasedIndex.open(catalog, "nope", old)
    with pytest.raises(AliasConflictError, match="name of an index"):
        create_alias(catalog, "docs-v1", "docs-v1")
    with pytest.raises(AliasConflictError, match="exists"):
        create_alias(catalog, "docs", "other")
    with pytest.raises(AliasStateError, match="already serves"):
        begin_upgrade(catalog, "docs", old)
    with pytest.raises(AliasStateError, match="upgrading"):
        cutover(catalog, "docs", [old, new])
    with pytest.raises(AliasStateError, match="no previous"):
        retire(catalog, "docs")
    with pytest.raises(InvalidInputError):
        create_alias(catalog, "bad name!", "docs-v1")
    catalog.store.raw("raw").create({})
    with pytest.raises(MissingStampError):
        create_alias(catalog, "raw-alias", "raw")
    assert catalog.aliases.read("docs") == before
    assert catalog.aliases.names() == ["docs"]


def test_a_damaged_record_is_a_typed_error(catalog, old):
    catalog.aliases.tamper("docs", '{"schema": 1, "name": "docs", "generation": "x"}')
    with pytest.raises(DamagedAliasError, match="docs"):
        AliasedIndex.open(catalog, "docs", old)


def test_a_live_upgrade_keeps_every_write_and_readers_switch_with_their_encoder(catalog, old, new):
    reader = AliasedIndex.open(catalog, "docs", Encoders(old, new))
    stale = AliasedIndex.open(catalog, "docs", Encoders(old))  # never given the new encoder
    writer = AliasedIndex.open(catalog, "docs", Encoders(old, new))
    assert reader.search("green tea").index == "docs-v1"

    record = begin_upgrade(catalog, "docs", new)
    assert record.state is AliasState.UPGRADING and record.shadow is not None
    shadow = record.shadow.index
    assert begin_upgrade(catalog, "docs", new) == record  # begun again: nothing changes
    with pytest.raises(AliasStateError, match="still upgrading"):
        retire(catalog, "docs")

    # Writes during the upgrade land in both indexes, each under its own contract.
    writer.upsert(["w1", "d3"], ["green tea document kettles", "document 3 about kettles and tea"])
    writer.delete(["d4"])
    report = backfill(catalog, "docs", Encoders(old, new))
    # 40 records now (d4 gone, w1 new); w1 and d3 reached the shadow through the alias.
    assert (report.written, report.unchanged, report.deleted) == (38, 2, 0)
    assert backfill(catalog, "docs", Encoders(old, new)).written == 0  # resumable: done
    assert digests(catalog, shadow, new) == digests(catalog, "docs-v1", old)

    gates = {g.name: g for g in check_gates(catalog, "docs", Encoders(old, new))}
    assert all(g.passed for g in gates.values()) and gates["parity"].figure == 0

    switched = cutover(catalog, "docs", Encoders(old, new))
    assert switched.target.index == shadow and switched.previous.index == "docs-v1"
    answered = reader.search("green tea", 5)
    assert answered.index == shadow and answered.fingerprint == new.contract.fingerprint
    assert answered.generation == switched.generation
    with pytest.raises(NoEncoderError, match="dim=8"):
        stale.search("green tea")

    # After cutover the previous target is still written: a rollback loses nothing.
    writer.upsert(["w2"], ["kettles about green tea"])
    back = rollback(catalog, "docs", Encoders(old, new))
    assert back.target.index == "docs-v1" and back.previous.index == shadow
    assert reader.search("green tea").index == "docs-v1"
    assert digests(catalog, shadow, new) == digests(catalog, "docs-v1", old)
    assert {"w1", "w2"} <= set(digests(catalog, "docs-v1", old)) and "d4" not in digests(
        catalog, "docs-v1", old
    )
    retired = retire(catalog, "docs")
    assert retired.previous is None and not catalog.exists(shadow)


def test_a_failed_gate_switches_nothing(catalog, old, new):
    begin_upgrade(catalog, "docs", new)
    before = catalog.aliases.read("docs")
    impossible = QualityGate({"q1": "green tea", "q2": "kettles"}, floor=1.5)
    with pytest.raises(GateFailedError, match="quality") as caught:
        cutover(catalog, "docs", [old, new], quality=impossible)
    assert [g.name for g in caught.value.gates] == ["canary", "parity", "sample", "quality"]
    assert catalog.aliases.read("docs") == before


def test_two_upgrades_of_one_alias_cannot_both_win(catalog, old, new):
    seen = catalog.aliases.read("docs")
    begin_upgrade(catalog, "docs", new)
    assert not catalog.aliases.swap(seen.next("begin"), expected=seen.generation)
    with pytest.raises(AliasStateError, match="upgrading to"):
        begin_upgrade(catalog, "docs", Embedder(old.contract.with_(truncate_dim=4)))
    record = catalog.aliases.read("docs")
    assert record.generation == seen.generation + 1


def test_a_lost_race_is_alias_moved(catalog, new, monkeypatch):
    book = catalog.aliases
    real = book.swap
    monkeypatch.setattr(book, "swap", lambda record, expected: False)
    with pytest.raises(AliasMovedError, match="another client"):
        begin_upgrade(catalog, "docs", new)
    monkeypatch.setattr(book, "swap", real)


def test_a_dry_run_plans_and_changes_nothing(catalog, old, new):
    before = catalog.aliases.read("docs")
    plan = plan_upgrade(catalog, "docs", new, Encoders(old))
    assert plan.documents == 40 and plan.rate > 0 and "re-embed 40" in plan.describe()
    assert catalog.aliases.read("docs") == before and not catalog.exists(plan.shadow)
