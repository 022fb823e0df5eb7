"""Aliases: a stable name bound to one index and its contract, and model upgrades without
downtime over any store (issue 45).

- :mod:`~ctxemb_core.aliases.record`: :class:`AliasRecord`, what a store keeps per alias;
- :mod:`~ctxemb_core.aliases.book`: the :class:`AliasBook` and :class:`Catalog` protocols a
  store adapter implements, the in-memory reference, :class:`RowBook`, a book as rows of a
  table of a database, and :class:`ClaimBook`, a book for a store without transactions over
  its :class:`Claims`;
- :mod:`~ctxemb_core.aliases.encoders`: :class:`Encoders`, found by contract;
- :mod:`~ctxemb_core.aliases.aliased`: :class:`AliasedIndex`, readers and writers by alias;
- :mod:`~ctxemb_core.aliases.hybrid`: an alias over a hybrid index, both sides followed
  (:class:`HybridCatalog`, what a store's catalog adds for them);
- :mod:`~ctxemb_core.aliases.frameworks`: :class:`AliasSource`, an alias as a framework
  component opens it (where its store is, its encoders);
- :mod:`~ctxemb_core.aliases.options`: :class:`AliasStoreOptions`, the keywords a framework's
  alias store hands on to :class:`AliasSource`;
- :mod:`~ctxemb_core.aliases.upgrade`: begin, backfill, gates, cutover, rollback, retire.
"""

from __future__ import annotations

from ctxemb_core.aliases.aliased import (
    AliasedHybridQuery,
    AliasedIndex,
    AliasedQuery,
    read_alias,
)
from ctxemb_core.aliases.book import (
    AliasBook,
    Catalog,
    ClaimBook,
    Claims,
    MemoryAliasBook,
    MemoryCatalog,
    RowBook,
)
from ctxemb_core.aliases.encoders import Encoders
from ctxemb_core.aliases.frameworks import AliasReader, AliasSource
from ctxemb_core.aliases.hybrid import HybridCatalog
from ctxemb_core.aliases.options import AliasStoreOptions
from ctxemb_core.aliases.record import AliasRecord, AliasState, AliasTarget, check_alias_name
from ctxemb_core.aliases.upgrade import (
    BackfillPlan,
    BackfillReport,
    Gate,
    QualityGate,
    UpgradePlan,
    backfill,
    begin_upgrade,
    check_gates,
    create_alias,
    cutover,
    plan_backfill,
    plan_upgrade,
    retire,
    rewrite_records,
    rollback,
    shadow_name,
    text_digests,
)

__all__ = [
    "AliasBook",
    "AliasReader",
    "AliasRecord",
    "AliasSource",
    "AliasState",
    "AliasStoreOptions",
    "AliasTarget",
    "AliasedHybridQuery",
    "AliasedIndex",
    "AliasedQuery",
    "BackfillPlan",
    "BackfillReport",
    "Catalog",
    "ClaimBook",
    "Claims",
    "Encoders",
    "Gate",
    "HybridCatalog",
    "MemoryAliasBook",
    "MemoryCatalog",
    "QualityGate",
    "RowBook",
    "UpgradePlan",
    "backfill",
    "begin_upgrade",
    "check_alias_name",
    "check_gates",
    "create_alias",
    "cutover",
    "plan_backfill",
    "plan_upgrade",
    "read_alias",
    "retire",
    "rewrite_records",
    "rollback",
    "shadow_name",
    "text_digests",
]
