"""Pooling and the post-pooling steps of a contract, on numpy arrays from any backend."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.contract import Pooling, Precision
from ctxemb_core.errors import (
    InvalidContractError,
    MalformedModelError,
    ModelNotFoundError,
    PickledWeightsError,
    UnsupportedModelError,
)
from ctxemb_core.folders.st_modules import check_dense_activation

__all__ = ["DenseHead", "dense_activation", "l2_normalize", "mix_layers", "pool", "quantize"]


def pool(hidden: np.ndarray, mask: np.ndarray, pooling: Pooling, *, skip: int = 0) -> np.ndarray:
    """One vector per text from ``(batch, tokens, width)`` token vectors and their mask.

    Padding may sit on either side; every rule looks only at positions where ``mask`` is 1.

    Args:
        skip: leading real tokens of each text left out of the pooling (an instruction
            prefix's, for a contract with ``include_prompt=False``), as sentence-transformers'
            ``Pooling(include_prompt=False)`` leaves them out: ``cls`` takes the first token
            after them, ``weighted_mean`` keeps the other tokens' position weights.
    """
    positions = np.cumsum(mask, axis=1) * mask  # 1-based among the real tokens, 0 on padding
    if skip:
        mask = mask * (positions > skip)
    m = mask.astype(hidden.dtype)
    if pooling is Pooling.CLS:
        # The first real token: position 0 with right padding, later with left padding.
        first = mask.argmax(axis=1)
        return hidden[np.arange(len(hidden)), first]
    if pooling is Pooling.LAST_TOKEN:
        last = mask.shape[1] - 1 - mask[:, ::-1].argmax(axis=1)
        return hidden[np.arange(len(hidden)), last]
    if pooling is Pooling.MAX:
        return np.where(m[..., None] > 0, hidden, -np.inf).max(axis=1).astype(hidden.dtype)
    if pooling is Pooling.WEIGHTED_MEAN:
        # Weight i for the i-th real token (1-based), whichever side the padding is on.
        weights = (positions * mask).astype(hidden.dtype)
        total = np.einsum("bth,bt->bh", hidden, weights)
        return total / np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)
    total = np.einsum("bth,bt->bh", hidden, m)
    count = np.maximum(m.sum(axis=1, keepdims=True), 1e-9)
    if pooling is Pooling.MEAN:
        return total / count
    if pooling is Pooling.MEAN_SQRT_LEN:
        return total / np.sqrt(count)
    raise UnsupportedModelError(f"pooling {pooling!r} has no implementation")  # pragma: no cover


def mix_layers(states: Sequence[np.ndarray], terms: Sequence[tuple[int, float]]) -> np.ndarray:
    """The fixed weighted sum ``Σ weight · states[index]`` of hidden states (float32).

    Args:
        states: the network's hidden states, as transformers' ``output_hidden_states=True``
            gives them (index 0: the embedding layer's output; -1: the last layer), each
            ``(batch, tokens, width)``; a stacked ``(layers + 1, batch, tokens, width)`` array
            serves as well.
        terms: ``(index, weight)`` pairs, as :func:`ctxemb_core.contract.layer_terms` gives.

    Raises:
        InvalidContractError: an index the network does not have.
    """
    count = len(states)
    out: np.ndarray | None = None
    for index, weight in terms:
        if not -count <= index < count:
            raise InvalidContractError(
                f"layers names hidden state {index}, which the network does not have: it gives "
                f"{count} hidden states, 0..{count - 1} (0 is the embedding output), or "
                f"-{count}..-1 counted from the last. Use contract_for(model, layers=...), which "
                "checks the layers against the model"
            )
        term = np.asarray(states[index], dtype=np.float32)
        if weight != 1.0:
            term = term * np.float32(weight)
        out = term if out is None else out + term
    if out is None:
        raise InvalidContractError("layers names no hidden state")
    return out


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Scale rows to unit length (a zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def quantize(vectors: np.ndarray, precision: Precision) -> np.ndarray:
    """The numeric form a contract's precision asks for."""
    if precision is Precision.FLOAT32:
        return vectors.astype(np.float32, copy=False)
    if precision is Precision.FLOAT16:
        return vectors.astype(np.float16)
    if precision is Precision.INT8:
        return np.clip(np.rint(vectors * 127.0), -127, 127).astype(np.int8)
    return np.packbits(vectors > 0, axis=-1)


_ERF = np.frompyfunc(math.erf, 1, 1)
# One for each name of ctxemb_core.folders.st_modules.DENSE_ACTIVATIONS (a test pins it).
_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Identity": lambda x: x,
    "Tanh": np.tanh,
    "ReLU": lambda x: np.maximum(x, 0),
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    # The exact (erf) GELU, as torch.nn.GELU() computes it; heads are small, so a ufunc is fine.
    "GELU": lambda x: 0.5 * x * (1.0 + np.asarray(_ERF(x / math.sqrt(2.0)), dtype=x.dtype)),
}


def dense_activation(activation: Any, where: str) -> Callable[[np.ndarray], np.ndarray]:
    """The numpy form of a Dense config's ``activation_function`` (a ``torch.nn`` class path).

    Which names are valid is the folder format's (:func:`ctxemb_core.folders.st_modules.
    check_dense_activation`, which reading a folder applies too).

    Raises:
        MalformedModelError: the value is not a string.
        UnsupportedModelError: it names a class ctxemb does not implement, or one outside
            ``torch`` (sentence-transformers would import the folder's own code for it, or fall
            back to Tanh without saying so).
    """
    return _ACTIVATIONS[check_dense_activation(activation, where)]


class DenseHead:
    """A sentence-transformers ``Dense`` module (linear layer + activation) in numpy."""

    def __init__(self, folder: Path, activation: str) -> None:
        self.activation_name = activation
        self.activation = dense_activation(activation, str(folder))
        tensors = _load_tensors(folder)
        weight, bias = tensors.get("linear.weight"), tensors.get("linear.bias")
        if weight is None:
            raise ModelNotFoundError(f"{folder}: no 'linear.weight' tensor")
        if weight.ndim != 2 or (bias is not None and bias.shape != weight.shape[:1]):
            raise MalformedModelError(
                f"{folder}: a Dense head needs a 2-d linear.weight and a bias of its first "
                f"length; got {weight.shape} and {None if bias is None else bias.shape}"
            )
        #: ``(in, out)`` float32: the transpose of torch's ``linear.weight``.
        self.weight = weight.astype(np.float32).T.copy()
        self.bias = None if bias is None else bias.astype(np.float32)

    @classmethod
    def from_arrays(cls, weight: Any, bias: Any, activation: Any, where: str) -> DenseHead:
        """A head from its ``(in, out)`` weight, its bias (or ``None``) and its activation, as
        a ctxemb export keeps them (numpy alone: no safetensors, no torch).

        Raises:
            MalformedModelError: arrays of the wrong kind or shape, or an activation that is
                not a string.
            UnsupportedModelError: an activation ctxemb does not implement.
        """
        head = cls.__new__(cls)
        head.activation_name = activation
        head.activation = dense_activation(activation, where)
        if (
            not isinstance(weight, np.ndarray)
            or weight.ndim != 2
            or weight.dtype != np.float32
            or (
                bias is not None
                and (
                    not isinstance(bias, np.ndarray)
                    or bias.dtype != np.float32
                    or bias.shape != weight.shape[1:]
                )
            )
        ):
            raise MalformedModelError(
                f"{where}: a Dense head needs a 2-d float32 (in, out) weight and a float32 bias "
                "of length out"
            )
        head.weight = np.ascontiguousarray(weight)
        head.bias = None if bias is None else np.ascontiguousarray(bias)
        return head

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.weight
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y).astype(np.float32, copy=False)


def _load_tensors(folder: Path) -> dict[str, np.ndarray]:
    # Safetensors only, as for the network: a pickle can run code when it is loaded.
    st = folder / "model.safetensors"
    if not st.is_file():
        if (folder / "pytorch_model.bin").is_file():
            raise PickledWeightsError(folder)
        raise ModelNotFoundError(f"{folder}: no model.safetensors")
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(str(st))
    except (SafetensorError, OSError) as exc:
        raise MalformedModelError(f"{st} cannot be read as safetensors: {exc}") from None
