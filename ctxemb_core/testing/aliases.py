"""The conformance suite every store's aliases pass: what "an alias ctxemb keeps" means.

A store adapter that keeps aliases gives a :class:`~ctxemb_core.aliases.Catalog` (its indexes by
name, and an :class:`~ctxemb_core.aliases.AliasBook` that switches an alias atomically). Its
tests subclass :class:`CatalogConformance` and give one fixture, ``new_catalog``: a function
that returns a new handle (a new connection where the store has them) onto one fresh, empty
store, the same store on every call::

    import pytest
    from ctxemb_core.aliases import MemoryCatalog
    from ctxemb_core.index import MemoryStore
    from ctxemb_core.testing.aliases import CatalogConformance


    class TestMemoryAliases(CatalogConformance):
        @pytest.fixture
        def new_catalog(self):
            store = MemoryStore()
            return lambda: MemoryCatalog(store)

What is proven: an alias records its target and contract in the store and reads back as it was
written; bad input (an unknown alias, an alias named like an index, an alias taken, an upgrade
to the contract served, a cutover or retire out of turn, an unstamped index) is refused with a
typed error and changes nothing; a whole upgrade under load keeps every write in both indexes,
readers switch index and encoder together (or, without the new encoder, get
:class:`NoEncoderError` and no results), and a rollback and a retire follow; a failed gate
switches nothing; of several clients swapping one generation at once exactly one wins; a dry
run changes nothing. The embedders are tiny static models built in code
(:func:`~ctxemb_core.testing.conformance.tiny_embedder`, and the same cut to 8 dimensions).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from ctxemb_core.aliases import (
    AliasedIndex,
    AliasRecord,
    AliasState,
    Catalog,
    Encoders,
    QualityGate,
    backfill,
    begin_upgrade,
    check_gates,
    create_alias,
    cutover,
    plan_upgrade,
    retire,
    rollback,
    text_digests,
)
from ctxemb_core.contract import same_contract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    AliasConflictError,
    AliasMovedError,
    AliasStateError,
    GateFailedError,
    InvalidInputError,
    NoEncoderError,
    UnknownAliasError,
)
from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.conformance import tiny_embedder

__all__ = ["IDS", "TEXTS", "CatalogConformance", "digests"]

#: The corpus every test starts from (words the tiny model knows).
TEXTS = [f"document {k} about green tea and {k % 7} kettles" for k in range(40)]
IDS = [f"d{k}" for k in range(40)]


#: ``{id: text digest}`` of an index, read through the guard.
digests = text_digests


class CatalogConformance:
    """Subclass and give ``new_catalog`` (see the module's docstring)."""

    @pytest.fixture(scope="class")
    def old(self) -> Embedder:
        return tiny_embedder()

    @pytest.fixture(scope="class")
    def new(self, old: Embedder) -> Embedder:
        return Embedder(old.contract.with_(truncate_dim=8))

    @pytest.fixture
    def catalog(self, new_catalog: Callable[[], Catalog], old: Embedder) -> Catalog:
        """The store, holding index ``docs-v1`` (40 records) and alias ``docs`` over it."""
        catalog = new_catalog()
        GuardedIndex.open(catalog.driver("docs-v1"), old).add(IDS, TEXTS)
        create_alias(catalog, "docs", "docs-v1")
        return catalog

    def test_an_alias_records_its_target_and_contract_in_the_store(self, catalog, old):
        record = catalog.aliases.read("docs")
        assert record.target.index == "docs-v1"
        assert same_contract(old.contract, record.target.contract, exact=True)
        assert (record.generation, record.state) == (1, AliasState.SERVING)
        assert AliasRecord.from_json(record.to_json(), "docs") == record
        assert create_alias(catalog, "docs", "docs-v1") == record  # again: nothing changes
        assert catalog.aliases.names() == ["docs"]

    def test_bad_input_is_refused_and_changes_nothing(self, catalog, old, new):
        before = catalog.aliases.read("docs")
        with pytest.raises(UnknownAliasError, match="nope"):
            AliasedIndex.open(catalog, "nope", old)
        with pytest.raises(AliasConflictError, match="name of an index"):
            create_alias(catalog, "docs-v1", "docs-v1")
        with pytest.raises(AliasConflictError, match="exists"):
            create_alias(catalog, "docs", "other")
        with pytest.raises(AliasStateError, match="already serves"):
            begin_upgrade(catalog, "docs", old)
        with pytest.raises(AliasStateError, match="not upgrading"):
            cutover(catalog, "docs", [old, new])
        with pytest.raises(AliasStateError, match="no previous"):
            retire(catalog, "docs")
        with pytest.raises(InvalidInputError):
            create_alias(catalog, "bad name!", "docs-v1")
        with pytest.raises(InvalidInputError):
            create_alias(catalog, "other-alias", "missing-index")
        assert catalog.aliases.read("docs") == before
        assert catalog.aliases.names() == ["docs"]

    def test_a_live_upgrade_keeps_every_write_and_readers_switch_with_their_encoder(
        self, catalog, old, new
    ):
        reader = AliasedIndex.open(catalog, "docs", Encoders(old, new))
        stale = AliasedIndex.open(catalog, "docs", Encoders(old))  # never given the new one
        writer = AliasedIndex.open(catalog, "docs", Encoders(old, new))
        assert reader.search("green tea").index == "docs-v1"

        record = begin_upgrade(catalog, "docs", new)
        assert record.state is AliasState.UPGRADING and record.shadow is not None
        shadow = record.shadow.index
        assert begin_upgrade(catalog, "docs", new) == record  # begun again: nothing changes
        with pytest.raises(AliasStateError, match="still upgrading"):
            retire(catalog, "docs")

        # Writes during the upgrade land in both indexes, each under its own contract.
        writer.upsert(["w1", "d3"], ["green tea document kettles", "document 3 about tea"])
        writer.delete(["d4"])
        report = backfill(catalog, "docs", Encoders(old, new))
        # 40 records now (d4 gone, w1 new); w1 and d3 reached the shadow through the alias.
        assert (report.written, report.unchanged, report.deleted) == (38, 2, 0)
        assert backfill(catalog, "docs", Encoders(old, new)).written == 0  # resumable: done
        assert digests(catalog, shadow, new) == digests(catalog, "docs-v1", old)

        gates = {g.name: g for g in check_gates(catalog, "docs", Encoders(old, new))}
        assert all(g.passed for g in gates.values()) and gates["parity"].figure == 0

        switched = cutover(catalog, "docs", Encoders(old, new))
        assert switched.previous is not None and switched.target.index == shadow
        assert switched.previous.index == "docs-v1"
        answered = reader.search("green tea", 5)
        assert answered.index == shadow
        assert same_contract(new.contract, answered.fingerprint, exact=True)
        assert answered.generation == switched.generation
        with pytest.raises(NoEncoderError, match="dim=8"):
            stale.search("green tea")

        # After cutover the previous target is still written: a rollback loses nothing.
        writer.upsert(["w2"], ["kettles about green tea"])
        back = rollback(catalog, "docs", Encoders(old, new))
        assert back.previous is not None and back.previous.index == shadow
        assert back.target.index == "docs-v1"
        assert reader.search("green tea").index == "docs-v1"
        kept = digests(catalog, "docs-v1", old)
        assert digests(catalog, shadow, new) == kept
        assert {"w1", "w2"} <= set(kept) and "d4" not in kept
        assert retire(catalog, "docs").previous is None
        assert not catalog.exists(shadow)

    def test_a_failed_gate_switches_nothing(self, catalog, old, new):
        begin_upgrade(catalog, "docs", new)
        before = catalog.aliases.read("docs")
        impossible = QualityGate({"q1": "green tea", "q2": "kettles"}, floor=1.5)
        with pytest.raises(GateFailedError, match="quality") as caught:
            cutover(catalog, "docs", [old, new], quality=impossible)
        assert [g.name for g in caught.value.gates] == ["canary", "parity", "sample", "quality"]
        assert catalog.aliases.read("docs") == before

    def test_a_quality_gate_under_a_filter_measures_only_the_records_it_selects(
        self, catalog, old, new
    ):
        writer = AliasedIndex.open(catalog, "docs", Encoders(old, new))
        begin_upgrade(catalog, "docs", new)
        texts = ["tea leaves are steamed", "kettles boil water", "tea leaves are rolled"]
        writer.upsert(["e1", "e2", "e3"], texts, [{"set": "eval"}] * 3)
        backfill(catalog, "docs", Encoders(old, new))
        # Judged: e3 is the answer. Under the filter only e1..e3 compete, so e3 ranks within
        # the top 2 in both indexes; the figure is measured on them alone.
        qrels = {"q": {"e3": 1}}
        gate = QualityGate({"q": "tea leaves are rolled"}, qrels, floor=0.99, k=2)
        filtered = replace(gate, where={"set": "eval"})
        gates = check_gates(catalog, "docs", Encoders(old, new), quality=filtered)
        (quality,) = [g for g in gates if g.name == "quality"]
        assert quality.passed and quality.figure == pytest.approx(1.0), quality
        with pytest.raises(InvalidInputError, match="where"):
            QualityGate({"q": "tea"}, qrels, where="set=eval")  # type: ignore[arg-type]

    def test_of_clients_swapping_one_generation_one_wins(self, catalog, new_catalog, old):
        seen = catalog.aliases.read("docs")
        results: list[bool] = []
        barrier = threading.Barrier(4)

        def swap() -> None:
            book: Any = new_catalog().aliases  # each client its own handle
            barrier.wait()
            results.append(book.swap(seen.next("test"), expected=seen.generation))

        threads = [threading.Thread(target=swap) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False, False, False, True]
        assert catalog.aliases.read("docs").generation == seen.generation + 1
        begin_upgrade(catalog, "docs", Embedder(old.contract.with_(truncate_dim=8)))
        with pytest.raises(AliasStateError, match="upgrading to"):  # one upgrade at a time
            begin_upgrade(catalog, "docs", Embedder(old.contract.with_(truncate_dim=4)))

    @pytest.mark.parametrize("cuts", [(8, 4), (8, 8)], ids=["two-contracts", "one-contract"])
    def test_two_upgrades_started_at_once_end_on_one_complete_target(
        self, catalog, new_catalog, old, cuts
    ):
        """Two clients run a whole upgrade (begin, backfill, cutover) of one alias at once, each
        on its own handle: to two contracts, exactly one finishes and the other is refused with
        a typed alias error; to one contract, both may finish (the second finds the work done).
        Either way the alias ends serving one complete target, nothing lost."""
        barrier = threading.Barrier(2)
        done: list[int] = []
        refused: list[BaseException] = []

        def upgrade(dim: int) -> None:
            mine, to = new_catalog(), Embedder(old.contract.with_(truncate_dim=dim))
            encoders = Encoders(old, to)
            barrier.wait()
            try:
                begin_upgrade(mine, "docs", to)
                backfill(mine, "docs", encoders, progress=False)
                cutover(mine, "docs", encoders)
            except (AliasStateError, AliasMovedError) as exc:
                refused.append(exc)
            else:
                done.append(dim)

        threads = [threading.Thread(target=upgrade, args=(d,)) for d in cuts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        record = catalog.aliases.read("docs")
        assert record.state is AliasState.SERVING and record.previous is not None
        assert record.target.contract.output_dim in done
        if cuts[0] != cuts[1]:
            assert len(done) == 1 and len(refused) == 1, (done, refused)
        else:
            assert len(done) + len(refused) == 2 and done, (done, refused)
        to = Embedder(record.target.contract)
        assert digests(catalog, record.target.index, to) == digests(catalog, "docs-v1", old)

    def test_a_dry_run_plans_and_changes_nothing(self, catalog, old, new):
        before = catalog.aliases.read("docs")
        plan = plan_upgrade(catalog, "docs", new, Encoders(old))
        assert plan.documents == 40 and plan.rate > 0 and "re-embed 40" in plan.describe()
        assert catalog.aliases.read("docs") == before and not catalog.exists(plan.shadow)
