"""Scale-out: bulk indexing on a Ray cluster into a stamped index of any store whose driver each
node can make (see :func:`~ctxemb_core.scaleout.job.index_with_ray` and the ``StoreSession`` a
store's adapter gives it)."""

from __future__ import annotations

from ctxemb_core.scaleout.job import IndexSummary, StoreSession, index_with_ray

__all__ = ["IndexSummary", "StoreSession", "index_with_ray"]
