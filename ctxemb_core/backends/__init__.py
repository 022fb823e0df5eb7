"""Network backends: the one primitive that turns a batch of texts into the network's output.

An :class:`Encoder` gives token vectors; everything else (prefixes, pooling, dense heads,
truncation, normalisation, precision) is derived once, in :mod:`ctxemb_core.embedder`, so every
backend yields the same vectors for a contract. A :class:`Classifier` gives the logits of a
sequence-classification network (a cross-encoder) for texts or (first, second) pairs; the score
activation is the reranker's (:mod:`ctxemb_core.rerank.cross`). The types live in
:mod:`ctxemb_core.backends.base`; this module loads a backend by name.
"""

from __future__ import annotations

from pathlib import Path

from ctxemb_core.backends.base import Classifier, Encoder, LogitBatch, TextInput, TokenBatch
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
