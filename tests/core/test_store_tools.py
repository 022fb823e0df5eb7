"""What every store adapter shares (``ctxemb_core.store_tools``): the names it offers, its
errors translated from a table, its advice worded in its terms."""

from __future__ import annotations

import importlib

import pytest

from ctxemb_core.errors import InvalidInputError, MissingStampError, StoreUnavailableError
from ctxemb_core.remedy import StoreTerms
from ctxemb_core.store_tools import ADAPTER_API, translator, worded_in


@pytest.mark.parametrize("adapter", ["ctxemb_chroma", "ctxemb_pgvector"])
def test_every_store_adapter_offers_the_adapter_api(adapter):
    module = pytest.importorskip(adapter)
    assert set(module.__all__) >= set(ADAPTER_API)
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        assert callable(getattr(module, name)), name
    assert importlib.import_module(adapter) is module


class _Lost(OSError):
    pass


def test_a_translator_raises_the_first_matching_rule_with_what_first():
    translated = translator(
        (_Lost, StoreUnavailableError, "the server is gone ({exc})"),
        ((OSError, ValueError), InvalidInputError, "refused: {exc}"),
    )
    gone = r"^reading 'x': the server is gone \(bye\)$"
    with pytest.raises(StoreUnavailableError, match=gone), translated("reading 'x'"):
        raise _Lost("bye")
    refused = r"^writing: refused: {braces} stay$"
    with pytest.raises(InvalidInputError, match=refused) as info, translated("writing"):
        raise ValueError("{braces} stay")
    assert isinstance(info.value.__cause__, ValueError)
    # ctxemb's own errors and anything no rule names pass unchanged.
    own = InvalidInputError("as it was")
    with pytest.raises(InvalidInputError) as passed, translated("x"):
        raise own
    assert passed.value is own
    with pytest.raises(KeyError), translated("x"):
        raise KeyError("k")


def test_worded_in_gives_an_errors_advice_in_the_adapters_terms():
    terms = StoreTerms(module="ctxemb_x", open="open_x", kind="x", records="xs", cli_where="--x")

    def refuse() -> None:
        raise MissingStampError("no stamp. ")

    class Store:
        def open(self) -> None:
            refuse()

    with pytest.raises(MissingStampError) as info:
        worded_in(terms, refuse)()
    assert info.value.terms is terms
    worded_in(terms, Store)
    with pytest.raises(MissingStampError) as info:
        Store().open()
    assert info.value.terms is terms
