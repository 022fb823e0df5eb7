"""The int8 variants of the all-MiniLM-L6-v2 export that issue 15 tried, against the float export.

Every variant is made from ctxemb's own float ONNX export of the bundled all-MiniLM-L6-v2
(``export_dir(contract.weights) / "model.onnx"``, fused attention and GELU) with
``onnxruntime.quantization`` called directly, except the two values ctxemb ships, which are the
twins ctxemb itself makes (``Embedder(contract_for(MODEL, quantization=...))``) and are run as
ctxemb runs them, so the figures of those are exactly what a user gets:

=================  ==========================================================================
int8-dynamic       shipped, legacy: ``quantize_dynamic`` defaults, every op with a weight
                   (MatMul, fused Attention, EmbedLayerNormalization) int8, one scale per tensor
v1                 dynamic, MatMul + Attention, per tensor (embeddings float)
v2                 dynamic, MatMul + Attention, per channel
v3                 dynamic, MatMul only, per channel (attention float)
v4                 v2 with the feed-forward output MatMuls (those fed by BiasGelu) float
v8                 dynamic, every op per channel (EmbedLayerNormalization included)
v9                 v1 with the feed-forward output MatMuls float
v11                dynamic, MatMul per channel, then Attention per tensor (two passes)
s1                 static QDQ, MatMul per channel, int8 activations (S8S8), MinMax calibration
s2                 s1 with the feed-forward output MatMuls float
s5                 static QDQ, MatMul per channel, uint8 activations (U8S8): the recipe of
                   int8-static-v1 (shipped until the per-channel dynamic recipe replaced it),
                   made here by this script
t5                 s5 with the export's activations typed first, so that the quantiser really
                   quantises them (see below)
h1, h2             s1, s2, then dynamic per-channel quantisation of the fused Attention
int8-dynamic-pc-v1 shipped, the chosen recipe (``QUANTIZATION_RECIPES``): v2's graph, made by
                   ctxemb, each text run on its own (``run_per_text``), so that a text's
                   activation scales are its own
=================  ==========================================================================

Over ctxemb's fused export, ``quantize_static`` cannot type the outputs of the contrib ops and
leaves every activation float: s1, s2, s5 and int8-static-v1 are int8-*weight-only* graphs
(a DequantizeLinear per weight, which onnxruntime fuses into ``MatMulNBits``), so S8S8 and U8S8
give the same vectors. The result records each graph's operators and whether its activations
are ``static``, ``dynamic`` or ``float``; t5 shows what quantising them statically gives. (This
is why ctxemb no longer ships a static recipe.)

The static variants are calibrated exactly as int8-static-v1 was (:data:`CALIBRATION`, its
recipe's calibration block, kept here since ctxemb dropped the recipe): the texts that ship with
ctxemb (:func:`calibration_texts`: its demo corpus and queries, never evaluation data, pinned by
digest), in batches of 8 at 128 tokens (:func:`calibration_batches`). The default run measures
int8-dynamic, v2, v4, s1, s2, t5, h2 and int8-dynamic-pc-v1; ``--variants all`` (or a
comma-separated list) picks others.

Each variant is run by one onnxruntime session with ctxemb's session options; the texts are
tokenised by ctxemb's tokenizer for the model (truncation at the contract's 256 tokens, padding
to the longest text of a batch of 32), then mean-pooled over the attention mask and
L2-normalised, as the contract does. The run checks that this path gives the float and the
shipped int8 Embedders' own vectors. Per variant:

1. **Cosine to float**: median, minimum and 5th percentile of the cosine between a document's
   vector and the float export's, over the first ``--n`` SciFact documents (default 300).
2. **Documents/s relative to float**: the first ``--time-n`` documents (default 128), cut into
   chunks of ``--chunk`` (default 32); every variant and the float export take turns chunk by
   chunk (the order rotates, and reverses every other turn, so load drifts hit all alike), for
   ``--rounds`` rounds (default 3), after a warm-up. Reported: each variant's median documents/s
   over rounds and the median over turns of (float's chunk time ÷ the variant's): ratios from
   one run on a machine that may be shared, so read them as rough.
3. **Batch dependence**: 20 documents embedded in one batch and one at a time; the largest
   absolute difference of a vector component. Dynamic quantisation takes activation scales from
   the batch, so there a text's vector depends on the texts beside it.
4. ``--sts``: STS Benchmark test Spearman (``load_sts``, ``cosine_scores``, ``spearman``) of
   each variant. A batch-dependent variant's figure depends on how its sentences are batched
   (here: unique sentences by length, 32 a batch), so it can differ slightly from
   ``ctxemb eval --task sts``. Off by default (it embeds ~2,700 sentences per variant).
5. ``--sweep``: per-node sensitivity of the per-tensor dynamic graph (v1): each MatMul and
   Attention node left float in turn, the cosine to float on the same documents. Slow
   (24 quantisations); off by default.

Run (from the repository root; timing runs take the benchmark lock)::

    flock /tmp/ctxemb-bench.lock .venv/bin/python benchmarks/int8_recipes.py [--sts] [--sweep]

Writes ``benchmarks/results/int8_recipes.json`` (with the CPU and library versions).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    DEFAULT_DATA,
    MODEL,
    QUICK_WORDS,
    add_quick,
    cpu_label,
    machine_info,
    offline,
    quick_texts,
    quiet_truncation,
    scifact_texts,
    shown,
    write_result,
    writes,
)

FLOAT = "float"
SHIPPED = "int8-dynamic-pc-v1"
LEGACY = "int8-dynamic"
DEFAULT_VARIANTS = (LEGACY, "v2", "v4", "s1", "s2", "t5", "h2", SHIPPED)
#: ``--quick``: one variant of each way of making one (dynamic, static, typed, two-step, twins).
#: The dynamic one is v1, per tensor: v2 is the same code (:func:`dynamic`) made per channel,
#: which onnxruntime's quantiser does channel by channel in Python (2 of a quick run's 13 CPU-s).
QUICK_VARIANTS = (LEGACY, "v1", "s1", "t5", "h1", SHIPPED)
BATCH = 32
BATCH_CHECK = 20  # texts embedded in one batch and one at a time
PIPELINE_CHECK = 8  # texts on which this script's vectors are checked against the Embedders'
#: The bar the int8 path is held to (issue 15): median cosine to float, and STS-B Spearman
#: within this of the float export's.
BAR_MEDIAN_COSINE, BAR_SPEARMAN = 0.99, 0.002
STS_FILE = Path("stsbenchmark") / "sts-test.csv"
#: How the static variants are calibrated: the calibration block of the int8-static-v1 recipe
#: that ctxemb shipped before it dropped its static recipes (ea47839), so that they are the
#: variants measured then.
CALIBRATION: dict[str, Any] = {
    "texts": "ctxemb_core.demo: corpus (title + ' ' + text), then queries",
    "sha256": "e7b0026c48b83282bd04f42e1617b0ed118d790e2a4fc21493598bd5d56d9413",
    "batch": 8,
    "max_tokens": 128,
}
NOTE = (
    "documents/s ratios come from one run on a shared, loaded machine: rough figures; the "
    "cosines, batch dependence and Spearman do not depend on load"
)


class Source:
    """The float export and what the builders need from it: node lists and calibration."""

    def __init__(self, path: Path, tokenizer: Any, calibration: dict[str, Any]) -> None:
        import onnx

        self.path = path
        graph = onnx.load(str(path), load_external_data=False).graph
        self._inputs = [i.name for i in graph.input]
        made_by = {out: node.op_type for node in graph.node for out in node.output}
        #: The quantisable nodes, in graph order.
        self.nodes = [n.name for n in graph.node if n.op_type in ("MatMul", "Attention")]
        #: The feed-forward output MatMuls: those whose input comes from the (fused) GELU.
        self.ffn_out = [
            n.name
            for n in graph.node
            if n.op_type == "MatMul" and made_by.get(n.input[0]) in ("BiasGelu", "Gelu", "FastGelu")
        ]
        self._tokenizer = tokenizer
        self._calibration = calibration

    def reader(self) -> Any:
        """A fresh calibration reader over the calibration texts, in their batches."""
        from onnxruntime.quantization import CalibrationDataReader

        batches = calibration_batches(self._calibration, self._tokenizer, self._inputs)

        class Batches(CalibrationDataReader):
            def __init__(self) -> None:
                self._left = iter(batches)

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self._left, None)

        return Batches()


def calibration_texts() -> list[str]:
    """The texts the static variants are calibrated on: ctxemb's demo corpus, then its queries.

    They ship with ctxemb, so every run calibrates on the same texts, and they are no
    evaluation set's; :data:`CALIBRATION` pins their digest.
    """
    from ctxemb_core import demo

    texts = []
    for path in (demo.corpus_path(), demo.queries_path()):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                texts.append(f"{row.get('title', '')} {row['text']}".strip())
    return texts


def calibration_batches(
    calibration: dict[str, Any], tokenizer: Any, inputs: Sequence[str]
) -> list[dict[str, np.ndarray]]:
    """The graph's input arrays for the calibration texts, in the calibration's batches.

    Raises:
        SystemExit: the texts are not the ones the variants were measured with (a changed demo
            corpus changes what the static variants are).
    """
    texts = calibration_texts()
    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()
    if digest != calibration["sha256"]:
        raise SystemExit(
            f"the calibration texts have changed (sha256 {digest[:12]}…, the calibration pins "
            f"{calibration['sha256'][:12]}…): the static variants would be other variants"
        )
    size = int(calibration["batch"])
    batches = []
    for start in range(0, len(texts), size):
        _, arrays = tokenizer(texts[start : start + size], int(calibration["max_tokens"]))
        batches.append({name: arrays[name] for name in inputs})
    return batches


def _float_tensors() -> dict[str, Any]:
    import onnx

    # The fused kernels are contrib ops, which shape inference cannot type.
    return {"DefaultTensorType": onnx.TensorProto.FLOAT}


def dynamic(source: Path, out: Path, **options: Any) -> None:
    """``quantize_dynamic`` with int8 weights and ``options``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(source),
        str(out),
        weight_type=QuantType.QInt8,
        extra_options=_float_tensors(),
        **options,
    )


def static(
    src: Source, out: Path, activations: str, *, source: Path | None = None, **options: Any
) -> None:
    """``quantize_static`` (QDQ, MatMul, per-channel int8 weights, MinMax over the calibration).

    Over ctxemb's export the quantiser cannot type the outputs of the fused contrib ops
    (Attention, SkipLayerNormalization, BiasGelu) and so leaves every activation float (it logs
    "failed to infer the type of tensor", and only the weights get a DequantizeLinear): the
    graph is int8-weight-only. ``source`` (see :func:`typed_export`) quantises them for real.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    quantize_static(
        str(source or src.path),
        str(out),
        src.reader(),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=["MatMul"],
        per_channel=True,
        activation_type=QuantType[activations],
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options=_float_tensors(),
        **options,
    )


def typed_export(src: Source, out: Path) -> Path:
    """The export with a float type declared for each untyped float output of a node, so that
    ``quantize_static`` quantises the activations too (a copy; the export is not touched)."""
    import onnx

    model = onnx.load(str(src.path))
    graph = model.graph
    typed = {v.name for v in [*graph.value_info, *graph.input, *graph.output]}
    typed |= {i.name for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Cast":
            continue
        for k, name in enumerate(node.output):
            if node.op_type == "EmbedLayerNormalization" and k == 1:
                continue  # the int32 mask index
            if name and name not in typed:
                graph.value_info.append(
                    onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                )
    onnx.save(model, str(out))
    return out


@dataclass(frozen=True)
class Variant:
    """One candidate: what it is, and how to make it (``None``: a twin ctxemb makes)."""

    what: str
    build: Callable[[Builder, Path], None] | None = None


class Builder:
    """Makes each variant's graph once, in ``work``; a variant made from another makes that."""

    def __init__(self, src: Source, work: Path, twins: dict[str, Path]) -> None:
        self.src = src
        self.work = work
        self.built: dict[str, Path] = dict(twins)
        self.seconds: dict[str, float] = {}

    def path(self, name: str) -> Path:
        if name not in self.built:
            build = VARIANTS[name].build
            assert build is not None, f"{name} is a twin ctxemb makes"
            out = self.work / f"{name}.onnx"
            start = time.perf_counter()
            build(self, out)
            self.seconds[name] = time.perf_counter() - start
            self.built[name] = out
        return self.built[name]


def _two_pass(b: Builder, out: Path) -> None:
    first = out.with_suffix(".matmul.onnx")
    dynamic(b.src.path, first, op_types_to_quantize=["MatMul"], per_channel=True)
    dynamic(first, out, op_types_to_quantize=["Attention"])
    first.unlink()


MM_ATT = ["MatMul", "Attention"]
VARIANTS: dict[str, Variant] = {
    LEGACY: Variant("shipped (legacy; v0): quantize_dynamic defaults, all ops, per tensor"),
    "v1": Variant(
        "dynamic MatMul+Attention, per tensor",
        lambda b, out: dynamic(b.src.path, out, op_types_to_quantize=MM_ATT),
    ),
    "v2": Variant(
        "dynamic MatMul+Attention, per channel",
        lambda b, out: dynamic(b.src.path, out, op_types_to_quantize=MM_ATT, per_channel=True),
    ),
    "v3": Variant(
        "dynamic MatMul, per channel (Attention float)",
        lambda b, out: dynamic(b.src.path, out, op_types_to_quantize=["MatMul"], per_channel=True),
    ),
    "v4": Variant(
        "v2 with the FFN output MatMuls float",
        lambda b, out: dynamic(
            b.src.path,
            out,
            op_types_to_quantize=MM_ATT,
            per_channel=True,
            nodes_to_exclude=b.src.ffn_out,
        ),
    ),
    "v8": Variant(
        "dynamic, all ops, per channel",
        lambda b, out: dynamic(b.src.path, out, per_channel=True),
    ),
    "v9": Variant(
        "v1 with the FFN output MatMuls float",
        lambda b, out: dynamic(
            b.src.path, out, op_types_to_quantize=MM_ATT, nodes_to_exclude=b.src.ffn_out
        ),
    ),
    "v11": Variant("dynamic MatMul per channel, then Attention per tensor", _two_pass),
    "s1": Variant(
        "static QDQ MatMul per channel, S8S8",
        lambda b, out: static(b.src, out, "QInt8"),
    ),
    "s2": Variant(
        "s1 with the FFN output MatMuls float",
        lambda b, out: static(b.src, out, "QInt8", nodes_to_exclude=b.src.ffn_out),
    ),
    "s5": Variant(
        "static QDQ MatMul per channel, U8S8 (int8-static-v1's recipe, made here)",
        lambda b, out: static(b.src, out, "QUInt8"),
    ),
    "t5": Variant(
        "s5 with its activations typed, so they are quantised too (static, U8S8)",
        lambda b, out: static(
            b.src, out, "QUInt8", source=typed_export(b.src, out.with_suffix(".typed.onnx"))
        ),
    ),
    "h1": Variant(
        "s1, then dynamic per-channel Attention",
        lambda b, out: dynamic(
            b.path("s1"), out, op_types_to_quantize=["Attention"], per_channel=True
        ),
    ),
    "h2": Variant(
        "s2, then dynamic per-channel Attention",
        lambda b, out: dynamic(
            b.path("s2"), out, op_types_to_quantize=["Attention"], per_channel=True
        ),
    ),
    SHIPPED: Variant(
        "shipped (chosen): dynamic MatMul+Attention per channel, each text run alone, made by "
        "ctxemb"
    ),
}


class Runner:
    """One graph in one onnxruntime session: a batch of texts in, the contract's vectors out.

    ``per_text``: each text of a batch is run on its own, over its real tokens, as ctxemb runs a
    recipe that says so (``runs_per_text``); else the padded batch is run at once.
    """

    def __init__(
        self, path: Path, tokenizer: Any, contract: Any, *, per_text: bool = False
    ) -> None:
        import onnxruntime as ort

        from ctxemb_core.backends.onnx import session_options

        self.session = ort.InferenceSession(
            str(path), session_options(ort, None), providers=["CPUExecutionProvider"]
        )
        self._inputs = [i.name for i in self.session.get_inputs()]
        self._output = self.session.get_outputs()[0].name
        self._tokenizer = tokenizer
        self._contract = contract
        self._per_text = per_text

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        from ctxemb_core.backends.onnx import run_per_text
        from ctxemb_core.pooling import l2_normalize, pool

        _, arrays = self._tokenizer(texts, self._contract.max_tokens)
        if self._per_text:
            hidden = run_per_text(self.session, self._output, arrays, self._inputs)
        else:
            hidden = self.session.run([self._output], {k: arrays[k] for k in self._inputs})[0]
        return l2_normalize(pool(hidden, arrays["attention_mask"], self._contract.pooling))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """All of ``texts``, in batches of :data:`BATCH` in the given order."""
        parts = [self(texts[s : s + BATCH]) for s in range(0, len(texts), BATCH)]
        return np.concatenate(parts).astype(np.float32)


def graph_facts(path: Path) -> dict[str, Any]:
    """The stored graph's operators, and how its activations are computed.

    ``activations`` is ``"static"`` (QuantizeLinear with fixed scales), ``"dynamic"``
    (quantised per batch at run time) or ``"float"`` (int8 weights only, dequantised for a float
    product: what a QDQ graph is when the quantiser could not type its activations).
    """
    import onnx

    ops = Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)
    if ops["QuantizeLinear"]:
        activations = "static"
    elif ops["DynamicQuantizeLinear"] or ops["QAttention"] or ops["DynamicQuantizeMatMul"]:
        activations = "dynamic"
    else:
        activations = "float"
    return {"activations": activations, "ops": dict(sorted(ops.items()))}


def cosine_stats(vectors: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """Median, minimum and 5th percentile of the row cosines (rows are unit length)."""
    cos = np.sum(vectors.astype(np.float64) * reference, axis=1)
    return {
        "median": float(np.median(cos)),
        "min": float(cos.min()),
        "p5": float(np.percentile(cos, 5)),
    }


def batch_dependence(run: Runner, texts: Sequence[str]) -> float:
    """Largest component difference between ``texts`` in one batch and one at a time."""
    together = run(texts)
    alone = np.concatenate([run([t]) for t in texts])
    return float(np.abs(together - alone).max())


def interleaved(
    runners: dict[str, Runner], texts: list[str], chunk: int, rounds: int
) -> dict[str, dict[str, Any]]:
    """Documents/s of every runner, taking turns chunk by chunk; ratios to :data:`FLOAT`."""
    names = list(runners)
    for name in names:  # warm-up: first-run allocations and the thread pool
        runners[name](texts[:chunk])
    parts = [slice(s, min(s + chunk, len(texts))) for s in range(0, len(texts), chunk)]
    per_round: dict[str, list[float]] = {name: [] for name in names}
    paired: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    for r in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        for part in parts:
            shift = turn % len(names)
            order = names[shift:] + names[:shift]
            if turn % 2:
                order.reverse()
            took: dict[str, float] = {}
            for name in order:
                start = time.perf_counter()
                runners[name](texts[part])
                took[name] = time.perf_counter() - start
            for name in names:
                spent[name] += took[name]
                paired[name].append(took[FLOAT] / took[name])
            turn += 1
        for name in names:
            per_round[name].append(len(texts) / spent[name])
        print(
            f"  round {r + 1}: " + "  ".join(f"{n} {per_round[n][-1]:.1f}/s" for n in names),
            flush=True,
        )
    return {
        name: {
            "docs_per_s": statistics.median(per_round[name]),
            "ratio": statistics.median(paired[name]),
            "docs_per_s_rounds": [round(x, 2) for x in per_round[name]],
        }
        for name in names
    }


def sts_spearman(run: Runner, pairs: Any) -> float:
    """STS Spearman of one variant: unique sentences by length, then cosine of each pair."""
    from ctxemb_core.eval import cosine_scores, spearman

    unique = sorted(set(pairs.sentences1) | set(pairs.sentences2), key=lambda t: (len(t), t))
    vectors = dict(zip(unique, run.embed(unique), strict=True))
    u = np.stack([vectors[t] for t in pairs.sentences1])
    v = np.stack([vectors[t] for t in pairs.sentences2])
    return float(spearman(cosine_scores(u, v), pairs.scores))


def sweep(
    builder: Builder, tokenizer: Any, contract: Any, texts: list[str], ref: np.ndarray
) -> Any:
    """Each node of the per-tensor dynamic graph (v1) left float in turn: cosine to float."""
    base = cosine_stats(Runner(builder.path("v1"), tokenizer, contract).embed(texts), ref)
    print(f"sweep: v1 (every MatMul and Attention int8) median {base['median']:.5f}", flush=True)
    rows = []
    out = builder.work / "sweep.onnx"
    for node in builder.src.nodes:
        dynamic(builder.src.path, out, op_types_to_quantize=MM_ATT, nodes_to_exclude=[node])
        stats = cosine_stats(Runner(out, tokenizer, contract).embed(texts), ref)
        out.unlink()
        rows.append({"node_float": node, **stats, "median_gain": stats["median"] - base["median"]})
        print(
            f"  {node:55s} median {stats['median']:.5f} ({stats['median'] - base['median']:+.4f})"
            f" min {stats['min']:.5f}",
            flush=True,
        )
    return {"base": "v1", "base_cosine": base, "nodes": rows}


def _selected(spec: str) -> list[str]:
    if spec == "all":
        return list(VARIANTS)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; valid are {list(VARIANTS)} or 'all'")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " Reference: the float export's vectors (and STS-B Spearman with --sts).",
        epilog=writes("int8_recipes"),
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=300, help="documents for the cosines (300)")
    parser.add_argument("--time-n", type=int, default=128, help="documents timed (128)")
    parser.add_argument("--chunk", type=int, default=32, help="texts per turn (32)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (3)")
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, or 'all' (default {','.join(DEFAULT_VARIANTS)})",
    )
    parser.add_argument("--sts", action="store_true", help="STS-B test Spearman per variant")
    parser.add_argument("--sweep", action="store_true", help="per-node sensitivity of v1")
    parser.add_argument("--keep", type=Path, default=None, help="keep the graphs in this folder")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"4 documents cut to their first {QUICK_WORDS} words, 4 timed in chunks of 2, 1 round, "
        f"4 texts for the batch check; unless "
        f"--variants is given the variants "
        f"{','.join(QUICK_VARIANTS)}",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.time_n, args.chunk, args.rounds = 4, 4, 2, 1
        if args.variants == ",".join(DEFAULT_VARIANTS):
            args.variants = ",".join(QUICK_VARIANTS)
    names = _selected(args.variants)
    offline()
    quiet_truncation()
    logging.getLogger().setLevel(logging.ERROR)  # the quantiser's advice to pre-process

    import onnxruntime as ort

    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.backends import load_encoder
    from ctxemb_core.backends.onnx import export_dir, runs_per_text
    from ctxemb_core.eval import load_sts

    ort.set_default_logger_severity(3)
    sts_path = args.data / STS_FILE
    if args.sts and not sts_path.is_file():
        raise SystemExit(f"{sts_path} not found; pass --data pointing at the shared data folder")
    batch_check = 4 if args.quick else BATCH_CHECK
    texts = scifact_texts(args.data, max(args.n, args.time_n, batch_check))
    if args.quick:
        texts = quick_texts(texts)

    # -- the float export and the shipped twins, made by ctxemb --------------------------------
    contract = contract_for(MODEL)
    embedders = {FLOAT: Embedder(contract, backend="onnx", show_progress=False)}
    twins = {}
    for value in (LEGACY, SHIPPED):
        if value in names:
            quantized = contract_for(MODEL, quantization=value)
            embedders[value] = Embedder(quantized, backend="onnx", show_progress=False)
            twins[value] = export_dir(quantized.weights) / f"model.{value}.onnx"
    export = export_dir(contract.weights) / "model.onnx"
    tokenizer = load_encoder(embedders[FLOAT].model_path, "onnx", "cpu").tokenizer
    src = Source(export, tokenizer, CALIBRATION)
    print(f"CPU: {cpu_label()}; onnxruntime {ort.__version__}")
    print(f"float export: {export} ({export.stat().st_size / 1e6:.0f} MB)", flush=True)

    with tempfile.TemporaryDirectory(prefix="int8-recipes-") as scratch:
        work = args.keep if args.keep is not None else Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        builder = Builder(src, work, twins)
        runners = {FLOAT: Runner(export, tokenizer, contract)}
        for name in names:
            print(f"{name}: {VARIANTS[name].what}", flush=True)
            per_text = runs_per_text(name)  # the shipped recipe, run as ctxemb runs it
            runners[name] = Runner(builder.path(name), tokenizer, contract, per_text=per_text)

        quality = texts[: args.n]
        vectors = {name: run.embed(quality) for name, run in runners.items()}
        ref = vectors[FLOAT].astype(np.float64)
        # This script's path (tokenizer, session, pooling) gives the Embedders' own vectors;
        # text by text, since a dynamic graph's vectors depend on how texts are batched.
        check = texts[:batch_check]
        pipeline = {
            name: max(
                float(np.abs(emb.embed_documents([t]) - runners[name]([t])).max())
                for t in check[:PIPELINE_CHECK]
            )
            for name, emb in embedders.items()
        }
        print(
            "max |this script - Embedder|, text by text: "
            + ", ".join(f"{k} {v:.1e}" for k, v in pipeline.items())
        )

        rows: dict[str, dict[str, Any]] = {}
        for name, run in runners.items():
            path = builder.built.get(name, export)
            rows[name] = {
                "what": "the float export" if name == FLOAT else VARIANTS[name].what,
                "megabytes": round(path.stat().st_size / 1e6, 1),
                "build_seconds": round(builder.seconds[name], 1)
                if name in builder.seconds
                else None,
                "cosine_to_float": cosine_stats(vectors[name], ref),
                "batch_dependence": batch_dependence(run, check),
                **graph_facts(path),
            }

        print(f"timing {args.time_n} documents, chunks of {args.chunk}, {args.rounds} rounds")
        timing = interleaved(runners, texts[: args.time_n], args.chunk, args.rounds)
        for name in runners:
            rows[name].update(timing[name])

        if args.sts:
            pairs = load_sts(sts_path)
            for name, run in runners.items():
                rows[name]["sts_spearman"] = sts_spearman(run, pairs)
                print(f"  STS-B {name}: {rows[name]['sts_spearman']:.5f}", flush=True)

        swept = sweep(builder, tokenizer, contract, quality, ref) if args.sweep else None

    for row in rows.values():
        ok = row["cosine_to_float"]["median"] >= BAR_MEDIAN_COSINE
        if args.sts:
            ok = ok and abs(row["sts_spearman"] - rows[FLOAT]["sts_spearman"]) <= BAR_SPEARMAN
        row["meets_bar"] = ok

    header = f"{'variant':16s} {'median':>8s} {'min':>8s} {'p5':>8s} {'docs/s':>7s} {'x float':>7s}"
    header += (
        f" {'batch dep':>9s}" + (f" {'STS-B':>8s}" if args.sts else "") + "  bar   MB  activations"
    )
    print(f"\n{header}")
    for name, row in rows.items():
        c = row["cosine_to_float"]
        line = (
            f"{name:16s} {c['median']:8.5f} {c['min']:8.5f} {c['p5']:8.5f} "
            f"{row['docs_per_s']:7.1f} {row['ratio']:6.2f}x {row['batch_dependence']:9.1e}"
        )
        line += f" {row['sts_spearman']:8.5f}" if args.sts else ""
        line += f"  {'ok' if row['meets_bar'] else '--':4s} {row['megabytes']:3.0f}"
        print(f"{line}  {row['activations']}")
    bar = f"median cosine >= {BAR_MEDIAN_COSINE}"
    bar += f", STS-B within {BAR_SPEARMAN} of float" if args.sts else ""
    print(f"bar: {bar}\n({NOTE}; CPU: {cpu_label()})")

    payload: dict[str, Any] = {
        "model": MODEL,
        "export": {"weights": contract.weights, "megabytes": rows[FLOAT]["megabytes"]},
        "settings": {
            "documents": args.n,
            "timed_documents": args.time_n,
            "chunk": args.chunk,
            "rounds": args.rounds,
            "batch": BATCH,
            "max_tokens": contract.max_tokens,
            "batch_check_texts": batch_check,
            "calibration": CALIBRATION,
        },
        "note": NOTE,
        "bar": {"median_cosine": BAR_MEDIAN_COSINE, "spearman_within": BAR_SPEARMAN},
        "pipeline_max_abs_vs_embedder": pipeline,
        "variants": rows,
        "sweep": swept,
        "machine": machine_info(),
    }
    path = write_result("int8_recipes", payload, args.out, quick=args.quick)
    print(f"wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
