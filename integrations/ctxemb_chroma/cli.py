"""Chroma's options on the ``ctxemb`` command line, ``--path``, or ``--host`` and ``--port``, for
``--store chroma`` (the protocol :class:`ctxemb_core.cli.stores.StoreOptions`): declared here,
checked and said back by core's :class:`~ctxemb_core.cli.stores.FolderOrServer`."""

from __future__ import annotations

import argparse

from ctxemb_core.cli.stores import PORT, FolderOrServer, options_of

#: Where a store command looks without --path or --host, and the port of a --host without one.
DEFAULT_PATH = "./chroma"
DEFAULT_PORT = 8000
#: The demo's own store, apart from ./chroma so that it never mixes with the user's.
DEMO_PATH = "./ctxemb-demo-chroma"


def _options() -> FolderOrServer:
    """A folder-or-server store's options, from this module's defaults at the call."""
    return FolderOrServer("Chroma", DEFAULT_PATH, DEFAULT_PORT, DEMO_PATH)


# check_arguments, defaults, absent, flags, location, connect, ray_session: _options()'s;
# adapter().
__getattr__ = options_of(__name__, _options)


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
