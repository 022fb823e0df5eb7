"""The ONNX Runtime backend: the torch network exported once to ONNX, then run by onnxruntime.

The export is made from the same transformers network the torch backend runs (``AutoModel`` for
an encoder, ``AutoModelForSequenceClassification`` for a cross-encoder), with the TorchScript
exporter (``torch.onnx.export(..., dynamo=False)``: it needs only the ``onnx`` package, where the
dynamo exporter also needs ``onnxscript``, and it is several times faster), and kept under
``$CTXEMB_CACHE_DIR/onnx/<weights digest>/``::

    model.onnx                 the graph: input_ids, attention_mask[, token_type_ids]
                               -> last_hidden_state
    export.json                the weights digest it came from, the sha256 of each file of the
                               graph, the versions and the self-check's result
    model.int8-dynamic.onnx    a quantised twin, made on demand, and beside it
    model.int8-dynamic.json    its record: the digest of the graph it was made from, its own
                               digest and the recipe
    classifier/model.onnx      a sequence-classification network's graph -> logits
    classifier/export.json     (batch, num_labels), and its record
    layers/model.onnx          the encoder's graph -> hidden_states, every hidden state stacked
    layers/export.json         (layers + 1, batch, tokens, width), made on demand for a
                               contract whose ``layers`` is not ``"last"``, and its record

The folder's tokenizer, as transformers builds it, is kept under
``$CTXEMB_CACHE_DIR/tokenizers/<weights digest>/`` (``tokenizer.json`` and a record with its
sha256, facts and the transformers version), so a warm load reads the folder, the export and the
tokenizer with onnxruntime and ``tokenizers`` alone: transformers, which imports torch whenever
torch is installed, is not imported (see :func:`~ctxemb_core.backends._tokenize.folder_tokenizer`).

The directory is named by the weights digest, so a moved or copied folder reuses its export and
changed weights get a new one; each output has its own directory, so a classifier's export never
takes the place of an encoder's. Before an export is published it must reproduce the torch
network on a batch shaped unlike the one it was traced with (token vectors: a cosine of at least
:data:`CHECK_MIN_COSINE` for every token; logits: at most :data:`CHECK_LOGIT_TOLERANCE` times
the largest logit, or 1, apart); an export that does not is refused, never cached. Whether the
vectors of a *contract* are reproduced is the stamp's canary to decide, as for every backend.

Nothing in the directory is served on its name alone. Every load checks each graph file against
the digest its record holds, under the rule the weights digest follows (a file is hashed once per
state: size, times, inode and its first and last 64 KiB, see :mod:`ctxemb_core._files`), so
a graph replaced by another one (the int8 twin, another model's export), truncated or
overwritten is rebuilt, never served, and so is a graph onnxruntime cannot load.

The graph is traced with transformers' ``eager`` attention, whose plain MatMul / Softmax pattern
onnxruntime runs about 25 % faster than the trace of torch's fused attention, and, for the BERT
family, rewritten by ``onnxruntime.transformers``' optimizer into fused ``Attention``,
``SkipLayerNormalization`` and ``BiasGelu`` kernels. Recipes are tried fastest first; the first
one that passes the self-check is kept, and ``export.json`` records which.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._batches import PROGRESS_LOGGER
from ctxemb_core._files import (
    adopt_digest,
    cache_dir,
    file_digests,
    read_with_digest,
    sha256_file,
    write_atomic,
)
from ctxemb_core.backends import LogitBatch, TokenBatch
from ctxemb_core.backends._tokenize import TextInput, Tokenizer, folder_tokenizer, token_batch
from ctxemb_core.errors import (
    CtxembError,
    CtxembWarning,
    InvalidInputError,
    MissingDependencyError,
    UnsupportedModelError,
)
from ctxemb_core.pooling import mix_layers
from ctxemb_core.resolve import read_layout, weights_digest

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

#: Version of the export recipe and its record; a cached export of another version is rebuilt.
#: 3: the record holds the sha256 of each graph file; quantised twins have records of their own.
EXPORT_FORMAT = 3
#: ONNX opset of the export (17 has LayerNormalization, which onnxruntime fuses further).
OPSET = 17

_MODEL_FILE = "model.onnx"
# The folder's tokenizer as transformers builds it, kept under $CTXEMB_CACHE_DIR/tokenizers/
# <weights digest> (the digest covers the tokenizer's files), so that a warm load needs
# neither transformers nor torch.
_TOKENIZER_DIR = "tokenizers"
_META_FILE = "export.json"
_HIDDEN = "last_hidden_state"
_LOGITS = "logits"
# Every hidden state, stacked: the graph behind a contract's ``layers`` other than "last". Its
# own export, so the default graph (and its speed) stays exactly as it is.
_LAYERS = "hidden_states"
# Where each output's export lives inside the weights digest's directory.
_OUTPUT_DIRS = {_HIDDEN: "", _LOGITS: "classifier", _LAYERS: "layers"}
# Inputs a graph may take, in the order of its signature; the tokenizer decides which it gets.
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_DEVICES = ("cpu",)
_EXPORT_LOCK = threading.Lock()
# Model types whose graphs onnxruntime's "bert" optimizer knows how to fuse.
_FUSABLE = frozenset({"bert", "roberta", "xlm-roberta"})
#: How each quantised twin is made, by the contract value that names it. A value names one
#: recipe for ever: the vectors of a twin are a function of its recipe and of the export it is
#: made from, so a recipe is changed only by adding a value with a new version (``…-v2``), and
#: ``tests/test_quantization.py`` pins the digest of every recipe (:func:`recipe_digest`) so an
#: edit in place fails before it ships. A twin recorded with another recipe is made again.
#:
#: ``int8-dynamic`` (the first recipe, kept so that indexes stamped with it still open): every
#: weight int8 with one scale per tensor, the embedding table included, activations quantised
#: per batch at run time; median cosine 0.937 to the float vectors of all-MiniLM-L6-v2 on
#: SciFact, and a text's vector moves with the other texts of its batch.
#: ``int8-dynamic-pc-v1``: int8 weights (7 bits of range, ``reduce_range``, which keeps the
#: u8 x s8 products of AVX2/AVX-512 kernels without VNNI from saturating) with one scale per
#: output channel for the fused attention's Q/K/V projection and every MatMul (the embeddings
#: and layer norms stay float),
#: activations quantised at run time, and each text run on its own (``"run": "per-text"``), so
#: that its activation scales come from its own tokens: its vector does not depend on its batch
#: or its padding. Median cosine 0.994.
#:
#: Static (calibrated QDQ) recipes were measured and left out: over the fused export,
#: ``quantize_static`` cannot type the contrib kernels' outputs and keeps every activation
#: float, which gives int8 weights at float speed (``benchmarks/int8_recipes.py``).
QUANTIZATION_RECIPES: dict[str, dict[str, Any]] = {
    "int8-dynamic": {
        "tool": "onnxruntime.quantization.quantize_dynamic",
        "weight_type": "QInt8",
        "default_tensor_type": "FLOAT",
    },
    "int8-dynamic-pc-v1": {
        "tool": "onnxruntime.quantization.quantize_dynamic",
        "export_format": 3,
        "weight_type": "QInt8",
        "per_channel": True,
        "reduce_range": True,
        "op_types": ["Attention", "MatMul"],
        "run": "per-text",
        "default_tensor_type": "FLOAT",
    },
}
_QUANTIZATION_RECIPES = QUANTIZATION_RECIPES

# The trace runs on a padded batch of two, so the attention mask is traced as data and not
# folded away; the self-check then runs on three texts of other lengths (one cut by truncation).
_TRACE_TEXTS = ("an export", "a slightly longer text to trace the export with")
_CHECK_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Short.",
    "Mitochondria produce ATP through oxidative phosphorylation in eukaryotic cells, a process "
    "that depends on a proton gradient across the inner membrane, as measured in 2024 (±3%).",
)
_CHECK_TOKENS = 24
# The same for a classifier's pair encoding: other lengths, one pair cut longest-first.
_TRACE_PAIRS = ((_TRACE_TEXTS[0], _TRACE_TEXTS[1]), (_TRACE_TEXTS[1], _TRACE_TEXTS[0]))
_CHECK_PAIRS = (
    (_CHECK_TEXTS[1], _CHECK_TEXTS[0]),
    (_CHECK_TEXTS[0], _CHECK_TEXTS[2]),
    (_CHECK_TEXTS[2], _CHECK_TEXTS[1]),
)
#: Lowest cosine between a torch and an ONNX token vector the export's self-check accepts.
CHECK_MIN_COSINE = 0.99999
#: Largest difference between a torch and an ONNX logit the self-check accepts, relative to the
#: largest torch logit of the check (or 1, for logits near zero).
CHECK_LOGIT_TOLERANCE = 1e-4


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
        ort = _import_onnxruntime()
        _check_settings(device, threads)
        folder = Path(folder)
        self.device = device
        layout = read_layout(folder)
        self.hidden_size = int(layout.hidden_size)
        self.weights = weights_digest(layout)
        # Kept per weights digest: a warm process reads it without transformers (nor torch).
        self.tokenizer = folder_tokenizer(folder, _tokenizer_dir(self.weights))
        if quantization is not None and quantization not in _QUANTIZATION_RECIPES:
            raise UnsupportedModelError(
                f"quantization={quantization!r} is not supported; valid values are "
                f"{sorted(_QUANTIZATION_RECIPES)}"
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
        hidden = self._run(self.session, _HIDDEN, arrays)
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
        states = self._run(session, _LAYERS, arrays)
        return token_batch(encodings, arrays, mix_layers(list(states), terms), with_tokens)

    def _layers(self) -> Any:
        with self._layers_lock:
            if self._layers_session is None:
                ort, folder, quantization, threads = self._open_layers
                self._layers_session, _ = _open_session(
                    ort, folder, self.weights, self.tokenizer, quantization, threads, output=_LAYERS
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
        ort = _import_onnxruntime()
        _check_settings(device, threads)
        folder = Path(folder)
        self.device = device
        layout = read_layout(folder, task="sequence-classification")
        assert layout.num_labels is not None
        self.num_labels = layout.num_labels
        self.weights = weights_digest(layout)
        self.tokenizer = folder_tokenizer(folder, _tokenizer_dir(self.weights))
        self.session, model_file = _open_session(
            ort, folder, self.weights, self.tokenizer, None, threads, output=_LOGITS
        )
        #: Where the export lives (removed already if the cache directory was not writable).
        self.model_file = model_file
        self._inputs = [i.name for i in self.session.get_inputs()]

    def classify(self, inputs: Sequence[TextInput], max_tokens: int) -> LogitBatch:
        encodings, arrays = self.tokenizer(inputs, max_tokens)
        (logits,) = self.session.run([_LOGITS], {k: arrays[k] for k in self._inputs})
        truncated = np.array([bool(e.overflowing) for e in encodings])
        return LogitBatch(np.asarray(logits, dtype=np.float32), truncated)


@dataclass(frozen=True)
class CheckedExport:
    """A checked export of an encoder, as :func:`checked_export` hands it out.

    Attributes:
        graph: the graph to serve (``model.onnx``, or its quantised twin).
        files: ``{file name: sha256}`` of the graph's files (the graph and any external
            weight data beside it), all in ``graph``'s directory.
        inputs: the graph's inputs, in the order of its signature.
        record: what the export's record says (the recipe kept, the self-check's measures,
            the versions), and the twin's record under ``"quantized"`` for a twin.
    """

    graph: Path
    files: dict[str, str]
    inputs: list[str]
    record: dict[str, Any]


@contextlib.contextmanager
def checked_export(
    folder: Path, weights: str, tokenizer: Tokenizer, quantization: str | None = None
) -> Iterator[CheckedExport]:
    """The self-checked export of the encoder in ``folder``, made first if there is none.

    For copying out of the cache (:func:`ctxemb_core.export.export_model`): the files are
    valid while the context is open (a private scratch copy, when the cache directory is not
    writable, is removed when it closes). The digests are those of the record; a copy must be
    compared with them, since another process may replace a cached file at any time.

    Raises:
        MissingDependencyError: there is no valid export and torch, transformers or onnx,
            needed to make one, are missing.
        UnsupportedModelError: no export reproduces the torch network, or the quantisation is
            not known.
    """
    if quantization is not None and quantization not in _QUANTIZATION_RECIPES:
        raise UnsupportedModelError(
            f"quantization={quantization!r} is not supported; valid values are "
            f"{sorted(_QUANTIZATION_RECIPES)}"
        )
    scratch: list[Path | None] = []
    try:
        model_file, work = _ensure_export(folder, weights, tokenizer)
        scratch.append(work)
        meta = _read_record(model_file.parent / _META_FILE) or {}
        files = meta.get("files") if meta.get("weights") == weights else None
        if not isinstance(files, dict) or not files:  # a scratch export: no record beside it
            files = _hash_graph(model_file.parent)
        record = {k: v for k, v in meta.items() if k != "files"}
        if quantization is not None:
            model_file, work = _quantized(model_file, quantization)
            scratch.append(work)
            twin = _read_record(model_file.with_name(f"model.{quantization}.json"))
            digest = twin.get("digest") if twin else None
            files = {model_file.name: str(digest) if digest else sha256_file(model_file)}
            record["quantized"] = twin or {"quantization": quantization}
        inputs = record.get("inputs")
        if not isinstance(inputs, list):
            inputs = [k for k in _INPUTS if k in tokenizer.model_input_names]
        yield CheckedExport(model_file, dict(files), list(inputs), record)
    finally:
        for directory in scratch:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)


def export_dir(weights: str, output: str = _HIDDEN) -> Path:
    """The cache directory of the export of the network with weights digest ``weights``.

    Args:
        output: what the export computes: ``"last_hidden_state"`` (an encoder), ``"logits"``
            (a sequence-classification network, exported to the ``classifier`` subdirectory)
            or ``"hidden_states"`` (an encoder's every hidden state, in ``layers``).
    """
    if output not in _OUTPUT_DIRS:
        raise InvalidInputError(f"output={output!r} is not known; valid are {list(_OUTPUT_DIRS)}")
    return cache_dir() / "onnx" / weights.removeprefix("sha256:") / _OUTPUT_DIRS[output]


def _tokenizer_dir(weights: str) -> Path:
    return cache_dir() / _TOKENIZER_DIR / weights.removeprefix("sha256:")


def _check_settings(device: str, threads: int | None) -> None:
    if device not in _DEVICES:
        raise InvalidInputError(
            f"device={device!r} is not available to the onnx backend; valid devices are "
            f"{list(_DEVICES)} (use backend='torch' for other devices)"
        )
    check_threads(threads)


def check_threads(threads: int | None) -> None:
    """Refuse an onnxruntime thread count that is not ``None`` or a positive integer."""
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0
    ):
        raise InvalidInputError(f"threads must be a positive integer, got {threads!r}")


# -- the export ------------------------------------------------------------------------------


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise MissingDependencyError(
            f"the onnx backend needs onnxruntime ({exc}); install it with pip install onnxruntime"
        ) from None
    return onnxruntime


def session_options(ort: Any, threads: int | None) -> Any:
    """The onnxruntime session options every ctxemb graph runs with (a cached or a copied one)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # One intra-op thread per core we may run on: onnxruntime's own default counts the machine's
    # physical cores, which oversubscribes a CPU-limited container or a pinned process.
    options.intra_op_num_threads = threads or available_cores()
    options.inter_op_num_threads = 1
    # Pool threads block between parallel sections instead of spinning: a spinning pool on a
    # core another process also wants loses its turns to that process and takes the
    # neighbour's. On 2 cores with one kept busy by another process, MiniLM went from 11.1 to
    # 13.6 docs/s (idle 27.0 vs 26.9, no cost); one thread would gain little more under load
    # (14.0) and lose 43 % when idle (benchmarks/under_load.py).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # its warnings about unused initializers are noise here
    return options


def available_cores() -> int:
    """The cores this process may run on, or fewer when ``OMP_NUM_THREADS`` says so (as Ray
    does for an actor given one CPU: two such actors on two cores would otherwise run four
    threads and slow each other down; torch follows the same variable)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    wanted = os.environ.get("OMP_NUM_THREADS", "").strip()
    if wanted.isdigit() and int(wanted) > 0:
        return min(cores, int(wanted))
    return cores


def _open_session(
    ort: Any,
    folder: Path,
    weights: str,
    tokenizer: Tokenizer,
    quantization: str | None,
    threads: int | None,
    *,
    output: str = _HIDDEN,
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
            model_file, work = _ensure_export(
                folder, weights, tokenizer, redo=redo_export, output=output
            )
            scratch.append(work)
            loading = _MODEL_FILE  # a twin that cannot be made is the export's failure
            try:
                if quantization is not None:
                    model_file, work = _quantized(model_file, quantization, redo=redo_twin)
                    scratch.append(work)
                    loading = model_file.name
                graph = _checked_graph(model_file, weights, output)
                session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
                outputs = [o.name for o in session.get_outputs()]
                if outputs != [output]:
                    raise _GraphChanged(f"{loading} computes {outputs}, not {output}")
            except CtxembError:
                raise
            except Exception as exc:  # InvalidProtobuf, Fail, onnx's DecodeError, …
                why = (
                    str(exc)
                    if isinstance(exc, _GraphChanged)
                    else f"onnxruntime cannot use {loading} ({type(exc).__name__}: {exc})"
                )
                if redo_export is not None:
                    raise UnsupportedModelError(
                        f"the ONNX export of {folder} was made again and still {why}; use "
                        "backend='torch' for this model"
                    ) from exc
                _warn_rebuild(model_file.parent, why)
                if loading != _MODEL_FILE and not redo_twin:
                    redo_twin = True  # the export itself passed: only its twin is made again
                else:
                    redo_export = why
                continue
            return session, model_file
        finally:
            for directory in scratch:
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)


class _GraphChanged(Exception):
    """The graph read for loading is not the one its record names (replaced since its check),
    or not a graph of the output asked for (another output's export put in its place)."""


def _checked_graph(model_file: Path, weights: str, output: str = _HIDDEN) -> bytes | str:
    """What onnxruntime loads: the bytes of a published graph, proven to be the recorded ones.

    The graph was checked against its record by path; another process may replace it (an
    export, a twin made again, an attack) before onnxruntime opens that path. So the graph is
    read once, through one open file, and those very bytes are compared with the record and
    loaded. A graph with external weight data (over 2 GB) and a private copy made for this
    process alone (a read-only cache) are loaded by path.
    """
    if model_file.parent != export_dir(weights, output):
        return str(model_file)  # a scratch copy of this process, in a private directory
    if model_file.name == _MODEL_FILE:
        files = (_read_record(model_file.parent / _META_FILE) or {}).get("files")
        if not isinstance(files, dict) or len(files) != 1:
            return str(model_file)  # external data: checked by _stale, loaded by path
        recorded = files.get(_MODEL_FILE)
    else:
        record_file = model_file.with_name(f"{model_file.name.removesuffix('.onnx')}.json")
        recorded = (_read_record(record_file) or {}).get("digest")
    data, digest = read_with_digest(model_file)
    if digest != recorded:
        raise _GraphChanged(
            f"{model_file.name} changed after it was checked (sha256 {digest[:12]}…, the record "
            f"says {str(recorded)[:12]}…)"
        )
    return data


_progress = logging.getLogger(PROGRESS_LOGGER)


def _warn_rebuild(directory: Path, why: str) -> None:
    warnings.warn(
        CtxembWarning(
            f"the cached ONNX export in {directory} was not served: {why}. It is made again; if "
            "this repeats, something else writes into the cache directory (CTXEMB_CACHE_DIR)."
        ),
        stacklevel=4,
    )


def _read_record(file: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _check_files(directory: Path, files: Any) -> str | None:
    """Why the files recorded as ``{name: sha256}`` do not match what lies in ``directory``."""
    if (
        not isinstance(files, dict)
        or not files
        or not all(
            isinstance(n, str) and n == Path(n).name and not n.startswith(".") for n in files
        )
    ):
        return "its record lists no graph files"
    paths = [directory / name for name in sorted(files)]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        return f"{', '.join(missing)} is missing"
    try:
        digests = file_digests(paths)
    except OSError as exc:
        return f"its files cannot be read ({exc})"
    for path, digest in zip(paths, digests, strict=True):
        if files[path.name] != digest:
            return (
                f"{path.name} is not the file that was exported (sha256 {digest[:12]}…, the "
                f"record says {str(files[path.name])[:12]}…)"
            )
    return None


def _stale(directory: Path, weights: str) -> tuple[str, bool] | None:
    """Why the export in ``directory`` cannot be served, and whether that means damage.

    ``None`` when the record is of this format and these weights and every graph file it
    lists has the digest it records. No export yet, or one of another format, is a plain miss.
    """
    meta = _read_record(directory / _META_FILE)
    if meta is None:
        return "there is no export", False
    if meta.get("format") != EXPORT_FORMAT:
        return f"the export is of format {meta.get('format')!r}, not {EXPORT_FORMAT}", False
    if meta.get("weights") != weights:
        return f"its record names the weights {meta.get('weights')!r}", True
    files = meta.get("files")
    if not isinstance(files, dict) or _MODEL_FILE not in files:
        return f"its record lists no {_MODEL_FILE}", True
    damage = _check_files(directory, files)
    return None if damage is None else (damage, True)


def _ensure_export(
    folder: Path,
    weights: str,
    tokenizer: Tokenizer,
    *,
    redo: str | None = None,
    output: str = _HIDDEN,
) -> tuple[Path, Path | None]:
    """The model file of a checked export, exporting first if there is none that passes.

    Args:
        redo: why the cached export, although it passes its record, must be made again.
        output: what the network exports: its last hidden state or its logits.

    Returns the model file and the scratch directory of a new export, for the caller to remove
    once the model is loaded (it holds the model itself when the export could not be cached).
    """
    target = export_dir(weights, output)
    if redo is None and _stale(target, weights) is None:
        return target / _MODEL_FILE, None
    # One export at a time in a process: the TorchScript exporter keeps global state, and a
    # second thread waiting here then finds the first one's export.
    with _EXPORT_LOCK:
        stale = (redo, True) if redo is not None else _stale(target, weights)
        if stale is None:
            return target / _MODEL_FILE, None
        why, damaged = stale
        if damaged and redo is None:
            _warn_rebuild(target, why)
        try:
            target.mkdir(parents=True, exist_ok=True)
            # Scratch inside the target: the final os.replace stays on one filesystem (atomic).
            work = Path(tempfile.mkdtemp(prefix=".export-", dir=target))
        except OSError:
            # A read-only cache only costs speed: export for this process alone.
            work = Path(tempfile.mkdtemp(prefix="ctxemb-onnx-"))
        # ~15 s for MiniLM with nothing said would look like a hang (the CLI shows these lines;
        # a library caller sees them only if it asks for the progress logger's INFO records).
        what = f"{folder.name}" + ("" if output == _HIDDEN else f" ({output})")
        _progress.info(
            "building the ONNX export of %s (one time per model, ~15 s for MiniLM)…", what
        )
        started = time.monotonic()
        try:
            meta = _export(folder, work / _MODEL_FILE, tokenizer, weights, output=output)
        except MissingDependencyError as exc:
            shutil.rmtree(work, ignore_errors=True)
            if not damaged:
                raise
            raise MissingDependencyError(
                f"the cached ONNX export in {target} cannot be served ({why}), and making it "
                f"again failed: {exc}"
            ) from None
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        _progress.info(
            "built the ONNX export in %.0f s; later loads reuse it", time.monotonic() - started
        )
        meta["files"] = _hash_graph(work)
        try:
            _publish(work, target, meta)
        except OSError:
            return work / _MODEL_FILE, work
        return target / _MODEL_FILE, work


def _hash_graph(work: Path) -> dict[str, str]:
    """The sha256 of each file of a fresh export: the graph and any external weight data."""
    return {p.name: sha256_file(p) for p in sorted(work.iterdir()) if p.name != _META_FILE}


def _quantized(
    model_file: Path, quantization: str, *, redo: bool = False
) -> tuple[Path, Path | None]:
    """The checked quantised twin of a checked export, made beside it (atomically) if needed.

    The twin's record names the digest of the graph it was made from, its own digest and the
    recipe; a twin that does not match all three is made again, never served. Returns the twin
    and a scratch directory for the caller to remove (when the export's directory is read-only).
    """
    recipe = _QUANTIZATION_RECIPES[quantization]
    made_from = recipe.get("export_format", EXPORT_FORMAT)
    if made_from != EXPORT_FORMAT:
        # The twin would be quantised from another graph than the one its value was measured
        # on: other vectors under the same contract value, the drift a version exists to stop.
        raise UnsupportedModelError(
            f"quantization={quantization!r} is a recipe over format-{made_from} exports, and "
            f"this ctxemb exports format {EXPORT_FORMAT}; use a later version of the recipe "
            f"(valid values are {sorted(_QUANTIZATION_RECIPES)}) and re-embed the index"
        )
    twin = model_file.with_name(f"model.{quantization}.onnx")
    record_file = model_file.with_name(f"model.{quantization}.json")
    if not redo and _twin_stale(model_file, twin, record_file, recipe) is None:
        return twin, None
    try:
        import onnx
    except ImportError as exc:
        raise MissingDependencyError(
            f"making the {quantization} twin of an export needs the onnx package ({exc}); "
            "install it with pip install 'ctxemb[torch]' (or pip install onnx)"
        ) from None
    from onnxruntime import __version__ as ort_version

    with _EXPORT_LOCK:
        stale = None if redo else _twin_stale(model_file, twin, record_file, recipe)
        if not redo and stale is None:
            return twin, None
        if stale is not None and stale[1]:
            _warn_rebuild(twin.parent, stale[0])
        (source,) = file_digests([model_file])
        scratch = None
        work = twin.with_name(f".{twin.name}.{os.getpid()}.tmp")
        try:
            work.touch()
        except OSError:  # a read-only export directory: a twin for this process alone
            scratch = Path(tempfile.mkdtemp(prefix="ctxemb-onnx-"))
            work = scratch / twin.name
        try:
            with _quiet_logging():  # its advice to pre-process is for static quantisation
                _apply_recipe(onnx, model_file, work, recipe)
            if scratch is not None:
                return work, scratch
            hashed = work.stat()
            digest = sha256_file(work)
            # The old record goes first: a reader never pairs it with the new twin.
            record_file.unlink(missing_ok=True)
            os.replace(work, twin)
        except BaseException:
            work.unlink(missing_ok=True)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
        adopt_digest(twin, digest, hashed)
        record = {
            "format": EXPORT_FORMAT,
            "quantization": quantization,
            "source": source,
            "digest": digest,
            "recipe": recipe,
            "onnxruntime": ort_version,
        }
        write_atomic(record_file, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return twin, None


def recipe_digest(quantization: str) -> str:
    """The sha256 of a quantisation recipe's canonical JSON (pinned per value by the tests)."""
    recipe = _QUANTIZATION_RECIPES[quantization]
    canonical = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _apply_recipe(onnx: Any, model_file: Path, work: Path, recipe: dict[str, Any]) -> None:
    """Write the quantised twin of ``model_file`` to ``work`` as ``recipe`` says."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    options: dict[str, Any] = {"weight_type": QuantType[recipe["weight_type"]]}
    if "op_types" in recipe:
        options["op_types_to_quantize"] = list(recipe["op_types"])
    if recipe.get("per_channel"):
        options["per_channel"] = True
    if recipe.get("reduce_range"):
        options["reduce_range"] = True
    quantize_dynamic(
        str(model_file),
        str(work),
        # The fused kernels are contrib ops, which shape inference cannot type.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        **options,
    )


def runs_per_text(quantization: str | None) -> bool:
    """Whether a quantised graph is run one text at a time (its recipe's ``"run"``).

    Dynamic quantisation takes each activation's scale from the whole input tensor: run on a
    padded batch, a text's vector would depend on the texts beside it and on the padding.
    """
    return (
        quantization is not None
        and _QUANTIZATION_RECIPES.get(quantization, {}).get("run") == "per-text"
    )


def run_per_text(
    session: Any, output: str, arrays: dict[str, np.ndarray], inputs: Sequence[str]
) -> np.ndarray:
    """``output`` for a padded batch, computed one text at a time over its real tokens only.

    The output's last three axes are (batch, tokens, width), as for the last hidden state or
    every hidden state stacked; padded positions of the result are zero (no pooling reads them).
    """
    mask = arrays["attention_mask"]
    result: np.ndarray | None = None
    for row in range(mask.shape[0]):
        (real,) = np.nonzero(mask[row])
        (out,) = session.run([output], {k: arrays[k][row : row + 1, real] for k in inputs})
        out = np.asarray(out, dtype=np.float32)
        if result is None:
            result = np.zeros((*out.shape[:-3], *mask.shape, out.shape[-1]), dtype=np.float32)
        result[..., row, real, :] = out[..., 0, :, :]
    assert result is not None  # a batch has at least one text
    return result


def _twin_stale(
    model_file: Path, twin: Path, record_file: Path, recipe: dict[str, Any]
) -> tuple[str, bool] | None:
    """Why a quantised twin cannot be served, and whether that means damage (as ``_stale``)."""
    record = _read_record(record_file)
    if record is None or not twin.is_file():
        return f"there is no {twin.name} with its record", False
    if record.get("format") != EXPORT_FORMAT or record.get("recipe") != recipe:
        return f"{twin.name} was made by another recipe", False
    try:
        source, digest = file_digests([model_file, twin])
    except OSError as exc:
        return f"{twin.name} cannot be read ({exc})", True
    if record.get("source") != source:
        return f"{twin.name} was made from another graph than {model_file.name}", True
    if record.get("digest") != digest:
        return f"{twin.name} is not the twin its record describes (sha256 {digest[:12]}…)", True
    return None


@contextlib.contextmanager
def _quiet_logging() -> Iterator[None]:
    """Only errors from the root logger for a while: onnxruntime's tools log advice at WARNING."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _publish(work: Path, target: Path, meta: dict[str, Any]) -> None:
    # Each file arrives whole (os.replace) and the record last, so a reader that trusts the
    # record finds a complete model; two processes exporting at once each replace the files with
    # an equivalent export of the same weights.
    # Quantised twins belong to the export they were made from: a new export drops them.
    for twin in [*target.glob("model.*.onnx"), *target.glob("model.*.json")]:
        twin.unlink(missing_ok=True)
    files: dict[str, str] = meta["files"]
    hashed = {name: (work / name).stat() for name in files}
    for name in sorted(files, key=lambda n: n == _MODEL_FILE):  # the graph last
        os.replace(work / name, target / name)  # external weight data, for a graph over 2 GB
    for name, digest in files.items():
        adopt_digest(target / name, digest, hashed[name])
    record = work / _META_FILE
    record.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(record, target / _META_FILE)


@dataclass(frozen=True)
class _Check:
    """The self-check of one export: its measures (kept in the record) and any shortfall."""

    measures: dict[str, float]
    shortfall: str | None


def _export(
    folder: Path,
    model_file: Path,
    tokenizer: Tokenizer,
    weights: str,
    *,
    output: str = _HIDDEN,
) -> dict[str, Any]:
    """Export the network in ``folder`` to ``model_file``, check it, and return its record."""
    try:
        # torch.onnx.export writes the graph through the onnx package (the TorchScript
        # exporter as much as the dynamo one), which moved from the base install to [torch].
        import onnx
        import torch
        import transformers
    except ImportError as exc:
        raise MissingDependencyError(
            f"exporting a network for the onnx backend needs torch, transformers and onnx "
            f"({exc}); install them with pip install 'ctxemb[torch]' (torch==2.13.0 for the "
            "CPU build), or export once where they are installed and share the cache directory "
            "(CTXEMB_CACHE_DIR), or serve a folder made by ctxemb export"
        ) from None
    from ctxemb_core.backends.torch import TorchClassifier, TorchEncoder

    # The torch backend's own loader, so the export is of exactly the network it would run;
    # ``want`` is that network's output on the check inputs, as it runs.
    labels: dict[str, int] = {}
    trace_inputs: Sequence[TextInput]
    if output == _LOGITS:
        classifier = TorchClassifier(folder, device="cpu")
        model, trace_inputs = classifier.model, _TRACE_PAIRS
        want = classifier.classify(_CHECK_PAIRS, _CHECK_TOKENS).logits
        labels = {"num_labels": classifier.num_labels}
    else:
        encoder = TorchEncoder(folder, device="cpu")
        model, trace_inputs = encoder.model, _TRACE_TEXTS
        if output == _LAYERS:
            want = encoder.hidden_states(list(_CHECK_TEXTS), _CHECK_TOKENS)
        else:
            want = encoder.encode(list(_CHECK_TEXTS), _CHECK_TOKENS).hidden
    accepted = inspect.signature(model.forward).parameters
    _, arrays = tokenizer(trace_inputs, _CHECK_TOKENS)
    names = [k for k in _INPUTS if k in arrays and k in accepted]
    attention = model.config._attn_implementation
    # Fastest first: eager attention fused, eager attention, the attention torch runs. Older
    # transformers cannot switch a loaded model's attention: only the last recipe is left then.
    switch: Any = getattr(model, "set_attn_implementation", None)
    recipes = [("eager", True)] if model.config.model_type in _FUSABLE else []
    recipes += [("eager", False)] if attention != "eager" else []
    recipes = [r for r in recipes if switch is not None or r[0] == attention]
    recipes += [(attention, False)]
    tried: list[str] = []
    for implementation, fuse in recipes:
        recipe = f"{implementation}{' + fused' if fuse else ''}"
        try:
            if implementation != attention:
                switch(implementation)
            _trace(torch, model, names, arrays, model_file, output)
            fused = _fuse(model_file, model.config) if fuse else {}
            check = _self_check(model_file, want, tokenizer, names, output)
        except Exception as exc:  # a recipe this network or toolchain cannot take
            tried.append(f"{recipe}: {type(exc).__name__}: {exc}")
            continue
        finally:
            if implementation != attention:
                switch(attention)
        if check.shortfall is None:
            break
        tried.append(f"{recipe}: {check.shortfall}")
    else:
        raise UnsupportedModelError(
            f"no ONNX export of {folder} reproduces its torch network ({'; '.join(tried)}); "
            "use backend='torch' for this model"
        )
    return {
        "format": EXPORT_FORMAT,
        "weights": weights,
        "inputs": names,
        "output": output,
        **labels,
        "opset": OPSET,
        "exporter": "torch.onnx.export(dynamo=False)",
        "attention": implementation,
        "fused": fused,
        "rejected": tried,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        **check.measures,
    }


def _trace(
    torch: Any,
    model: Any,
    names: list[str],
    arrays: dict[str, np.ndarray],
    model_file: Path,
    output: str,
) -> None:
    # Logits are (batch, num_labels): only the batch axis varies; stacked hidden states are
    # (layers + 1, batch, tokens, width).
    output_axes = {
        _HIDDEN: {0: "batch", 1: "tokens"},
        _LAYERS: {1: "batch", 2: "tokens"},
    }.get(output, {0: "batch"})
    with warnings.catch_warnings():
        # Its deprecation notice, and tracer warnings that shape checks were frozen: the
        # self-check, on another batch shape, is what proves the graph.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _output_of(torch, model, names, output),
            tuple(torch.from_numpy(arrays[k]) for k in names),
            str(model_file),
            dynamo=False,
            input_names=names,
            output_names=[output],
            dynamic_axes={**{k: {0: "batch", 1: "tokens"} for k in names}, output: output_axes},
            opset_version=OPSET,
            do_constant_folding=True,
        )


def _fuse(model_file: Path, config: Any) -> dict[str, int]:
    """Rewrite a BERT-family graph in place with onnxruntime's fused kernels; the counts."""
    if any(p != model_file for p in model_file.parent.iterdir()):
        # External weight data beside the graph (over 2 GB): keep it as exported.
        raise UnsupportedModelError("graphs with external weight data are not fused")
    from onnxruntime.transformers.optimizer import optimize_model

    with _quiet_logging():
        optimized = optimize_model(
            str(model_file),
            model_type="bert",
            num_heads=int(config.num_attention_heads),
            hidden_size=int(config.hidden_size),
        )
    counts = {k: int(v) for k, v in optimized.get_fused_operator_statistics().items() if v}
    if not counts.get("Attention"):
        raise UnsupportedModelError(f"the optimizer fused no attention ({counts})")
    optimized.save_model_to_file(str(model_file))
    return counts


def _output_of(torch: Any, model: Any, names: list[str], output: str) -> Any:
    """The model as a module of positional tensors returning only the named output."""

    class Output(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            feeds = dict(zip(names, inputs, strict=True))
            if output == _LAYERS:
                return torch.stack(self.model(**feeds, output_hidden_states=True).hidden_states)
            return getattr(self.model(**feeds), output)

    # eval() on the wrapper too: the exporter restores the wrapper's training flag afterwards,
    # and a fresh module's flag is True, which would leave the shared model in dropout mode.
    return Output().eval()


def _self_check(
    model_file: Path, want: np.ndarray, tokenizer: Tokenizer, names: list[str], output: str
) -> _Check:
    """How close the export's output on the check inputs comes to the torch network's ``want``.

    Token vectors are compared by cosine, token by token (padding excluded); logits, which a
    reranker ranks and thresholds by value, by their largest absolute difference.
    """
    ort = _import_onnxruntime()
    session = ort.InferenceSession(
        str(model_file), session_options(ort, None), providers=["CPUExecutionProvider"]
    )
    inputs: Sequence[TextInput] = _CHECK_PAIRS if output == _LOGITS else _CHECK_TEXTS
    _, arrays = tokenizer(inputs, _CHECK_TOKENS)
    (got,) = session.run([output], {k: arrays[k] for k in names})
    got, expected = np.asarray(got, dtype=np.float64), want.astype(np.float64)
    if output == _LOGITS:
        if got.shape != expected.shape:
            return _Check({}, f"logits of shape {got.shape}, not {expected.shape}")
        diff = float(np.max(np.abs(got - expected)))
        tolerance = CHECK_LOGIT_TOLERANCE * max(1.0, float(np.max(np.abs(expected))))
        shortfall = None if diff <= tolerance else f"logit difference {diff:.3g} > {tolerance:.3g}"
        return _Check({"check_max_abs_diff": diff, "check_tolerance": tolerance}, shortfall)
    real = arrays["attention_mask"].astype(bool)
    if got.shape != expected.shape:
        return _Check({}, f"token vectors of shape {got.shape}, not {expected.shape}")
    if output == _LAYERS:  # every hidden state's tokens, one row each
        a, b = got[:, real].reshape(-1, got.shape[-1]), expected[:, real].reshape(-1, got.shape[-1])
    else:
        a, b = got[real], expected[real]
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
    min_cosine = float(np.min(np.sum(a * b, axis=1) / norms))
    shortfall = None
    if not min_cosine >= CHECK_MIN_COSINE:
        shortfall = f"token cosine {min_cosine:.6f} < {CHECK_MIN_COSINE}"
    return _Check({"check_min_cosine": min_cosine}, shortfall)
