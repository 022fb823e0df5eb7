"""What the framework adapters hand on to core unchanged stays in step with core.

- an alias store's ``**where`` (:class:`~ctxemb_core.aliases.AliasStoreOptions`) is exactly
  :class:`~ctxemb_core.aliases.AliasSource`'s keywords but the connection string, so an option
  an alias gains reaches Haystack's and LangChain's alias stores with no edit of theirs.
"""

from __future__ import annotations

import inspect
import typing

from ctxemb_core.aliases import AliasSource, AliasStoreOptions


def test_alias_store_options_are_alias_sources_keywords_but_the_dsn():
    keywords = {
        name
        for name, p in inspect.signature(AliasSource).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert set(typing.get_type_hints(AliasStoreOptions)) == keywords - {"dsn"}
    assert not AliasStoreOptions.__required_keys__  # every option may be left out
