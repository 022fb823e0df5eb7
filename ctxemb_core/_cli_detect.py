"""``ctxemb detect``: which contract wrote an index of unknown provenance."""

from __future__ import annotations

import argparse
from typing import Any

from ctxemb_core.errors import InvalidInputError


def add_parser(sub: Any) -> None:
    sub.add_parser(
        "detect",
        help="find which contract wrote an existing collection (not built yet)",
    )


def run(args: argparse.Namespace) -> int:
    raise InvalidInputError("ctxemb detect is not built yet")
