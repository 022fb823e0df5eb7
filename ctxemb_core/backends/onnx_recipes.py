"""What a ctxemb ONNX export is: the version of its format, what each graph computes from
which inputs, and the int8 recipes that make its quantised twins.

Plain data and the rules read from it, the self-check's bounds included (read from here when an
export is checked). Making an export or a twin is :mod:`ctxemb_core.backends.onnx_build`'s,
keeping them is :mod:`ctxemb_core.backends.onnx_cache`'s.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = [
    "CHECK_LOGIT_TOLERANCE",
    "CHECK_MIN_COSINE",
    "EXPORT_FORMAT",
    "HIDDEN",
    "INPUTS",
    "LAYERS",
    "LOGITS",
    "OPSET",
    "QUANTIZATION_RECIPES",
    "recipe_digest",
    "runs_per_text",
]

#: Version of the export recipe and its record; a cached export of another version is rebuilt.
#: 3: the record holds the sha256 of each graph file; quantised twins have records of their own.
EXPORT_FORMAT = 3
#: ONNX opset of the export (17 has LayerNormalization, which onnxruntime fuses further).
OPSET = 17
#: Lowest cosine between a torch and an ONNX token vector the export's self-check accepts.
CHECK_MIN_COSINE = 0.99999
#: Largest difference between a torch and an ONNX logit the self-check accepts, relative to the
#: largest torch logit of the check (or 1, for logits near zero).
CHECK_LOGIT_TOLERANCE = 1e-4
#: The graph of an encoder: its last hidden state.
HIDDEN = "last_hidden_state"
#: The graph of a sequence-classification network: its logits.
LOGITS = "logits"
#: Every hidden state, stacked: the graph behind a contract's ``layers`` other than "last". Its
#: own export, so the default graph (and its speed) stays exactly as it is.
LAYERS = "hidden_states"
#: Inputs a graph may take, in the order of its signature; the tokenizer decides which it gets.
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: How each quantised twin is made, by the contract value that names it. A value names one
#: recipe for ever: the vectors of a twin are a function of its recipe and of the export it is
#: made from, so a recipe is changed only by adding a value with a new version (``…-v2``), and
#: ``tests/core/test_quantization.py`` pins the digest of every recipe (:func:`recipe_digest`) so an
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


def recipe_digest(quantization: str) -> str:
    """The sha256 of a quantisation recipe's canonical JSON (pinned per value by the tests)."""
    recipe = QUANTIZATION_RECIPES[quantization]
    canonical = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def runs_per_text(quantization: str | None) -> bool:
    """Whether a quantised graph is run one text at a time (its recipe's ``"run"``).

    Dynamic quantisation takes each activation's scale from the whole input tensor: run on a
    padded batch, a text's vector would depend on the texts beside it and on the padding.
    """
    return (
        quantization is not None
        and QUANTIZATION_RECIPES.get(quantization, {}).get("run") == "per-text"
    )
