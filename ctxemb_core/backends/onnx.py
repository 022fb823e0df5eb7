"""The ONNX Runtime backend: the torch network exported once to ONNX, then run by onnxruntime.

The export is made from the same transformers ``AutoModel`` the torch backend runs, with the
TorchScript exporter (``torch.onnx.export(..., dynamo=False)``: it needs only the ``onnx``
package, where the dynamo exporter also needs ``onnxscript``, and it is several times faster),
and kept under ``$CTXEMB_CACHE_DIR/onnx/<weights digest>/``::

    model.onnx     the graph: input_ids, attention_mask[, token_type_ids] -> last_hidden_state
    export.json    the weights digest it came from, the versions and the self-check's result

The directory is named by the weights digest, so a moved or copied folder reuses its export and
changed weights get a new one. Before an export is published it must reproduce the torch
network's token vectors on a batch shaped unlike the one it was traced with; an export that does
not is refused, never cached. Whether the vectors of a *contract* are reproduced is the stamp's
canary to decide, as for every backend.

The graph is traced with transformers' ``eager`` attention, whose plain MatMul / Softmax pattern
onnxruntime runs about 25 % faster than the trace of torch's fused attention, and, for the BERT
family, rewritten by ``onnxruntime.transformers``' optimizer into fused ``Attention``,
``SkipLayerNormalization`` and ``BiasGelu`` kernels. Recipes are tried fastest first; the first
one that passes the self-check is kept, and ``export.json`` records which.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.backends import TokenBatch
from ctxemb_core.backends._tokenize import FolderTokenizer, token_batch
from ctxemb_core.errors import InvalidInputError, MissingDependencyError, UnsupportedModelError
from ctxemb_core.resolve import _cache_dir, read_layout, weights_digest

__all__ = ["CHECK_MIN_COSINE", "EXPORT_FORMAT", "OPSET", "OnnxEncoder", "export_dir"]

#: Version of the export recipe; a cached export of another version is rebuilt.
EXPORT_FORMAT = 2
#: ONNX opset of the export (17 has LayerNormalization, which onnxruntime fuses further).
OPSET = 17

_MODEL_FILE = "model.onnx"
_META_FILE = "export.json"
_OUTPUT = "last_hidden_state"
# Inputs a graph may take, in the order of its signature; the tokenizer decides which it gets.
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_DEVICES = ("cpu",)
_EXPORT_LOCK = threading.Lock()
# Model types whose graphs onnxruntime's "bert" optimizer knows how to fuse.
_FUSABLE = frozenset({"bert", "roberta", "xlm-roberta"})

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
#: Lowest cosine between a torch and an ONNX token vector the export's self-check accepts.
CHECK_MIN_COSINE = 0.99999


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
        if device not in _DEVICES:
            raise InvalidInputError(
                f"device={device!r} is not available to the onnx backend; valid devices are "
                f"{list(_DEVICES)} (use backend='torch' for other devices)"
            )
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0
        ):
            raise InvalidInputError(f"threads must be a positive integer, got {threads!r}")
        folder = Path(folder)
        self.device = device
        self.tokenizer = FolderTokenizer(folder)
        layout = read_layout(folder)
        self.hidden_size = int(layout.hidden_size)
        self.weights = weights_digest(layout)
        model_file, scratch = _ensure_export(folder, self.weights, self.tokenizer)
        try:
            if quantization is not None:
                model_file = _quantized(model_file, quantization)
            self.session = ort.InferenceSession(
                str(model_file), _session_options(ort, threads), providers=["CPUExecutionProvider"]
            )
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        #: Where the export lives (removed already if the cache directory was not writable).
        self.model_file = model_file
        self._inputs = [i.name for i in self.session.get_inputs()]

    def encode(
        self, texts: Sequence[str], max_tokens: int, *, with_tokens: bool = False
    ) -> TokenBatch:
        encodings, arrays = self.tokenizer(texts, max_tokens)
        (hidden,) = self.session.run([_OUTPUT], {k: arrays[k] for k in self._inputs})
        return token_batch(encodings, arrays, np.asarray(hidden, dtype=np.float32), with_tokens)


def export_dir(weights: str) -> Path:
    """The cache directory of the export of the network with weights digest ``weights``."""
    return _cache_dir() / "onnx" / weights.removeprefix("sha256:")


# -- the export ------------------------------------------------------------------------------


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise MissingDependencyError(
            f"the onnx backend needs onnxruntime ({exc}); install it with pip install onnxruntime"
        ) from None
    return onnxruntime


def _session_options(ort: Any, threads: int | None) -> Any:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # One intra-op thread per core we may run on: onnxruntime's own default counts the machine's
    # physical cores, which oversubscribes a CPU-limited container or a pinned process.
    options.intra_op_num_threads = threads or _available_cores()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # its warnings about unused initializers are noise here
    return options


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _is_current(directory: Path, weights: str) -> bool:
    try:
        meta = json.loads((directory / _META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(meta, dict)
        and meta.get("format") == EXPORT_FORMAT
        and meta.get("weights") == weights
        and (directory / _MODEL_FILE).is_file()
    )


def _ensure_export(
    folder: Path, weights: str, tokenizer: FolderTokenizer
) -> tuple[Path, Path | None]:
    """The model file of a current export, exporting first if there is none.

    Returns the model file and the scratch directory of a new export, for the caller to remove
    once the model is loaded (it holds the model itself when the export could not be cached).
    """
    target = export_dir(weights)
    if _is_current(target, weights):
        return target / _MODEL_FILE, None
    # One export at a time in a process: the TorchScript exporter keeps global state, and a
    # second thread waiting here then finds the first one's export.
    with _EXPORT_LOCK:
        if _is_current(target, weights):
            return target / _MODEL_FILE, None
        try:
            target.mkdir(parents=True, exist_ok=True)
            # Scratch inside the target: the final os.replace stays on one filesystem (atomic).
            work = Path(tempfile.mkdtemp(prefix=".export-", dir=target))
        except OSError:
            # A read-only cache only costs speed: export for this process alone.
            work = Path(tempfile.mkdtemp(prefix="ctxemb-onnx-"))
        try:
            meta = _export(folder, work / _MODEL_FILE, tokenizer, weights)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        try:
            _publish(work, target, meta)
        except OSError:
            return work / _MODEL_FILE, work
        return target / _MODEL_FILE, work


def _quantized(model_file: Path, quantization: str) -> Path:
    """The dynamically quantised twin of an export, made once beside it (atomically)."""
    if quantization != "int8-dynamic":
        raise UnsupportedModelError(f"quantization={quantization!r} is not supported")
    target = model_file.with_name(f"model.{quantization}.onnx")
    if target.is_file():
        return target
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _EXPORT_LOCK:
        if not target.is_file():
            work = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            with _quiet_logging():  # its advice to pre-process is for static quantisation
                quantize_dynamic(
                    str(model_file),
                    str(work),
                    weight_type=QuantType.QInt8,
                    # The fused kernels are contrib ops, which shape inference cannot type.
                    extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
                )
            os.replace(work, target)
    return target


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
    for twin in target.glob("model.*.onnx"):
        twin.unlink(missing_ok=True)
    for file in sorted(work.iterdir()):
        if file.name != _MODEL_FILE:
            os.replace(file, target / file.name)  # external weight data, for a graph over 2 GB
    os.replace(work / _MODEL_FILE, target / _MODEL_FILE)
    record = work / _META_FILE
    record.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(record, target / _META_FILE)


def _export(
    folder: Path, model_file: Path, tokenizer: FolderTokenizer, weights: str
) -> dict[str, Any]:
    """Export the network in ``folder`` to ``model_file``, check it, and return its record."""
    try:
        import onnx
        import torch
        import transformers
    except ImportError as exc:
        raise MissingDependencyError(
            f"exporting a network for the onnx backend needs torch, transformers and onnx "
            f"({exc}); install them with pip install torch==2.13.0 transformers onnx, or export "
            "once where they are installed and share the cache directory (CTXEMB_CACHE_DIR)"
        ) from None
    from ctxemb_core.backends.torch import TorchEncoder

    # The torch backend's own loader, so the export is of exactly the network it would run.
    reference = TorchEncoder(folder, device="cpu")
    model = reference.model
    accepted = inspect.signature(model.forward).parameters
    _, arrays = tokenizer(_TRACE_TEXTS, _CHECK_TOKENS)
    names = [k for k in _INPUTS if k in arrays and k in accepted]
    want = reference.encode(list(_CHECK_TEXTS), _CHECK_TOKENS).hidden  # the network as it runs
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
            _trace(torch, model, names, arrays, model_file)
            fused = _fuse(model_file, model.config) if fuse else {}
            min_cosine = _self_check(model_file, want, tokenizer, names)
        except Exception as exc:  # a recipe this network or toolchain cannot take
            tried.append(f"{recipe}: {type(exc).__name__}: {exc}")
            continue
        finally:
            if implementation != attention:
                switch(attention)
        if min_cosine >= CHECK_MIN_COSINE:
            break
        tried.append(f"{recipe}: token cosine {min_cosine:.6f} < {CHECK_MIN_COSINE}")
    else:
        raise UnsupportedModelError(
            f"no ONNX export of {folder} reproduces its torch network ({'; '.join(tried)}); "
            "use backend='torch' for this model"
        )
    return {
        "format": EXPORT_FORMAT,
        "weights": weights,
        "inputs": names,
        "output": _OUTPUT,
        "opset": OPSET,
        "exporter": "torch.onnx.export(dynamo=False)",
        "attention": implementation,
        "fused": fused,
        "rejected": tried,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "check_min_cosine": min_cosine,
    }


def _trace(
    torch: Any, model: Any, names: list[str], arrays: dict[str, np.ndarray], model_file: Path
) -> None:
    with warnings.catch_warnings():
        # Its deprecation notice, and tracer warnings that shape checks were frozen: the
        # self-check, on another batch shape, is what proves the graph.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _last_hidden_state(torch, model, names),
            tuple(torch.from_numpy(arrays[k]) for k in names),
            str(model_file),
            dynamo=False,
            input_names=names,
            output_names=[_OUTPUT],
            dynamic_axes={k: {0: "batch", 1: "tokens"} for k in [*names, _OUTPUT]},
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


def _last_hidden_state(torch: Any, model: Any, names: list[str]) -> Any:
    """The model as a module of positional tensors returning only the last hidden state."""

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return self.model(**dict(zip(names, inputs, strict=True))).last_hidden_state

    # eval() on the wrapper too: the exporter restores the wrapper's training flag afterwards,
    # and a fresh module's flag is True, which would leave the shared model in dropout mode.
    return LastHiddenState().eval()


def _self_check(
    model_file: Path, want: np.ndarray, tokenizer: FolderTokenizer, names: list[str]
) -> float:
    """The lowest cosine between the export's token vectors of the check texts and ``want``."""
    ort = _import_onnxruntime()
    session = ort.InferenceSession(
        str(model_file), _session_options(ort, None), providers=["CPUExecutionProvider"]
    )
    _, arrays = tokenizer(_CHECK_TEXTS, _CHECK_TOKENS)
    (got,) = session.run([_OUTPUT], {k: arrays[k] for k in names})
    real = arrays["attention_mask"].astype(bool)
    a, b = np.asarray(got, dtype=np.float64)[real], want.astype(np.float64)[real]
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
    return float(np.min(np.sum(a * b, axis=1) / norms))
