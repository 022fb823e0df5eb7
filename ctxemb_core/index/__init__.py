"""Stores as drivers under one guard (issue 44).

- :mod:`~ctxemb_core.index.driver`: the :class:`StoreDriver` protocol, the few primitives a
  store offers, and the capabilities it declares;
- :mod:`~ctxemb_core.index.guarded`: :class:`GuardedIndex`, the one guard over any driver;
- :mod:`~ctxemb_core.index.facade`: :class:`IndexFacade`, the base of a store adapter's public
  index object (``GuardedCollection``, ``GuardedTable``): the guarded index in a store's shapes;
- :mod:`~ctxemb_core.index.memory`: the reference driver, in memory;
- :mod:`~ctxemb_core.index.store_options`: :class:`StoreOpenOptions`, what a framework's
  vector store takes of the open options;
- :mod:`~ctxemb_core.index.migrate`: a copy between any two drivers;
- :mod:`ctxemb_core.testing.conformance`: the suite every driver passes.
"""

from __future__ import annotations

from ctxemb_core.index.driver import (
    Capabilities,
    Head,
    Hit,
    Record,
    SealingDriver,
    SeekingDriver,
    StampMovedError,
    StampRead,
    StoreDriver,
)
from ctxemb_core.index.facade import IndexFacade, OpenOptions
from ctxemb_core.index.guarded import (
    GuardedIndex,
    Match,
    restamp_index,
    stamped_contract,
    verify_driver,
)
from ctxemb_core.index.memory import MemoryDriver, MemoryStore, RawMemoryClient
from ctxemb_core.index.migrate import Migration, migrate_index, migration
from ctxemb_core.index.store_options import StoreOpenOptions, store_opening

__all__ = [
    "Capabilities",
    "GuardedIndex",
    "Head",
    "Hit",
    "IndexFacade",
    "Match",
    "MemoryDriver",
    "MemoryStore",
    "Migration",
    "OpenOptions",
    "RawMemoryClient",
    "Record",
    "SealingDriver",
    "SeekingDriver",
    "StampMovedError",
    "StampRead",
    "StoreDriver",
    "StoreOpenOptions",
    "migrate_index",
    "migration",
    "restamp_index",
    "stamped_contract",
    "store_opening",
    "verify_driver",
]
