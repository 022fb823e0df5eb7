"""Moved to :mod:`ctxemb_core.validate` (public: adapters use it); kept for this release only.

Nothing new imports this module; it goes in the next release.
"""

from __future__ import annotations

from ctxemb_core import validate as _validate
from ctxemb_core.validate import *  # noqa: F403 (the same names, for old imports)

__all__ = list(_validate.__all__)
