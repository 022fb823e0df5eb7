"""LangChain on PostgreSQL: ContractPGVector passes LangChain's standard vector-store suite on a
real PostgreSQL + pgvector, refuses another contract, shares one table with the CLI's path, and
langchain-postgres's own PGVectorStore reads its rows (its own writes there are caught)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator

import pytest
from conftest import DOCS, MINILM, fresh_name
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

import ctxemb_pgvector
from ctxemb_core import Embedder, contract_for
from ctxemb_core.errors import ContractMismatchError, ForeignVectorsError
from ctxemb_langchain import ContractEmbeddings, ContractPGVector, ContractRetriever


@functools.cache
def minilm_embeddings() -> ContractEmbeddings:
    return ContractEmbeddings(contract_for(MINILM))


class TestContractPGVector(VectorStoreIntegrationTests):
    @staticmethod
    def get_embeddings() -> Embeddings:
        return minilm_embeddings()

    @pytest.fixture
    def vectorstore(self, pg_dsn: str) -> Iterator[VectorStore]:
        store = ContractPGVector(fresh_name(), self.get_embeddings(), connection=pg_dsn, sample=0)
        try:
            yield store
        finally:
            store.close()


@pytest.fixture
def store(pg) -> ContractPGVector:
    return ContractPGVector("docs", minilm_embeddings(), connection=pg)


def test_search_filter_retriever_and_mmr(store):
    ids = store.add_texts(list(DOCS.values()), [{"topic": k} for k in DOCS], ids=list(DOCS))
    assert ids == list(DOCS)
    (hit,) = store.similarity_search("how is green tea made", k=1)
    assert (hit.id, hit.metadata) == ("tea", {"topic": "tea"})
    assert [d.id for d in store.similarity_search("bank", k=6, filter={"topic": "river"})] == [
        "river"
    ]
    retriever = store.as_retriever(k=2)
    assert isinstance(retriever, ContractRetriever)
    assert retriever.invoke("the phases of the moon")[0].id == "moon"
    mmr = store.max_marginal_relevance_search("bank", k=2, fetch_k=6)
    assert len({d.id for d in mmr}) == 2
    scored = store.similarity_search_with_relevance_scores("how is green tea made", k=1)
    assert scored[0][0].id == "tea" and 0.3 < scored[0][1] <= 1.0


def test_another_contract_is_refused_naming_the_field(pg, store):
    store.add_texts([DOCS["tea"]], ids=["tea"])
    cls = ContractEmbeddings(contract_for(MINILM, pooling="cls"))
    with pytest.raises(ContractMismatchError) as err:
        ContractPGVector("docs", cls, connection=pg)
    assert err.value.fields == ("pooling",)
    assert store.table.count() == 1


def test_one_table_through_langchain_and_the_cli_path(pg, store, minilm):
    store.add_texts(list(DOCS.values()), ids=list(DOCS))
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert table.count() == len(DOCS) and table.open_check.checked == len(DOCS)
    table.add(["extra"], ["Kettles boil water for tea."])
    assert store.get_by_ids(["extra"])[0].page_content == "Kettles boil water for tea."


def test_langchain_postgres_reads_the_rows_and_its_own_writes_are_caught(pg, store, minilm):
    from langchain_postgres import PGEngine, PGVectorStore

    store.add_texts(list(DOCS.values()), [{"topic": k} for k in DOCS], ids=list(DOCS))
    base, _, query = pg.ctxemb_dsn.partition("?")
    url = base.replace("postgresql://", "postgresql+psycopg://", 1) + (f"?{query}" if query else "")
    engine = PGEngine.from_connection_string(url=url)
    try:
        plain = PGVectorStore.create_sync(
            engine,
            embedding_service=minilm_embeddings(),
            table_name="docs",
            id_column="id",
            content_column="content",
            embedding_column="embedding",
            metadata_json_column="meta",
            metadata_columns=[],
        )
        (hit,) = plain.similarity_search("how is green tea made", k=1)
        assert hit.page_content == DOCS["tea"]
        # langchain-postgres's own write, with another recipe's vector, around the guard.
        cls = Embedder(minilm.contract.with_(pooling="cls"))
        plain.add_embeddings(
            [DOCS["bank"] + " (again)"],
            cls.embed_documents([DOCS["bank"]]).tolist(),
            ids=[str(uuid.uuid4())],
        )
    finally:
        engine._run_as_sync(engine.close())
    with pytest.raises(ForeignVectorsError):
        ContractPGVector("docs", minilm_embeddings(), connection=pg, sample=2)
