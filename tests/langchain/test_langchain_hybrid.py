"""ContractHybridRetriever on real stores (embedded Chroma, PostgreSQL) and the bundled MiniLM:
fused Documents carrying each side's rank; another stemmer, fusion k or pooling refused with the
field named; an index written through LangChain opens in ``ctxemb_chroma.open_hybrid`` and
``ctxemb query --hybrid`` (same ids) and one the CLI wrote is queried here; a write through the
plain vector store is refused as out of step until ``refresh()``; LangChain's standard
``RetrieversIntegrationTests`` pass."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DOCS, MINILM, fresh_name
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pydantic import ValidationError

import ctxemb_chroma
from ctxemb_core import EmbeddingContract, contract_for
from ctxemb_core.cli import main
from ctxemb_core.documents import TEXT_KEY
from ctxemb_core.errors import (
    ContractMismatchError,
    HybridMismatchError,
    InvalidInputError,
    OutOfStepError,
)
from ctxemb_core.hybrid import Fusion, LexicalContract
from ctxemb_langchain import ContractChroma, ContractEmbeddings, ContractHybridRetriever

QUERY = "how is green tea made"


@functools.cache
def minilm_contract() -> EmbeddingContract:
    return contract_for(MINILM)


@functools.cache
def embeddings() -> ContractEmbeddings:
    return ContractEmbeddings(minilm_contract())


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "db")


@pytest.fixture
def store(db: str) -> ContractChroma:
    return ContractChroma("docs", embeddings(), persist_directory=db)


@pytest.fixture
def retriever(store: ContractChroma) -> ContractHybridRetriever:
    metadatas = [{"topic": k} for k in DOCS]
    return ContractHybridRetriever.from_texts(DOCS.values(), store, metadatas, ids=list(DOCS), k=3)


def cli_query(capsys: pytest.CaptureFixture[str], db: str, *options: str) -> tuple[int, Any]:
    store = ["--path", db, "--collection", "docs"]
    code = main(["query", QUERY, *store, "--hybrid", "--json", *options])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else err


def test_fused_documents_carry_each_sides_rank_and_the_stamp(retriever):
    docs = retriever.invoke(QUERY)
    assert [d.id for d in docs][:1] == ["tea"] and len(docs) == 3
    top = docs[0]
    assert top.page_content == DOCS["tea"] and top.metadata["topic"] == "tea"
    assert top.metadata["id"] == "tea" and TEXT_KEY not in top.metadata
    assert top.metadata["dense_rank"] == 1 and top.metadata["lexical_rank"] == 1
    assert top.metadata["hybrid_score"] == pytest.approx(2 / 61)  # rrf k=60, first on both
    assert top.metadata["dense_score"] > docs[1].metadata["dense_score"]
    assert top.metadata["hybrid_fingerprint"] == retriever.contract.fingerprint
    assert [d.id for d in retriever.invoke(QUERY, k=1)] == ["tea"]
    assert [d.id for d in asyncio.run(retriever.ainvoke(QUERY))] == [d.id for d in docs]
    assert [d.id for d in asyncio.run(retriever.ainvoke(QUERY, k=1))] == ["tea"]
    with pytest.raises(InvalidInputError, match="k must be a positive integer"):
        retriever.invoke(QUERY, k=0)


def test_another_stemmer_fusion_k_or_pooling_is_refused_naming_the_field(store, retriever, db):
    other_stemmer = LexicalContract(stemmer="none")
    with pytest.raises(HybridMismatchError) as err:
        ContractHybridRetriever(index=retriever.index, lexical=other_stemmer)
    assert err.value.fields == ("lexical.stemmer",)
    with pytest.raises(HybridMismatchError) as err:
        ContractHybridRetriever.from_store(store, lexical=other_stemmer)
    assert "lexical.stemmer: index='english', caller='none'" in str(err.value)
    with pytest.raises(HybridMismatchError) as err:
        retriever.invoke(QUERY, fusion=Fusion(k=20))
    assert err.value.fields == ("fusion.k",) and err.value.diff.kind.value == "query_only"
    with pytest.raises(HybridMismatchError, match=r"fusion\.k: index=60, caller=20"):
        ContractHybridRetriever.from_store(store, fusion=Fusion(k=20))
    # The stamp's own recipe, stated: accepted.
    stated = ContractHybridRetriever.from_store(store, lexical=LexicalContract(), fusion=Fusion())
    assert stated.invoke(QUERY)[0].id == "tea"
    with pytest.raises(ValidationError, match="fuson"):
        ContractHybridRetriever(index=retriever.index, fuson=Fusion(k=20))
    with pytest.raises(TypeError, match="fuson"):
        retriever.invoke(QUERY, fuson=Fusion(k=20))  # a misspelt recipe is not ignored
    # In a chain: another process stamps another fusion; the retriever that stated k = 60
    # raises inside the chain instead of returning documents fused another way.
    chain = stated | (lambda docs: [d.id for d in docs])
    assert chain.invoke(QUERY)[0] == "tea"
    ctxemb_chroma.open_hybrid(ctxemb_chroma.connect(db), "docs", minilm_contract()).set_fusion(
        Fusion(k=30)
    )
    with pytest.raises(HybridMismatchError, match=r"fusion\.k: index=30, caller=60"):
        chain.invoke(QUERY)
    assert retriever.invoke(QUERY)[0].id == "tea"  # the one that stated nothing follows
    # A dense change: the store refuses it; a collection re-created under another pooling is
    # refused by the lexical side's stamp, which still names the old dense contract.
    cls = ContractEmbeddings(contract_for(MINILM, pooling="cls"))
    with pytest.raises(ContractMismatchError) as err:
        ContractChroma("docs", cls, persist_directory=db)
    assert err.value.fields == ("pooling",)
    store.delete_collection()
    remade = ContractChroma("docs", cls, persist_directory=db)
    with pytest.raises(ContractMismatchError) as err:
        ContractHybridRetriever.from_store(remade)
    assert "pooling" in err.value.fields and not isinstance(err.value, HybridMismatchError)


def test_written_through_langchain_opens_in_ctxemb_chroma_and_the_cli(retriever, db, capsys):
    ours = [d.id for d in retriever.invoke(QUERY, k=6)]
    client = ctxemb_chroma.connect(db)
    hybrid = ctxemb_chroma.open_hybrid(client, "docs", minilm_contract(), create=False)
    assert hybrid.contract == retriever.contract and hybrid.verify()["ok"]
    assert [h.id for h in hybrid.query(QUERY, 6)] == ours
    code, row = cli_query(capsys, db, "-k", "6")
    assert code == 0 and [r["id"] for r in row["results"]] == ours
    assert row["hybrid_fingerprint"] == retriever.contract.fingerprint
    code, err = cli_query(capsys, db, "--stemmer", "none")
    assert code == 2 and "lexical.stemmer" in err


def test_written_by_the_cli_is_queried_here(tmp_path, db, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    args = ["index", str(corpus), "--path", db, "--collection", "docs", "--model", MINILM]
    assert main([*args, "--hybrid"]) == 0
    capsys.readouterr()
    store = ContractChroma("docs", embeddings(), persist_directory=db)
    retriever = ContractHybridRetriever.from_store(store, create=False, k=4)
    docs = retriever.invoke(QUERY)
    hybrid = ctxemb_chroma.open_hybrid(ctxemb_chroma.connect(db), "docs", minilm_contract())
    assert docs[0].id == "tea" and [d.id for d in docs] == [h.id for h in hybrid.query(QUERY, 4)]
    assert docs[0].metadata["hybrid_fingerprint"] == hybrid.contract.fingerprint


def test_a_write_through_the_plain_store_is_refused_until_refresh(store, retriever):
    store.add_texts(["Kettles boil water for green tea."], ids=["kettle"])
    with pytest.raises(OutOfStepError, match="7 documents on the dense side, 6 on the lexical"):
        retriever.invoke(QUERY)
    with pytest.raises(OutOfStepError) as err:
        ContractHybridRetriever.from_store(store)
    assert err.value.only_dense == ("kettle",)
    assert retriever.refresh() == (["kettle"], [], [])
    # An upsert through the store (LangChain's add_texts) changes a text, not the count: the
    # documents returned are checked on both sides, so stale BM25 terms are not fused silently.
    store.add_texts(["Matcha is stone-ground green tea powder."], ids=["tea"])
    with pytest.raises(OutOfStepError) as err:
        retriever.invoke(QUERY)
    assert err.value.changed == ("tea",)
    assert retriever.refresh() == ([], [], ["tea"])
    assert retriever.invoke("stone-ground matcha", k=1)[0].id == "tea"
    assert retriever.invoke("kettles boil water", k=1)[0].id == "kettle"
    # The retriever's own writes reach both sides, and the store sees them.
    retriever.add_documents([Document("Sencha is a steamed green tea.", id="sencha")])
    assert store.get_by_ids(["sencha"])[0].page_content == "Sencha is a steamed green tea."
    retriever.delete(["kettle"])
    assert retriever.index.verify()["ok"] and len(retriever.index.lexical) == len(DOCS) + 1
    with pytest.raises(TypeError, match="ContractChroma or a ContractPGVector"):
        ContractHybridRetriever.from_store(store.guarded)
    # One refusal in core for every framework: ctxemb's own error too, naming Qdrant's store.
    with pytest.raises(InvalidInputError, match="needs a ContractQdrant, "):
        ContractHybridRetriever.from_store(store.guarded)


def test_on_postgresql(pg):
    import ctxemb_pgvector
    from ctxemb_langchain import ContractPGVector

    store = ContractPGVector("docs", embeddings(), connection=pg)
    # The lexical side lives in the table's database: no folder is asked for.
    retriever = ContractHybridRetriever.from_texts(DOCS.values(), store, ids=list(DOCS), k=3)
    docs = retriever.invoke(QUERY)
    assert docs[0].id == "tea" and docs[0].metadata["lexical_rank"] == 1
    hybrid = ctxemb_pgvector.open_hybrid(pg, "docs", minilm_contract())
    assert [d.id for d in docs] == [h.id for h in hybrid.query(QUERY, 3)]
    with pytest.raises(HybridMismatchError) as err:
        ContractHybridRetriever.from_store(store, lexical=LexicalContract(stemmer="none"))
    assert err.value.fields == ("lexical.stemmer",)
    store.add_texts(["Kettles boil water for green tea."], ids=["kettle"])
    with pytest.raises(OutOfStepError):
        retriever.invoke(QUERY)


# -- LangChain's own suite -----------------------------------------------------------------------

RETRIEVER_TEXTS = [
    "Green tea leaves are steamed soon after picking.",
    "Water around eighty degrees suits most green teas.",
    "Black tea is fully oxidised before drying.",
    "A bicycle chain lasts longer when it is oiled.",
    "The Moon shows phases as it orbits the Earth.",
]


class TestContractHybridRetrieverStandard(RetrieversIntegrationTests):
    index: Any

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def stored(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
        db = str(tmp_path_factory.mktemp("lc-hybrid-std"))
        store = ContractChroma(fresh_name(), embeddings(), persist_directory=db)
        cls.index = ContractHybridRetriever.from_texts(RETRIEVER_TEXTS, store).index
        yield

    @property
    def retriever_constructor(self) -> type[ContractHybridRetriever]:
        return ContractHybridRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": self.index, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return QUERY
