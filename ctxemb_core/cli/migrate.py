"""``ctxemb migrate``: a collection re-embedded under a new contract into a new collection, or
copied as it is into another store (``--to-store``) under its own contract."""

from __future__ import annotations

import argparse
from typing import Any

from ctxemb_core.cli.common import (
    PORT,
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
from ctxemb_core.cli.stores import (
    LABELS,
    STORES,
    open_store,
    scoped,
    store_args,
    store_options,
    where,
)
from ctxemb_core.errors import InvalidInputError

#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = (
    "run the same command again: it continues where it stopped (the source was not modified)"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "migrate",
        help="re-embed a collection under a new contract into a new collection",
        description="Copy every document into a new stamped collection, re-embedded under the "
        "source's contract with the changes given (or another --model). Resumable: a copy "
        "stopped half-way is refused by every command until the same migrate finishes it. The "
        "source is never modified.",
        epilog=examples(
            "ctxemb migrate --collection demo --to demo-128 --truncate-dim 128 --path ./chroma",
            "ctxemb migrate --collection demo --to demo-e5 --model ./e5-small --family e5",
            "ctxemb migrate --collection demo --path ./chroma --to demo --to-store pgvector "
            "--to-dsn postgresql://localhost/rag",
        ),
    )
    store_args(p)
    p.add_argument("--to", required=True, help="name of the new collection")
    p.add_argument(
        "--to-store",
        choices=STORES,
        help="write the new collection into another store (default: the store the --to-* "
        "options name, else the source's): under the source's own contract its vectors and "
        "stamp are copied, nothing is re-embedded",
    )
    p.add_argument("--to-dsn", help="with --to-store pgvector: its connection string")
    p.add_argument("--to-schema", help="with --to-store pgvector: the table's schema (public)")
    p.add_argument("--to-path", help="with --to-store chroma: an embedded folder")
    p.add_argument("--to-host", help="with --to-store chroma: a server's host")
    p.add_argument("--to-port", type=PORT, help="with --to-store chroma and --to-host: its port")
    p.add_argument("--to-qdrant-path", help="with --to-store qdrant: a local-mode folder")
    p.add_argument("--to-qdrant-url", help="with --to-store qdrant: a server's URL")
    p.add_argument(
        "--reembed",
        action="store_true",
        help="re-embed every document even under the source's own contract",
    )
    p.add_argument("--model", help="the target model (default: the source's model)")
    p.add_argument("--batch-size", type=POSITIVE, default=256, help="documents per write (≥ 1)")
    open_sample_arg(p)
    remote_args(p)
    contract_args(p)


#: The target's options, by the store they belong to.
_TARGET_OPTIONS = {
    "pgvector": ("to_dsn", "to_schema"),
    "chroma": ("to_path", "to_host", "to_port"),
    "qdrant": ("to_qdrant_path", "to_qdrant_url"),
}


def _target(args: argparse.Namespace) -> tuple[Any, argparse.Namespace] | None:
    """The other store ``--to-store`` (or the ``--to-*`` options) names, its options checked,
    or ``None``: an option of one store is never taken for another's, nor ignored."""
    given = {
        store: [o for o in names if getattr(args, o) is not None]
        for store, names in _TARGET_OPTIONS.items()
    }
    naming = [store for store, options in given.items() if options]
    if args.to_store is None:
        if len(naming) > 1:
            raise InvalidInputError(
                " and ".join(f"{_flag(given[s][0])} ({LABELS[s]})" for s in naming)
                + " name two target stores: give the options of one"
            )
        if not naming:
            return None
        args.to_store = naming[0]
    for store in naming:
        if store != args.to_store:
            raise InvalidInputError(
                f"{_flag(given[store][0])} is a {LABELS[store]} option; --to-store "
                f"{args.to_store} takes "
                + ", ".join(_flag(o) for o in _TARGET_OPTIONS[args.to_store])
            )
    where = argparse.Namespace(
        path=args.to_path,
        host=args.to_host,
        port=args.to_port,
        dsn=args.to_dsn,
        schema=args.to_schema,
        qdrant_path=args.to_qdrant_path,
        qdrant_url=args.to_qdrant_url,
        store=args.to_store,
    )
    options = store_options(args.to_store)
    options.check_arguments(where)
    return options, where


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def run(args: argparse.Namespace) -> int:
    given = given_contract(args)
    target_store = _target(args)
    if args.to == args.collection and target_store is None:
        raise InvalidInputError(
            f"--to {args.to!r} is the source collection; migrate writes a new collection and "
            "never modifies the source: pass another name (or --to-store for another store)"
        )
    with open_store(args, create=False) as (adapter, client):
        source_contract = adapter.stamped_contract(client, args.collection)
        source = adapter.open_collection(
            client, args.collection, source_contract, create=False, **open_kwargs(args)
        )
        target = given or changed(source_contract, overrides(args))
        if target_store is None:
            done = adapter.migrate(
                source,
                embedder(args, target),
                args.to,
                batch_size=args.batch_size,
                reembed=args.reembed,
            )
            print(f"{args.to}: {done.count()} documents in {where(args)} under {target.describe()}")
        else:
            options, to = target_store
            into = scoped(options.adapter(), options, to)
            into.check_name(args.to)
            other = options.connect(to, create=True)
            try:
                done = into.migrate(
                    source,
                    embedder(args, target),
                    args.to,
                    client=other,
                    batch_size=args.batch_size,
                    reembed=args.reembed,
                )
                print(
                    f"{args.to}: {done.count()} documents in {where(to)} under "
                    f"{target.describe()} (from {where(args)})"
                )
            finally:
                other.close()
    diff = source_contract.diff(target)
    carried = not diff and not args.reembed and target_store is not None
    print(
        f"changed: {diff}" + ("; vectors and stamp copied, nothing re-embedded" if carried else "")
    )
    return 0
