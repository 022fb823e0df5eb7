"""MaxSim: the late-interaction score of token-vector matrices, in bounded memory.

    score(q, d) = Σ_i max_j q_i · d_j

One query against many candidates (a padded 3-D array with masks, or a list of matrices), in
chunks of bounded size, with the large products through onnxruntime's MLAS where it is faster.
The checks of token matrices every late-interaction module shares live here too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxemb_core.errors import (
    InvalidInputError,
)
from ctxemb_core.validate import check_positive_int

__all__ = ["EMPTY_SCORE", "check_finite", "maxsim", "token_matrix"]

#: The score of a candidate with no token to match (none given, or every one masked). The max
#: over no tokens is -inf; this finite stand-in is what sentence-transformers' ``maxsim`` gives
#: (``_EMPTY_DOCUMENT_SCORE``): it ranks below any real score of unit-length token vectors
#: (whose magnitude is at most the number of query tokens), survives sorting, thresholds and
#: JSON, and leaves empty candidates in input order among themselves.
EMPTY_SCORE = -1e9

# Elements (token vectors plus their products) one chunk of candidates may hold: 8 MB of float32.
_CHUNK_ELEMENTS = 1 << 21
# A listed candidate this long or longer is multiplied where it lies; shorter ones are copied
# side by side and multiplied together (below it, a call's overhead costs more than the copy).
# Measured in the rerank benchmark's alternating turns: gathering candidates of 64-127 tokens
# made a list of 64..256-token candidates 0.7x the per-candidate loop; in place, 1.0x.
_GATHER_BELOW = 32


# -- MaxSim ------------------------------------------------------------------------------------


def maxsim(
    query_vectors: Any,
    doc_vectors: Any,
    masks: Any = None,
    *,
    query_mask: Any = None,
    chunk_elements: int | None = None,
) -> np.ndarray:
    """``Σ_i max_j q_i · d_j`` of one query against each candidate, vectorised.

    A padded batch is multiplied by the query in one BLAS matrix product per chunk of
    candidates, read in place; in a list, each candidate of 32 tokens or more is multiplied
    where it lies and shorter ones are copied side by side and multiplied together (copying a
    long candidate costs more than its own call). Dot products are float32; each candidate's
    maximum per query token is taken over its own tokens only (a reshape, or one segment
    reduction), and the maxima are summed over the query tokens in float64. Working memory
    stays within ``chunk_elements``. Every kernel checks every product (a max over tokens would
    hide a ``-inf``), and a sum that float32 cannot hold is refused rather than returned as
    ``inf``: the scores are float32, and an infinite one would rank first.

    Empty cases: a candidate with no token (zero rows, or every token masked) scores
    :data:`EMPTY_SCORE` (``-1e9``, as ``sentence_transformers.util.similarity.maxsim``); an
    empty query (no rows, or every query token masked) scores ``0.0``, the empty sum, against
    every candidate that has tokens.

    Args:
        query_vectors: ``(query_tokens, dim)`` array.
        doc_vectors: a list of ``(tokens_j, dim)`` arrays (any lengths), or one padded
            ``(candidates, tokens, dim)`` array.
        masks: which tokens count (``True``/1) and which are padding (``False``/0): for a padded
            array, ``(candidates, tokens)``; for a list, a list of ``(tokens_j,)`` masks.
            ``None``: every token counts.
        query_mask: ``(query_tokens,)``; query tokens marked ``False`` are left out of the sum.
        chunk_elements: the memory budget of one chunk, in float32 elements.

    Returns:
        ``(candidates,)`` float32 scores, in input order.

    Raises:
        InvalidInputError: an array that is not 2-D (3-D for a padded batch), widths that
            differ, masks of another shape or not boolean, a NaN or infinite value anywhere
            (padding and masked tokens included: pad with zeros; a float64 value beyond
            float32's range counts as infinite), or dot products or a score too large for
            float32.

    Example:
        >>> q = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> maxsim(q, [np.array([[1.0, 0.0], [0.6, 0.8]]), np.zeros((0, 2))]).tolist()
        [1.7999999523162842, -1000000000.0]
    """
    q = token_matrix(query_vectors, "query_vectors")
    check_finite(q, "query_vectors")
    if query_mask is not None:
        q = q[_mask(query_mask, (len(q),), "query_mask")]
    budget = (
        _CHUNK_ELEMENTS
        if chunk_elements is None
        else check_positive_int(chunk_elements, "chunk_elements")
    )
    if isinstance(doc_vectors, np.ndarray):
        return _maxsim_padded(q, doc_vectors, masks, budget)
    return _maxsim_list(q, doc_vectors, masks, budget)


def _maxsim_padded(q: np.ndarray, docs: np.ndarray, masks: Any, budget: int) -> np.ndarray:
    if docs.ndim != 3:
        raise InvalidInputError(
            "doc_vectors must be a list of (tokens, dim) arrays or one padded (candidates, "
            f"tokens, dim) array, got an array of shape {docs.shape}; wrap a single candidate "
            "in a list"
        )
    _check_numeric(docs, "doc_vectors")
    n, width, dim = docs.shape
    _check_dim(dim, q.shape[1], "doc_vectors")
    keep = None if masks is None else _mask(masks, (n, width), "masks")
    present = np.asarray(keep.any(axis=1)) if keep is not None else np.full(n, width > 0)
    out = np.zeros(n, dtype=np.float32)
    if len(q) == 0 or width == 0:
        check_finite(docs, "doc_vectors")
    else:
        q_t = np.ascontiguousarray(q.T)
        per = max(1, budget // (width * (dim + len(q))))
        products = np.empty((min(per, n) * width, len(q)), dtype=np.float32)
        for a in range(0, n, per):
            b = min(n, a + per)
            with np.errstate(invalid="ignore", over="ignore"):  # checked just below
                # A view when the batch is C-contiguous float32: the product reads it in place.
                # A float64 value beyond float32's range becomes inf here, and so its products.
                tokens = np.ascontiguousarray(docs[a:b], dtype=np.float32).reshape(-1, dim)
                scores = _matmul(tokens, q_t, out=products[: len(tokens)])
            if not np.isfinite(scores).all():
                _refuse_scores(scores, np.arange(a, b).repeat(width))
            scores = scores.reshape(b - a, width, len(q))
            if keep is not None:
                scores[~keep[a:b]] = -np.inf  # padding never wins a max
            _store_sums(out, np.arange(a, b), scores.max(axis=1), present[a:b])
    out[~present] = EMPTY_SCORE
    return out


def _maxsim_list(q: np.ndarray, docs: Any, masks: Any, budget: int) -> np.ndarray:
    if isinstance(docs, (str, bytes)) or not isinstance(docs, Sequence):
        raise InvalidInputError(
            "doc_vectors must be a list of (tokens, dim) arrays or one padded (candidates, "
            f"tokens, dim) array, got {type(docs).__name__}"
        )
    if masks is not None and (
        isinstance(masks, (str, bytes)) or not isinstance(masks, Sequence | np.ndarray)
    ):
        raise InvalidInputError(
            f"masks of a list of candidates is a list of per-candidate masks, got "
            f"{type(masks).__name__}"
        )
    if masks is not None and len(masks) != len(docs):
        raise InvalidInputError(f"masks has {len(masks)} items for {len(docs)} candidates")
    dim = q.shape[1]
    items = []
    for j, doc in enumerate(docs):
        tokens = token_matrix(doc, f"doc_vectors[{j}]")
        _check_dim(tokens.shape[1], dim, f"doc_vectors[{j}]")
        if masks is not None:
            keep = _mask(masks[j], (len(tokens),), f"masks[{j}]")
            # Masked tokens are padding, checked like a padded batch's (no product sees them).
            if not keep.all() and not np.isfinite(tokens[~keep]).all():
                raise InvalidInputError(
                    f"doc_vectors[{j}] holds NaN or infinite values in tokens its mask leaves "
                    "out; every value must be finite (padding included: pad with zeros)"
                )
            tokens = tokens[keep]
        items.append(tokens)
    n = len(items)
    lengths = np.array([len(t) for t in items], dtype=np.int64)
    out = np.zeros(n, dtype=np.float32)
    if len(q) == 0:
        for j, tokens in enumerate(items):
            check_finite(tokens, f"doc_vectors[{j}]")
    elif n:
        q_t = np.ascontiguousarray(q.T)
        best = np.empty((n, len(q)), dtype=np.float32)
        rows = max(1, budget // (dim + len(q)))  # the tokens one product may cover
        sizes = lengths.tolist()  # plain ints: the loops below run per candidate
        small = [j for j, size in enumerate(sizes) if 0 < size < _GATHER_BELOW]
        for j, size in enumerate(sizes):
            if size >= _GATHER_BELOW:
                # Multiplied where it lies: copying a long candidate costs more than its call.
                # Every product is checked, not only the maxima: a -inf product never wins a
                # max, so a -inf token among finite ones would leave a finite score.
                if size <= rows:
                    np.max(_products(items[j], q_t, np.full(1, j), blas=False), axis=0, out=best[j])
                    continue
                best[j] = -np.inf
                for a in range(0, size, rows):
                    part = _products(items[j][a : a + rows], q_t, np.full(1, j), blas=False)
                    np.maximum(best[j], part.max(axis=0), out=best[j])
        if small:
            # Short candidates side by side in one buffer: one product for many of them.
            room = max(min(rows, sum(sizes[j] for j in small)), _GATHER_BELOW)
            buffer = np.empty((room, dim), np.float32)
            start = 0
            while start < len(small):
                stop, total = start, 0
                while stop < len(small) and (stop == start or total + sizes[small[stop]] <= room):
                    total += sizes[small[stop]]
                    stop += 1
                group = small[start:stop]
                tokens = buffer[:total]
                np.concatenate([items[j] for j in group], axis=0, out=tokens)
                part = _products(tokens, q_t, np.repeat(group, lengths[group]))
                starts = np.cumsum([0] + [sizes[j] for j in group[:-1]])
                # Segment maxima along contiguous rows (reduceat runs fastest along a row).
                best[group] = np.maximum.reduceat(np.ascontiguousarray(part.T), starts, axis=1).T
                start = stop
        full = lengths > 0
        _store_sums(out, np.arange(n), best, full)
    out[lengths == 0] = EMPTY_SCORE
    return out


def _products(
    tokens: np.ndarray, q_t: np.ndarray, owner: np.ndarray, *, blas: bool = True
) -> np.ndarray:
    """``tokens @ q_t``, refused if any product is not finite (``owner``: each row's candidate).

    ``blas=False`` keeps numpy's product (a long candidate's, multiplied where it lies).
    """
    with np.errstate(invalid="ignore", over="ignore"):  # checked just below
        products = _matmul(tokens, q_t) if blas else np.matmul(tokens, q_t)
    if not np.isfinite(products).all():
        _refuse_scores(products, np.broadcast_to(owner, len(products)))
    return products


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _store_sums(out: np.ndarray, index: np.ndarray, best: np.ndarray, present: np.ndarray) -> None:
    """``out[index] = best.sum(axis=1)`` (float64 sums), refused where float32 cannot hold one.

    Each product fits in float32 (checked before), but their sum over the query tokens may not:
    stored as float32 it would become ``inf`` (and rank first) or ``-inf``. It is refused, like an
    overflowing product, rather than computed in float64: the scores are float32 throughout
    ctxemb (rerankers, thresholds, JSON), and scores this large mean the vectors are not
    embeddings (unit-length token vectors score at most the number of query tokens).
    """
    sums = best.sum(axis=1, dtype=np.float64)
    bad = np.flatnonzero(present & ~(np.abs(sums) <= _FLOAT32_MAX))
    if len(bad):
        j = int(index[bad[0]])
        raise InvalidInputError(
            f"doc_vectors[{j}] ({len(bad)} candidate(s) in all) scores {sums[bad[0]]:.3g}, "
            "beyond float32's range (±3.4e38): each dot product fits but their sum over the "
            "query tokens does not; scale the vectors down (embedding token vectors are "
            "usually unit length)"
        )
    with np.errstate(over="ignore", invalid="ignore"):  # absent candidates (-inf) are reset
        out[index] = sums


# Products this large or larger go to onnxruntime's GEMM (MLAS): on the 2-core Xeons measured,
# numpy's OpenBLAS ran one large float32 product barely faster than 100 small ones (it does not
# use the CPU's widest vector units there), while MLAS ran it 4-5x faster. Below this size a
# session call's overhead outweighs the kernel.
_MLAS_MIN_FLOPS = 1 << 22
_MLAS_LOCK = threading.Lock()
_MLAS: dict[str, Any] = {}


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` in float32: onnxruntime's GEMM for large products when it runs, else numpy.

    Both compute the same sums of float32 products (the tests compare them); only the kernel
    and its summation order differ, as between any two BLAS libraries.
    """
    if a.shape[0] * a.shape[1] * b.shape[1] >= _MLAS_MIN_FLOPS:
        session = _mlas_session()
        if session is not None:
            result: np.ndarray = session.run(
                None, {"a": np.ascontiguousarray(a), "b": np.ascontiguousarray(b)}
            )[0]
            if out is None:
                return result
            out[...] = result
            return out
    return np.matmul(a, b, out=out)


def _mlas_session() -> Any:
    """A one-node MatMul graph on onnxruntime, built in memory once; ``None`` without it."""
    if "session" not in _MLAS:
        with _MLAS_LOCK:
            if "session" not in _MLAS:
                _MLAS["session"] = _build_mlas_session()
    return _MLAS["session"]


def _build_mlas_session() -> Any:
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    from ctxemb_core.backends.ort import available_cores

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "maxsim_products",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["rows", "dim"]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["dim", "query"]),
        ],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["rows", "query"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = available_cores()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Spinning threads would hold the cores after each product, starving numpy and the
    # encoder that run next (measured: a numpy loop 100x slower right after a spinning run).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception:  # an onnxruntime that cannot run it: numpy computes the same products
        return None


def token_matrix(value: Any, name: str) -> np.ndarray:
    """A 2-D real array as C-contiguous float32 (finiteness is checked by the caller)."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name} is not an array of numbers: {exc}") from None
    if array.ndim != 2:
        raise InvalidInputError(
            f"{name} must be a 2-D (tokens, dim) array, got shape {array.shape}"
        )
    _check_numeric(array, name)
    # A value beyond float32's range becomes +-inf here: the products (or _check_finite) refuse it.
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(array, dtype=np.float32)


def _check_numeric(array: np.ndarray, name: str) -> None:
    if array.dtype.kind not in "fiu":
        raise InvalidInputError(f"{name} must hold real numbers, got dtype {array.dtype}")


def _check_dim(dim: int, expected: int, name: str) -> None:
    if dim != expected:
        raise InvalidInputError(
            f"{name} has vectors of width {dim}, the query's are {expected}; both sides must "
            "come from one token encoder"
        )


def check_finite(array: np.ndarray, name: str) -> None:
    """Refuse NaN or infinite values, judged as float32 (a float64 1e300 becomes inf there)."""
    if array.size and array.dtype != np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            array = array.astype(np.float32)
    if array.size and not np.isfinite(array).all():
        raise InvalidInputError(f"{name} holds NaN or infinite values; every value must be finite")


def _refuse_scores(scores: np.ndarray, owner: np.ndarray) -> None:
    """Name the candidates whose dot products are not finite.

    A NaN or inf anywhere in a candidate's vectors makes every product of that token NaN or
    inf (0 · inf is NaN), so checking the (tokens, query_tokens) products finds it, at a
    fraction of the cost of checking the (tokens, dim) vectors themselves.
    """
    bad = sorted({int(i) for i in owner[~np.isfinite(scores).all(axis=1)]})
    raise InvalidInputError(
        f"doc_vectors[{bad[0]}] ({len(bad)} candidate(s) in all) holds NaN or infinite values, "
        "or values whose dot products overflow float32; every value must be finite (padding "
        "included: pad with zeros)"
    )


def _mask(value: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.shape != shape:
        raise InvalidInputError(f"{name} must have shape {shape}, got {array.shape}")
    if array.dtype == bool:
        return array
    if array.dtype.kind not in "fiu" or not np.isin(array, (0, 1)).all():
        raise InvalidInputError(f"{name} must be boolean (or 0/1), got dtype {array.dtype}")
    return array != 0
