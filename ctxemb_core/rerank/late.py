"""Late interaction: MaxSim over per-token vectors (ColBERT), under a reranker contract.

A query and a document are each a matrix of token vectors, and the score is

    score(q, d) = Σ_i max_j q_i · d_j

(plain dot products; with unit-length token vectors, a sum of cosines). Document token vectors
do not depend on the query, so they can be computed once and kept: :class:`TokenVectorStore`
keeps them under the reranker contract's fingerprint, so vectors made under one contract are
never served to another.

Example:
    >>> from ctxemb_core.rerank import LateInteractionReranker, TokenVectorStore
    >>> reranker = LateInteractionReranker(contract, store=TokenVectorStore("./tokens"))
    >>> reranker.rerank("tea", ["green tea", "bicycles"], ids=["t", "b"])[0].id  # doctest: +SKIP
    't'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import string
import threading
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core._validate import check_positive_int, check_text, check_texts
from ctxemb_core.contract import Role
from ctxemb_core.embedder import Embedder, TokenEmbeddings
from ctxemb_core.errors import (
    DataFormatError,
    InvalidInputError,
    StoreUnavailableError,
)
from ctxemb_core.pooling import l2_normalize
from ctxemb_core.rerank._base import Reranker, Reranking
from ctxemb_core.rerank.contract import (
    RerankerContract,
    RerankKind,
    ScoreThreshold,
    SkipTokens,
)

__all__ = ["EMPTY_SCORE", "LateInteractionReranker", "TokenVectorStore", "maxsim"]

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
    q = _matrix(query_vectors, "query_vectors")
    _check_finite(q, "query_vectors")
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
        _check_finite(docs, "doc_vectors")
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
        tokens = _matrix(doc, f"doc_vectors[{j}]")
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
            _check_finite(tokens, f"doc_vectors[{j}]")
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


def _matrix(value: Any, name: str) -> np.ndarray:
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


def _check_finite(array: np.ndarray, name: str) -> None:
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


# -- the token vector store --------------------------------------------------------------------

_MAGIC = b"ctxemb-token-vectors 1\n"
_HEADER_KEYS = frozenset({"fingerprint", "id", "text_sha256", "shape", "dtype", "sha256"})
_CONTRACT_FILE = "contract.json"
_SUFFIX = ".tokens"


class _Entry(NamedTuple):
    vectors: np.ndarray
    text_sha256: str | None


class TokenVectorStore:
    """Document token vectors, keyed by reranker contract fingerprint and document id.

    Vectors made under one :class:`~ctxemb_core.rerank.RerankerContract` are kept apart from
    any other's: every lookup goes through the caller's contract fingerprint, so a changed
    contract (another encoder, skip rule, marker, normalisation) finds nothing and computes
    afresh; it can never read stale vectors. Each entry may record the sha256 of its document's
    text: a lookup given the texts serves only entries whose text is unchanged.

    In memory by default; with ``directory``, persisted as::

        directory/<fingerprint>/contract.json            the contract (its JSON)
        directory/<fingerprint>/<h[:2]>/<h>.tokens       one document, h = sha256(id)

    Each file is written atomically (a temporary file renamed over it) and records the
    fingerprint, id, text digest, shape and a sha256 of its vectors; a file that disagrees
    with where it lies or with itself is refused with a
    :class:`~ctxemb_core.errors.DataFormatError`, never served.

    Args:
        directory: where to persist the vectors; ``None`` keeps them in memory.

    Raises:
        StoreUnavailableError: the directory cannot be created.

    Example:
        >>> store = TokenVectorStore("./token-vectors")
        >>> store.put(contract, ["doc-1"], [vectors])  # doctest: +SKIP
        >>> store.get(contract, ["doc-1", "doc-2"])  # doctest: +SKIP
        [array([[...]], dtype=float32), None]
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = None if directory is None else Path(directory)
        self._memory: dict[str, dict[str, _Entry]] = {}
        self._checked: set[str] = set()
        self._lock = threading.Lock()
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailableError(
                    f"cannot use {self.directory} for token vectors: {exc.strerror or exc}"
                ) from None

    def __repr__(self) -> str:
        where = "memory" if self.directory is None else str(self.directory)
        return f"TokenVectorStore({where})"

    # -- reading -------------------------------------------------------------------------------

    def get(
        self,
        contract: RerankerContract,
        ids: Sequence[str],
        *,
        texts: Sequence[str] | None = None,
    ) -> list[np.ndarray | None]:
        """The stored vectors of each id under ``contract`` (``None`` where there are none).

        Args:
            contract: the late-interaction contract the vectors must have been made under.
            ids: document ids.
            texts: each document's text; an entry recorded for another text (or none) is
                not served (``None``).

        Raises:
            DataFormatError: a persisted file that is damaged or does not belong where it
                lies (delete it, or :meth:`clear` the contract, to compute it again).
        """
        fp, width = _late(contract)
        keys = check_texts(ids, "ids", single="wrap a single id in a list")
        digests = self._digests(texts, len(keys))
        out: list[np.ndarray | None] = []
        for i, key in enumerate(keys):
            entry = self._read(contract, fp, width, key)
            wanted = None if digests is None else digests[i]
            if entry is None or (wanted is not None and entry.text_sha256 != wanted):
                out.append(None)
            else:
                out.append(entry.vectors)
        return out

    def __contains__(self, key: object) -> bool:
        """``(contract, id) in store``: whether vectors are stored for the id under it."""
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        contract, doc_id = key
        if not isinstance(contract, RerankerContract) or not isinstance(doc_id, str):
            return False
        fp = contract.fingerprint
        if self.directory is None:
            with self._lock:
                return doc_id in self._memory.get(fp, {})
        return self._path(fp, doc_id).is_file()

    def count(self, contract: RerankerContract) -> int:
        """How many documents have vectors under ``contract``."""
        fp, _ = _late(contract)
        if self.directory is None:
            with self._lock:
                return len(self._memory.get(fp, {}))
        folder = self.directory / fp
        return sum(1 for _ in folder.glob(f"*/*{_SUFFIX}")) if folder.is_dir() else 0

    # -- writing -------------------------------------------------------------------------------

    def put(
        self,
        contract: RerankerContract,
        ids: Sequence[str],
        vectors: Sequence[Any],
        *,
        texts: Sequence[str] | None = None,
    ) -> None:
        """Store each document's ``(tokens, dim)`` vectors under ``contract`` (replacing any).

        Args:
            contract: the late-interaction contract the vectors were made under.
            ids: document ids.
            vectors: one float array per id, of the contract's token width, finite.
            texts: each document's text, recorded (as a sha256) so a changed text is not
                served later.

        Raises:
            InvalidInputError: ids and vectors that do not pair, or vectors of another width,
                not 2-D, or not finite. Nothing is written.
            StoreUnavailableError: a file cannot be written.
        """
        fp, width = _late(contract)
        keys = check_texts(ids, "ids", single="wrap a single id in a list")
        digests = self._digests(texts, len(keys))
        arrays = _check_token_vectors(vectors, len(keys), width, "vectors", own=True)
        if self.directory is None:
            with self._lock:
                bucket = self._memory.setdefault(fp, {})
                for i, (key, array) in enumerate(zip(keys, arrays, strict=True)):
                    bucket[key] = _Entry(array, None if digests is None else digests[i])
            return
        self._ensure_contract(contract, fp, create=True)
        for i, (key, array) in enumerate(zip(keys, arrays, strict=True)):
            header = {
                "fingerprint": fp,
                "id": key,
                "text_sha256": None if digests is None else digests[i],
                "shape": list(array.shape),
                "dtype": "<f4",
                "sha256": hashlib.sha256(array.astype("<f4").tobytes()).hexdigest(),
            }
            data = (
                _MAGIC
                + json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
                + b"\n"
                + array.astype("<f4").tobytes()
            )
            _write_atomic(self._path(fp, key), data)

    def clear(self, contract: RerankerContract) -> int:
        """Remove every vector stored under ``contract``; how many documents had some."""
        fp, _ = _late(contract)
        if self.directory is None:
            with self._lock:
                return len(self._memory.pop(fp, {}))
        folder = self.directory / fp
        if not folder.is_dir():
            return 0
        count = self.count(contract)
        # Renamed away first, so no reader ever sees half a removal.
        trash = self.directory / f".{fp}.{uuid.uuid4().hex}.removing"
        try:
            os.replace(folder, trash)
            shutil.rmtree(trash)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot clear {folder}: {exc.strerror or exc}") from None
        with self._lock:
            self._checked.discard(fp)
        return count

    # -- internals -----------------------------------------------------------------------------

    def _digests(self, texts: Sequence[str] | None, count: int) -> list[str] | None:
        if texts is None:
            return None
        values = check_texts(texts, "texts", single="wrap a single text in a list")
        if len(values) != count:
            raise InvalidInputError(f"texts has {len(values)} items for {count} ids")
        return [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in values]

    def _path(self, fp: str, key: str) -> Path:
        assert self.directory is not None
        h = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.directory / fp / h[:2] / f"{h}{_SUFFIX}"

    def _read(self, contract: RerankerContract, fp: str, width: int, key: str) -> _Entry | None:
        if self.directory is None:
            with self._lock:
                return self._memory.get(fp, {}).get(key)
        path = self._path(fp, key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailableError(f"cannot read {path}: {exc.strerror or exc}") from None
        self._ensure_contract(contract, fp, create=False)
        return _decode(data, path, fp, key, width)

    def _ensure_contract(self, contract: RerankerContract, fp: str, *, create: bool) -> None:
        """The fingerprint's folder holds this contract's JSON (written by the first put)."""
        with self._lock:
            if fp in self._checked:
                return
        assert self.directory is not None
        file = self.directory / fp / _CONTRACT_FILE
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            if not create:
                raise DataFormatError(
                    f"{file.parent} holds token vectors but no {_CONTRACT_FILE}; the folder is "
                    "refused. Delete it (or TokenVectorStore.clear(contract)) to compute the "
                    "vectors again"
                ) from None
            _write_atomic(file, contract.to_json().encode("utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise DataFormatError(f"cannot read {file}: {exc}") from None
        else:
            try:
                stored = RerankerContract.from_json(text)
            except DataFormatError as exc:
                raise DataFormatError(f"{file} is not a reranker contract: {exc}") from None
            except Exception as exc:  # an invalid contract (InvalidContractError, …)
                raise DataFormatError(f"{file} is not a valid reranker contract: {exc}") from None
            if stored.fingerprint != fp:
                raise DataFormatError(
                    f"{file} holds the contract {stored.fingerprint[:12]}…, not {fp[:12]}… its "
                    "folder is named for; the folder is refused. Delete it (or "
                    "TokenVectorStore.clear(contract)) to compute the vectors again"
                )
        with self._lock:
            self._checked.add(fp)


def _late(contract: Any) -> tuple[str, int]:
    """The fingerprint and token width of a late-interaction contract."""
    if not isinstance(contract, RerankerContract):
        raise InvalidInputError(
            f"a TokenVectorStore is keyed by a RerankerContract, got {type(contract).__name__}"
        )
    if contract.kind is not RerankKind.LATE_INTERACTION or contract.encoder is None:
        raise InvalidInputError(
            f"token vectors belong to a late_interaction contract, got kind={contract.kind.value!r}"
        )
    return contract.fingerprint, contract.encoder.dimension


def _decode(data: bytes, path: Path, fp: str, key: str, width: int) -> _Entry:
    """The entry in a token-vector file, or a DataFormatError saying what is wrong with it."""

    def refuse(why: str) -> DataFormatError:
        return DataFormatError(
            f"{path}: {why}; the file is refused, never served. Delete it (or "
            "TokenVectorStore.clear(contract)) and its vectors are computed again"
        )

    if not data.startswith(_MAGIC):
        raise refuse("not a ctxemb token-vector file")
    end = data.find(b"\n", len(_MAGIC))
    if end < 0:
        raise refuse("its header is cut off")
    try:
        header = json.loads(data[len(_MAGIC) : end])
    except (ValueError, RecursionError):
        raise refuse("its header is not JSON") from None
    if not isinstance(header, dict) or set(header) != _HEADER_KEYS:
        raise refuse(f"its header does not have the fields {sorted(_HEADER_KEYS)}")
    if header["fingerprint"] != fp:
        raise refuse(
            f"it was written under the reranker contract {str(header['fingerprint'])[:12]}…, "
            f"not {fp[:12]}…"
        )
    if header["id"] != key:
        raise refuse(f"it holds the document {str(header['id'])[:80]!r}, not {key[:80]!r}")
    shape = header["shape"]
    if (
        not isinstance(shape, list)
        or len(shape) != 2
        or not all(type(s) is int and s >= 0 for s in shape)
        or header["dtype"] != "<f4"
    ):
        raise refuse(f"its shape {shape!r} or dtype {header['dtype']!r} is not a token matrix")
    if shape[1] != width:
        raise refuse(f"its vectors are {shape[1]} wide; the contract's tokens are {width}")
    payload = data[end + 1 :]
    if len(payload) != shape[0] * shape[1] * 4:
        need = shape[0] * shape[1] * 4
        raise refuse(f"it holds {len(payload)} bytes of vectors where {shape} needs {need}")
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise refuse("its vectors do not match their recorded sha256")
    text = header["text_sha256"]
    if text is not None and not isinstance(text, str):
        raise refuse("its text digest is not a string")
    vectors = np.frombuffer(payload, dtype="<f4").reshape(shape).astype(np.float32, copy=False)
    if not np.isfinite(vectors).all():
        raise refuse("its vectors hold NaN or infinite values")
    return _Entry(vectors, text)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise StoreUnavailableError(f"cannot write {path}: {exc.strerror or exc}") from None


def _check_token_vectors(
    vectors: Any, count: int, width: int, name: str, *, own: bool = False
) -> list[np.ndarray]:
    """Token matrices as C-contiguous float32: one per document, ``width`` wide, finite; else
    :class:`InvalidInputError` naming the first bad one. ``own``: read-only copies."""
    if isinstance(vectors, (str, bytes)) or not isinstance(vectors, Sequence | np.ndarray):
        raise InvalidInputError(
            f"{name} must be a list of (tokens, {width}) arrays, one per document, got "
            f"{type(vectors).__name__}"
        )
    if len(vectors) != count:
        raise InvalidInputError(f"{name} has {len(vectors)} items for {count} documents")
    out = []
    for j, value in enumerate(vectors):
        array = _matrix(value, f"{name}[{j}]")
        if array.shape[1] != width:
            raise InvalidInputError(
                f"{name}[{j}] has vectors of width {array.shape[1]}; this contract's token "
                f"vectors are {width} wide"
            )
        _check_finite(array, f"{name}[{j}]")
        if own:
            array = array.copy()  # the caller's array stays theirs, and cannot change ours
            array.flags.writeable = False
        out.append(array)
    return out


# -- the reranker ------------------------------------------------------------------------------


class LateInteractionReranker(Reranker):
    """Scores documents by MaxSim over per-token vectors, under a late-interaction contract.

    Any encoder serves: the contract's ``encoder`` (an
    :class:`~ctxemb_core.EmbeddingContract`) gives the token vectors through the
    :class:`~ctxemb_core.Embedder`'s token path. How a text becomes its token matrix:

    1. the contract's marker (``query_prefix`` / ``document_prefix``, ColBERT's ``[Q] ``/``[D] ``)
       is read before the text, after the encoder contract's own role prefix (whose tokens are
       always dropped);
    2. with ``query_length``, a query is cut at that many tokens and padded up to it with the
       tokenizer's mask token (ColBERT's query expansion; the network attends to the masks);
    3. ``skip`` drops special tokens and the marker's tokens (both sides; never the expansion
       tokens) and punctuation-only tokens (the document side, as ColBERT does);
    4. the encoder folder's dense heads (a ``Dense`` module: ColBERT's linear projection) are
       applied to each token, so vectors have the encoder contract's ``dimension``;
    5. with ``token_normalize``, each token vector is scaled to unit length.

    The encoder contract's pooling, Matryoshka truncation and precision play no part. Document
    token vectors can be given (``token_vectors=``), or kept in a :class:`TokenVectorStore`
    under this contract's fingerprint (``store=``; looked up by ``ids=``).

    Args:
        contract: a ``late_interaction`` :class:`~ctxemb_core.rerank.RerankerContract` (or its
            ``to_dict()`` / JSON).
        path: the encoder's model folder; found from the contract if omitted.
        backend, device, batch_size, token_budget, show_progress: as the
            :class:`~ctxemb_core.Embedder`'s, for the token encoder.
        store: where document token vectors are kept between calls (``None``: nowhere); a
            local resource, so not part of :meth:`config`.

    Raises:
        InvalidInputError: a contract of another kind, or a store that is not a
            :class:`TokenVectorStore`.

    Example:
        >>> reranker = LateInteractionReranker(contract, store=TokenVectorStore())
        >>> ranking = reranker.rerank("tea", ["green tea", "bicycles"], ids=["t", "b"])
        >>> ranking.ids, ranking.fingerprint == contract.fingerprint  # doctest: +SKIP
        (['t', 'b'], True)
    """

    def __init__(
        self,
        contract: RerankerContract | Mapping[str, Any] | str,
        *,
        path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 32,
        token_budget: int = 4096,
        show_progress: bool | None = None,
        store: TokenVectorStore | None = None,
    ) -> None:
        super().__init__(
            contract,
            path=path,
            backend=backend,
            device=device,
            batch_size=batch_size,
            token_budget=token_budget,
            show_progress=show_progress,
        )
        if self.contract.kind is not RerankKind.LATE_INTERACTION:
            raise InvalidInputError(
                "LateInteractionReranker needs a late_interaction contract, got "
                f"kind={self.contract.kind.value!r}; use CrossEncoderReranker (or reranker_for, "
                "which picks the regime) for it"
            )
        if store is not None and not isinstance(store, TokenVectorStore):
            raise InvalidInputError(
                f"store must be a TokenVectorStore or None, got {type(store).__name__}"
            )
        assert self.contract.encoder is not None
        #: Where document token vectors are kept between calls, if anywhere.
        self.store = store
        self._skip = frozenset(self.contract.skip)
        self._embedder = Embedder(
            self.contract.encoder,
            path=path,
            backend=backend,
            device=device,
            batch_size=batch_size,
            token_budget=token_budget,
            show_progress=show_progress,
        )

    @property
    def embedder(self) -> Embedder:
        """The token encoder's :class:`~ctxemb_core.Embedder`."""
        return self._embedder

    @property
    def dimension(self) -> int:
        """The width of every token vector (the encoder contract's ``dimension``)."""
        assert self.contract.encoder is not None
        return self.contract.encoder.dimension

    # -- token vectors -------------------------------------------------------------------------

    def query_vectors(self, query: str) -> np.ndarray:
        """The query's ``(tokens, dimension)`` float32 token matrix under the contract."""
        query = check_text(query, "query")
        c = self.contract
        toks = self._embedder.embed_token_batch(
            [query],
            role=Role.QUERY,
            keep_special=True,
            marker=c.query_prefix,
            expand_to=c.query_length,
            dense=True,
        )[0]
        return self._matrix(toks, document=False)

    def document_vectors(self, documents: Sequence[str]) -> list[np.ndarray]:
        """Each document's ``(tokens, dimension)`` float32 token matrix, in input order.

        Batched by the token budget; what :class:`TokenVectorStore` keeps and what
        ``token_vectors=`` takes.
        """
        docs = check_texts(documents, "documents", single="wrap a single document in a list")
        if not docs:
            return []
        toks = self._embedder.embed_token_batch(
            docs,
            role=Role.DOCUMENT,
            keep_special=True,
            marker=self.contract.document_prefix,
            dense=True,
        )
        return [self._matrix(t, document=True) for t in toks]

    def _matrix(self, toks: TokenEmbeddings, *, document: bool) -> np.ndarray:
        keep = np.ones(len(toks.tokens), dtype=bool)
        if SkipTokens.SPECIAL in self._skip:
            keep &= ~toks.special
        if SkipTokens.MARKER in self._skip:
            keep &= ~toks.marker
        if document and SkipTokens.PUNCTUATION in self._skip:
            keep &= ~_punctuation(toks)
        keep |= toks.expansion
        vectors = toks.vectors[keep]
        if self.contract.token_normalize:
            vectors = l2_normalize(vectors)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    # -- scoring -------------------------------------------------------------------------------

    def score(
        self,
        query: str,
        documents: Sequence[str],
        *,
        ids: Sequence[str] | None = None,
        token_vectors: Sequence[Any] | None = None,
        **inputs: Any,
    ) -> np.ndarray:
        """The MaxSim score of each document for ``query``, in input order (float32).

        Args:
            query: the query.
            documents: the candidate texts.
            ids: an id per document: with a ``store``, their token vectors are read from it
                (and the missing ones computed and stored).
            token_vectors: pre-computed token matrices, one per document (as
                :meth:`document_vectors` gives them); neither computed nor stored.
        """
        return super().score(query, documents, token_vectors=token_vectors, _ids=ids, **inputs)

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        ids: Sequence[str] | None = None,
        top_k: int | None = None,
        score_threshold: float | ScoreThreshold | None = None,
        token_vectors: Sequence[Any] | None = None,
        **inputs: Any,
    ) -> Reranking:
        """Documents ordered by MaxSim, best first (see :meth:`Reranker.rerank`).

        ``ids`` also key the ``store``; ``token_vectors`` are as in :meth:`score`.
        """
        return super().rerank(
            query,
            documents,
            ids=ids,
            top_k=top_k,
            score_threshold=score_threshold,
            token_vectors=token_vectors,
            _ids=ids,
            **inputs,
        )

    def _scores(self, query: str, documents: list[str], **inputs: Any) -> np.ndarray:
        given = inputs.pop("token_vectors", None)
        ids = inputs.pop("_ids", None)
        if inputs:
            raise InvalidInputError(
                f"unknown inputs {sorted(inputs)}; a LateInteractionReranker takes ids= and "
                "token_vectors="
            )
        if given is not None:
            docs = self._given(given, len(documents))
        else:
            docs = self._stored(documents, ids)
        return maxsim(self.query_vectors(query), docs)

    def _given(self, vectors: Any, count: int) -> list[np.ndarray]:
        docs = _check_token_vectors(vectors, count, self.dimension, "token_vectors")
        if self.contract.token_normalize:
            for j, d in enumerate(docs):
                norms = np.linalg.norm(d, axis=1)
                if len(norms) and not np.allclose(norms, 1.0, atol=1e-3):
                    raise InvalidInputError(
                        f"token_vectors[{j}] are not unit length, and this contract has "
                        "token_normalize=True: they were made under another contract. Use "
                        "document_vectors() of this reranker"
                    )
        return docs

    def _stored(self, documents: list[str], ids: Any) -> list[np.ndarray]:
        if ids is None or self.store is None:
            return self.document_vectors(documents)
        keys = check_texts(ids, "ids", single="wrap a single id in a list")
        if len(keys) != len(documents):
            raise InvalidInputError(f"ids has {len(keys)} items for {len(documents)} documents")
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            j = first.setdefault(key, i)
            if documents[j] != documents[i]:
                raise InvalidInputError(
                    f"ids[{j}] and ids[{i}] are both {key!r} for different texts; an id keys "
                    "one document's token vectors in the store"
                )
        found = self.store.get(self.contract, keys, texts=documents)
        missing = [k for k, i in first.items() if found[i] is None]
        if missing:
            texts = [documents[first[k]] for k in missing]
            computed = self.document_vectors(texts)
            self.store.put(self.contract, missing, computed, texts=texts)
            made = dict(zip(missing, computed, strict=True))
            found = [made.get(k, v) if v is None else v for k, v in zip(keys, found, strict=True)]
        return [v for v in found if v is not None]


def _punctuation(toks: TokenEmbeddings) -> np.ndarray:
    """Per token: a text token made only of punctuation (``string.punctuation`` or Unicode P*)."""
    out = np.zeros(len(toks.tokens), dtype=bool)
    plain = ~(toks.special | toks.marker | toks.expansion)
    for i, (s, e) in enumerate(toks.offsets):
        if plain[i] and e > s:
            out[i] = all(
                ch in string.punctuation or unicodedata.category(ch).startswith("P")
                for ch in toks.text[s:e]
            )
    return out
