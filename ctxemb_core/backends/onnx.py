"""The ONNX Runtime backend: the torch network exported once to ONNX, then run by onnxruntime.

This module is the runtime: the sessions over a checked export and the encoder and classifier
that run them, with onnxruntime and ``tokenizers`` alone. The export is kept and checked by
:mod:`ctxemb_core.backends.onnx_cache` (its layout under ``$CTXEMB_CACHE_DIR/onnx/<weights
digest>/`` is drawn there), made by :mod:`ctxemb_core.backends.onnx_build` (the one part that
imports torch, transformers and onnx, loaded only when an export or an int8 twin must be made),
and quantised by the versioned recipes of :mod:`ctxemb_core.backends.onnx_recipes`. The names
those modules define that callers used from here stay importable from here.

The folder's tokenizer, as transformers builds it, is kept under
``$CTXEMB_CACHE_DIR/tokenizers/<weights digest>/``, so a warm load reads the folder, the export
and the tokenizer with onnxruntime and ``tokenizers`` alone: transformers, which imports torch
whenever torch is installed, is not imported (see
:func:`~ctxemb_core.backends._tokenize.folder_tokenizer`).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.backends._tokenize import TextInput, Tokenizer, folder_tokenizer, token_batch
from ctxemb_core.backends.base import LogitBatch, TokenBatch
from ctxemb_core.backends.onnx_cache import (
    MODEL_FILE,
    CheckedExport,
    GraphChanged,
    checked_export,
    checked_graph,
    ensure_export,
    export_dir,
    quantized,
    tokenizer_dir,
    warn_rebuild,
)
from ctxemb_core.backends.onnx_recipes import (
    CHECK_LOGIT_TOLERANCE,
    CHECK_MIN_COSINE,
    EXPORT_FORMAT,
    HIDDEN,
    LAYERS,
    LOGITS,
    OPSET,
    QUANTIZATION_RECIPES,
    recipe_digest,
    runs_per_text,
)
from ctxemb_core.backends.ort import available_cores as available_cores
from ctxemb_core.backends.ort import (
    check_threads,
    import_onnxruntime,
    run_per_text,
    session_options,
)
from ctxemb_core.errors import CtxembError, InvalidInputError, UnsupportedModelError
from ctxemb_core.folders.digests import weights_digest
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.pooling import mix_layers

__all__ = [
    "CHECK_LOGIT_TOLERANCE",
    "CHECK_MIN_COSINE",
    "EXPORT_FORMAT",
    "OPSET",
    "QUANTIZATION_RECIPES",
    "CheckedExport",
    "OnnxClassifier",
    "OnnxEncoder",
    "check_threads",
    "checked_export",
    "export_dir",
    "recipe_digest",
    "run_per_text",
    "runs_per_text",
    "session_options",
]

# Names of the cache, the recipes and the session settings that were defined here are imported
# above, and kept importable from here for this release.
_QUANTIZATION_RECIPES = QUANTIZATION_RECIPES
_quantized = quantized
_DEVICES = ("cpu",)


class OnnxEncoder:
    """A transformers encoder (or decoder) exported to ONNX and run by onnxruntime on the CPU.

    The first load of a network exports it (seconds for a MiniLM; it needs torch, transformers
    and ``onnx``); later loads in any process reuse the cached export and never load torch
    weights.

    Args:
        folder: the transformer's folder (config, weights, tokenizer).
        device: ``"cpu"``, the only device of this backend.
        threads: onnxruntime's intra-op threads; ``None`` uses one per available CPU core.

    Example:
        >>> enc = OnnxEncoder(Path("my-bert"))  # doctest: +SKIP
        >>> enc.encode(["hello"], max_tokens=128).hidden.shape  # doctest: +SKIP
        (1, 3, 384)
    """

    def __init__(
        self,
        folder: Path,
        *,
        device: str = "cpu",
        threads: int | None = None,
        quantization: str | None = None,
    ) -> None:
        ort = import_onnxruntime()
        _check_settings(device, threads)
        folder = Path(folder)
        self.device = device
        layout = read_layout(folder)
        self.hidden_size = int(layout.hidden_size)
        self.weights = weights_digest(layout)
        # Kept per weights digest: a warm process reads it without transformers (nor torch).
        self.tokenizer = folder_tokenizer(folder, tokenizer_dir(self.weights))
        if quantization is not None and quantization not in QUANTIZATION_RECIPES:
            raise UnsupportedModelError(
                f"quantization={quantization!r} is not supported; valid values are "
                f"{sorted(QUANTIZATION_RECIPES)}"
            )
        self.session, model_file = _open_session(
            ort, folder, self.weights, self.tokenizer, quantization, threads
        )
        #: Where the export lives (removed already if the cache directory was not writable).
        self.model_file = model_file
        self._inputs = [i.name for i in self.session.get_inputs()]
        # The graph of every hidden state, opened on the first call that needs it.
        self._open_layers = (ort, folder, quantization, threads)
        self._layers_session: Any = None
        self._layers_lock = threading.Lock()
        # A recipe whose activation scales must come from one text alone.
        self._per_text = runs_per_text(quantization)

    def _run(self, session: Any, output: str, arrays: dict[str, np.ndarray]) -> np.ndarray:
        if self._per_text:
            return run_per_text(session, output, arrays, self._inputs)
        (result,) = session.run([output], {k: arrays[k] for k in self._inputs})
        return np.asarray(result, dtype=np.float32)

    def encode(
        self, texts: Sequence[str], max_tokens: int, *, with_tokens: bool = False
    ) -> TokenBatch:
        encodings, arrays = self.tokenizer(texts, max_tokens)
        hidden = self._run(self.session, HIDDEN, arrays)
        return token_batch(encodings, arrays, hidden, with_tokens)

    def encode_layers(
        self,
        texts: Sequence[str],
        max_tokens: int,
        terms: Sequence[tuple[int, float]],
        *,
        with_tokens: bool = False,
    ) -> TokenBatch:
        """As :meth:`encode`, with token vectors mixed from the hidden layers ``terms`` names
        (``(index, weight)`` pairs of :func:`ctxemb_core.contract.layer_terms`).

        Runs the export of every hidden state (the ``layers`` directory of the weights
        digest's export directory), made and self-checked on the first call.
        """
        session = self._layers()
        encodings, arrays = self.tokenizer(texts, max_tokens)
        states = self._run(session, LAYERS, arrays)
        return token_batch(encodings, arrays, mix_layers(list(states), terms), with_tokens)

    def _layers(self) -> Any:
        with self._layers_lock:
            if self._layers_session is None:
                ort, folder, quantization, threads = self._open_layers
                self._layers_session, _ = _open_session(
                    ort, folder, self.weights, self.tokenizer, quantization, threads, output=LAYERS
                )
            return self._layers_session


class OnnxClassifier:
    """A sequence-classification network (a cross-encoder) exported to ONNX, returning logits.

    Exported, self-checked against the torch network and cached like :class:`OnnxEncoder`'s
    networks, in the ``classifier`` directory of the weights digest's export directory.

    Args:
        folder: the network's folder (config, weights, tokenizer).
        device: ``"cpu"``, the only device of this backend.
        threads: onnxruntime's intra-op threads; ``None`` uses one per available CPU core.

    Example:
        >>> clf = OnnxClassifier(Path("my-cross-encoder"))  # doctest: +SKIP
        >>> clf.classify([("tea", "green tea")], max_tokens=128).logits.shape  # doctest: +SKIP
        (1, 1)
    """

    def __init__(self, folder: Path, *, device: str = "cpu", threads: int | None = None) -> None:
        ort = import_onnxruntime()
        _check_settings(device, threads)
        folder = Path(folder)
        self.device = device
        layout = read_layout(folder, task="sequence-classification")
        assert layout.num_labels is not None
        self.num_labels = layout.num_labels
        self.weights = weights_digest(layout)
        self.tokenizer = folder_tokenizer(folder, tokenizer_dir(self.weights))
        self.session, model_file = _open_session(
            ort, folder, self.weights, self.tokenizer, None, threads, output=LOGITS
        )
        #: Where the export lives (removed already if the cache directory was not writable).
        self.model_file = model_file
        self._inputs = [i.name for i in self.session.get_inputs()]

    def classify(self, inputs: Sequence[TextInput], max_tokens: int) -> LogitBatch:
        encodings, arrays = self.tokenizer(inputs, max_tokens)
        (logits,) = self.session.run([LOGITS], {k: arrays[k] for k in self._inputs})
        truncated = np.array([bool(e.overflowing) for e in encodings])
        return LogitBatch(np.asarray(logits, dtype=np.float32), truncated)


def _check_settings(device: str, threads: int | None) -> None:
    if device not in _DEVICES:
        raise InvalidInputError(
            f"device={device!r} is not available to the onnx backend; valid devices are "
            f"{list(_DEVICES)} (use backend='torch' for other devices)"
        )
    check_threads(threads)


def _open_session(
    ort: Any,
    folder: Path,
    weights: str,
    tokenizer: Tokenizer,
    quantization: str | None,
    threads: int | None,
    *,
    output: str = HIDDEN,
) -> tuple[Any, Path]:
    """An onnxruntime session over the checked export (or its twin) and the graph it loaded.

    A graph that passes its record's digests but that onnxruntime cannot quantise or load (a
    record forged to match, an opset this onnxruntime does not know) is made again once: the
    twin alone when the twin fails to load, else the export. What fails after that is refused
    with :class:`UnsupportedModelError`, never passed on as onnxruntime's own exception.
    """
    options = session_options(ort, threads)
    redo_export: str | None = None
    redo_twin = False
    while True:
        scratch: list[Path | None] = []
        try:
            model_file, work = ensure_export(
                folder, weights, tokenizer, redo=redo_export, output=output
            )
            scratch.append(work)
            loading = MODEL_FILE  # a twin that cannot be made is the export's failure
            try:
                if quantization is not None:
                    model_file, work = quantized(model_file, quantization, redo=redo_twin)
                    scratch.append(work)
                    loading = model_file.name
                graph = checked_graph(model_file, weights, output)
                session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
                outputs = [o.name for o in session.get_outputs()]
                if outputs != [output]:
                    raise GraphChanged(f"{loading} computes {outputs}, not {output}")
            except CtxembError:
                raise
            except Exception as exc:  # InvalidProtobuf, Fail, onnx's DecodeError, …
                why = (
                    str(exc)
                    if isinstance(exc, GraphChanged)
                    else f"onnxruntime cannot use {loading} ({type(exc).__name__}: {exc})"
                )
                if redo_export is not None:
                    raise UnsupportedModelError(
                        f"the ONNX export of {folder} was made again and still {why}; use "
                        "backend='torch' for this model"
                    ) from exc
                warn_rebuild(model_file.parent, why)
                if loading != MODEL_FILE and not redo_twin:
                    redo_twin = True  # the export itself passed: only its twin is made again
                else:
                    redo_export = why
                continue
            return session, model_file
        finally:
            for directory in scratch:
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)
