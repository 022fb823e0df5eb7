"""Cross-encoder reranking: each (query, document) pair read jointly by one network.

Nothing is pre-computable: every pair is a forward pass, so a cross-encoder reranks a shortlist.
The pair is formed, truncated and turned into a score exactly as the contract says; the network
runs on ONNX Runtime (an export self-checked against torch, cached under the weights digest) or
on torch.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core._batches import loading, plan_batches, with_progress
from ctxemb_core.backends import load_classifier
from ctxemb_core.backends.base import Classifier, TextInput
from ctxemb_core.errors import (
    CtxembWarning,
    InvalidInputError,
    RerankerMismatchError,
    TruncationWarning,
)
from ctxemb_core.folders.digests import weights_digest
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.locate import locate_model
from ctxemb_core.rerank._base import Reranker
from ctxemb_core.rerank.contract import Activation, RerankerContract, RerankKind
from ctxemb_core.resolve import check_fits
from ctxemb_core.validate import check_text

__all__ = ["CrossEncoderReranker"]


class _Network(NamedTuple):
    classifier: Classifier
    folder: Path
    # The most tokens the network has positions for: every contract served is checked.
    max_positions: int | None
    # One batch at a time: the tokenizer's truncation and padding are set per call.
    lock: threading.Lock


# Loaded networks, keyed by weights digest, backend and device: never by name. Contracts that
# differ only in activation, pair format or truncation share one loaded network.
_NETWORKS: dict[tuple[str, str, str], _Network] = {}
_NETWORKS_LOCK = threading.Lock()


class CrossEncoderReranker(Reranker):
    """Scores each (query, document) pair jointly under a cross-encoder contract.

    Pairs are formed by the contract (the tokenizer's pair encoding, or its template, with any
    prefixes), truncated to its ``max_tokens`` (longest side first), batched by real token
    counts within ``token_budget``, and their logits turned into scores by its activation.

    Args:
        contract: a ``cross_encoder`` :class:`~ctxemb_core.rerank.RerankerContract` (or its
            ``to_dict()`` / JSON), usually from :func:`~ctxemb_core.rerank.rerank_contract_for`.
        path: the model folder; it must hold the contract's weights. Found from the contract
            (its weights digest or name) if omitted.
        backend: ``"auto"`` (ONNX Runtime, else torch with a
            :class:`~ctxemb_core.errors.CtxembWarning` that says why), ``"onnx"`` or ``"torch"``.
        device: where the network runs (``"cpu"``).
        batch_size: the most pairs in one forward pass.
        token_budget: the most padded tokens in one forward pass.
        show_progress: a progress bar on long work; ``None`` shows one for 1,000 pairs or more
            when stderr is a terminal.

    Raises:
        InvalidInputError: a late-interaction contract, a bad setting.
        RerankerMismatchError: ``path`` holds other weights than the contract's.
        InvalidContractError: the network has another number of labels, or fewer positions
            than the contract's ``max_tokens``.

    Example:
        >>> from ctxemb_core.rerank import CrossEncoderReranker, rerank_contract_for
        >>> reranker = CrossEncoderReranker(rerank_contract_for("./ce"))  # doctest: +SKIP
        >>> reranker.rerank("tea", ["green tea", "bicycles"], top_k=1)[0].text  # doctest: +SKIP
        'green tea'
        >>> reranker.score_pairs([("tea", "green tea"), ("cars", "a bus")])  # doctest: +SKIP
        array([0.93, 0.41], dtype=float32)
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
        if self.contract.kind is not RerankKind.CROSS_ENCODER:
            raise InvalidInputError(
                f"CrossEncoderReranker needs a cross_encoder contract, got a "
                f"{self.contract.kind.value} one; use LateInteractionReranker (or reranker_for)"
            )
        #: How many pairs the last call truncated to ``max_tokens``.
        self.last_truncated = 0
        #: The backend in use (``"auto"`` resolved to ``"onnx"`` or ``"torch"``).
        self.backend: str
        self.backend, self._network = _load_auto(self.contract, self.path, backend, device)

    def __repr__(self) -> str:
        return f"CrossEncoderReranker({self.contract.describe()}, backend={self.backend!r})"

    @property
    def model_path(self) -> Path:
        """The local folder of the network; machine-specific, never fingerprinted."""
        return self._network.folder

    # -- scoring -----------------------------------------------------------------------------

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The score of each (query, document) pair, in input order (float32).

        For many pairs of different queries at once (an evaluation, a benchmark); the pairs are
        batched together by token length whatever their query.

        Raises:
            InvalidInputError: ``pairs`` is not a list of (query, document) string pairs.
        """
        return self._activate(self.logits(pairs))

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The raw logits of each (query, document) pair: ``(len(pairs), num_labels)`` float32.

        The pair is formed as the contract says; no activation is applied.
        """
        checked = _check_pairs(pairs)
        return self._logits([self.contract.pair_text(q, d) for q, d in checked])

    def _scores(self, query: str, documents: list[str], **inputs: Any) -> np.ndarray:
        if inputs:
            raise InvalidInputError(
                f"CrossEncoderReranker takes no inputs {sorted(inputs)}; it reads the texts"
            )
        pairs = [self.contract.pair_text(query, d) for d in documents]
        return self._activate(self._logits(pairs))

    def _activate(self, logits: np.ndarray) -> np.ndarray:
        """Scores from logits, as the contract says (one column: its label, or the only one)."""
        c = self.contract
        column = c.label if c.label is not None else 0
        if c.activation is Activation.SOFTMAX:
            shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
            exp = np.exp(shifted)
            scores = exp[:, column] / exp.sum(axis=1)
        elif c.activation is Activation.SIGMOID:
            x = logits[:, column].astype(np.float64)
            scores = 0.5 * (1.0 + np.tanh(0.5 * x))  # the logistic function, without overflow
        else:
            scores = logits[:, column]
        return np.asarray(scores, dtype=np.float32)

    def _logits(self, pairs: list[tuple[str, str | None]]) -> np.ndarray:
        network = self._network
        classifier = network.classifier
        max_tokens = self.contract.max_tokens
        # The tokenizer's pair encoding for two texts, its single encoding for a template's one.
        inputs: list[TextInput] = [q if d is None else (q, d) for q, d in pairs]
        out = np.empty((len(inputs), classifier.num_labels), dtype=np.float32)
        truncated = 0
        with network.lock:
            for idx in _progress(self._plan(classifier, inputs), len(inputs), self.show_progress):
                batch = classifier.classify([inputs[i] for i in idx], max_tokens)
                truncated += int(batch.truncated.sum())
                out[idx] = batch.logits
        self.last_truncated = truncated
        if truncated:
            warnings.warn(TruncationWarning(truncated, len(inputs), max_tokens), stacklevel=4)
        return out

    def _plan(self, classifier: Classifier, inputs: list[TextInput]) -> list[np.ndarray]:
        """Index batches: by token length, longest first, each within the token budget.

        Results are written back by index, so the output order is always the input order.
        """
        if len(inputs) <= 1:
            return [np.arange(len(inputs))] if inputs else []
        lengths = classifier.tokenizer.lengths(inputs, self.contract.max_tokens)
        return plan_batches(lengths, self.batch_size, self.token_budget)


# -- inputs ----------------------------------------------------------------------------------


def _check_pairs(pairs: Any) -> list[tuple[str, str]]:
    """``pairs`` as a new list of (query, document) string tuples, or InvalidInputError."""
    if isinstance(pairs, (str, bytes, bytearray, Mapping)) or not isinstance(pairs, Sequence):
        raise InvalidInputError(
            "pairs must be a list of (query, document) pairs, got "
            f"{type(pairs).__name__}" + ("; pass list(...)" if isinstance(pairs, Iterable) else "")
        )
    checked = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidInputError(
                f"pairs[{i}] must be a (query, document) pair of two strings, got {pair!r:.80}"
            )
        checked.append(
            (check_text(pair[0], f"pairs[{i}][0]"), check_text(pair[1], f"pairs[{i}][1]"))
        )
    return checked


def _progress(batches: list[np.ndarray], total: int, show: bool | None) -> Iterable[np.ndarray]:
    return with_progress(batches, total, show, unit="pair", desc="reranking")


# -- loading ---------------------------------------------------------------------------------


class _BackendFailed(Exception):
    """The backend could not load a network the folder and contract are fine for."""


def _load_auto(
    contract: RerankerContract, path: Path | None, backend: str, device: str
) -> tuple[str, _Network]:
    """Load with the backend asked for; ``"auto"`` prefers ONNX Runtime and falls back to torch.

    Any failure of the onnx backend (no onnxruntime, a network no export reproduces) falls back
    with a warning that says why; a failure of the contract or the folder is raised, since torch
    would refuse it too.
    """
    if backend != "auto":
        return backend, _load(contract, path, backend, device)
    if device == "cpu":
        try:
            return "onnx", _load(contract, path, "onnx", device, fallible=True)
        except _BackendFailed as failed:
            error = failed.__cause__
            warnings.warn(
                CtxembWarning(
                    f"backend='auto': the onnx backend cannot serve {contract.model} "
                    f"({type(error).__name__}: {error}); the torch backend serves it instead "
                    "(same network, slower). Pass backend='torch' to choose it, or "
                    "backend='onnx' to raise."
                ),
                stacklevel=3,
            )
    return "torch", _load(contract, path, "torch", device)


def _load(
    contract: RerankerContract,
    path: Path | None,
    backend: str,
    device: str,
    *,
    fallible: bool = False,
) -> _Network:
    """The network the contract pins, loaded once per weights digest, backend and device."""
    key = (contract.weights, backend, device)
    if path is None:
        with _NETWORKS_LOCK:
            cached = _NETWORKS.get(key)
        if cached is not None:
            return _fits(contract, cached)
    folder = (
        locate_model(path) if path is not None else locate_model(contract.model, contract.weights)
    )
    layout = read_layout(folder, task="sequence-classification")
    actual = weights_digest(layout)
    if actual != contract.weights:
        # The folder found is not the network the contract pins: same name, other weights.
        raise RerankerMismatchError(
            contract, contract.with_(weights=actual), what="the model folder"
        )
    with _NETWORKS_LOCK:
        cached = _NETWORKS.get(key)
    if cached is not None:
        return _fits(contract, cached)
    assert layout.num_labels is not None
    # What the folder says, checked before a load that may cost an export.
    check_fits(contract, layout.num_labels, layout.max_positions, folder)
    try:
        with loading(contract.model):
            classifier = load_classifier(layout.transformer, backend, device)
    except Exception as exc:
        if fallible:
            raise _BackendFailed() from exc
        raise
    network = _Network(classifier, folder, layout.max_positions, threading.Lock())
    _fits(contract, network)
    with _NETWORKS_LOCK:
        return _NETWORKS.setdefault(key, network)


def _fits(contract: RerankerContract, network: _Network) -> _Network:
    check_fits(contract, network.classifier.num_labels, network.max_positions, network.folder)
    return network
