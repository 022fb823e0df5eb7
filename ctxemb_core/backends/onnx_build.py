"""Making an ONNX export: the torch network traced to ONNX, fused, and self-checked against the
torch network before it is handed to the cache; and applying an int8 recipe to make a twin.

The only part of the ONNX backend that imports torch, transformers and onnx, and only when an
export or a twin must be made: :mod:`ctxemb_core.backends.onnx_cache` imports this module then,
so serving a cached export needs onnxruntime and ``tokenizers`` alone.

The export is made from the same transformers network the torch backend runs (``AutoModel`` for
an encoder, ``AutoModelForSequenceClassification`` for a cross-encoder), with the TorchScript
exporter (``torch.onnx.export(..., dynamo=False)``: it needs only the ``onnx`` package, where the
dynamo exporter also needs ``onnxscript``, and it is several times faster). The graph is traced
with transformers' ``eager`` attention, whose plain MatMul / Softmax pattern onnxruntime runs
about 25 % faster than the trace of torch's fused attention, and, for the BERT family, rewritten
by ``onnxruntime.transformers``' optimizer into fused ``Attention``, ``SkipLayerNormalization``
and ``BiasGelu`` kernels. Recipes are tried fastest first; the first one that passes the
self-check is kept, and ``export.json`` records which.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.backends import onnx_recipes
from ctxemb_core.backends._tokenize import TextInput, Tokenizer
from ctxemb_core.backends.onnx_recipes import EXPORT_FORMAT, HIDDEN, INPUTS, LAYERS, LOGITS
from ctxemb_core.backends.ort import import_onnxruntime, session_options
from ctxemb_core.errors import MissingDependencyError, UnsupportedModelError

__all__ = [
    "apply_recipe",
    "build_export",
    "import_onnx",
    "quiet_logging",
]

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
# The same for a classifier's pair encoding: other lengths, one pair cut longest-first.
_TRACE_PAIRS = ((_TRACE_TEXTS[0], _TRACE_TEXTS[1]), (_TRACE_TEXTS[1], _TRACE_TEXTS[0]))
_CHECK_PAIRS = (
    (_CHECK_TEXTS[1], _CHECK_TEXTS[0]),
    (_CHECK_TEXTS[0], _CHECK_TEXTS[2]),
    (_CHECK_TEXTS[2], _CHECK_TEXTS[1]),
)


@dataclass(frozen=True)
class _Check:
    """The self-check of one export: its measures (kept in the record) and any shortfall."""

    measures: dict[str, float]
    shortfall: str | None


def build_export(
    folder: Path,
    model_file: Path,
    tokenizer: Tokenizer,
    weights: str,
    *,
    output: str = HIDDEN,
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
    if output == LOGITS:
        classifier = TorchClassifier(folder, device="cpu")
        model, trace_inputs = classifier.model, _TRACE_PAIRS
        want = classifier.classify(_CHECK_PAIRS, _CHECK_TOKENS).logits
        labels = {"num_labels": classifier.num_labels}
    else:
        encoder = TorchEncoder(folder, device="cpu")
        model, trace_inputs = encoder.model, _TRACE_TEXTS
        if output == LAYERS:
            want = encoder.hidden_states(list(_CHECK_TEXTS), _CHECK_TOKENS)
        else:
            want = encoder.encode(list(_CHECK_TEXTS), _CHECK_TOKENS).hidden
    accepted = inspect.signature(model.forward).parameters
    _, arrays = tokenizer(trace_inputs, _CHECK_TOKENS)
    names = [k for k in INPUTS if k in arrays and k in accepted]
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
        problem = f"no ONNX export of {folder} reproduces its torch network ({'; '.join(tried)})"
        raise UnsupportedModelError(
            f"{problem}; use backend='torch' for this model",
            cli=f"{problem}; use --backend torch for this model",
        )
    return {
        "format": EXPORT_FORMAT,
        "weights": weights,
        "inputs": names,
        "output": output,
        **labels,
        "opset": onnx_recipes.OPSET,
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
        HIDDEN: {0: "batch", 1: "tokens"},
        LAYERS: {1: "batch", 2: "tokens"},
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
            opset_version=onnx_recipes.OPSET,
            do_constant_folding=True,
        )


def _fuse(model_file: Path, config: Any) -> dict[str, int]:
    """Rewrite a BERT-family graph in place with onnxruntime's fused kernels; the counts."""
    if any(p != model_file for p in model_file.parent.iterdir()):
        # External weight data beside the graph (over 2 GB): keep it as exported.
        raise UnsupportedModelError("graphs with external weight data are not fused")
    from onnxruntime.transformers.optimizer import optimize_model

    with quiet_logging():
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
            if output == LAYERS:
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
    ort = import_onnxruntime()
    session = ort.InferenceSession(
        str(model_file), session_options(ort, None), providers=["CPUExecutionProvider"]
    )
    inputs: Sequence[TextInput] = _CHECK_PAIRS if output == LOGITS else _CHECK_TEXTS
    _, arrays = tokenizer(inputs, _CHECK_TOKENS)
    (got,) = session.run([output], {k: arrays[k] for k in names})
    got, expected = np.asarray(got, dtype=np.float64), want.astype(np.float64)
    if output == LOGITS:
        if got.shape != expected.shape:
            return _Check({}, f"logits of shape {got.shape}, not {expected.shape}")
        diff = float(np.max(np.abs(got - expected)))
        tolerance = onnx_recipes.CHECK_LOGIT_TOLERANCE * max(1.0, float(np.max(np.abs(expected))))
        shortfall = None if diff <= tolerance else f"logit difference {diff:.3g} > {tolerance:.3g}"
        return _Check({"check_max_abs_diff": diff, "check_tolerance": tolerance}, shortfall)
    real = arrays["attention_mask"].astype(bool)
    if got.shape != expected.shape:
        return _Check({}, f"token vectors of shape {got.shape}, not {expected.shape}")
    if output == LAYERS:  # every hidden state's tokens, one row each
        a, b = got[:, real].reshape(-1, got.shape[-1]), expected[:, real].reshape(-1, got.shape[-1])
    else:
        a, b = got[real], expected[real]
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
    min_cosine = float(np.min(np.sum(a * b, axis=1) / norms))
    shortfall = None
    if not min_cosine >= onnx_recipes.CHECK_MIN_COSINE:
        shortfall = f"token cosine {min_cosine:.6f} < {onnx_recipes.CHECK_MIN_COSINE}"
    return _Check({"check_min_cosine": min_cosine}, shortfall)


def import_onnx(quantization: str) -> Any:
    """The onnx package, which making the ``quantization`` twin of an export needs."""
    try:
        import onnx
    except ImportError as exc:
        raise MissingDependencyError(
            f"making the {quantization} twin of an export needs the onnx package ({exc}); "
            "install it with pip install 'ctxemb[torch]' (or pip install onnx)"
        ) from None
    return onnx


def apply_recipe(onnx: Any, model_file: Path, work: Path, recipe: dict[str, Any]) -> None:
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


@contextlib.contextmanager
def quiet_logging() -> Iterator[None]:
    """Only errors from the root logger for a while: onnxruntime's tools log advice at WARNING."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
