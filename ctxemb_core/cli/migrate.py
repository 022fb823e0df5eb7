"""``ctxemb migrate``: a collection re-embedded under a new contract into a new collection."""

from __future__ import annotations

import argparse
from typing import Any

from ctxemb_core.cli.common import (
    POSITIVE,
    changed,
    contract_args,
    embedder,
    examples,
    given_contract,
    open_kwargs,
    open_sample_arg,
    overrides,
    remote_args,
)
from ctxemb_core.cli.stores import open_store, store_args
from ctxemb_core.errors import InvalidInputError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "migrate",
        help="re-embed a collection under a new contract into a new collection",
        description="Copy every document into a new stamped collection, re-embedded under the "
        "source's contract with the changes given (or another --model). Resumable; the source "
        "is never modified.",
        epilog=examples(
            "ctxemb migrate --collection demo --to demo-128 --truncate-dim 128 --path ./chroma",
            "ctxemb migrate --collection demo --to demo-e5 --model ./e5-small --family e5",
        ),
    )
    store_args(p)
    p.add_argument("--to", required=True, help="name of the new collection")
    p.add_argument("--model", help="the target model (default: the source's model)")
    p.add_argument("--batch-size", type=POSITIVE, default=256, help="documents per write (≥ 1)")
    open_sample_arg(p)
    remote_args(p)
    contract_args(p)


def run(args: argparse.Namespace) -> int:
    given = given_contract(args)
    if args.to == args.collection:
        raise InvalidInputError(
            f"--to {args.to!r} is the source collection; migrate writes a new collection and "
            "never modifies the source: pass another name"
        )
    with open_store(args, create=False) as (adapter, client):
        source_contract = adapter.stamped_contract(client, args.collection)
        source = adapter.open_collection(
            client, args.collection, source_contract, create=False, **open_kwargs(args)
        )
        target = given or changed(source_contract, overrides(args))
        done = adapter.migrate(source, embedder(args, target), args.to, batch_size=args.batch_size)
        print(f"{args.to}: {done.count()} documents under {target.describe()}")
    print(f"changed: {source_contract.diff(target)}")
    return 0
