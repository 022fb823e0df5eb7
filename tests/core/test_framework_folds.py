"""What the framework adapters hand on to core unchanged stays in step with core.

- an alias store's ``**where`` (:class:`~ctxemb_core.aliases.AliasStoreOptions`) is exactly
  :class:`~ctxemb_core.aliases.AliasSource`'s keywords but the connection string, so an option
  an alias gains reaches Haystack's and LangChain's alias stores with no edit of theirs;
- a framework's PostgreSQL store's ``**opening`` (:class:`~ctxemb_core.index.StoreOpenOptions`)
  takes ``sample``, ``create`` and ``adopt`` with their defaults, and refuses any other keyword.
"""

from __future__ import annotations

import inspect
import typing

import pytest

from ctxemb_core.aliases import AliasSource, AliasStoreOptions


def test_alias_store_options_are_alias_sources_keywords_but_the_dsn():
    keywords = {
        name
        for name, p in inspect.signature(AliasSource).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert set(typing.get_type_hints(AliasStoreOptions)) == keywords - {"dsn"}
    assert not AliasStoreOptions.__required_keys__  # every option may be left out


def test_a_framework_store_takes_the_open_options_it_names_and_their_defaults():
    from ctxemb_core.index import StoreOpenOptions, store_opening
    from ctxemb_core.records import OPEN_SAMPLE

    assert store_opening({}, "Store") == {"sample": OPEN_SAMPLE, "create": True, "adopt": False}
    assert store_opening({"sample": 0, "adopt": True}, "Store")["sample"] == 0
    assert StoreOpenOptions.__optional_keys__ == {"sample", "create", "adopt"}
    # repair and stamp are GuardedIndex.open's, not a framework store's: refused as a
    # signature refuses a keyword it lacks.
    with pytest.raises(TypeError, match="Store\\(\\) got an unexpected keyword argument 'repair'"):
        store_opening({"repair": True}, "Store")
