"""``ctxemb alias`` (create, show, list): a stable name for an index and its contract."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxemb_core.cli.common import examples
from ctxemb_core.cli.stores import catalog_of, open_store, store_args, where
from ctxemb_core.errors import InvalidInputError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "alias",
        help="a stable name for an index: create, show or list aliases",
        description="An alias names one index and the contract its stamp carries; "
        "applications open the alias, and ctxemb upgrade moves it to a new index without "
        "downtime. The alias lives in the store itself.",
        epilog=examples(
            "ctxemb alias create docs --collection docs-v1 --path ./chroma",
            "ctxemb alias show docs --path ./chroma",
            "ctxemb alias list --dsn postgresql://localhost/rag",
        ),
    )
    p.add_argument("action", choices=["create", "show", "list"], help="what to do")
    p.add_argument("alias_name", metavar="NAME", nargs="?", help="the alias (not for list)")
    store_args(p, collection_required=False)
    p.add_argument("--json", action="store_true", help="print the alias record as JSON")


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.aliases import create_alias, read_alias

    if args.action != "list" and not args.alias_name:
        raise InvalidInputError(f"ctxemb alias {args.action} needs the alias's name")
    if args.action == "create" and not args.collection:
        raise InvalidInputError("ctxemb alias create needs --collection: the index it names")
    with open_store(args, create=False) as (adapter, client):
        catalog = catalog_of(adapter, client)
        store = where(args)
        if args.action == "list":
            names = catalog.aliases.names()
            records = [read_alias(catalog, n) for n in names]
            if args.json:
                print(json.dumps([r.to_dict() for r in records], indent=2))
            for r in [] if args.json else records:
                print(f"{r.name} -> {r.target.index} [{r.target.fingerprint[:12]}] {r.state.value}")
            if not names and not args.json:
                print(f"no aliases in {store}")
            return 0
        if args.action == "create":
            record = create_alias(catalog, args.alias_name, args.collection)
        else:
            record = read_alias(catalog, args.alias_name)
    print(json.dumps(record.to_dict(), indent=2) if args.json else record.describe())
    return 0
