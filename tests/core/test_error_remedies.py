"""Errors carry their remedy as data, and each adapter words it in its own terms (issue 44,
item 6): no text of one store is rewritten into another's."""

from __future__ import annotations

import pickle

import pytest

from ctxemb_core.errors import (
    ContractMismatchError,
    ForeignVectorsError,
    MissingStampError,
    unstamped_remedies,
)
from ctxemb_core.remedy import DEFAULT_TERMS, Remedy, Step, StoreTerms


def test_a_pgvector_error_names_pgvectors_calls_and_options(minilm_contract):
    pytest.importorskip("psycopg")
    from ctxemb_pgvector._connect import TERMS

    unstamped = MissingStampError(
        "table 'docs' carries no stamp. ", remedies=unstamped_remedies("docs")
    )
    unstamped.in_terms_of(TERMS)
    text = str(unstamped)
    assert "ctxemb_pgvector.open_table(client, 'docs', contract, adopt=True)" in text
    assert "ctxemb_pgvector.detect(client, 'docs', model)" in text
    assert "ContractChroma" not in text and "open_collection" not in text
    assert "a sample of its rows" in text
    assert "(with --store pgvector and the same --dsn)" in unstamped.message_for("cli")
    # The innermost adapter's terms stay; a copy keeps them.
    unstamped.in_terms_of(DEFAULT_TERMS)
    assert "ctxemb_pgvector." in str(unstamped)
    foreign = ForeignVectorsError(("d1",), 8, 0.1).in_terms_of(TERMS)
    back = pickle.loads(pickle.dumps(foreign))
    assert str(back) == str(foreign) and "ctxemb_pgvector.open_table(" in str(back)
    mismatch = ContractMismatchError(
        minilm_contract, minilm_contract.with_(pooling="cls"), stamped=True
    ).in_terms_of(TERMS)
    back = pickle.loads(pickle.dumps(mismatch))
    assert "ctxemb_pgvector.migrate(source, contract, new_name)" in str(back)
    assert "re-embed the table into a new one" in str(back)


def test_an_adapters_terms_are_data_not_text():
    terms = StoreTerms(
        module="ctxemb_qdrant", open="open_index", kind="collection", records="points",
        cli_where="--store qdrant and the same --url",
    )  # fmt: skip
    err = MissingStampError("no stamp. ", remedies=unstamped_remedies("c"))
    assert "ctxemb_chroma.open_collection(client, 'c'" in str(err)  # the default store's
    err.in_terms_of(terms)
    assert "ctxemb_qdrant.open_index(client, 'c', contract, adopt=True)" in str(err)
    assert "ctxemb_chroma" not in str(err) and "points" in str(err)
    assert err.problem == "no stamp. "
    assert [r.step for r in err.remedies] == [Step.ADOPT, Step.DETECT]
    assert Remedy.of(Step.GIVE, when="x", model="m").get("model") == "m"
