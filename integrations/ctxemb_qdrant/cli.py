"""Qdrant's options on the ``ctxemb`` command line: ``--qdrant-path DIR`` or ``--qdrant-url URL``
(the key from ``$CTXEMB_QDRANT_API_KEY``, never shown): core's
:class:`~ctxemb_core.cli.stores.FolderOrUrl`, the module the CLI's store table names for
``--store qdrant`` (the protocol :class:`ctxemb_core.cli.stores.StoreOptions`).
"""

from __future__ import annotations

from ctxemb_core.cli.stores import FolderOrUrl, options_of
from ctxemb_qdrant import _names

#: Where a store command looks without --qdrant-path or --qdrant-url (``connect``'s default).
DEFAULT_PATH = _names.DEFAULT_PATH
#: The environment variable a server's API key is read from.
API_KEY_ENV = _names.API_KEY_ENV


def _options() -> FolderOrUrl:
    """With this module's defaults as they are at the call (every command fills them in)."""
    return FolderOrUrl("qdrant", "Qdrant", DEFAULT_PATH, API_KEY_ENV)


# add_arguments, check_arguments, absent, flags, location, connect...: _options()'s; adapter().
__getattr__ = options_of(__name__, _options)
