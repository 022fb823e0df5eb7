"""``ctxemb demo``: the example corpus indexed into a stamped collection, queried, and the
collection refusing embedders under other contracts."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

from ctxemb_core.cli.advice import Invocation, cli_message
from ctxemb_core.cli.common import (
    DEFAULT_MODEL,
    POSITIVE,
    examples,
    index_corpus,
    load_documents,
    metric,
)
from ctxemb_core.cli.stores import demo_store_args, open_store, store_options
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.demo import corpus_path, queries_path
from ctxemb_core.errors import DataFormatError

#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = (
    "run the demo again: it continues where it stopped (the documents already indexed are kept)"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="index a small corpus into a stamped Chroma collection, query it, show mismatches",
        description="Index the example corpus with the bundled model into an embedded, "
        "contract-stamped Chroma collection, run the example queries, then show the collection "
        "refusing embedders under other contracts.",
        epilog=examples("ctxemb demo", "ctxemb demo --path /tmp/demo-store --top-k 5"),
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="the model folder or name")
    p.add_argument("--corpus", type=Path, default=corpus_path(), help="a JSONL corpus")
    p.add_argument("--queries", type=Path, default=queries_path(), help='JSONL {"text": ...}')
    p.add_argument("--top-k", type=POSITIVE, default=3, help="results per query")
    p.add_argument("--collection", default="ctxemb-demo", help="collection name")
    demo_store_args(p)


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    corpus = load_documents(args.corpus)
    queries = _load_queries(args.queries)
    contract = contract_for(args.model)
    with open_store(args, create=True, demo=True) as (adapter, client):
        return _demo_in(args, adapter, client, contract, corpus, queries)


def _load_queries(path: Path) -> list[str]:
    """The texts of a JSONL file of ``{"text": ...}`` queries (the demo's)."""
    from ctxemb_core.validate import check_text

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not valid UTF-8 ({exc.reason})") from None
    queries = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)["text"]
        except (ValueError, TypeError, KeyError):
            text = None
        if not isinstance(text, str):
            raise DataFormatError(f'{path}:{lineno}: expected a JSON object with a string "text"')
        queries.append(check_text(text, f"{path}:{lineno}: query"))
    if not queries:
        raise DataFormatError(f'{path} holds no queries; write one {{"text": ...}} per line')
    return queries


def _demo_in(
    args: argparse.Namespace,
    adapter: Any,
    client: Any,
    contract: EmbeddingContract,
    corpus: dict[str, dict[str, str]],
    queries: list[str],
) -> int:
    from ctxemb_core.embedder import Embedder
    from ctxemb_core.errors import ContractMismatchError

    options = store_options(args.store)
    run = Invocation.of(args)
    shown = None if run is None else dataclasses.replace(run, shown=True)
    print(f"contract   {contract.describe()}")
    collection = adapter.open_collection(client, args.collection, Embedder(contract))
    added = len(index_corpus(collection, corpus, 512).added)
    print(
        f"collection {args.collection!r} in {options.location(args)}: "
        f"{added} documents added, {collection.count()} in all, stamped {contract.fingerprint[:12]}"
    )
    print(f"scores     {metric(contract)} of each hit, higher is better")
    for q in queries:
        found = adapter.shortlist(collection, q, args.top_k, require_text=False).candidates
        hits = ", ".join(f"{h.id} ({h.score:.3f})" for h in found)
        print(f"query      {q!r}\n  -> {hits}")

    print("\nThe same collection opened under other contracts:")
    for label, other in (
        ("CLS pooling instead of mean", contract.with_(pooling="cls")),
        ("normalisation switched off", contract.with_(normalize=False)),
        ("an E5-style query prefix added", contract.with_(query_prefix="query: ")),
    ):
        try:
            adapter.open_collection(client, args.collection, Embedder(other), create=False)
        except ContractMismatchError as exc:
            print(f"- {label}: refused ({exc.diff.kind.value}), fields {', '.join(exc.fields)}")
            print("  " + cli_message(exc, shown).replace("\n", "\n  "))
        else:  # pragma: no cover - the guard failing is the one thing the demo must not show
            print(f"- {label}: NOT refused")
            return 1
    # The store options spelled out: the other commands' default store is ./chroma, not this.
    where = f"--collection {shlex.quote(args.collection)} {options.flags(args)}"
    print("\nQuery the demo collection yourself, or check it:")
    print(f"  ctxemb query {shlex.quote(queries[0] if queries else 'green tea')} {where}")
    print(f"  ctxemb verify {where}")
    return 0
