"""Qdrant's options on the ``ctxemb`` command line: ``--qdrant-path DIR`` or ``--qdrant-url URL``.

The module the CLI's store table names for ``--store qdrant``; it follows the protocol
:class:`ctxemb_core.cli.stores.StoreOptions`. A server's API key is read from
``$CTXEMB_QDRANT_API_KEY`` only (a command line is seen by every user of the machine, and kept in
shell histories), and is never shown: not in ``flags``, ``location`` nor any error.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Any

from ctxemb_core.cli.stores import DEFAULT_STORE, LABELS
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.redact import redact_dsn
from ctxemb_qdrant._store import DEFAULT_PATH
from ctxemb_qdrant._store import connect as _connect

#: The environment variable a server's API key is read from.
API_KEY_ENV = "CTXEMB_QDRANT_API_KEY"


def add_arguments(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """``--qdrant-path`` and ``--qdrant-url`` (the demo runs on Chroma: nothing for it)."""
    if demo:
        return
    parser.add_argument(
        "--qdrant-path",
        help=f"a Qdrant local-mode folder (default with --store qdrant: {DEFAULT_PATH}); "
        "selects --store qdrant",
    )
    parser.add_argument(
        "--qdrant-url",
        help=f"a Qdrant server's URL (its API key from ${API_KEY_ENV}); selects --store qdrant",
    )


def check_arguments(args: argparse.Namespace, *, demo: bool = False) -> None:
    """One of ``--qdrant-path`` and ``--qdrant-url``; the path's default filled in."""
    if demo:
        raise InvalidInputError(
            f"the demo runs on {LABELS[DEFAULT_STORE]}: leave out --store qdrant"
        )
    path, url = getattr(args, "qdrant_path", None), getattr(args, "qdrant_url", None)
    if path is not None and url is not None:
        raise InvalidInputError(
            "--qdrant-path and --qdrant-url name two stores: give --qdrant-url for a server, "
            "or --qdrant-path for a local-mode folder"
        )
    if url is None and path is None:
        args.qdrant_path = DEFAULT_PATH
    args.qdrant_url = url


def defaults() -> dict[str, str]:
    return {"qdrant_path": DEFAULT_PATH}


def absent(args: argparse.Namespace) -> bool:
    """Whether ``--qdrant-path`` names a folder that does not exist (no URL given)."""
    path = getattr(args, "qdrant_path", None)
    return bool(not getattr(args, "qdrant_url", None) and path and not Path(path).exists())


def flags(args: argparse.Namespace) -> str:
    if args.qdrant_url is not None:
        return f"--store qdrant --qdrant-url {shlex.quote(redact_dsn(args.qdrant_url))}"
    return f"--store qdrant --qdrant-path {shlex.quote(str(args.qdrant_path))}"


def location(args: argparse.Namespace) -> str:
    """The folder, or the server's URL (a password in it masked)."""
    return redact_dsn(args.qdrant_url) if args.qdrant_url else str(args.qdrant_path)


def connect(args: argparse.Namespace, *, create: bool) -> Any:
    """A client of the store the checked options name (see :func:`ctxemb_qdrant.connect`)."""
    if args.qdrant_url is not None:
        return _connect(url=args.qdrant_url, api_key=os.environ.get(API_KEY_ENV) or None)
    return _connect(args.qdrant_path, create=create)


def adapter() -> Any:
    """The Qdrant adapter: ``open_collection``, ``verify``, ``migrate``, ``restamp``, ..."""
    import ctxemb_qdrant

    return ctxemb_qdrant
