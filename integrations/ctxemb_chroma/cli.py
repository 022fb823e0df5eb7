"""Chroma's options on the ``ctxemb`` command line: ``--path``, or ``--host`` and ``--port``.

The module the CLI's store table names for ``--store chroma``; it follows the protocol
:class:`ctxemb_core.cli.stores.StoreOptions`: it adds the options to a command's parser, checks
them together (filling in the defaults) and connects to the store they name.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from ctxemb_chroma._connect import connect as _connect
from ctxemb_core.cli.stores import PORT
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


def check_arguments(args: argparse.Namespace, *, demo: bool = False) -> None:
    """``--path``, ``--host`` and ``--port`` checked together, their defaults filled in.

    A port alone is refused rather than taken to mean a server on 127.0.0.1: without
    ``--host`` the store is the embedded folder, and a server that was meant but is not named
    must not turn into a quiet read of ``./chroma`` (or a write into a new one).
    """
    if args.host is not None and args.path is not None:
        raise InvalidInputError(
            f"--host {args.host} and --path {args.path} name two stores: give --host (and "
            "--port) for a Chroma server, or --path for an embedded folder"
        )
    if args.port is not None and args.host is None:
        raise InvalidInputError(
            f"--port {args.port} needs --host: a port belongs to a server (e.g. --host "
            f"127.0.0.1 --port {args.port}); for an embedded folder give --path alone"
        )
    if args.host is None:
        if args.path is None:
            args.path = DEMO_PATH if demo else DEFAULT_PATH
    elif args.port is None:
        args.port = DEFAULT_PORT


def defaults() -> dict[str, str]:
    """The defaults :func:`check_arguments` fills in, as a help text shows them."""
    return {"path": DEFAULT_PATH, "port": str(DEFAULT_PORT)}


def absent(args: argparse.Namespace) -> bool:
    """Whether ``--path`` names a folder that does not exist (and no ``--host`` is given)."""
    return bool(not args.host and args.path and not Path(args.path).exists())


def flags(args: argparse.Namespace) -> str:
    """The store options that name the store ``args`` point at, as a shell would take them."""
    if args.host is not None:
        return f"--host {shlex.quote(args.host)} --port {args.port}"
    return f"--path {shlex.quote(str(args.path))}"


def location(args: argparse.Namespace) -> str:
    """The folder, or ``host:port`` of the server."""
    return str(args.path or f"{args.host}:{args.port}")


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
