"""The options of a store that is either a folder on this machine or a server: ``--path``, or
``--host`` and ``--port`` (Chroma's; a store such as Qdrant or LanceDB has the same pair).

A store adapter's module of CLI options (a :class:`~ctxemb_core.cli.stores.StoreOptions`)
declares the options itself, with its defaults in their help; :class:`FolderOrServer` checks
them together, fills in those defaults, and says the store they name back (``flags``,
``location``, ``absent``), the same for every such store.

Example:
    >>> options = FolderOrServer("Chroma", path="./chroma", port=8000, demo_path="./demo")
    >>> options.defaults()
    {'path': './chroma', 'port': '8000'}
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path

from ctxemb_core.errors import InvalidInputError

__all__ = ["FolderOrServer"]


@dataclass(frozen=True)
class FolderOrServer:
    """``--path``, ``--host`` and ``--port`` of one store (their defaults: ``path``, ``port``;
    the demo's own folder: ``demo_path``); ``store``: its name in messages."""

    store: str
    path: str
    port: int
    demo_path: str

    def check_arguments(self, args: argparse.Namespace, *, demo: bool = False) -> None:
        """``--path``, ``--host`` and ``--port`` checked together, their defaults filled in.

        A port alone is refused rather than taken to mean a server on 127.0.0.1: without
        ``--host`` the store is the embedded folder, and a server that was meant but is not
        named must not turn into a quiet read of the default folder (or a write into a new one).
        """
        if args.host is not None and args.path is not None:
            raise InvalidInputError(
                f"--host {args.host} and --path {args.path} name two stores: give --host (and "
                f"--port) for a {self.store} server, or --path for an embedded folder"
            )
        if args.port is not None and args.host is None:
            raise InvalidInputError(
                f"--port {args.port} needs --host: a port belongs to a server (e.g. --host "
                f"127.0.0.1 --port {args.port}); for an embedded folder give --path alone"
            )
        if args.host is None:
            if args.path is None:
                args.path = self.demo_path if demo else self.path
        elif args.port is None:
            args.port = self.port

    def defaults(self) -> dict[str, str]:
        """The defaults :meth:`check_arguments` fills in, as a help text shows them."""
        return {"path": self.path, "port": str(self.port)}

    def absent(self, args: argparse.Namespace) -> bool:
        """Whether ``--path`` names a folder that does not exist (and no ``--host`` is given)."""
        return bool(not args.host and args.path and not Path(args.path).exists())

    def flags(self, args: argparse.Namespace) -> str:
        """The store options that name the store ``args`` point at, as a shell would take them."""
        if args.host is not None:
            return f"--host {shlex.quote(args.host)} --port {args.port}"
        return f"--path {shlex.quote(str(args.path))}"

    def location(self, args: argparse.Namespace) -> str:
        """The folder, or ``host:port`` of the server."""
        return str(args.path or f"{args.host}:{args.port}")
