"""``ctxemb inspect``: the contract a model folder or name resolves to, as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxemb_core.cli.common import DEFAULT_MODEL, contract_args, examples, overrides

#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = "inspect only reads, so nothing was changed"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="print the contract derived from a model folder or name, as JSON",
        description="Derive a model's contract (pooling, prefixes, normalisation, digest) and "
        "print it as JSON with its fingerprint.",
        epilog=examples(
            f"ctxemb inspect {DEFAULT_MODEL}",
            "ctxemb inspect ./my-bert --pooling cls --name acme/bert",
        ),
    )
    p.add_argument("model", help=f"a folder path or an offline name such as {DEFAULT_MODEL}")
    contract_args(p)


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    contract = contract_for(args.model, **overrides(args))
    out = {"fingerprint": contract.fingerprint, "contract": contract.to_dict()}
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0
