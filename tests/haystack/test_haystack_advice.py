"""An error met through a Haystack component on a PostgreSQL table advises in the words of the
interface called: ``ctxemb_pgvector``'s calls and Haystack's own ``adopt=True``, never the
Chroma adapter's (the words of every guarded store come from its binding)."""

from __future__ import annotations

import pytest
from conftest import fresh_name
from haystack.utils import Secret
from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

from ctxemb_core.errors import MissingStampError
from ctxemb_haystack import ContractRetriever


def test_an_unstamped_table_is_refused_in_pgvector_and_haystack_words(pg, monkeypatch):
    monkeypatch.setenv("CTXEMB_TEST_PG_CONN_STR", pg.ctxemb_dsn)
    store = PgvectorDocumentStore(
        connection_string=Secret.from_env_var("CTXEMB_TEST_PG_CONN_STR"),
        table_name=fresh_name(),
        embedding_dimension=4,
    )
    assert store.count_documents() == 0  # Haystack creates its table, unstamped
    retriever = ContractRetriever(PgvectorEmbeddingRetriever(document_store=store))
    # A fingerprint this process never built: only the table's stamp could vouch for it.
    with pytest.raises(MissingStampError) as err:
        retriever.run(query_embedding=[0.5] * 4, fingerprint="0" * 64)
    advice = str(err.value)
    assert "ctxemb_pgvector.open_table(" in advice and "ctxemb_chroma" not in advice
    assert "ContractDocumentWriter(..., adopt=True)" in advice
