"""The ``ctxemb`` command.

Store commands (Chroma, …) are reached by name and loaded on demand, so this module imports no
integration at module level.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import CtxembError, MissingDependencyError

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _contract_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pooling", help="cls, mean, max, last_token, weighted_mean, mean_sqrt_len")
    p.add_argument("--name", help="identity to record for a local folder (default: its name)")
    p.add_argument("--family", help="prefix preset: e5, bge-en, bge-zh, instructor, nomic")
    p.add_argument("--query-prefix")
    p.add_argument("--document-prefix")
    p.add_argument("--truncate-dim", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--precision", help="float32, float16, int8, binary")
    p.add_argument("--quantization", help="int8-dynamic (int8 weights, onnx backend)")
    p.add_argument(
        "--normalize", action=argparse.BooleanOptionalAction, default=None, help="L2 normalise"
    )


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from ctxemb_core.resolve import CONTRACT_OVERRIDES

    keys = (*CONTRACT_OVERRIDES, "name", "family")
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxemb",
        description="Contract-aware embeddings: pin the recipe, stamp the index, refuse mixes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "inspect",
        help="print the contract derived from a model folder or name, as JSON",
        description="Derive a model's contract (pooling, prefixes, normalisation, digest) and "
        "print it as JSON with its fingerprint.",
    )
    p.add_argument("model", help=f"a folder path or an offline name such as {DEFAULT_MODEL}")
    _contract_args(p)
    p = sub.add_parser(
        "demo",
        help="index a small corpus into a stamped Chroma collection, query it, show mismatches",
        description="Index the example corpus with the bundled model into an embedded, "
        "contract-stamped Chroma collection, run the example queries, then show the collection "
        "refusing embedders under other contracts.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--corpus", type=Path, default=_EXAMPLES / "corpus.jsonl")
    p.add_argument("--queries", type=Path, default=_EXAMPLES / "queries.jsonl")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--collection", default="ctxemb-demo")
    p.add_argument("--store", default="chroma")
    p.add_argument("--path", default="./ctxemb-demo-chroma", help="embedded store folder")
    p.add_argument("--host", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=8000, help=argparse.SUPPRESS)

    p = sub.add_parser(
        "index",
        help="embed a BEIR folder or a JSONL corpus into a stamped collection",
        description="Embed documents ({_id, title, text} JSONL, or a BEIR folder's corpus) into "
        "a collection stamped with the contract. A second run adds only the missing ids.",
    )
    p.add_argument("data", type=Path, help="a BEIR folder or a .jsonl(.gz) file")
    _store_args(p)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--batch-size", type=int, default=512, help="documents per write")
    _contract_args(p)

    p = sub.add_parser(
        "query",
        help="query a stamped collection",
        description="Embed the query under the collection's contract (or the one given, which "
        "must match) and print the nearest documents.",
    )
    p.add_argument("text", nargs="+", help="one or more query texts")
    _store_args(p)
    p.add_argument("-k", "--top-k", type=int, default=5)
    p.add_argument("--model", help="query with this model's contract (must match the index)")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    _contract_args(p)

    p = sub.add_parser(
        "verify",
        help="check a collection against a contract and print a report",
        description="Report the stamp, the fingerprint match (with the differing fields), the "
        "canary cosine and a sampled re-embedding. Exit code 1 when anything fails.",
    )
    _store_args(p)
    p.add_argument("--model", help="the caller's model (default: the collection's own contract)")
    p.add_argument("--sample", type=int, default=32)
    _contract_args(p)

    p = sub.add_parser(
        "migrate",
        help="re-embed a collection under a new contract into a new collection",
        description="Copy every document into a new stamped collection, re-embedded under the "
        "source's contract with the changes given (or another --model). Resumable; the source "
        "is never modified.",
    )
    _store_args(p)
    p.add_argument("--to", required=True, help="name of the new collection")
    p.add_argument("--model", help="the target model (default: the source's model)")
    p.add_argument("--batch-size", type=int, default=256)
    _contract_args(p)

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
    _contract_args(p)
    return parser


def _store_args(p: argparse.ArgumentParser, *, collection_required: bool = True) -> None:
    p.add_argument("--collection", required=collection_required, help="collection name")
    p.add_argument("--store", default="chroma", help="the store's adapter (default: chroma)")
    p.add_argument("--path", default="./chroma", help="embedded store folder (default ./chroma)")
    p.add_argument("--host", help="a store server's host (instead of --path)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--no-cache", action="store_true", help="do not read or write the embedding cache"
    )


def _adapter(args: argparse.Namespace) -> tuple[Any, Any]:
    """The store's adapter module, loaded by name only now, and a client for it."""
    name = f"ctxemb_{args.store}"
    try:
        adapter = importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependencyError(
            f"the {args.store!r} store needs its adapter: "
            f"pip install 'ctxemb[{args.store}]' ({exc})"
        ) from None
    return adapter, adapter.connect(path=args.path, host=args.host, port=args.port)


def _caller_contract(args: argparse.Namespace, adapter: Any, client: Any) -> EmbeddingContract:
    """The contract given on the command line, else the collection's own."""
    from ctxemb_core.resolve import contract_for

    overrides = _overrides(args)
    if args.model:
        return contract_for(args.model, **overrides)
    stamped = adapter.stamped_contract(client, args.collection)
    if not overrides:
        return stamped
    return contract_for(stamped.model, **overrides)


def _embedder(args: argparse.Namespace, contract: EmbeddingContract) -> Any:
    from ctxemb_core import Embedder
    from ctxemb_core.cache import EmbeddingCache

    return Embedder(contract, cache=None if args.no_cache else EmbeddingCache())


def _load_documents(data: Path) -> dict[str, dict[str, str]]:
    from ctxemb_core.eval.beir import load_beir, load_jsonl_corpus

    if data.is_dir():
        return load_beir(data).corpus
    return load_jsonl_corpus(data)


def _index_missing(collection: Any, corpus: dict[str, dict[str, str]], batch: int) -> int:
    """Add the documents whose ids the collection lacks; returns how many were added."""
    from tqdm.auto import tqdm

    from ctxemb_core.eval.beir import document_text

    have = collection.ids()
    todo = [i for i in corpus if i not in have]
    with tqdm(total=len(todo), unit="doc", desc="indexing", disable=not todo) as bar:
        for start in range(0, len(todo), batch):
            ids = todo[start : start + batch]
            collection.add(ids, [document_text(corpus[i]) for i in ids])
            bar.update(len(ids))
    return len(todo)


def _index(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    adapter, client = _adapter(args)
    corpus = _load_documents(args.data)
    contract = contract_for(args.model, **_overrides(args))
    collection = adapter.open_collection(client, args.collection, _embedder(args, contract))
    added = _index_missing(collection, corpus, args.batch_size)
    print(
        f"{args.collection}: {added} added, {collection.count()} documents, "
        f"contract {contract.describe()}"
    )
    return 0


def _query(args: argparse.Namespace) -> int:
    adapter, client = _adapter(args)
    contract = _caller_contract(args, adapter, client)
    collection = adapter.open_collection(client, args.collection, contract, create=False)
    result = collection.query(args.text, n_results=args.top_k)
    for q, ids, dists, docs in zip(
        args.text, result["ids"], result["distances"], result["documents"], strict=True
    ):
        if args.json:
            print(json.dumps({"query": q, "ids": ids, "distances": dists}, ensure_ascii=False))
            continue
        print(f"query {q!r}")
        for i, d, doc in zip(ids, dists, docs, strict=True):
            print(f"  {i:<20} {d:8.4f}  {(doc or '')[:70]}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    adapter, client = _adapter(args)
    contract = _caller_contract(args, adapter, client)
    stored = adapter.stored_collection(client, args.collection)
    report = adapter.verify(stored, contract, sample=args.sample)
    print(json.dumps(report.to_dict(), indent=2))
    return 0 if report.ok else 1


def _migrate(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    adapter, client = _adapter(args)
    source_contract = adapter.stamped_contract(client, args.collection)
    source = adapter.open_collection(client, args.collection, source_contract, create=False)
    overrides = _overrides(args)
    target = contract_for(args.model or source_contract.model, **overrides)
    done = adapter.migrate(source, _embedder(args, target), args.to, batch_size=args.batch_size)
    print(f"{args.to}: {done.count()} documents under {target.describe()}")
    print(f"changed: {source_contract.diff(target)}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ctxemb_core.eval.beir import load_beir
    from ctxemb_core.eval.metrics import evaluate
    from ctxemb_core.resolve import contract_for

    adapter, client = _adapter(args)
    data = load_beir(args.data, split=args.split)
    contract = contract_for(args.model, **_overrides(args))
    name = args.collection or f"beir-{args.data.resolve().name}-{contract.fingerprint[:12]}"
    collection = adapter.open_collection(client, name, _embedder(args, contract))
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


def _inspect(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    contract = contract_for(args.model, **_overrides(args))
    out = {"fingerprint": contract.fingerprint, "contract": contract.to_dict()}
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.errors import ContractMismatchError

    adapter, client = _adapter(args)
    corpus = _load_documents(args.corpus)
    queries = [json.loads(line)["text"] for line in args.queries.read_text().splitlines() if line]

    contract = contract_for(args.model)
    print(f"contract   {contract.describe()}")
    collection = adapter.open_collection(client, args.collection, Embedder(contract))
    added = _index_missing(collection, corpus, 512)
    print(
        f"collection {args.collection!r} in {args.path}: {added} documents added, "
        f"{collection.count()} in all, stamped {contract.fingerprint[:12]}"
    )
    result = collection.query(queries, n_results=args.top_k)
    for q, ids, dists in zip(queries, result["ids"], result["distances"], strict=True):
        hits = ", ".join(f"{i} ({1 - d:.3f})" for i, d in zip(ids, dists, strict=True))
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
            print("  " + str(exc).replace("\n", "\n  "))
        else:  # pragma: no cover - the guard failing is the one thing the demo must not show
            print(f"- {label}: NOT refused")
            return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ctxemb`` console script."""
    args = _parser().parse_args(argv)
    handlers = {
        "inspect": _inspect,
        "demo": _demo,
        "index": _index,
        "query": _query,
        "verify": _verify,
        "migrate": _migrate,
        "eval": _eval,
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            return handlers[args.command](args)
    except CtxembError as exc:
        print(f"ctxemb: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
