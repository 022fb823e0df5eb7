"""Chroma's options on the ``ctxemb`` command line: ``--path``, or ``--host`` and ``--port``.

The module the CLI's store table names for ``--store chroma``; it follows the protocol
:class:`ctxemb_core.cli.stores.StoreOptions`: the options of a store that is a folder or a
server (:mod:`ctxemb_core.cli.folder_or_server`) with Chroma's defaults, and a client of the
store they name.
"""

from __future__ import annotations

import argparse
from typing import Any

import ctxemb_core.cli.folder_or_server as folder_or_server
from ctxemb_chroma._connect import connect as _connect
from ctxemb_core.errors import InvalidInputError

#: Where a store command looks without --path or --host, and the port of a --host without one.
DEFAULT_PATH = "./chroma"
DEFAULT_PORT = 8000
#: The demo's own store, apart from ./chroma so that it never mixes with the user's.
DEMO_PATH = "./ctxemb-demo-chroma"


def add_arguments(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """``--path``, ``--host`` and ``--port`` (the demo's: its own folder, no server shown)."""
    folder_or_server.add_arguments(parser, DEFAULT_PATH, DEFAULT_PORT, DEMO_PATH if demo else None)


def check_arguments(args: argparse.Namespace, *, demo: bool = False) -> None:
    """``--path``, ``--host`` and ``--port`` checked together, their defaults filled in
    (:func:`ctxemb_core.cli.folder_or_server.check_arguments`)."""
    default = DEMO_PATH if demo else DEFAULT_PATH
    folder_or_server.check_arguments(args, default, DEFAULT_PORT, "Chroma")


def defaults() -> dict[str, str]:
    """The defaults :func:`check_arguments` fills in, as a help text shows them."""
    return {"path": DEFAULT_PATH, "port": str(DEFAULT_PORT)}


absent = folder_or_server.absent
flags = folder_or_server.flags
location = folder_or_server.location


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
