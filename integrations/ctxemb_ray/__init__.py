"""ctxemb for Ray: bulk indexing on a Ray cluster into a stamped index of any store whose driver
every node can make.

Install with ``pip install 'ctxemb[ray]'`` (Ray Data); Ray itself is imported only when a job
runs, so importing this package (or a store adapter that builds on it) loads no Ray. The job,
:func:`index_with_ray`, takes a store's :data:`StoreSession`: a picklable callable that each
actor calls on its own node to reopen the store and make the index's driver. For a store
adapter that is an :class:`AdapterSession` (the adapter's name, the index's name and the
keywords of the adapter's ``connect`` and ``driver``), and :func:`index_with_ray_for` makes the
adapter's own ``index_with_ray`` (``ctxemb_chroma``: a collection on a Chroma server;
``ctxemb_pgvector``: a table in a database); another store may write a :class:`DriverSession`.
:func:`backfill_with_ray` runs an alias's upgrade backfill (core's plan, core's writes, the new
contract's canary on every actor) the same way. This package imports only ``ctxemb_core``: it
knows no store, and imports an adapter only by the name a session holds, when it is used.
"""

from __future__ import annotations

from ctxemb_ray._adapter import AdapterSession, index_with_ray_for
from ctxemb_ray._backfill import backfill_with_ray
from ctxemb_ray._job import DriverSession, IndexSummary, StoreSession, index_with_ray

__all__ = [
    "AdapterSession",
    "DriverSession",
    "IndexSummary",
    "StoreSession",
    "backfill_with_ray",
    "index_with_ray",
    "index_with_ray_for",
]
