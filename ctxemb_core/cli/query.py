"""``ctxemb query``: the nearest documents of a stamped collection, each with its similarity under
the contract; with ``--rerank``, a two-stage search whose second stage is a pinned reranker."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ctxemb_core.cli.common import (
    POSITIVE,
    caller_contract,
    changed,
    clip,
    contract_args,
    examples,
    given_contract,
    metric,
    open_kwargs,
    open_sample_arg,
    overrides,
    remote_args,
    remote_options,
)
from ctxemb_core.cli.hybrid import check_hybrid_args, hybrid_args
from ctxemb_core.cli.stores import (
    alias_arg,
    collection_or_alias,
    open_store,
    resolve_alias,
    store_args,
    where,
)
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.validate import check_texts

#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = "query only reads, so nothing was changed"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "query",
        help="query a stamped collection; prints each result's similarity",
        description="Embed the query under the collection's contract (or the one given, which "
        "must match) and print the nearest documents, best first, each with its similarity "
        "under the contract (higher is better: the cosine for a normalised contract). --json "
        'prints one object per query: {"query", "metric", "results": [{"id", "similarity", '
        '"text"}]}. With --rerank, each result also has the reranker\'s score.',
        epilog=examples(
            "ctxemb query 'slugs in the garden' --collection demo --path ./chroma -k 3",
            "ctxemb query 'slugs' 'tyres' --collection demo --path ./chroma --json",
            "ctxemb query 'slugs' --collection demo --path ./chroma --rerank maxsim",
        ),
    )
    p.add_argument("text", nargs="+", help="one or more query texts")
    store_args(p, collection_required=False)
    alias_arg(p)
    p.add_argument("-k", "--top-k", type=POSITIVE, default=5, help="results per query (≥ 1)")
    p.add_argument(
        "--model",
        help="query with this model's contract, which must match the index's (default: the "
        "collection's own contract, with the contract options applied)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per query")
    _rerank_args(p)
    open_sample_arg(p)
    remote_args(p)
    contract_args(p)
    hybrid_args(p, building=False)


def _rerank_args(p: argparse.ArgumentParser) -> None:
    from ctxemb_core.rerank import Activation

    group = p.add_argument_group(
        "two-stage search",
        "Shortlist --candidates documents with the collection's bi-encoder, then rerank them "
        "and keep --top-k. The reranker's contract fingerprint is printed with the results.",
    )
    group.add_argument(
        "--rerank",
        metavar="MODEL",
        help="a cross-encoder folder or name, a reranker contract JSON file, or 'maxsim' "
        "(late interaction over the collection's own encoder's token vectors)",
    )
    group.add_argument(
        "--candidates",
        type=POSITIVE,
        default=50,
        help="first-stage candidates to rerank (≥ --top-k)",
    )
    group.add_argument(
        "--activation",
        choices=[a.value for a in Activation],
        help="the cross-encoder's score activation (needed for a plain transformers folder; "
        "a sentence-transformers CrossEncoder folder says its own)",
    )
    group.add_argument(
        "--threshold", type=float, help="keep results whose reranker score is at least this"
    )


def run(args: argparse.Namespace) -> int:
    # A command line may carry bytes that are not UTF-8 (decoded as lone surrogates).
    check_texts(args.text, "query text")
    collection_or_alias(args)
    check_hybrid_args(args)
    if args.hybrid and args.rerank is not None:
        raise InvalidInputError("--rerank and --hybrid are two different second stages: pick one")
    given = given_contract(args)
    # A reranker that cannot be built is refused before the store is read.
    reranker = _reranker(args, None) if args.rerank not in (None, "maxsim") else None
    with open_store(args, create=False) as (adapter, client):
        record = resolve_alias(args, adapter, client)
        # By alias, the index is held to the contract the alias records for it (not to whatever
        # its stamp says now: an index restamped behind the alias is refused, as in Python).
        if record is not None and given is None:
            given = changed(record.target.contract, overrides(args))
        contract = caller_contract(args, given, adapter, client)
        remote = remote_options(args)
        if remote:  # the queries are embedded by the server, checked against the stamp's canary
            from ctxemb_core.embedder import Embedder

            querier: Any = Embedder(contract, **remote)
        else:
            querier = contract
        if args.hybrid:
            from ctxemb_core.cli.hybrid import open_hybrid_index

            hybrid = open_hybrid_index(
                args, adapter, client, querier, create=False, **open_kwargs(args),
                recorded=None if record is None else record.target.hybrid,
            )  # fmt: skip
            return _hybrid(args, hybrid, where(args))
        collection = adapter.open_collection(
            client, args.collection, querier, create=False, **open_kwargs(args)
        )
        if args.rerank is not None:
            reranker = reranker or _reranker(args, collection.contract)
            return _two_stage(args, adapter, collection, reranker, where(args))
        similarity = metric(collection.contract)
        store = where(args)
        for q in args.text:
            hits = adapter.shortlist(collection, q, args.top_k, require_text=False).candidates
            if args.json:
                results = [
                    {"id": h.id, "similarity": round(h.score, 6), "text": h.text} for h in hits
                ]
                row = {"query": q, "metric": similarity, "store": store, "results": results}
                print(json.dumps(row, ensure_ascii=False))
                continue
            print(f"query {q!r}  ({similarity}, higher is better) from {store}")
            for rank, h in enumerate(hits, start=1):
                print(f"  {rank:>2}. {h.id:<20} similarity {h.score:7.4f}  {clip(h.text, 60)}")
    return 0


def _hybrid(args: argparse.Namespace, hybrid: Any, store: str) -> int:
    c = hybrid.contract
    similarity = metric(c.dense)
    for q in args.text:
        hits = hybrid.query(q, args.top_k)
        if args.json:
            results = [
                {
                    "id": h.id,
                    "score": round(h.score, 6),
                    "dense_rank": h.dense_rank,
                    "similarity": None if h.dense_score is None else round(h.dense_score, 6),
                    "lexical_rank": h.lexical_rank,
                    "bm25": None if h.lexical_score is None else round(h.lexical_score, 6),
                    "text": h.document,
                }
                for h in hits
            ]
            row = {
                "query": q,
                "fusion": c.fusion.describe(),
                "metric": similarity,
                "hybrid_fingerprint": c.fingerprint,
                "store": store,
                "results": results,
            }
            print(json.dumps(row, ensure_ascii=False))
            continue
        print(
            f"query {q!r}  (hybrid: {c.fusion.describe()}; dense {similarity}, lexical BM25) "
            f"from {store}"
        )
        for rank, h in enumerate(hits, start=1):
            dense = "-" if h.dense_rank is None else f"#{h.dense_rank}"
            lexical = "-" if h.lexical_rank is None else f"#{h.lexical_rank}"
            print(
                f"  {rank:>2}. {h.id:<20} fused {h.score:.4f} (dense {dense:>4}, bm25 "
                f"{lexical:>4})  {clip(h.document or '', 50)}"
            )
    return 0


def _reranker(args: argparse.Namespace, contract: EmbeddingContract | None) -> Any:
    """The reranker ``--rerank`` names (``maxsim`` over ``contract``'s encoder)."""
    from ctxemb_core.rerank import rerank_contract_for, reranker_for
    from ctxemb_core.rerank.contract import load_reranker_contract

    if args.candidates < args.top_k:
        raise InvalidInputError(
            f"--candidates {args.candidates} is fewer than --top-k {args.top_k}: the reranker "
            "keeps at most the candidates it is given"
        )
    source = args.rerank
    if source == "maxsim":
        assert contract is not None
        found = rerank_contract_for(contract, kind="late_interaction")
    elif source.endswith(".json") and Path(source).is_file():
        found = load_reranker_contract(source)
    else:
        found = rerank_contract_for(source, activation=args.activation)
    if args.activation is not None and found.activation not in (None, args.activation):
        raise InvalidInputError(
            f"--activation {args.activation} differs from the contract's "
            f"{found.activation.value if found.activation else None}"
        )
    return reranker_for(found)


def _two_stage(
    args: argparse.Namespace, adapter: Any, collection: Any, reranker: Any, store: str
) -> int:
    similarity = metric(collection.contract)
    for q in args.text:
        result = adapter.search(
            collection,
            q,
            reranker,
            k=args.candidates,
            n=args.top_k,
            score_threshold=args.threshold,
        )
        if args.json:
            row = {
                "query": q,
                "ids": result.ids,
                "scores": [h.score for h in result.hits],
                "score": "reranker",
                "similarities": [h.first_score for h in result.hits],
                "metric": similarity,
                "index_fingerprint": result.index_fingerprint,
                "reranker_fingerprint": result.reranker_fingerprint,
                "rerank_ms": round(result.rerank_seconds * 1000, 2),
                "store": store,
            }
            print(json.dumps(row, ensure_ascii=False))
            continue
        print(
            f"query {q!r}  reranked {result.shortlisted} by "
            f"{reranker.contract.describe()} "
            f"(reranker score, higher is better; first stage: {similarity}) from {store}"
        )
        for rank, h in enumerate(result.hits, start=1):
            print(
                f"  {rank:>2}. {h.id:<20} reranker score {h.score:9.4f}  (first stage "
                f"#{h.first_rank + 1}, similarity {h.first_score:.4f})  {clip(h.text, 50)}"
            )
    return 0
