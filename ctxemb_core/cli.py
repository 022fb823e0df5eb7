"""The ``ctxemb`` command.

Store commands (Chroma, …) are reached by name and loaded on demand, so this module imports no
integration at module level.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxemb_core.errors import CtxembError

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
    p.add_argument(
        "--normalize", action=argparse.BooleanOptionalAction, default=None, help="L2 normalise"
    )


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "pooling",
        "name",
        "family",
        "query_prefix",
        "document_prefix",
        "truncate_dim",
        "max_tokens",
        "precision",
        "normalize",
    )
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
        help="embed a small corpus, stamp it, query it, and show mismatches refused",
        description="Embed the example corpus with the bundled model, stamp the index, run the "
        "example queries, then show embedders under other contracts being refused.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--corpus", type=Path, default=_EXAMPLES / "corpus.jsonl")
    p.add_argument("--queries", type=Path, default=_EXAMPLES / "queries.jsonl")
    p.add_argument("--top-k", type=int, default=3)
    return parser


def _inspect(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    contract = contract_for(args.model, **_overrides(args))
    out = {"fingerprint": contract.fingerprint, "contract": contract.to_dict()}
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _demo(args: argparse.Namespace) -> int:
    import numpy as np

    from ctxemb_core import Embedder, IndexStamp, contract_for
    from ctxemb_core.errors import ContractMismatchError
    from ctxemb_core.eval.beir import document_text, load_jsonl_corpus

    corpus = load_jsonl_corpus(args.corpus)
    ids = list(corpus)
    queries = [json.loads(line)["text"] for line in args.queries.read_text().splitlines() if line]

    contract = contract_for(args.model)
    embedder = Embedder(contract)
    print(f"contract  {contract.describe()}")
    vectors = embedder.embed_documents([document_text(corpus[i]) for i in ids])
    index_metadata = IndexStamp.from_embedder(embedder).to_metadata()
    print(
        f"indexed   {len(ids)} documents from {args.corpus.name}, "
        f"stamped {contract.fingerprint[:12]}"
    )

    def search(querier: Embedder, text: str) -> list[tuple[str, float]]:
        # The guard runs before any result leaves: the stamp is read from the index's metadata.
        IndexStamp.from_metadata(index_metadata).check_contract(querier.contract)
        scores = vectors @ querier.embed_query(text)
        top = np.argsort(-scores)[: args.top_k]
        return [(ids[i], float(scores[i])) for i in top]

    IndexStamp.from_metadata(index_metadata).verify(embedder)
    for q in queries:
        hits = ", ".join(f"{i} ({s:.3f})" for i, s in search(embedder, q))
        print(f"query     {q!r}\n  -> {hits}")

    print("\nThe same index asked through embedders under other contracts:")
    for label, other in (
        ("CLS pooling instead of mean", contract.with_(pooling="cls")),
        ("normalisation switched off", contract.with_(normalize=False)),
        ("an E5-style query prefix added", contract.with_(query_prefix="query: ")),
    ):
        try:
            search(Embedder(other), queries[0])
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
    handlers = {"inspect": _inspect, "demo": _demo}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            return handlers[args.command](args)
    except CtxembError as exc:
        print(f"ctxemb: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
