"""Aliases over the reference in-memory store (issue 45): the alias conformance suite, and what
only the reference can show (a record damaged in the store, a lost compare-and-swap)."""

from __future__ import annotations

import threading
import time

import pytest

from ctxemb_core import Embedder
from ctxemb_core.aliases import (
    AliasedIndex,
    Encoders,
    MemoryCatalog,
    backfill,
    begin_upgrade,
    check_gates,
    create_alias,
    cutover,
    plan_backfill,
    text_digests,
)
from ctxemb_core.documents import text_digest
from ctxemb_core.errors import AliasMovedError, DamagedAliasError, TextNotStoredError
from ctxemb_core.index import GuardedIndex, MemoryStore
from ctxemb_core.testing.aliases import CatalogConformance
from ctxemb_core.testing.conformance import tiny_embedder


class TestMemoryAliases(CatalogConformance):
    @pytest.fixture
    def new_catalog(self):
        store = MemoryStore()
        return lambda: MemoryCatalog(store)

    def test_a_damaged_record_is_a_typed_error(self, catalog, old):
        catalog.aliases.tamper("docs", '{"schema": 1, "name": "docs", "generation": "x"}')
        with pytest.raises(DamagedAliasError, match="docs"):
            AliasedIndex.open(catalog, "docs", old)

    def test_a_batch_whose_records_were_all_deleted_meanwhile_writes_nothing(
        self, catalog, old, new
    ):
        # Found by benchmarks/alias_upgrade.py on all of SciFact under a live writer: a batch of
        # the plan whose records the writer deleted (through the alias) before it was read.
        begin_upgrade(catalog, "docs", new)
        plan = plan_backfill(catalog, "docs", Encoders(old, new))
        gone = list(plan.todo[:5])
        AliasedIndex.open(catalog, "docs", Encoders(old, new)).delete(gone)
        assert plan.write(gone) == 0
        assert plan.write(plan.todo[5:]) == len(plan.todo) - 5

    def test_a_lost_race_is_alias_moved_and_writes_nothing(self, catalog, new, monkeypatch):
        before = catalog.aliases.read("docs")
        monkeypatch.setattr(catalog.aliases, "swap", lambda record, expected: False)
        with pytest.raises(AliasMovedError, match="another client"):
            begin_upgrade(catalog, "docs", new)
        monkeypatch.undo()
        assert catalog.aliases.read("docs") == before


def test_parity_waits_for_a_write_in_flight_and_not_for_one_that_died():
    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = MemoryCatalog(MemoryStore())
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(["d1", "d2"], ["green tea", "kettles"])
    create_alias(catalog, "docs", "docs-v1")
    shadow = begin_upgrade(catalog, "docs", new).shadow.index
    backfill(catalog, "docs", Encoders(old, new))
    target = GuardedIndex.open(catalog.driver("docs-v1"), old, create=False, sample=0)
    shade = GuardedIndex.open(catalog.driver(shadow), new, create=False, sample=0)

    # A writer between its two writes: the target has the new text, the shadow a moment later.
    target.upsert(["d1"], ["green tea kettles"])
    later = threading.Timer(0.01, lambda: shade.upsert(["d1"], ["green tea kettles"]))
    later.start()
    gates = {g.name: g for g in check_gates(catalog, "docs", Encoders(old, new))}
    later.join()
    assert gates["parity"].passed, gates["parity"].detail

    # A writer that died between them: the difference stays, and the gate says so.
    target.upsert(["d2"], ["tea kettles"])
    started = time.perf_counter()
    gates = {g.name: g for g in check_gates(catalog, "docs", Encoders(old, new))}
    assert not gates["parity"].passed and gates["parity"].figure == 1
    assert time.perf_counter() - started < 5

    # The cutover mends it: a difference that outlasts the re-reads is backfilled again (here a
    # writer that dies between the two indexes after the cutover's own first backfill).
    from ctxemb_core.aliases import upgrade

    real, rounds = upgrade.backfill, []

    def backfill_then_a_writer_dies(*args, **kwargs):
        report = real(*args, **kwargs)
        if not rounds:
            target.upsert(["d3"], ["a third text"])
        rounds.append(report)
        return report

    upgrade.backfill = backfill_then_a_writer_dies
    try:
        switched = cutover(catalog, "docs", Encoders(old, new))
    finally:
        upgrade.backfill = real
    assert len(rounds) == 2 and switched.target.index == shadow
    assert text_digests(catalog, shadow, new) == text_digests(catalog, "docs-v1", old)


def test_a_change_to_metadata_alone_is_a_difference_parity_sees_and_the_cutover_mends():
    # A filter reads metadata: a shadow that kept a record's old tag would answer
    # where={"tag": "new"} with nothing after the cutover.
    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = MemoryCatalog(MemoryStore())
    target = GuardedIndex.open(catalog.driver("docs-v1"), old)
    target.add(["d1", "d2"], ["green tea", "black tea"], [{"tag": "old"}, {"tag": "old"}])
    create_alias(catalog, "docs", "docs-v1")
    shadow = begin_upgrade(catalog, "docs", new).shadow.index
    backfill(catalog, "docs", Encoders(old, new))
    target.upsert(["d1"], ["green tea"], [{"tag": "new"}])  # a writer that died after the target
    gates = {g.name: g for g in check_gates(catalog, "docs", Encoders(old, new))}
    assert not gates["parity"].passed and gates["parity"].figure == 1
    cutover(catalog, "docs", Encoders(old, new))
    served = AliasedIndex.open(catalog, "docs", new)
    assert [r.id for r in served.index.get(["d1"]) if r.metadata["tag"] == "new"] == ["d1"]
    assert shadow == catalog.aliases.read("docs").target.index


def test_a_quality_gate_that_measured_nothing_does_not_pass():
    from ctxemb_core.aliases import QualityGate

    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = MemoryCatalog(MemoryStore())
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(["d1", "d2"], ["green tea", "kettles"])
    create_alias(catalog, "docs", "docs-v1")
    begin_upgrade(catalog, "docs", new)
    backfill(catalog, "docs", Encoders(old, new))
    # Judgements of ids neither index holds: nDCG 0 on both sides is no evidence.
    gate = QualityGate({"q": "tea"}, {"q": {"absent": 1}})
    (quality,) = [
        g
        for g in check_gates(catalog, "docs", Encoders(old, new), quality=gate)
        if g.name == "quality"
    ]
    assert not quality.passed and "nothing was measured" in quality.detail


def test_a_named_shadow_that_exists_and_a_name_in_ctxembs_own_space_are_refused():
    from ctxemb_core.errors import AliasConflictError, InvalidInputError

    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = MemoryCatalog(MemoryStore())
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(["d1"], ["green tea"])
    GuardedIndex.open(catalog.driver("notes-v1"), new).add(["n1"], ["black tea"])
    create_alias(catalog, "docs", "docs-v1")
    # Another index under the new contract: its records would be deleted by the backfill.
    with pytest.raises(AliasConflictError, match="'notes-v1' cannot be the shadow index"):
        begin_upgrade(catalog, "docs", new, shadow="notes-v1")
    assert GuardedIndex.open(catalog.driver("notes-v1"), new).count() == 1
    # Where a store keeps alias records as indexes, an index under their names breaks them.
    for name in ("ctxemb-alias--docs--0000000009", "ctxemb-alias--x"):
        with pytest.raises(InvalidInputError, match="ctxemb's own"):
            GuardedIndex.open(catalog.driver(name), old)
        with pytest.raises(InvalidInputError, match="ctxemb's own"):
            begin_upgrade(catalog, "docs", new, shadow=name)
    assert catalog.aliases.read("docs").target.index == "docs-v1"


def test_a_backfill_batch_after_another_clients_cutover_writes_nothing():
    # Two upgrades at once (or a --no-cutover backfill beside a cutover): the slower one's late
    # batch must not land in what the alias now serves, undoing a write made through it since.
    from ctxemb_core.errors import AliasMovedError

    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = MemoryCatalog(MemoryStore())
    texts = {f"d{k}": f"green tea number {k}" for k in range(6)}
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(list(texts), list(texts.values()))
    create_alias(catalog, "docs", "docs-v1")
    begin_upgrade(catalog, "docs", new)
    slow = plan_backfill(catalog, "docs", Encoders(old, new))
    cutover(catalog, "docs", Encoders(old, new))  # the other client, all the way
    served = AliasedIndex.open(catalog, "docs", Encoders(old, new))
    served.upsert(["d3"], ["black tea now"])
    with pytest.raises(AliasMovedError, match="no longer upgrades into"):
        slow.write(list(slow.todo))
    (d3,) = served.index.get(["d3"])
    assert d3.text == "black tea now"


def test_records_embedded_from_another_text_than_they_store_are_refused_not_re_embedded():
    # A framework that joins metadata into the text it embeds (Haystack's meta_fields_to_embed)
    # stores the content alone: a backfill re-embedding that content would drop the title from
    # the vector, and its parity gate would never pass. Refused, naming the ids, before anything
    # is written; once written into the shadow as its pipeline makes it, it is left alone.
    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = MemoryCatalog(MemoryStore())
    target = GuardedIndex.open(catalog.driver("docs-v1"), old)
    target.add(["d1"], ["green tea"])
    titled = "Tea. black tea"

    def joined(index, embedder):
        index.add_embedded(
            ["d2"],
            embedder.embed_documents([titled]),
            ["black tea"],
            [{"ctxemb_text": text_digest(titled)}],
            fingerprint=embedder.contract.fingerprint,
            upsert=True,
        )

    joined(target, old)
    create_alias(catalog, "docs", "docs-v1")
    shadow = begin_upgrade(catalog, "docs", new).shadow.index
    with pytest.raises(TextNotStoredError) as err:
        backfill(catalog, "docs", Encoders(old, new))
    assert err.value.index == "docs-v1" and err.value.ids == ("d2",)
    assert "'d2'" in str(err.value) and "Nothing was written" in str(err.value)
    assert GuardedIndex.open(catalog.driver(shadow), new).count() == 0
    joined(GuardedIndex.open(catalog.driver(shadow), new), new)
    assert backfill(catalog, "docs", Encoders(old, new)).written == 1  # d1 alone
    assert cutover(catalog, "docs", Encoders(old, new)).target.index == shadow
