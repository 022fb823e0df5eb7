"""Chroma's options on the ``ctxemb`` command line: ``--path``, or ``--host`` and ``--port``.

The module the CLI's store table names for ``--store chroma``; it follows the protocol
:class:`ctxemb_core.cli.stores.StoreOptions`: it adds the options to a command's parser (their
checks are core's :class:`~ctxemb_core.cli.stores.FolderOrServer`'s) and connects to
the store they name.
"""

from __future__ import annotations

import argparse
from typing import Any

from ctxemb_chroma._connect import connect as _connect
from ctxemb_core.cli.stores import PORT, FolderOrServer
from ctxemb_core.errors import InvalidInputError

#: Where a store command looks without --path or --host, and the port of a --host without one.
DEFAULT_PATH = "./chroma"
DEFAULT_PORT = 8000
#: The demo's own store, apart from ./chroma so that it never mixes with the user's.
DEMO_PATH = "./ctxemb-demo-chroma"


def add_arguments(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """``--path``, ``--host`` and ``--port`` (the demo's: its own folder, no server shown)."""
    # --path and --port have no argparse default: check_arguments must see which were given.
    if demo:
        parser.add_argument("--path", help=f"embedded store folder (default: {DEMO_PATH})")
        parser.add_argument("--host", help=argparse.SUPPRESS)
        parser.add_argument("--port", type=PORT, help=argparse.SUPPRESS)
        return
    parser.add_argument("--path", help=f"embedded store folder (default: {DEFAULT_PATH})")
    parser.add_argument("--host", help="a store server's host (instead of --path)")
    parser.add_argument(
        "--port", type=PORT, help=f"the server's port, with --host (default: {DEFAULT_PORT})"
    )


def _options() -> FolderOrServer:
    """Those of every store that is a folder or a server, with this module's defaults as they
    are at the call (so a default changed here is the one every command fills in and shows)."""
    return FolderOrServer("Chroma", DEFAULT_PATH, DEFAULT_PORT, DEMO_PATH)


def check_arguments(args: argparse.Namespace, *, demo: bool = False) -> None:
    _options().check_arguments(args, demo=demo)


def defaults() -> dict[str, str]:
    return _options().defaults()


def absent(args: argparse.Namespace) -> bool:
    return _options().absent(args)


def flags(args: argparse.Namespace) -> str:
    return _options().flags(args)


def location(args: argparse.Namespace) -> str:
    return _options().location(args)


def connect(args: argparse.Namespace, *, create: bool) -> Any:
    """A client of the store the checked options name (see :func:`ctxemb_chroma.connect`)."""
    return _connect(path=args.path, host=args.host, port=args.port, create=create)


def ray_session(args: argparse.Namespace, name: str) -> Any:
    """Collection ``name`` on the server, as every Ray actor reaches it (``ctxemb index
    --ray``); an embedded folder is one process's, so ``--ray`` needs ``--host``."""
    if args.host is None:
        raise InvalidInputError(
            "--ray writes to a Chroma server every actor can reach: give --host and --port "
            "(an embedded folder is one process's)"
        )
    from ctxemb_chroma._ray import ServerCollection

    return ServerCollection(args.host, args.port, name)


def adapter() -> Any:
    """The Chroma adapter: ``open_collection``, ``verify``, ``migrate``, ``restamp``, ..."""
    import ctxemb_chroma

    return ctxemb_chroma
