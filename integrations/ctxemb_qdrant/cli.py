"""Qdrant's options on the ``ctxemb`` command line: ``--qdrant-path DIR`` or ``--qdrant-url URL``
(the key from ``$CTXEMB_QDRANT_API_KEY``, never shown): core's
:class:`~ctxemb_core.cli.stores.FolderOrUrl`, the module the CLI's store table names for
``--store qdrant`` (the protocol :class:`ctxemb_core.cli.stores.StoreOptions`).
"""

from __future__ import annotations

import argparse
from typing import Any

from ctxemb_core.cli.stores import FolderOrUrl
from ctxemb_qdrant._store import DEFAULT_PATH
from ctxemb_qdrant._store import connect as _connect

#: The environment variable a server's API key is read from.
API_KEY_ENV = "CTXEMB_QDRANT_API_KEY"
_OPTIONS = FolderOrUrl("qdrant", "Qdrant", DEFAULT_PATH, API_KEY_ENV)
add_arguments = _OPTIONS.add_arguments
check_arguments = _OPTIONS.check_arguments
defaults = _OPTIONS.defaults
absent = _OPTIONS.absent
flags = _OPTIONS.flags
location = _OPTIONS.location


def connect(args: argparse.Namespace, *, create: bool) -> Any:
    """A client of the store the checked options name (see :func:`ctxemb_qdrant.connect`)."""
    where = _OPTIONS.where(args)
    return _connect(**where) if "url" in where else _connect(**where, create=create)


def adapter() -> Any:
    """The Qdrant adapter: ``open_collection``, ``verify``, ``migrate``, ``restamp``, ..."""
    import ctxemb_qdrant

    return ctxemb_qdrant
