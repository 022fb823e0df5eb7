"""How a framework's vector store opens its index: the part of
:class:`~ctxemb_core.index.OpenOptions` a framework store takes from its caller.

LangChain's and LlamaIndex's PostgreSQL stores (and any store a framework adds) take these as
``**opening: Unpack[StoreOpenOptions]`` beside their store's own arguments (a connection, a
schema) and hand them to the guarded open unchanged, so their meaning and defaults are said
once, here and in :meth:`~ctxemb_core.index.GuardedIndex.open`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from ctxemb_core.records import OPEN_SAMPLE

__all__ = ["StoreOpenOptions", "store_opening"]


class StoreOpenOptions(TypedDict, total=False):
    """A framework store's open options (each is :class:`~ctxemb_core.index.OpenOptions`'):

    - ``sample`` (:data:`~ctxemb_core.records.OPEN_SAMPLE`): stored records re-embedded and
      compared when the index is opened;
    - ``create`` (``True``): create the index (stamped) when it is missing;
    - ``adopt`` (``False``): stamp an unstamped index once a sample of its records proves it
      is the contract's.
    """

    sample: int
    create: bool
    adopt: bool


def store_opening(opening: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """``opening`` with every option given its value (left out: its default), for the guarded
    open and the store's other opens (its hybrid index's ``sample``).

    Raises:
        TypeError: a keyword :class:`StoreOpenOptions` does not name (as Python says it of a
            signature; ``owner``: the class or call that was given it).
    """
    unknown = sorted(set(opening) - StoreOpenOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}")
    return {"sample": OPEN_SAMPLE, "create": True, "adopt": False, **opening}
