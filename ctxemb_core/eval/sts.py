"""Semantic textual similarity: the STS Benchmark reader and the correlations it is scored with.

STS is scored as MTEB does: embed both sentences of each pair, take the row-wise cosine, and
report the Spearman correlation (main score) and Pearson correlation with the gold scores.
The correlations are implemented in numpy so the core needs no scipy; :func:`spearman` uses
average ranks for ties, exactly as ``scipy.stats.spearmanr``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctxemb_core.errors import DataFormatError, InvalidInputError
from ctxemb_core.eval.beir import _open_text

__all__ = ["StsPairs", "cosine_scores", "load_sts", "pearson", "spearman"]

# 0-based columns of the STS Benchmark files: genre, file, year, id, score, sentence1, sentence2,
# then optional source columns.
_SCORE_COL, _S1_COL, _S2_COL = 4, 5, 6


@dataclass(frozen=True)
class StsPairs:
    """Sentence pairs with gold similarity scores.

    Attributes:
        scores: ``(n,)`` float64 gold scores (0-5 for the STS Benchmark).
        sentences1: first sentence of each pair.
        sentences2: second sentence of each pair.
    """

    scores: np.ndarray = field(repr=False)
    sentences1: list[str] = field(repr=False)
    sentences2: list[str] = field(repr=False)

    def __len__(self) -> int:
        return len(self.sentences1)

    def __repr__(self) -> str:
        return f"StsPairs(n={len(self)})"


def load_sts(path: str | Path) -> StsPairs:
    """Read an STS Benchmark file (``sts-train.csv``, ``sts-dev.csv``, ``sts-test.csv``).

    Each line is split on tabs only, with no quote handling: the sentences contain quote
    characters that a CSV reader would misparse. The score is column 5 and the sentences are
    columns 6 and 7 (1-based); further columns (sources of the forum pairs) are ignored.

    Args:
        path: the file, UTF-8.

    Returns:
        The pairs in file order.

    Raises:
        DataFormatError: the file is missing or unreadable, a line has fewer than 7 columns, or
            a score is not a finite number. The message names file and 1-based line.
    """
    path = Path(path)
    scores: list[float] = []
    s1: list[str] = []
    s2: list[str] = []
    for lineno, line in _open_text(path):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 7:
            raise DataFormatError(
                f"{path}:{lineno}: expected at least 7 tab-separated columns "
                f"(genre, file, year, id, score, sentence1, sentence2), got {len(cols)}"
            )
        raw = cols[_SCORE_COL].strip()
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataFormatError(f"{path}:{lineno}: score {raw!r} is not a finite number")
        scores.append(score)
        s1.append(cols[_S1_COL])
        s2.append(cols[_S2_COL])
    if not scores:
        raise DataFormatError(f"{path}: no sentence pairs found")
    return StsPairs(scores=np.asarray(scores, dtype=np.float64), sentences1=s1, sentences2=s2)


def _paired_vectors(a: object, b: object) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1:
        raise InvalidInputError(f"expected two 1-D arrays, got shapes {x.shape} and {y.shape}")
    if x.shape != y.shape:
        raise InvalidInputError(f"arrays differ in length: {x.shape[0]} and {y.shape[0]}")
    if x.shape[0] < 2:
        raise InvalidInputError("a correlation needs at least 2 pairs")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise InvalidInputError("arrays contain NaN or infinite values")
    return x, y


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    xc = x - x.mean()
    yc = y - y.mean()
    denom = math.sqrt(float(xc @ xc) * float(yc @ yc))
    if denom == 0.0:
        # A constant input has no defined correlation; scipy returns NaN too.
        return math.nan
    # Rounding can push |r| a hair past 1 for (anti)identical inputs.
    return float(np.clip(float(xc @ yc) / denom, -1.0, 1.0))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their positions (``rankdata(method="average")``)."""
    n = x.shape[0]
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts_group = np.empty(n, dtype=bool)
    starts_group[0] = True
    np.not_equal(sorted_x[1:], sorted_x[:-1], out=starts_group[1:])
    group = np.cumsum(starts_group) - 1
    starts = np.flatnonzero(starts_group)
    ends = np.append(starts[1:], n)  # exclusive
    # Positions start..end-1 (0-based) average to (start + end - 1) / 2; +1 for 1-based ranks.
    avg_rank = (starts + ends - 1) / 2.0 + 1.0
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = avg_rank[group]
    return ranks


def pearson(a: np.ndarray | list[float], b: np.ndarray | list[float]) -> float:
    """Pearson correlation coefficient of two equal-length 1-D arrays.

    Args:
        a: first sample.
        b: second sample.

    Returns:
        ``r`` in ``[-1, 1]``, or NaN when either input is constant.

    Raises:
        InvalidInputError: inputs are not 1-D, differ in length, have fewer than 2 values or
            contain NaN/inf.
    """
    x, y = _paired_vectors(a, b)
    return _pearson(x, y)


def spearman(a: np.ndarray | list[float], b: np.ndarray | list[float]) -> float:
    """Spearman rank correlation, equal to ``scipy.stats.spearmanr(a, b).statistic``.

    Pearson correlation of the ranks, with tied values given the average of their ranks.

    Args:
        a: first sample.
        b: second sample.

    Returns:
        ``rho`` in ``[-1, 1]``, or NaN when either input is constant.

    Raises:
        InvalidInputError: inputs are not 1-D, differ in length, have fewer than 2 values or
            contain NaN/inf.
    """
    x, y = _paired_vectors(a, b)
    return _pearson(_average_ranks(x), _average_ranks(y))


def cosine_scores(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two ``(n, dim)`` arrays.

    Norms are clamped at ``1e-12`` like ``torch.nn.functional.normalize`` (used by
    sentence-transformers), so an all-zero row scores 0 instead of NaN.

    Args:
        u: ``(n, dim)`` vectors.
        v: ``(n, dim)`` vectors.

    Returns:
        ``(n,)`` float64 cosines.

    Raises:
        InvalidInputError: the arrays are not 2-D of the same shape.
    """
    x = np.asarray(u, dtype=np.float64)
    y = np.asarray(v, dtype=np.float64)
    if x.ndim != 2 or x.shape != y.shape:
        raise InvalidInputError(
            f"expected two 2-D arrays of the same shape, got {x.shape} and {y.shape}"
        )
    # float64 whatever the input dtype: float32 rounding can turn nearly equal cosines into
    # exact ties (or break real ones), which changes Spearman ranks.
    nx = np.maximum(np.linalg.norm(x, axis=1), 1e-12)
    ny = np.maximum(np.linalg.norm(y, axis=1), 1e-12)
    return np.einsum("ij,ij->i", x, y) / (nx * ny)
