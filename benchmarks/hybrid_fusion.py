"""Hybrid retrieval on SciFact: dense, BM25, their fusion, and how the fusion's parameters move it.

The headline is fixed before looking: reciprocal-rank fusion with the published k = 60 over the top
100 of each side (Cormack, Clarke and Büttcher 2009), the default of ``HybridContract``; the shared
data holds only SciFact's test judgements, so nothing is tuned on them. Everything else printed is a
measurement of sensitivity, not a choice: RRF's k from 1 to 1000, the depth each side contributes,
and a min-max-normalised weighted sum at a few stated weights.

The dense run is the bundled all-MiniLM-L6-v2 (exact cosine search over all documents, the memory
path's), the lexical run ctxemb's BM25 under the default ``LexicalContract`` (Lucene BM25, k1 1.5,
b 0.75, English stemmer and stop words; equal to bm25s' scores). The goal of issue 29: the fused
nDCG@10 at least 0.02 above the better of the two.

Run:  .venv/bin/python benchmarks/hybrid_fusion.py   (embeds SciFact once, minutes on 2 cores; the
      embedding cache makes a second run take seconds)
"""

from __future__ import annotations

import argparse
import time
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

NAME = "hybrid_fusion"
#: RRF's k values measured (60 is the headline, fixed before looking).
KS = (1, 5, 10, 20, 40, 60, 80, 100, 200, 1000)
#: Candidates per side.
DEPTHS = (10, 20, 50, 100)
#: Weighted sums (dense, lexical), min-max normalised per query.
WEIGHTS = ((0.3, 0.7), (0.5, 0.5), (0.7, 0.3))
GOAL = 0.02
#: ``--quick``: the first test queries, over their judged documents and this many others.
QUICK_QUERIES, QUICK_OTHERS = 20, 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " Reference: the better of dense and BM25 in the same run.",
        epilog=writes(NAME),
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"the first {QUICK_QUERIES} test queries over their judged documents and "
        f"{QUICK_OTHERS} others, each document cut to its first {QUICK_WORDS} words",
    )
    args = parser.parse_args(argv)
    offline()
    quiet_truncation()

    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.eval import evaluate, load_beir
    from ctxemb_core.eval.beir import document_text
    from ctxemb_core.hybrid import Fusion, HybridContract, LexicalIndex, fuse

    dataset = load_beir(args.data / "scifact")
    corpus, queries, qrels = dataset.corpus, dataset.queries, dataset.qrels
    if args.quick:
        chosen = sorted(qrels)[:QUICK_QUERIES]
        judged = {d for q in chosen for d in qrels[q]}
        keep = sorted(judged) + [d for d in corpus if d not in judged][:QUICK_OTHERS]
        corpus = {d: corpus[d] for d in keep}
        queries = {q: queries[q] for q in chosen}
        qrels = {q: qrels[q] for q in chosen}
    ids = list(corpus)
    texts = [document_text(corpus[d]) for d in ids]
    if args.quick:  # the embedding was most of a quick run: both sides get the same short texts
        texts = quick_texts(texts)
    qids = list(queries)

    embedder = Embedder(contract_for(MODEL))
    started = time.perf_counter()
    docs = np.asarray(embedder.embed_documents(texts))
    qvecs = np.asarray(embedder.embed_queries([queries[q] for q in qids]))
    embed_s = time.perf_counter() - started
    depth = min(100, len(ids))
    sims = qvecs @ docs.T
    dense: dict[str, list[tuple[str, float]]] = {}
    for n, q in enumerate(qids):
        top = np.argsort(-sims[n], kind="stable")[:depth]
        dense[q] = [(ids[j], float(sims[n, j])) for j in top]

    started = time.perf_counter()
    index = LexicalIndex.fit(ids, texts)
    fit_s = time.perf_counter() - started
    lexical = {q: index.search(queries[q], depth) for q in qids}

    def score(run: dict[str, list[tuple[str, float]]]) -> dict[str, float]:
        got = evaluate({q: dict(r) for q, r in run.items()}, qrels, ks=(10, 100))
        return {m: round(got[m], 5) for m in ("ndcg@10", "recall@100", "mrr@10")}

    def fused(fusion: Any) -> dict[str, float]:
        return score({q: fuse(fusion, dense[q], lexical[q], depth) for q in qids})

    rows: dict[str, Any] = {"dense": score(dense), "bm25": score(lexical)}
    headline_fusion = Fusion()
    contract = HybridContract(embedder.contract, index.contract, headline_fusion)
    rows["rrf k=60 depth=100 (headline)"] = fused(headline_fusion)
    rrf_k = {k: fused(Fusion(k=k, depth=depth))["ndcg@10"] for k in KS}
    depths = {d: fused(Fusion(depth=min(d, depth)))["ndcg@10"] for d in DEPTHS}
    weighted = {
        f"{w[0]:g}/{w[1]:g}": fused(Fusion(method="weighted", weights=w, depth=depth))["ndcg@10"]
        for w in WEIGHTS
    }
    best = max(rows["dense"]["ndcg@10"], rows["bm25"]["ndcg@10"])
    gain = rows["rrf k=60 depth=100 (headline)"]["ndcg@10"] - best

    print(f"SciFact: {len(ids)} documents, {len(qids)} test queries (embedded in {embed_s:.1f} s)")
    print(f"{'':34} {'nDCG@10':>8} {'recall@100':>11} {'MRR@10':>8}")
    for label, m in rows.items():
        print(f"{label:34} {m['ndcg@10']:8.5f} {m['recall@100']:11.5f} {m['mrr@10']:8.5f}")
    verdict = "meets" if gain >= GOAL else "MISSES"
    print(f"fused - better single: {gain:+.5f} (goal >= +{GOAL}: {verdict} goal)")
    print("sensitivity (nDCG@10), measured, not chosen:")
    print("  rrf k:     " + "  ".join(f"{k}: {v:.5f}" for k, v in rrf_k.items()))
    print("  depth:     " + "  ".join(f"{d}: {v:.5f}" for d, v in depths.items()))
    print("  weighted:  " + "  ".join(f"{w}: {v:.5f}" for w, v in weighted.items()))
    info = machine_info()
    print(f"on {info['cpu_label']}")
    out = write_result(
        NAME,
        {
            "model": MODEL,
            "documents": len(ids),
            "queries": len(qids),
            "hybrid_fingerprint": contract.fingerprint,
            "lexical": index.contract.to_dict(),
            "results": rows,
            "gain_over_better_single": round(gain, 5),
            "goal": f">= {GOAL}",
            "sensitivity": {
                "rrf_k": {str(k): v for k, v in rrf_k.items()},
                "depth": {str(d): v for d, v in depths.items()},
                "weighted_dense_lexical": weighted,
            },
            "seconds": {"embed": round(embed_s, 2), "bm25_fit": round(fit_s, 3)},
            "command": command_line(),
            "machine": info,
        },
        args.out,
        quick=args.quick,
    )
    print(f"written to {shown(out)}")
    print(f"reproduce: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
