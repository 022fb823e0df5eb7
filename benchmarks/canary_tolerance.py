"""How far a stamp's canary vectors move under honest noise and under real changes to the encoder.

An index stamp stores the contract's vectors for a few fixed probe texts
(``IndexStamp.from_embedder(e).canary``, both roles); on open, the caller re-embeds the probes
and a cosine below ``CANARY_TOLERANCE`` raises ``EncoderDriftError``. This measures the lowest
cosine between the stored canary and its re-embedding, with the bundled all-MiniLM-L6-v2, when:

- honest noise (must stay above the tolerance, with margin):
  (a) the same contract is re-embedded in a fresh process;
  (b) the probes are embedded amid other texts of other lengths (SciFact documents and queries),
      with batch sizes 1, 8 and 32;
  (c) torch runs on 1 thread and on 2 threads;
- lossy copies: (d) the weights are cast to float16 and back; (d2) the network runs in bfloat16;
- real changes (must fall below): (e) every weight tensor gets Gaussian noise of standard
  deviation ``sigma`` times the tensor's RMS (so ||dW|| / ||W|| is about ``sigma``), for
  ``--sigmas``; (f) another network of the same width: a 1-layer BERT of hidden size 384 with
  random weights and the bundled model's tokenizer;
- another backend: (g) ONNX Runtime (fp32, same contract) must stay above the tolerance;
  (g2) its int8-dynamic quantisation is another contract (the fingerprint refuses it), measured
  to show how lossy it is. Both are skipped where onnxruntime is not installed.

The stored canary comes from the torch backend (the one whose weights (d)-(e) modify).

Run (from the repository root)::

    .venv/bin/python benchmarks/canary_tolerance.py

Writes ``benchmarks/results/canary_tolerance.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    DEFAULT_DATA,
    MODEL,
    QUICK_WORDS,
    add_quick,
    command_line,
    machine_info,
    offline,
    quick_texts,
    quiet_truncation,
    shown,
    write_result,
    writes,
)

HONEST, LOSSY, CHANGE = "honest", "lossy", "change"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The lowest row-wise cosine between two ``(rows, width)`` matrices."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos = (a64 * b64).sum(axis=1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    return float(cos.min())


def canary(embedder: Any) -> np.ndarray:
    from ctxemb_core import IndexStamp

    return IndexStamp.from_embedder(embedder).canary


def canary_amid(embedder: Any, fillers: list[str], seed: int) -> np.ndarray:
    """The canary rows, embedded in one call together with ``fillers`` in shuffled order."""
    from ctxemb_core.contract import Role
    from ctxemb_core.stamp import PROBES

    rows = []
    for role in (Role.DOCUMENT, Role.QUERY):
        texts = [*fillers, *PROBES]
        order = list(range(len(texts)))
        random.Random(seed).shuffle(order)
        vectors = embedder.embed_float([texts[i] for i in order], role)
        where = {i: k for k, i in enumerate(order)}
        rows.append(vectors[[where[len(fillers) + p] for p in range(len(PROBES))]])
    return np.concatenate(rows)


def filler_pool(data: Path) -> tuple[list[str], list[str]]:
    """SciFact documents (long) and queries (short) to surround the probes with."""
    from _common import scifact_texts

    docs = scifact_texts(data, 200)
    queries_file = data / "scifact" / "queries.jsonl"
    with queries_file.open(encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in itertools.islice(fh, 200)]
    return docs, queries


@contextmanager
def weights_changed(model: Any, change: Callable[[Any], Any]) -> Iterator[None]:
    """Replace every parameter ``p`` of a loaded torch module by ``change(p)``, then restore."""
    import torch

    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(change(p))
        yield
    finally:
        model.load_state_dict(saved)


def relative_noise(sigma: float, seed: int) -> Callable[[Any], Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)

    def change(p: Any) -> Any:
        rms = p.pow(2).mean().sqrt()
        return p + sigma * rms * torch.randn(p.shape, generator=gen, dtype=p.dtype)

    return change


@contextmanager
def run_in(model: Any, dtype: Any) -> Iterator[None]:
    """Run a loaded torch module in another dtype, then restore its float32 weights exactly."""
    import torch

    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    try:
        model.to(dtype)
        yield
    finally:
        model.to(torch.float32)
        model.load_state_dict(saved)


def tiny_bert(folder: Path, source: Path, seed: int) -> Path:
    """A random 1-layer BERT of width 384 with the source model's tokenizer files beside it."""
    import torch
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertModel

    vocab = Tokenizer.from_file(str(source / "tokenizer.json")).get_vocab_size()
    torch.manual_seed(seed)
    config = BertConfig(
        hidden_size=384,
        num_hidden_layers=1,
        num_attention_heads=6,
        intermediate_size=512,
        vocab_size=vocab,
    )
    BertModel(config).save_pretrained(str(folder))
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, folder / name)
    return folder


def fresh_process_canary(threads: int | None) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "canary.npy"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--emit-canary", str(out)]
        if threads is not None:
            cmd += ["--threads", str(threads)]
        subprocess.run(cmd, check=True)
        return np.load(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " Reference: the canary stored from the bundled all-MiniLM-L6-v2 on the torch backend,"
        " and CANARY_TOLERANCE.",
        epilog=writes("canary_tolerance"),
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument(
        "--sigmas",
        default="1e-4,3e-4,1e-3,3e-3,1e-2",
        help="relative weight-noise levels, comma-separated (default 1e-4,3e-4,1e-3,3e-3,1e-2)",
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds per random case (default 3)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"1 seed, sigma 1e-2 only, one fresh process, 3+3 filler texts (the documents cut to "
        f"their first {QUICK_WORDS} words)",
    )
    parser.add_argument("--emit-canary", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.sigmas = 1, "1e-2"
    offline()
    quiet_truncation()

    import torch
    from transformers.utils import logging as hf_logging

    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.errors import CtxembError
    from ctxemb_core.resolve import locate_model
    from ctxemb_core.stamp import CANARY_TOLERANCE

    hf_logging.disable_progress_bar()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    contract = contract_for(MODEL)
    embedder = Embedder(contract, backend="torch", show_progress=False)
    if args.emit_canary is not None:  # the child of case (a)
        np.save(args.emit_canary, canary(embedder))
        return 0

    threads = torch.get_num_threads()
    stored = canary(embedder)
    model = embedder._doc.encoder.model  # the transformers module the torch backend runs
    seeds = range(args.seeds)
    cases: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}

    def record(case: str, kind: str, vectors: list[np.ndarray], **extra: Any) -> None:
        # Per trial, the worst probe; across trials, the worst and the best of those.
        per_trial = [min_cosine(stored, v) for v in vectors]
        lo, hi = min(per_trial), max(per_trial)
        cases.append(
            {"case": case, "kind": kind, "min_cosine": lo, "max_cosine": hi, "trials": per_trial}
            | extra
        )
        print(f"  {case:<46} {kind:<7} {lo:12.9f} {hi:12.9f}  {1 - lo:8.1e}", flush=True)

    print(f"canary: {stored.shape[0]} vectors of {stored.shape[1]} (probes x 2 roles)")
    print(f"  {'case':<46} {'kind':<7} {'min cos':>12} {'max cos':>12}  {'1 - min':>8}")
    record("same process, again", HONEST, [canary(embedder)])
    fresh = [fresh_process_canary(args.threads) for _ in range(1 if args.quick else 2)]
    record("(a) fresh process", HONEST, fresh)
    docs, queries = filler_pool(args.data)
    if args.quick:
        docs = quick_texts(docs)
    # Documents and queries around the probes (a quick run's 3+3 and 4 probes: 10 texts a role,
    # so that batches of 8 still split them).
    fill = 3 if args.quick else 24
    for batch_size in (1, 8, 32):
        amid = Embedder(contract, backend="torch", batch_size=batch_size, show_progress=False)
        trials = []
        for seed in seeds:
            rng = random.Random(seed)
            fillers = rng.sample(docs, fill) + rng.sample(queries, fill)
            trials.append(canary_amid(amid, fillers, seed))
        record(f"(b) amid other texts, batch size {batch_size}", HONEST, trials)
    for n in (1, 2):
        torch.set_num_threads(n)
        record(f"(c) torch on {n} thread{'s' if n > 1 else ''}", HONEST, [canary(embedder)])
    torch.set_num_threads(threads)
    with weights_changed(model, lambda p: p.half().float()):
        record("(d) weights cast to float16 and back", LOSSY, [canary(embedder)])
    with run_in(model, torch.bfloat16):
        record("(d2) network run in bfloat16", LOSSY, [canary(embedder)])
    for sigma in (float(s) for s in args.sigmas.split(",")):
        trials = []
        for seed in seeds:
            with weights_changed(model, relative_noise(sigma, seed)):
                trials.append(canary(embedder))
        record(f"(e) weights + relative noise {sigma:g}", CHANGE, trials, sigma=sigma)
    source = locate_model(MODEL, contract.weights)
    trials = []
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            folder = tiny_bert(Path(tmp) / "tiny-bert-384", source, seed)
            other = contract_for(
                folder, pooling="mean", name="tiny-random-bert-384", max_tokens=256
            )
            trials.append(canary(Embedder(other, backend="torch", show_progress=False)))
    record("(f) another model of width 384 (random BERT)", CHANGE, trials)
    for case, kind, onnx_contract in (
        ("(g) ONNX Runtime backend", HONEST, contract),
        ("(g2) ONNX int8-dynamic (another contract)", LOSSY, None),
    ):
        try:
            if onnx_contract is None:
                onnx_contract = contract_for(MODEL, quantization="int8-dynamic")
            onnx = Embedder(onnx_contract, backend="onnx", show_progress=False)
        except (CtxembError, ImportError) as exc:
            skipped[case] = str(exc)
            print(f"  {case:<46} skipped: {exc}")
            continue
        record(case, kind, [canary(onnx)])

    honest = min(c["min_cosine"] for c in cases if c["kind"] == HONEST)
    # A real change must be caught in every trial: its least-moved trial is what counts.
    real = max(c["max_cosine"] for c in cases if c["kind"] == CHANGE and c.get("sigma", 1) >= 1e-2)
    separates = honest >= CANARY_TOLERANCE > real
    print()
    print(f"lowest honest cosine:            {honest:.9f}  (1 - cos {1 - honest:.1e})")
    print(f"highest cosine of a real change: {real:.9f}  (1 - cos {1 - real:.1e})")
    print(f"any tolerance in ({real:.6f}, {honest:.9f}] separates honest noise from real change")
    verdict = "separates them" if separates else "does NOT separate them"
    print(f"CANARY_TOLERANCE = {CANARY_TOLERANCE} {verdict}; per case:")
    for c in cases:
        if c["kind"] != HONEST:
            caught = c["max_cosine"] < CANARY_TOLERANCE
            some = c["min_cosine"] < CANARY_TOLERANCE
            word = "caught" if caught else ("caught in some trials" if some else "passes")
            print(f"  {c['case']:<46} {word}")

    info = machine_info()
    print(f"on {info['cpu_label']}")
    out = write_result(
        "canary_tolerance",
        {
            "model": MODEL,
            "tolerance": CANARY_TOLERANCE,
            "canary_shape": list(stored.shape),
            "noise": "W + sigma * rms(W) * N(0, 1) per parameter tensor",
            "seeds": args.seeds,
            "cases": cases,
            "lowest_honest": honest,
            "highest_real_change": real,
            "tolerance_separates": separates,
            "skipped": skipped,
            "machine": info,
        },
        args.out,
        quick=args.quick,
    )
    print(f"wrote {shown(out)}")
    print(f"reproduce: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
