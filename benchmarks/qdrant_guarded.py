"""Qdrant in local mode: guarded writes and queries against raw qdrant-client on the same vectors.

The guard's own cost, not the model's: SciFact documents and queries are embedded once with the
bundled all-MiniLM-L6-v2, then written into two collections of one local-mode store, one by
qdrant-client's ``upsert`` (points laid out as the driver lays them: a uuid5 id, the text and
metadata in the payload, a Dot vector), one through ctxemb (``open_collection`` stamping it, then
``add_embedded``: every batch checked against the stamp, its ids' records read first so that a
failed write is undone, the stamp re-read), in the same batches; then every query is asked of
both with the same query vector (``query_points`` with the payload against the guarded
``query_vectors``, which checks the collection's head before it searches and returns the same
hits in its columns; local mode's head is read again only when the collection changed). The two
sides take turns batch by batch and query by query in one store, the order alternating, so that
a machine whose load drifts slows both alike; the ratios are of one run.

The insert ratio is the median of the rounds' own ratios (each round's guarded writes against
its raw writes, made side by side): a slow round slows both of its sides, where medians taken
side by side could pair one side's slow round with the other's fast one. Creating the
collection is timed apart and reported beside it (the guarded side's includes the stamp, whose
canary texts the model embeds: the model's cost, paid once per collection, not per document).

Run:  .venv/bin/python benchmarks/qdrant_guarded.py                (2,000 documents, 5 rounds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes("qdrant_guarded")
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=2000, help="documents to write")
    parser.add_argument("--batch", type=int, default=256, help="documents per write")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        help="OpenBLAS threads for local mode's brute-force search (default: OpenBLAS's own; "
        "1 keeps threads contending for a loaded machine's cores out of both medians)",
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"24 documents cut to their first {QUICK_WORDS} words, in batches of 8, 5 queries, 1 round",
    )
    args = parser.parse_args()
    if args.quick:
        args.n, args.batch, args.queries, args.rounds = 24, 8, 5, 1
    if args.blas_threads is not None:  # read when numpy loads, which is below
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
    offline()
    quiet_truncation()

    import numpy as np
    from qdrant_client import models

    import ctxemb_qdrant
    from ctxemb_core import Embedder, contract_for

    texts = scifact_texts(args.data, args.n)
    if args.quick:
        texts = quick_texts(texts)
    ids = [f"d{i}" for i in range(len(texts))]
    lines = (args.data / "scifact" / "queries.jsonl").read_text().splitlines()
    queries = [json.loads(line)["text"] for line in lines[: args.queries]]
    contract = contract_for(MODEL)
    embedder = Embedder(contract)
    vectors = embedder.embed_documents(texts)
    asked = embedder.embed_queries(queries)
    metadata = [{"ctxemb_text": "", "n": i} for i in range(len(texts))]

    # Both sides live in one store and take turns batch by batch and query by query (the
    # order alternating), so a machine whose load drifts slows both alike.
    raw_w, our_w, raw_q, our_q = [], [], [], []
    raw_made, our_made = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            client = ctxemb_qdrant.connect(f"{tmp}/store-{r}")
            start = time.perf_counter()
            client.create_collection(
                "raw", vectors_config=models.VectorParams(size=384, distance=models.Distance.DOT)
            )
            raw_made.append(time.perf_counter() - start)
            start = time.perf_counter()
            col = ctxemb_qdrant.open_collection(client, "ours", embedder)  # with its stamp
            our_made.append(time.perf_counter() - start)
            raw_w.append(0.0)
            our_w.append(0.0)

            def raw_batch(i: int, client: Any = client) -> None:
                client.upsert(
                    "raw",
                    [
                        models.PointStruct(
                            id=ctxemb_qdrant.point_id(ids[k]),
                            vector=vectors[k].tolist(),
                            payload={"page_content": texts[k], "metadata": metadata[k]},
                        )
                        for k in range(i, min(i + args.batch, len(texts)))
                    ],
                )

            def our_batch(i: int, col: Any = col) -> None:
                col.add_embedded(
                    ids[i : i + args.batch],
                    vectors[i : i + args.batch],
                    texts[i : i + args.batch],
                    [{"n": k} for k in range(i, min(i + args.batch, len(texts)))],
                    fingerprint=contract.fingerprint,
                )

            for b, i in enumerate(range(0, len(texts), args.batch)):
                pair = [(raw_w, raw_batch), (our_w, our_batch)]
                for spent, fn in pair if (b + r) % 2 == 0 else pair[::-1]:
                    start = time.perf_counter()
                    fn(i)
                    spent[-1] += time.perf_counter() - start
            for j, q in enumerate(asked):
                pair = [
                    (
                        raw_q,
                        lambda q=q, client=client: client.query_points(
                            "raw", query=q.tolist(), limit=10, with_payload=True
                        ),
                    ),
                    (our_q, lambda q=q, col=col: col.query_vectors(q, 10)),
                ]
                for times, fn in pair if (j + r) % 2 == 0 else pair[::-1]:
                    start = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - start)
            print(
                f"round {r + 1}: written raw {len(texts) / raw_w[-1]:8.1f} docs/s, guarded "
                f"{len(texts) / our_w[-1]:8.1f} docs/s"
            )
            client.close()

    raw_rate = len(texts) / statistics.median(raw_w)
    our_rate = len(texts) / statistics.median(our_w)
    insert_ratio = statistics.median(raw / ours for raw, ours in zip(raw_w, our_w, strict=True))
    raw_ms = 1000 * statistics.median(raw_q)
    our_ms = 1000 * statistics.median(our_q)
    result = {
        "documents": len(texts),
        "batch": args.batch,
        "queries": len(queries),
        "rounds": args.rounds,
        "store": "qdrant-client local mode (a folder)",
        "blas_threads": args.blas_threads,
        "raw_docs_per_s": round(raw_rate, 2),
        "guarded_docs_per_s": round(our_rate, 2),
        "insert_ratio": round(insert_ratio, 3),
        "insert_ratio_per_round": [round(a / b, 3) for a, b in zip(raw_w, our_w, strict=True)],
        "insert_goal": ">= 0.9",
        "raw_create_ms_median": round(1000 * statistics.median(raw_made), 1),
        "guarded_create_ms_median": round(1000 * statistics.median(our_made), 1),
        "raw_query_ms_median": round(raw_ms, 3),
        "guarded_query_ms_median": round(our_ms, 3),
        "query_latency_ratio": round(our_ms / raw_ms, 3),
        "query_goal": "<= 1.1",
        "same_vectors": bool(np.isfinite(vectors).all()),
        "machine": machine_info(),
    }
    path = write_result("qdrant_guarded", result, args.out, quick=args.quick)
    print(f"\n{len(texts)} SciFact documents, local mode, median of {args.rounds} rounds")
    print(
        f"  insert: raw {raw_rate:8.1f} docs/s, guarded {our_rate:8.1f} docs/s, "
        f"ratio {insert_ratio:.3f} (median of the rounds' own; goal >= 0.9)"
    )
    print(
        f"  create: raw {result['raw_create_ms_median']} ms, guarded "
        f"{result['guarded_create_ms_median']} ms (with the stamp's canary vectors)"
    )
    print(
        f"  query:  raw {raw_ms:.3f} ms, guarded {our_ms:.3f} ms, "
        f"ratio {our_ms / raw_ms:.3f} (goal <= 1.1)"
    )
    print(f"on {result['machine']['cpu_label']}")
    print(f"written to {shown(path)}")
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    main()
