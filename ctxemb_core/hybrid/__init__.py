"""Hybrid retrieval under one contract: BM25 beside the dense bi-encoder, fused, all pinned.

- :class:`HybridContract`: the dense :class:`~ctxemb_core.EmbeddingContract`, the lexical recipe
  (:class:`LexicalContract`: BM25's parameters, the analyzer, and once fitted the digest of the
  vocabulary and document frequencies) and the :class:`Fusion` (reciprocal rank with its ``k``,
  or a weighted sum with its normalisation). ``diff`` names fields by side and classifies the
  change: a fusion change is query-side only, a lexical change rebuilds the lexical side only,
  a dense change is the dense contract's.
- :class:`LexicalIndex`: BM25 postings fitted under the recipe, in memory (evaluation).
- :class:`LexicalStore`: the lexical side of a hybrid index in a transactional store (SQLite
  beside an embedded store, PostgreSQL tables beside a pgvector table), updated by the
  documents written, its recipe and fitted statistics stamped inside it and checked on open.
- :mod:`~ctxemb_core.hybrid.pair`: a guarded dense index and its lexical side, kept in step and
  queried fused; a store adapter's ``open_hybrid`` is ``open_paired`` over its own open and the
  place it keeps the side in.
- :mod:`~ctxemb_core.hybrid.guard`: the checks every adapter makes (caller against stamp,
  analyzer against its canary, the two sides holding the same documents).

Needs ``bm25s`` (its stop-word lists) and ``PyStemmer``: ``pip install 'ctxemb[hybrid]'``.
"""

from ctxemb_core.hybrid.contract import HybridContract, HybridDiff, HybridDiffKind
from ctxemb_core.hybrid.fusion import RRF_K, Fusion, fuse
from ctxemb_core.hybrid.index import LexicalIndex, corpus_state
from ctxemb_core.hybrid.lexical import Analyzer, LexicalContract
from ctxemb_core.hybrid.store import (
    ForeignLexicalError,
    HybridStamp,
    LexicalStore,
    NoLexicalSideError,
    SQLiteLexical,
)

__all__ = [
    "RRF_K",
    "Analyzer",
    "ForeignLexicalError",
    "Fusion",
    "HybridContract",
    "HybridDiff",
    "HybridDiffKind",
    "HybridStamp",
    "LexicalContract",
    "LexicalIndex",
    "LexicalStore",
    "NoLexicalSideError",
    "SQLiteLexical",
    "corpus_state",
    "fuse",
]
