"""``ctxemb restamp``: a query-side contract change accepted on a stamped collection."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ctxemb_core.cli.common import changed, contract_args, examples, flag, overrides
from ctxemb_core.cli.stores import open_store, store_args, where
from ctxemb_core.errors import InvalidInputError

#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = (
    "the stamp is rewritten in one step, so the collection has the old stamp or the new "
    "one; run ctxemb restamp again to be sure"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "restamp",
        help="accept a query-side contract change on a stamped collection, deliberately",
        description="Rewrite a collection's stamp for a contract whose change leaves the stored "
        "documents valid: a new query prefix, a separate query encoder, another name for the "
        "same weights. The new contract is the stamp's with the contract options applied (or "
        "the --contract file). Any change that needs the documents re-embedded is refused: "
        "use ctxemb migrate. Prints the old and new fingerprints and each changed field.",
        epilog=examples(
            "ctxemb restamp --collection demo --path ./chroma --query-prefix 'query: '",
            "ctxemb restamp --collection demo --host 127.0.0.1 --port 8000 --contract new.json",
        ),
    )
    store_args(p)
    p.add_argument(
        "--contract",
        type=Path,
        metavar="FILE",
        help='the new contract as JSON (what ctxemb inspect prints under "contract"), '
        "instead of contract options",
    )
    contract_args(p)


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.contract import load_contract

    given = overrides(args)
    if args.contract is not None and given:
        options = ", ".join(flag(k) for k in given)
        raise InvalidInputError(
            f"--contract and {options} both say what the new contract is: give the file, or "
            "the contract options to change in the stamp's contract"
        )
    new = load_contract(args.contract) if args.contract is not None else None
    if new is None and not given:
        raise InvalidInputError(
            "restamp needs the new contract: contract options to change in the stamp's "
            "contract (e.g. --query-prefix 'query: ') or --contract FILE"
        )
    with open_store(args, create=False) as (adapter, client):
        old = adapter.stamped_contract(client, args.collection)
        new = new or changed(old, given)
        report = adapter.restamp(client, args.collection, new)
        store = where(args)
    if not report.changed:
        print(
            f"{args.collection}: unchanged, fingerprint {report.old_fingerprint[:12]}, in {store}"
        )
        return 0
    print(
        f"{args.collection}: {report.old_fingerprint[:12]} -> "
        f"{report.new_fingerprint[:12]} ({report.kind.value}) in {store}"
    )
    for change in report.changes:
        print(f"  {change.field}: {change.index!r} -> {change.caller!r}")
    return 0
