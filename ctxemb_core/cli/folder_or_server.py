"""The command-line options of a store that is an embedded folder or a server: ``--path``, or
``--host`` and ``--port``.

Chroma is one (``PersistentClient`` or ``HttpClient``), as a store kept in a folder with a
server of its own would be. Its adapter's :class:`~ctxemb_core.cli.stores.StoreOptions` calls
these with its defaults and its words (``store``: "Chroma"), so every such store checks the
three options alike: two stores named at once are refused, and so is a port without a host.

Example:
    >>> import argparse
    >>> args = argparse.Namespace(path=None, host=None, port=None)
    >>> check_arguments(args, "./chroma", 8000, "Chroma")
    >>> flags(args)
    '--path ./chroma'
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ctxemb_core.cli.stores import PORT
from ctxemb_core.errors import InvalidInputError

__all__ = ["absent", "add_arguments", "check_arguments", "flags", "location"]


def add_arguments(
    parser: argparse.ArgumentParser, default_path: str, default_port: int, demo_path: str | None
) -> None:
    """``--path``, ``--host`` and ``--port``; for the demo (``demo_path``), its own folder and no
    server shown."""
    # --path and --port have no argparse default: check_arguments must see which were given.
    if demo_path is not None:
        parser.add_argument("--path", help=f"embedded store folder (default: {demo_path})")
        parser.add_argument("--host", help=argparse.SUPPRESS)
        parser.add_argument("--port", type=PORT, help=argparse.SUPPRESS)
        return
    parser.add_argument("--path", help=f"embedded store folder (default: {default_path})")
    parser.add_argument("--host", help="a store server's host (instead of --path)")
    parser.add_argument(
        "--port", type=PORT, help=f"the server's port, with --host (default: {default_port})"
    )


def check_arguments(
    args: argparse.Namespace, default_path: str, default_port: int, store: str
) -> None:
    """``--path``, ``--host`` and ``--port`` checked together, their defaults filled in.

    A port alone is refused rather than taken to mean a server on 127.0.0.1: without
    ``--host`` the store is the embedded folder, and a server that was meant but is not named
    must not turn into a quiet read of the default folder (or a write into a new one).
    """
    if args.host is not None and args.path is not None:
        raise InvalidInputError(
            f"--host {args.host} and --path {args.path} name two stores: give --host (and "
            f"--port) for a {store} server, or --path for an embedded folder"
        )
    if args.port is not None and args.host is None:
        raise InvalidInputError(
            f"--port {args.port} needs --host: a port belongs to a server (e.g. --host "
            f"127.0.0.1 --port {args.port}); for an embedded folder give --path alone"
        )
    if args.host is None:
        if args.path is None:
            args.path = default_path
    elif args.port is None:
        args.port = default_port


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
