"""``ctxemb verify``: a collection checked against a contract, with a JSON report of what was
proven and what was not."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ctxemb_core.cli.advice import Invocation
from ctxemb_core.cli.common import (
    COUNT,
    caller_contract,
    changed,
    contract_args,
    examples,
    given_contract,
    overrides,
    remote_args,
    remote_options,
)
from ctxemb_core.cli.stores import (
    alias_arg,
    collection_or_alias,
    open_store,
    resolve_alias,
    store_args,
    where,
)

_DESCRIPTION = """\
Check a collection against a contract (the given one, else the collection's own) and print a JSON
report whose "checked" and "not_checked" lists say what was proven and what was not. The checks:
the stamp is there and readable; its fingerprint equals the caller's (each differing field
listed); this encoder re-embeds the stamp's canary probes to the stored canary vectors; the
store's own embedding setting agrees with the stamp; and stored records re-embed to their stored
vectors -- a sample (--sample N: the newest half and a random half; the report gives the chance
that it finds one altered older record) or every record (--all: read page by page, progress on
stderr). Not checked: records outside the sample, records stored without their text (they cannot
be re-embedded), record metadata (not part of the contract), and anything written after the
check. With --alias, the index the alias serves now is checked against the contract the alias
records for it (an index restamped around the alias fails here). Exit code 0 when every check
passes; 1 when any fails, with one line on stderr naming what failed; 2 on an error."""


#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = "verify only reads, so nothing was changed; run it again to check from the start"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="check a collection against a contract and print a report",
        description=_DESCRIPTION,
        epilog=examples(
            "ctxemb verify --collection demo --path ./chroma",
            "ctxemb verify --collection demo --path ./chroma --all",
            "ctxemb verify --alias docs --path ./chroma",
            "ctxemb verify --collection demo --host 127.0.0.1 --port 8000 --sample 0",
        ),
    )
    store_args(p, collection_required=False)
    alias_arg(p)
    p.add_argument(
        "--model",
        help="the caller's model (default: the collection's own contract; with --alias, the one "
        "the alias records)",
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--sample",
        type=COUNT,
        default=32,
        help="stored documents to re-embed and compare (0: stamp and canary only)",
    )
    scope.add_argument(
        "--all", action="store_true", help="re-embed and compare every stored document"
    )
    remote_args(p)
    contract_args(p)


def run(args: argparse.Namespace) -> int:
    collection_or_alias(args)
    given = given_contract(args)
    with open_store(args, create=False) as (adapter, client):
        record = resolve_alias(args, adapter, client)
        if record is not None and given is None:
            contract = changed(record.target.contract, overrides(args))
        else:
            contract = caller_contract(args, given, adapter, client)
        stored = adapter.stored_collection(client, args.collection)
        # --all reads every record in pages, a progress bar on stderr (stdout stays the JSON).
        scope = {"all": True, "progress": True} if args.all else {"sample": args.sample}
        remote = remote_options(args)
        if remote:  # the canary and the records re-embedded by that server
            from ctxemb_core.embedder import Embedder

            checker: Any = Embedder(contract, **remote)
        else:
            checker = contract
        report = adapter.verify(stored, checker, **scope)
        store = where(args)
    out = {**report.to_dict(), "store": store}
    if record is not None:
        out["alias"] = {
            "name": record.name,
            "generation": record.generation,
            "index": args.collection,
        }
    print(json.dumps(out, indent=2))
    if report.ok:
        return 0
    run = Invocation.of(args)
    chosen = run.contract_given() if run is not None else []
    print(f"ctxemb: error: verify failed: {_failures(report, chosen)}", file=sys.stderr)
    return 1


def _failures(report: Any, given: list[str] | None = None) -> str:
    """What a failed verify report found, and the next step for each, in one line."""
    found = []
    if not report.stamped:
        found.append("the collection carries no ctxemb stamp (index it through ctxemb)")
    elif report.damaged:
        found.append(f"its stamp is damaged ({report.damaged})")
    elif not report.fingerprint_match:
        fields = ", ".join(c.field for c in report.diff.changes) if report.diff else "?"
        own = f"leave out {' and '.join(given)}" if given else "use the index's own contract"
        found.append(
            f"the contract differs in {fields} ({own} to check against the collection's own "
            "contract, or re-embed it into a new collection with ctxemb migrate)"
        )
    elif report.canary_cosine is None or report.canary_cosine < report.tolerance:
        found.append(
            f"encoder drift: the canary re-embeds with cosine {report.canary_cosine} < "
            f"{report.tolerance} (check library versions, backend and weights)"
        )
    if report.configuration not in (None, "match"):
        found.append(
            f"the store's embedding setting disagrees with the stamp ({report.configuration})"
        )
    if report.bad_ids:
        shown = ", ".join(report.bad_ids[:3]) + (" …" if len(report.bad_ids) > 3 else "")
        found.append(
            f"{len(report.bad_ids)} of {report.sample_size} checked records carry vectors this "
            f"contract did not make ({shown}; re-embed them through ctxemb)"
        )
    return "; ".join(found) + "; the report on stdout has the details"
