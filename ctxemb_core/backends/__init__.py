"""Network backends: the one primitive that turns a batch of texts into the network's output.

An :class:`Encoder` gives token vectors; everything else (prefixes, pooling, dense heads,
truncation, normalisation, precision) is derived once, in :mod:`ctxemb_core.embedder`, so every
backend yields the same vectors for a contract. A :class:`Classifier` gives the logits of a
sequence-classification network (a cross-encoder) for texts or (first, second) pairs; the score
activation is the reranker's (:mod:`ctxemb_core.rerank.cross`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ctxemb_core.backends._tokenize import TextInput, Tokenizer
from ctxemb_core.errors import InvalidInputError, UnsupportedModelError

__all__ = [
    "BACKENDS",
    "Classifier",
    "Encoder",
    "LogitBatch",
    "TextInput",
    "TokenBatch",
    "load_classifier",
    "load_encoder",
]


@dataclass(frozen=True)
class TokenBatch:
    """Token vectors of a padded batch.

    Attributes:
        hidden: ``(batch, tokens, width)`` float32 contextual vectors (the encoder's last layer).
        mask: ``(batch, tokens)`` 1 where a real token stands, 0 on padding.
        truncated: per text, whether the tokenizer cut it to ``max_tokens``.
        tokens: per text, the token strings (padding excluded), or ``None`` if not requested.
        offsets: per text, ``(start, end)`` character offsets of each token in the text.
        special: per text, 1 where the token is a special token ([CLS], [SEP], EOS, …).
    """

    hidden: np.ndarray
    mask: np.ndarray
    truncated: np.ndarray
    tokens: list[list[str]] | None = None
    offsets: list[list[tuple[int, int]]] | None = None
    special: list[list[int]] | None = None


@runtime_checkable
class Encoder(Protocol):
    """A loaded network and its tokenizer."""

    #: Width of the token vectors.
    hidden_size: int
    #: The folder's tokenizer (shared by every backend, so all of them see the same tokens).
    tokenizer: Tokenizer

    def encode(
        self, texts: Sequence[str], max_tokens: int, *, with_tokens: bool = False
    ) -> TokenBatch:
        """Tokenize (truncating to ``max_tokens``) and run the network over one batch."""
        ...


@dataclass(frozen=True)
class LogitBatch:
    """The logits of a batch of texts or pairs.

    Attributes:
        logits: ``(batch, num_labels)`` float32, the network's classification head.
        truncated: per input, whether the tokenizer cut it to ``max_tokens``.
    """

    logits: np.ndarray
    truncated: np.ndarray


@runtime_checkable
class Classifier(Protocol):
    """A loaded sequence-classification network and its tokenizer."""

    #: Outputs per input (the labels of the classification head).
    num_labels: int
    #: The folder's tokenizer (shared by every backend, so all of them see the same tokens).
    tokenizer: Tokenizer

    def classify(self, inputs: Sequence[TextInput], max_tokens: int) -> LogitBatch:
        """Tokenize texts or (first, second) pairs (truncating to ``max_tokens``) and run the
        network over one batch."""
        ...


def _load_torch(folder: Path, device: str, quantization: str | None) -> Encoder:
    from ctxemb_core.backends.torch import TorchEncoder

    if quantization is not None:
        raise UnsupportedModelError(
            f"quantization={quantization!r} runs on the onnx backend, not on torch"
        )
    return TorchEncoder(folder, device=device)


def _load_onnx(folder: Path, device: str, quantization: str | None) -> Encoder:
    from ctxemb_core.backends.onnx import OnnxEncoder

    return OnnxEncoder(folder, device=device, quantization=quantization)


BACKENDS = {"torch": _load_torch, "onnx": _load_onnx}


def load_encoder(
    folder: Path, backend: str, device: str, quantization: str | None = None
) -> Encoder:
    """Load the network in ``folder`` with the named backend (and weight quantization)."""
    try:
        loader = BACKENDS[backend]
    except KeyError:
        raise InvalidInputError(
            f"backend={backend!r} is not known; valid backends are {sorted(BACKENDS)}"
        ) from None
    return loader(folder, device, quantization)


def _classifier_torch(folder: Path, device: str) -> Classifier:
    from ctxemb_core.backends.torch import TorchClassifier

    return TorchClassifier(folder, device=device)


def _classifier_onnx(folder: Path, device: str) -> Classifier:
    from ctxemb_core.backends.onnx import OnnxClassifier

    return OnnxClassifier(folder, device=device)


_CLASSIFIERS = {"torch": _classifier_torch, "onnx": _classifier_onnx}


def load_classifier(folder: Path, backend: str, device: str) -> Classifier:
    """Load the sequence-classification network in ``folder`` with the named backend."""
    try:
        loader = _CLASSIFIERS[backend]
    except KeyError:
        raise InvalidInputError(
            f"backend={backend!r} is not known; valid backends are {sorted(_CLASSIFIERS)}"
        ) from None
    return loader(folder, device)
