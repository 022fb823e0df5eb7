"""The networks Embedders run: found, loaded once per weights digest and shared, with fallback.

A loaded network is cached by the weights digest (the part of the fingerprint that names the
network), the backend and the device: never by name. Contracts that differ only in pooling,
prefixes or normalisation share one loaded network, across every Embedder of the process, and
every contract served from the cache is checked against what the network emits. ``"auto"``
prefers ONNX Runtime and falls back to torch with a warning that says why; a static model's
folder is served by the ``"static"`` backend, an export's by onnxruntime.

This module sits below :mod:`ctxemb_core.embedder` (which imports it) and never imports it.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ctxemb_core._batches import loading
from ctxemb_core.backends import load_encoder
from ctxemb_core.backends.base import Encoder, TokenBatch
from ctxemb_core.contract import LAST_LAYER, EmbeddingContract, layer_terms
from ctxemb_core.errors import (
    ContractMismatchError,
    CtxembError,
    CtxembWarning,
    MissingDependencyError,
    UnsupportedModelError,
)
from ctxemb_core.folders.digests import weights_digest
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.locate import locate_model
from ctxemb_core.folders.manifest import is_export, read_manifest
from ctxemb_core.folders.static import is_static_folder
from ctxemb_core.pooling import DenseHead
from ctxemb_core.resolve import check_fits

__all__ = [
    "Network",
    "encode",
    "folder_hint",
    "hinted_folder",
    "load_network",
    "load_network_with",
]


class Network(NamedTuple):
    """A loaded network: its encoder, its dense heads, the folder it was read from."""

    encoder: Encoder
    dense: tuple[DenseHead, ...]
    folder: Path
    # What the loaded network emits (after its dense heads), and the most tokens it has
    # positions for: every contract served from the cache is checked against both.
    dimension: int
    max_positions: int | None
    # What the embedding cache adds to the backend's name: the digest of an export's graph,
    # tokenizer and heads, so that a cache hit is always what this very export computes.
    label: str = ""


# The process-wide cache: (weights digest, backend [+quantization], device) -> the network, one
# per key however many Embedders share it; the lock guards it and the fallback warnings.
_ENCODERS: dict[tuple[str, str, str], Network] = {}
_ENCODERS_LOCK = threading.Lock()


def folder_hint(path: str | Path | None, model: str, weights: str | None) -> str | None:
    """Where a model folder is (``path`` as given, else located), or ``None`` if not found."""
    if path is not None:
        return str(path)
    try:
        return str(locate_model(model, weights))
    except CtxembError:
        return None


def hinted_folder(hint: Any, weights: str) -> Path | None:
    """The hinted folder if it holds exactly these weights, else ``None`` (found another way)."""
    if not isinstance(hint, str) or not hint:
        return None
    folder = Path(hint)
    try:
        if is_export(folder):
            # Verified in full when it is loaded; here only whose weights it says it holds.
            return folder if read_manifest(folder).contract.weights == weights else None
        if folder.is_dir() and weights_digest(folder) == weights:
            return folder
    except CtxembError:
        pass  # a folder that changed or broke since: the hint is only a hint
    return None


class _BackendFailed(Exception):
    """The backend could not load a network the folder and contract are fine for."""


def load_network(
    contract: EmbeddingContract,
    model: str,
    weights: str,
    path: str | Path | None,
    backend: str,
    device: str,
) -> tuple[str, Network]:
    """Load with the backend asked for; ``"auto"`` prefers ONNX Runtime and falls back to torch.

    Any failure of the onnx backend (no onnxruntime, a model no export reproduces, a cached
    export that cannot be made again) falls back with a warning that says why; a failure of the
    contract or the folder is raised, since torch would refuse it too. A quantised contract has
    nothing to fall back to: torch does not run int8 weights. A static model's folder is served
    by the ``"static"`` backend.
    """
    static = _load_static(contract, model, weights, path, backend, device)
    if static is not None:
        return "static", static
    if backend != "auto":
        return backend, load_network_with(contract, model, weights, path, backend, device)
    if device == "cpu":
        try:
            return "onnx", load_network_with(
                contract, model, weights, path, "onnx", device, fallible=True
            )
        except _BackendFailed as failed:
            error = failed.__cause__
            if contract.quantization is not None and isinstance(error, BaseException):
                raise error from None
            if not _torch_installed():
                # Nothing to fall back to: one error saying what to install, not a warning
                # about the onnx path followed by the torch backend's own import error.
                raise MissingDependencyError(
                    f"embedding with the model folder of {model} needs torch and transformers, "
                    "which the base install leaves out (it serves exports): pip install "
                    "'ctxemb[torch]' (after pip install torch==2.13.0, the CPU build). To serve "
                    "without them, export the model where torch is installed, "
                    "ctxemb_core.export.export_model(contract, DIR), and use "
                    "Embedder.from_export(DIR) here",
                    cli=f"embedding with the model folder of {model} needs torch and "
                    "transformers, which the base install leaves out: pip install "
                    "'ctxemb[torch]'. To serve without them, run ctxemb export MODEL DIR where "
                    "torch is installed and pass --model DIR here",
                ) from None
            reason = (weights, type(error).__name__)
            with _ENCODERS_LOCK:
                first = reason not in _FALLBACKS_WARNED
                _FALLBACKS_WARNED.add(reason)
            if first:  # once per network and reason in a process, not once per Embedder
                warnings.warn(
                    CtxembWarning(
                        f"backend='auto': the onnx backend cannot serve {model} "
                        f"({type(error).__name__}: {error}); the torch backend serves it "
                        "instead (same network, slower). Pass backend='torch' to choose it, "
                        "or backend='onnx' to raise."
                    ),
                    stacklevel=3,
                )
    return "torch", load_network_with(contract, model, weights, path, "torch", device)


def _load_static(
    contract: EmbeddingContract,
    model: str,
    weights: str,
    path: str | Path | None,
    backend: str,
    device: str,
) -> Network | None:
    """The lookup table of a static model's folder, or ``None`` when the folder is a network's.

    Raises:
        UnsupportedModelError: ``backend="onnx"``/``"torch"`` for a static folder (there is no
            network to run), or ``backend="static"`` for a network's folder.
    """
    from ctxemb_core.backends.static import StaticEncoder

    key = (weights, "static", device)
    if path is None and backend in ("auto", "static"):
        with _ENCODERS_LOCK:
            cached = _ENCODERS.get(key)
        if cached is not None:
            return _fits(contract, cached)
    try:
        folder = locate_model(path) if path is not None else locate_model(model, weights)
    except CtxembError:
        if backend == "static":
            raise
        return None  # the network's path says what is missing
    if not is_static_folder(folder):
        if backend == "static":
            raise UnsupportedModelError(
                f"backend='static' serves static models (a lookup table in model2vec's format); "
                f"{folder} holds a network: use backend='auto', 'onnx' or 'torch'"
            )
        return None
    if backend not in ("auto", "static"):
        raise UnsupportedModelError(
            f"{model} is a static model (a lookup table, no network): backend={backend!r} has "
            "nothing to run. It is served by backend='static' (numpy), which backend='auto' "
            "picks for it"
        )
    encoder = StaticEncoder(folder, device=device)
    if encoder.weights != weights:
        # The folder found is not the table the contract pins: same name, other files.
        raise ContractMismatchError(
            contract, contract.with_(weights=encoder.weights), folder=folder
        )
    network = Network(encoder, (), folder, encoder.hidden_size, None)
    check_fits(contract, network.dimension, network.max_positions, folder)
    with _ENCODERS_LOCK:
        return _ENCODERS.setdefault(key, network)


#: (weights digest, error type) pairs whose fall-back to torch was already reported.
_FALLBACKS_WARNED: set[tuple[str, str]] = set()


def _torch_installed() -> bool:
    """Whether torch and transformers can be imported (looked up, not imported)."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
    except (ImportError, ValueError):
        return False


def load_network_with(
    contract: EmbeddingContract,
    model: str,
    weights: str,
    path: str | Path | None,
    backend: str,
    device: str,
    *,
    fallible: bool = False,
) -> Network:
    """The network the contract pins, loaded once per weights digest, backend and device.

    Args:
        fallible: raise a failure of the backend itself as :class:`_BackendFailed` (from the
            original error), for ``"auto"`` to fall back on.
    """
    # The quantised network is another network: it gets its own place in the cache.
    quant = f"+{contract.quantization.value}" if contract.quantization else ""
    key = (weights, backend + quant, device)
    if path is None:
        with _ENCODERS_LOCK:
            cached = _ENCODERS.get(key)
        if cached is not None:
            # Loaded from bytes whose digest was checked when they were read; the contract
            # asking for it now may still be one the network cannot serve.
            return _fits(contract, cached)
    folder = locate_model(path) if path is not None else locate_model(model, weights)
    if is_export(folder):
        if backend == "onnx" or path is not None:
            return _load_export(contract, folder, weights, backend, device)
        # An export registered for these weights serves onnxruntime only; torch needs the
        # model folder, which may still be found by the model's name (bundled, hub cache).
        folder = _model_folder(model, folder)
        if is_export(folder):
            return _load_export(contract, folder, weights, backend, device)
    layout = read_layout(folder)
    actual = weights_digest(layout)
    if actual != weights:
        # The folder found is not the network the contract pins: same name, other weights.
        field = "weights" if weights == contract.weights else "query_weights"
        raise ContractMismatchError(contract, contract.with_(**{field: actual}), folder=folder)
    with _ENCODERS_LOCK:
        cached = _ENCODERS.get(key)
    if cached is not None:
        return _fits(contract, cached)
    # What the folder says, checked before a load that may cost an export.
    check_fits(contract, layout.dimension, layout.max_positions, folder)
    quantization = contract.quantization.value if contract.quantization else None
    try:
        with loading(model):
            encoder = load_encoder(layout.transformer, backend, device, quantization)
        if contract.layers != LAST_LAYER:
            # Now, where "auto" can still fall back: the onnx backend exports the graph of
            # every hidden state on its first use, and a layer the network lacks is refused.
            encode(encoder, ["layers"], contract.max_tokens, contract.layers)
    except Exception as exc:
        if fallible:
            raise _BackendFailed() from exc
        raise
    dense = tuple(DenseHead(d.path, d.activation) for d in layout.dense)
    width = dense[-1].weight.shape[1] if dense else encoder.hidden_size
    network = Network(encoder, dense, folder, int(width), layout.max_positions)
    check_fits(contract, network.dimension, network.max_positions, folder)
    with _ENCODERS_LOCK:
        return _ENCODERS.setdefault(key, network)


def _load_export(
    contract: EmbeddingContract, folder: Path, weights: str, backend: str, device: str
) -> Network:
    """The network of a ctxemb export folder (onnxruntime only), loaded once per folder."""
    from ctxemb_core.backends.exported import ExportEncoder

    if contract.layers != LAST_LAYER:
        raise UnsupportedModelError(
            f"{folder} is a ctxemb export, which serves its network's last layer only; "
            f"layers={contract.layers!r} needs the model folder it was exported from "
            "(Embedder(contract, path=<model folder>), backend 'torch' or 'onnx')"
        )
    if backend != "onnx" or device != "cpu":
        raise UnsupportedModelError(
            f"{folder} is a ctxemb export, served by onnxruntime on the CPU (backend='auto' or "
            f"'onnx', device='cpu'); backend={backend!r}, device={device!r} needs the model "
            "folder it was exported from",
            cli=f"{folder} is a ctxemb export, served by onnxruntime on the CPU (--backend auto "
            f"or onnx); --backend {backend} needs the model folder it was exported from",
        )
    quant = f"+{contract.quantization.value}" if contract.quantization else ""
    key = (weights, f"export{quant}:{folder}", device)
    with _ENCODERS_LOCK:
        cached = _ENCODERS.get(key)
    if cached is not None:
        return _fits(contract, cached)
    encoder = ExportEncoder(folder, device=device)  # every file checked against the manifest
    served = encoder.contract
    if encoder.weights != weights or served.quantization != contract.quantization:
        # Another network than the contract pins, or its int8 twin where float was asked for.
        field = "weights" if weights == contract.weights else "query_weights"
        raise ContractMismatchError(
            contract,
            contract.with_(**{field: encoder.weights, "quantization": served.quantization}),
            folder=folder,
        )
    network = Network(
        encoder,
        encoder.dense,
        folder,
        encoder.dimension,
        encoder.max_positions,
        label=f":export:{encoder.network_digest[:16]}",
    )
    check_fits(contract, network.dimension, network.max_positions, folder)
    with _ENCODERS_LOCK:
        return _ENCODERS.setdefault(key, network)


def _model_folder(model: str, export: Path) -> Path:
    """The folder ``model`` names when it is not an export, else ``export`` (refused later)."""
    try:
        folder = locate_model(model)
    except CtxembError:
        return export
    return export if is_export(folder) else folder


def encode(
    encoder: Encoder,
    texts: Sequence[str],
    max_tokens: int,
    layers: str,
    *,
    with_tokens: bool = False,
) -> TokenBatch:
    """The encoder's token vectors from the hidden layers a contract's ``layers`` names."""
    if layers == LAST_LAYER:
        return encoder.encode(texts, max_tokens, with_tokens=with_tokens)
    # Backends that can mix hidden layers (torch, onnx) have encode_layers; others refuse.
    encode_layers = getattr(encoder, "encode_layers", None)
    if encode_layers is None:
        raise UnsupportedModelError(
            f"layers={layers!r}: the {type(encoder).__name__} network gives its last layer "
            "only; embed from the model folder with backend='torch' or 'onnx' for this contract"
        )
    batch: TokenBatch = encode_layers(
        texts, max_tokens, layer_terms(layers), with_tokens=with_tokens
    )
    return batch


def _fits(contract: EmbeddingContract, network: Network) -> Network:
    check_fits(contract, network.dimension, network.max_positions, network.folder)
    return network
