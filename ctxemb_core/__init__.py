"""ctxemb: an embedding is a contract, not a model name.

The contract pins the whole recipe of a vector (encoder and weights, pooling, instruction prefix
per role, normalisation, truncation, precision); the embedder applies it on both sides of
retrieval; the index stamp makes an index refuse any other recipe.

Example:
    >>> from ctxemb_core import Embedder, IndexStamp, contract_for
    >>> embedder = Embedder(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
    >>> stamp = IndexStamp.from_embedder(embedder)
    >>> stamp.verify(embedder).min_cosine > 0.9999
    True
"""

from __future__ import annotations

from ctxemb_core._version import __version__
from ctxemb_core.contract import (
    DiffKind,
    EmbeddingContract,
    Pooling,
    Precision,
    Quantization,
    Role,
)
from ctxemb_core.detect import DetectReport, detect_contract
from ctxemb_core.embedder import Embedder
from ctxemb_core.resolve import contract_for
from ctxemb_core.stamp import IndexStamp

__all__ = [
    "DetectReport",
    "DiffKind",
    "Embedder",
    "EmbeddingContract",
    "IndexStamp",
    "Pooling",
    "Precision",
    "Quantization",
    "Role",
    "__version__",
    "contract_for",
    "detect_contract",
]
