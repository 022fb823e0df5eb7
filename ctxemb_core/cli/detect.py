"""``ctxemb detect``: which contract wrote an index of unknown provenance."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxemb_core.cli.common import POSITIVE, contract_args, examples, overrides
from ctxemb_core.cli.stores import open_store, store_args, where
from ctxemb_core.errors import InvalidInputError

_DESCRIPTION = """\
Re-embed a sample of a collection's stored documents under candidate contracts -- each model's
own recipe with every pooling, normalisation on and off, no document prefix and each known
family's, truncated to the stored width -- and print each candidate's agreement with the stored
vectors (min and median cosine, length ratio), best first; --json prints the whole report as
one JSON object instead (every candidate, for scripts).
A match is conclusive when one recipe reproduces every sampled record and no recipe with other
document vectors does; the query side is never observable from stored documents and is stated
as an assumption. Contract options hold those fields fixed instead of varying them. --adopt
stamps an unstamped collection with a conclusive match (after open re-checks a sample). Exit
code 0 when conclusive, 1 when not, 2 on an error (--adopt on an inconclusive match included:
nothing is written)."""

# Contract options that hold a candidate field fixed; --family fixes both prefixes.
_KEPT = {
    "pooling": ("pooling",),
    "normalize": ("normalize",),
    "query_prefix": ("query_prefix",),
    "document_prefix": ("document_prefix",),
    "family": ("query_prefix", "document_prefix"),
    "truncate_dim": ("truncate_dim",),
    "precision": ("precision",),
}
_ROWS = 12  # candidates shown in the table; --json has them all


#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = (
    "detect only reads (--adopt writes the stamp in one step, after the report); run it again"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "detect",
        help="find which contract wrote an existing collection (stamped or not)",
        description=_DESCRIPTION,
        epilog=examples(
            "ctxemb detect --collection legacy --path ./chroma",
            "ctxemb detect --collection legacy --path ./chroma --model ./e5-small --adopt",
        ),
    )
    store_args(p)
    p.add_argument(
        "--model",
        action="append",
        help="a candidate model folder or name (repeatable; default: the stamp's contract, "
        "else the bundled all-MiniLM-L6-v2, Chroma's default model)",
    )
    p.add_argument(
        "--sample",
        type=POSITIVE,
        default=32,
        help="stored documents to re-embed (≥ 1; the newest half and a random half)",
    )
    p.add_argument(
        "--adopt",
        action="store_true",
        help="stamp the collection with the best contract when the match is conclusive",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as one JSON object (every candidate; 'adopted' says whether "
        "--adopt stamped) instead of the table",
    )
    contract_args(p)


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.detect import DEFAULT_MODEL, model_contract

    fixed = overrides(args)
    keep = sorted({f for option in fixed for f in _KEPT.get(option, ())})
    models = [model_contract(m, **fixed) for m in args.model or ()]
    if fixed and not models:
        models = [model_contract(DEFAULT_MODEL, **fixed)]
    # Read-only unless --adopt: a mistyped --path never becomes a new, empty store.
    with open_store(args, create=False) as (adapter, client):
        report = adapter.detect(client, args.collection, *models, sample=args.sample, keep=keep)
        if not args.json:
            for line in _table(args.collection, report, where(args)):
                print(line)
        adopted, refused = False, None
        if args.adopt:
            try:
                adopted = _adopt(args, adapter, client, report)
            except InvalidInputError as exc:
                refused = exc  # raised after the report: --json output stays one whole object
    if args.json:
        # Indented like verify's report: stdout is exactly one JSON document (jq, json.load).
        print(
            json.dumps(
                {
                    "collection": args.collection,
                    "store": where(args),
                    "adopted": adopted,
                    **report.to_dict(),
                },
                indent=2,
            )
        )
    if refused is not None:
        raise refused
    return 0 if report.conclusive else 1


def _adopt(args: argparse.Namespace, adapter: Any, client: Any, report: Any) -> bool:
    """Stamp the collection with a conclusive match; ``False`` if it already carries it."""
    from ctxemb_core.embedder import Embedder

    best = report.best
    if not report.conclusive or best is None:
        raise InvalidInputError(
            f"--adopt: the match is inconclusive, nothing was written; unknown: "
            f"{'; '.join(report.unknown) or 'no candidate'}"
        )
    if report.stamped is not None:
        if report.stamp_match:
            if not args.json:  # the JSON's "adopted": false says it
                print(f"already stamped with {report.stamped.describe()}: nothing to adopt")
            return False
        fields = ", ".join(report.stamped.diff(best.contract).fields) or "the query side"
        raise InvalidInputError(
            f"--adopt: {args.collection!r} is stamped with another contract (it differs from "
            f"the best match in {fields}); ctxemb never overwrites a stamp: re-embed with "
            "ctxemb migrate, or open it under its stamp"
        )
    adapter.open_collection(
        client,
        args.collection,
        Embedder(best.contract),
        create=False,
        adopt=True,
        sample=args.sample,
    )
    if not args.json:
        print(f"adopted: {args.collection!r} stamped with {best.contract.describe()}")
    return True


def _table(name: str, report: Any, store: str) -> list[str]:
    """The candidates, best first, one distinct document-side recipe per row."""
    total = "?" if report.records is None else report.records
    precision = report.precision.value if report.precision else "?"
    lines = [
        f"collection {name!r}: {report.sampled} of {total} records sampled, {report.checked} "
        f"re-embedded (width {report.width or '?'}, {precision}) in {store}; models: "
        + ", ".join(report.models)
    ]
    ranked = report.ranked
    several = len(report.models) > 1
    lines.append(f"{'#':>3}  {'agree':>7}  {'min cos':>8}  {'median':>8}  {'length':>7}  recipe")
    for rank, c in enumerate(ranked[:_ROWS], start=1):
        same = sum(1 for x in report.candidates if x.represented_by(c))
        recipe = (f"{c.contract.model}: " if several else "") + c.label
        if same:
            recipe += f" (+{same} indistinguishable)"
        lines.append(
            f"{rank:>3}  {c.agreeing:>3}/{c.checked:<3}  {c.min_cosine:8.5f}  "
            f"{c.median_cosine:8.5f}  {c.norm_ratio:7.4f}  {recipe}"
        )
    if len(ranked) > _ROWS:
        lines.append(f"     … {len(ranked) - _ROWS} more recipes with --json")
    best = report.best
    if report.conclusive and best is not None:
        lines.append(f"conclusive: {best.contract.describe()}")
    else:
        lines.append("inconclusive")
    if report.stamp_match is not None:
        lines.append(
            "the stamp's contract is the best match"
            if report.stamp_match
            else "the stamp's contract is NOT the best match"
        )
    label = "assumed / not observable:" if report.conclusive else "unknown:"
    lines += [label, *(f"  - {u}" for u in report.unknown)]
    return lines
