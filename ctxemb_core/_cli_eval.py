"""``ctxemb eval``: the published tables through every path."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ctxemb_core._validate import check_text
from ctxemb_core.cli import (
    DEFAULT_MODEL,
    _adapter,
    _contract_args,
    _embedder,
    _index_missing,
    _non_empty,
    _open_kwargs,
    _open_sample_arg,
    _overrides,
    _store_args,
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="index a BEIR dataset (or reuse it) and print retrieval metrics",
        description="Index the corpus (adding only missing ids), run the split's queries and "
        "print nDCG, recall and MRR; the last line is one JSON object.",
    )
    p.add_argument("--data", type=Path, required=True, help="a BEIR folder")
    p.add_argument("--split", default="test")
    _store_args(p, collection_required=False)
    p.add_argument("--model", default=DEFAULT_MODEL)
    _open_sample_arg(p)
    _contract_args(p)


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.eval.beir import load_beir
    from ctxemb_core.eval.metrics import evaluate
    from ctxemb_core.resolve import contract_for

    data = load_beir(args.data, split=args.split)
    _non_empty(data.corpus, args.data)
    for qid, text in data.queries.items():
        check_text(text, f"{args.data}: query {qid!r}")
    contract = contract_for(args.model, **_overrides(args))
    embedder = _embedder(args, contract)
    adapter, client = _adapter(args)
    name = args.collection or f"beir-{args.data.resolve().name}-{contract.fingerprint[:12]}"
    collection = adapter.open_collection(client, name, embedder, **_open_kwargs(args))
    added = _index_missing(collection, data.corpus, 512)
    qids = list(data.queries)
    run: dict[str, dict[str, float]] = {}
    k = 100
    for start in range(0, len(qids), 64):
        chunk = qids[start : start + 64]
        result = collection.query(
            [data.queries[q] for q in chunk], n_results=k, include=["distances"]
        )
        for q, ids, dists in zip(chunk, result["ids"], result["distances"], strict=True):
            # Chroma's cosine distance is 1 - cosine: higher score, better rank.
            run[q] = {i: float(1.0 - d) for i, d in zip(ids, dists, strict=True)}
    metrics = evaluate(run, data.qrels, ks=(1, 10, 100))
    out = {
        "dataset": args.data.resolve().name,
        "split": args.split,
        "collection": name,
        "documents": collection.count(),
        "indexed_now": added,
        "queries": len(qids),
        "fingerprint": contract.fingerprint,
        "model": contract.model,
        **{m: round(v, 5) for m, v in sorted(metrics.items())},
    }
    print(json.dumps(out))
    return 0
