"""Hybrid retrieval in real Haystack pipelines over a real embedded Chroma store: the writer keeps
the stamped lexical side in step, ContractLexicalRetriever reads it and ContractFusionJoiner fuses
both rankings; another stemmer, fusion k or pooling is refused with the field named; an index
built here opens through ctxemb_chroma.open_hybrid and ctxemb query --hybrid, and the other way
round; the pipelines round-trip through YAML."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import DOCS, MINILM, fresh_name
from haystack import Document, Pipeline
from haystack.core.errors import PipelineRuntimeError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

import ctxemb_chroma
from ctxemb_core.cli import main
from ctxemb_core.errors import (
    ContractMismatchError,
    DamagedStampError,
    HybridMismatchError,
    InvalidInputError,
    MissingStampError,
    OutOfStepError,
)
from ctxemb_core.hybrid import Fusion, LexicalContract
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractFusionJoiner,
    ContractLexicalRetriever,
    ContractRetriever,
    ContractTextEmbedder,
)

QUERY = "how is green tea made"


def documents(docs: dict[str, str] = DOCS) -> list[Document]:
    return [Document(id=k, content=v, meta={"topic": k}) for k, v in docs.items()]


def indexing(contract, store, **hybrid) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractDocumentEmbedder(contract=contract, progress_bar=False))
    writer = ContractDocumentWriter(store, policy=DuplicatePolicy.OVERWRITE, hybrid=True, **hybrid)
    pipe.add_component("writer", writer)
    pipe.connect("embedder.documents", "writer.documents")
    return pipe


def querying(contract, store, top_k=3, lexical=None, fusion=None) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(contract=contract))
    dense = ContractRetriever(ChromaEmbeddingRetriever(store, top_k=10))
    pipe.add_component("dense", dense)
    pipe.add_component("lexical", ContractLexicalRetriever(store, lexical=lexical))
    pipe.add_component("joiner", ContractFusionJoiner(fusion=fusion, top_k=top_k))
    pipe.connect("embedder.embedding", "dense.query_embedding")
    pipe.connect("embedder.fingerprint", "dense.fingerprint")
    pipe.connect("embedder.fingerprint", "joiner.fingerprint")
    pipe.connect("dense.documents", "joiner.dense_documents")
    pipe.connect("lexical.documents", "joiner.lexical_documents")
    pipe.connect("lexical.hybrid", "joiner.hybrid")
    return pipe


def ask(pipe: Pipeline, text: str = QUERY) -> list[Document]:
    out = pipe.run({"embedder": {"text": text}, "lexical": {"query": text}})
    return out["joiner"]["documents"]


def cause(info: pytest.ExceptionInfo) -> BaseException:
    assert isinstance(info.value, PipelineRuntimeError) and info.value.__cause__ is not None
    return info.value.__cause__


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def indexed(minilm_contract, path):
    """A collection and its lexical side written by a Haystack indexing pipeline."""
    name = fresh_name()
    store = ChromaDocumentStore(collection_name=name, persist_path=path)
    assert indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})[
        "writer"
    ] == {"documents_written": len(DOCS)}
    return name, store


def test_an_indexing_pipeline_then_a_query_pipeline_return_the_fused_top_k(
    indexed, minilm_contract, minilm, path
):
    name, store = indexed
    hybrid = ctxemb_chroma.open_hybrid(ctxemb_chroma.connect(path), name, minilm)
    stamp = hybrid.stamp
    assert sorted(hybrid.lexical.ids()) == sorted(DOCS) and stamp.contract.dense == minilm_contract
    found = ask(querying(minilm_contract, store))
    assert [d.id for d in found][:1] == ["tea"] and len(found) == 3
    top = found[0]
    assert top.content == DOCS["tea"] and top.meta["topic"] == "tea"
    assert top.meta["ctxemb_hybrid"] == stamp.fingerprint
    assert top.meta["ctxemb_dense_rank"] == 1 and top.meta["ctxemb_lexical_rank"] == 1
    assert top.score == pytest.approx(2 / 61)  # rrf k=60: first on both sides
    # The same ranking as the core hybrid index over the same collection and folder.
    expected = hybrid.query(QUERY, 3)
    assert [d.id for d in found] == [h.id for h in expected]
    assert [d.score for d in found] == pytest.approx([h.score for h in expected])
    # The lexical hits are whole documents with their BM25 scores.
    lexical = ContractLexicalRetriever(store).run("green tea leaves", top_k=2)
    assert lexical["documents"][0].id == "tea" and lexical["hybrid"] == stamp.fingerprint
    best = hybrid.lexical.search("green tea leaves", 1)[0][0][1]
    assert lexical["documents"][0].score == pytest.approx(best)
    later = asyncio.run(ContractLexicalRetriever(store).run_async("green tea leaves", top_k=2))
    assert later == lexical
    # A later write keeps the lexical side in step (an overwrite and a new document).
    changed = {"tea": "Black tea leaves are withered, rolled and oxidised.", "kettle": "A kettle."}
    indexing(minilm_contract, store).run({"embedder": {"documents": documents(changed)}})
    assert ask(querying(minilm_contract, store, top_k=1), "oxidised rolled leaves")[0].id == "tea"
    again = ctxemb_chroma.open_hybrid(ctxemb_chroma.connect(path), name, minilm)
    assert again.verify()["ok"] and len(again.lexical) == len(DOCS) + 1


def test_another_stemmer_fusion_k_or_pooling_is_refused_with_the_field_named(
    indexed, minilm_contract
):
    _, store = indexed
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(minilm_contract, store, lexical=LexicalContract(stemmer="none")))
    err = cause(info)
    assert isinstance(err, HybridMismatchError) and err.fields == ("lexical.stemmer",)
    assert "lexical.stemmer: index='english', caller='none'" in str(err)
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(minilm_contract, store, fusion=Fusion(k=20)))
    err = cause(info)
    assert isinstance(err, HybridMismatchError) and err.fields == ("fusion.k",)
    cls = minilm_contract.with_(pooling="cls")
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(cls, store))
    err = cause(info)
    assert isinstance(err, ContractMismatchError) and "pooling" in err.fields
    # The joiner's own checks, whatever reached it: a query of another dense contract ...
    lexical = ContractLexicalRetriever(store).run(QUERY)
    joiner = ContractFusionJoiner()
    ContractTextEmbedder(contract=cls)  # built in this process: its fields can be named
    with pytest.raises(ContractMismatchError) as caught:
        joiner.run([], lexical["documents"], cls.fingerprint, lexical["hybrid"])
    assert "pooling" in caught.value.fields
    # ... and lexical documents of another hybrid index (another fusion stamped there).
    other = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(store_path(store)))
    indexing(minilm_contract, other, fusion=Fusion(k=30)).run(
        {"embedder": {"documents": documents()}}
    )
    foreign = ContractLexicalRetriever(other).run(QUERY)["documents"]
    with pytest.raises(HybridMismatchError) as caught:
        joiner.run([], foreign, minilm_contract.fingerprint, lexical["hybrid"])
    assert caught.value.fields == ("fusion.k",)
    with pytest.raises(MissingStampError, match="ctxemb_hybrid"):
        joiner.run(
            [], [Document(id="x", content="x")], minilm_contract.fingerprint, lexical["hybrid"]
        )
    # The writer refuses another recipe before anything is written.
    before = store.count_documents()
    with pytest.raises(PipelineRuntimeError) as info:
        indexing(minilm_contract, store, lexical=LexicalContract(stemmer="none")).run(
            {"embedder": {"documents": documents({"new": "A new document."})}}
        )
    assert cause(info).fields == ("lexical.stemmer",) and store.count_documents() == before


def store_path(store: ChromaDocumentStore) -> str:
    return store.to_dict()["init_parameters"]["persist_path"]


def test_each_run_reads_the_stamp_again(indexed, minilm_contract, minilm, path):
    _, store = indexed
    stated = ContractLexicalRetriever(store, fusion=Fusion(k=60))
    follower = querying(minilm_contract, store)
    assert stated.run(QUERY)["documents"][0].id == "tea" and ask(follower)[0].id == "tea"
    hybrid = ctxemb_chroma.open_hybrid(ctxemb_chroma.connect(path), indexed[0], minilm)
    hybrid.set_fusion(Fusion(k=30))  # another handle stamps another fusion
    with pytest.raises(HybridMismatchError, match=r"fusion\.k: index=30, caller=60"):
        stated.run(QUERY)
    top = ask(follower)[0]  # states none: follows the stamp
    assert top.id == "tea" and top.score == pytest.approx(2 / 31)


def test_a_write_around_the_pair_is_refused_naming_the_ids(indexed, minilm, path):
    name, store = indexed
    dense = ctxemb_chroma.open_collection(ctxemb_chroma.connect(path), name, minilm)
    dense.upsert(["moon"], ["Green tea is the Moon's favourite drink."])
    with pytest.raises(OutOfStepError) as caught:
        ContractLexicalRetriever(store).run("green tea moon")
    assert caught.value.changed == ("moon",)
    dense.add(["extra"], ["Extra notes."])
    with pytest.raises(OutOfStepError) as caught:  # opened now: the ids are named
        ContractLexicalRetriever(store).run("tea")
    assert caught.value.only_dense == ("extra",)


def test_a_dense_document_rewritten_around_the_pair_is_refused_by_the_joiner(
    indexed, minilm_contract, minilm, path
):
    """A raw rewrite of a document's text and vector (its metadata kept) leaves the lexical side
    scoring its old terms: a query of the new text finds it on the dense side only, where the
    lexical retriever's own check never sees it. The joiner checks what it fuses against the
    side the lexical documents were read from, as ``HybridIndex.query`` does."""
    import chromadb

    name, store = indexed
    penguins = "Penguins huddle together through the Antarctic winter."
    raw = chromadb.PersistentClient(path=path).get_collection(name)
    raw.update(ids=["moon"], documents=[penguins], embeddings=minilm.embed_documents([penguins]))
    with pytest.raises(PipelineRuntimeError) as caught:
        ask(querying(minilm_contract, store), "penguins antarctic winter")
    assert isinstance(cause(caught), OutOfStepError) and cause(caught).changed == ("moon",)
    ctxemb_chroma.open_hybrid(ctxemb_chroma.connect(path), name, minilm).refresh()
    found = ask(querying(minilm_contract, store), "penguins antarctic winter")
    assert found[0].id == "moon" and found[0].meta["ctxemb_lexical_rank"] == 1


def test_the_joiner_checks_against_the_side_it_was_given_not_a_twin_of_one_stamp(
    indexed, minilm_contract, minilm, tmp_path, path
):
    """Two indexes of one corpus and recipe (a store copied or migrated, the old one still
    served) have one stamp fingerprint but two sides. A stale document of one, found on its
    dense side only, must be refused by its joiner even when the twin's lexical retriever ran
    last: the joiner checks against the side its lexical documents were read from."""
    import chromadb

    name, store = indexed
    twin = ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path / "twin"))
    indexing(minilm_contract, twin).run({"embedder": {"documents": documents()}})
    penguins = "Penguins huddle together through the Antarctic winter."
    raw = chromadb.PersistentClient(path=path).get_collection(name)
    raw.update(ids=["moon"], documents=[penguins], embeddings=minilm.embed_documents([penguins]))
    query = "penguins antarctic winter"
    vector = ContractTextEmbedder(contract=minilm_contract).run(query)
    dense = ContractRetriever(ChromaEmbeddingRetriever(store, top_k=10)).run(
        query_embedding=vector["embedding"], fingerprint=vector["fingerprint"]
    )
    lexical = ContractLexicalRetriever(store).run(query)
    other = ContractLexicalRetriever(twin).run(query)  # the twin's, read last
    assert other["hybrid"] == lexical["hybrid"]  # one stamp, two sides
    joiner = ContractFusionJoiner(top_k=3)
    with pytest.raises(OutOfStepError) as caught:
        joiner.run(
            dense["documents"], lexical["documents"], vector["fingerprint"], lexical["hybrid"]
        )
    assert caught.value.changed == ("moon",)
    twin_dense = ContractRetriever(ChromaEmbeddingRetriever(twin, top_k=10)).run(
        query_embedding=vector["embedding"], fingerprint=vector["fingerprint"]
    )
    ContractLexicalRetriever(store).run(query)  # the stale one's, read last: the twin's passes
    fused = joiner.run(
        twin_dense["documents"], other["documents"], vector["fingerprint"], other["hybrid"]
    )
    assert fused["documents"][0].content != penguins


def test_an_index_built_by_the_cli_is_queried_by_the_pipeline_and_back(
    tmp_path, minilm_contract, capsys, path
):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    cli = ("--path", path, "--collection", "cli", "--hybrid")
    assert main(["index", str(corpus), *cli, "--model", MINILM]) == 0
    capsys.readouterr()
    assert main(["query", QUERY, *cli, "--json", "-k", "3"]) == 0
    expected = [r["id"] for r in json.loads(capsys.readouterr().out)["results"]]
    store = ChromaDocumentStore(collection_name="cli", persist_path=path)
    found = ask(querying(minilm_contract, store))
    assert expected[0] == "tea" and [d.id for d in found] == expected
    # And the other way: a pipeline-built index is what ctxemb query --hybrid reads.
    name = fresh_name()
    ours = ChromaDocumentStore(collection_name=name, persist_path=path)
    indexing(minilm_contract, ours).run({"embedder": {"documents": documents()}})
    assert main(["query", QUERY, "--path", path, "--collection", name, "--hybrid", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["id"] == "tea"
    assert main(["query", "tea", "--path", path, "--collection", name, "--hybrid", "--rrf-k", "9"])
    assert "fusion.k: index=60, caller=9" in capsys.readouterr().err


def test_components_and_pipelines_round_trip_through_yaml(indexed, minilm_contract, tmp_path):
    _, store = indexed
    components = [
        ContractLexicalRetriever(store, lexical=LexicalContract(), fusion=Fusion(), top_k=5),
        ContractLexicalRetriever(store, str(tmp_path / "lx")),
        ContractFusionJoiner(fusion=Fusion(method="weighted", weights=(0.7, 0.3)), top_k=4),
        ContractDocumentWriter(store, hybrid=True, lexical=LexicalContract(k1=1.2)),
    ]
    for component in components:
        data = component.to_dict()
        assert json.loads(json.dumps(data)) == data
        back = type(component).from_dict(json.loads(json.dumps(data)))
        assert back.to_dict() == data
    assert "hybrid" not in ContractDocumentWriter(store).to_dict()["init_parameters"]
    query = querying(minilm_contract, store)
    again = Pipeline.loads(query.dumps())
    assert same(again, query)
    assert [d.id for d in ask(again)] == [d.id for d in ask(query)]
    writer = indexing(minilm_contract, store, fusion=Fusion(k=60))
    assert same(Pipeline.loads(writer.dumps()), writer)


def same(a: Pipeline, b: Pipeline) -> bool:
    """The same pipeline (Haystack lists the connections in the order it walks them)."""
    x, y = a.to_dict(), b.to_dict()
    for d in (x, y):
        d["connections"] = sorted(d["connections"], key=lambda c: (c["sender"], c["receiver"]))
    return x == y


def test_bad_input_is_refused_with_typed_errors(indexed):
    _, store = indexed
    with pytest.raises(TypeError, match="InMemoryDocumentStore"):
        ContractLexicalRetriever(InMemoryDocumentStore())
    with pytest.raises(InvalidInputError, match="top_k"):
        ContractLexicalRetriever(store, top_k=0)
    with pytest.raises(InvalidInputError, match="LexicalContract"):
        ContractLexicalRetriever(store, lexical="english")
    with pytest.raises(InvalidInputError, match="a query must be a string"):
        ContractLexicalRetriever(store).run(["tea"])
    with pytest.raises(InvalidInputError, match="hybrid=True"):
        ContractDocumentWriter(store, fusion=Fusion(k=10))
    with pytest.raises(InvalidInputError, match="no stamp"):
        ContractFusionJoiner().run([], [], "0" * 64, "f" * 64)
    with pytest.raises(TypeError, match="dense_documents"):
        ContractFusionJoiner().run("tea", [], "0" * 64, "f" * 64)
    # The collection records its lexical side: a folder without it is a lost side, not "none".
    with pytest.raises(DamagedStampError, match="no longer holds"):
        ContractLexicalRetriever(store, "/nonexistent/lexical").run("tea")


def test_a_pgvector_store_keeps_its_lexical_side_in_its_database(
    pg, minilm_contract, minilm, monkeypatch
):
    from haystack.utils import Secret
    from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever
    from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

    import ctxemb_pgvector

    monkeypatch.setenv("CTXEMB_TEST_PG_CONN_STR", pg.ctxemb_dsn)
    table = fresh_name()
    store = PgvectorDocumentStore(
        connection_string=Secret.from_env_var("CTXEMB_TEST_PG_CONN_STR"),
        table_name=table,
        embedding_dimension=384,
    )
    with pytest.raises(MissingStampError, match="no lexical side"):
        ContractLexicalRetriever(store).run(QUERY)
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(contract=minilm_contract))
    pipe.add_component(
        "dense", ContractRetriever(PgvectorEmbeddingRetriever(document_store=store, top_k=10))
    )
    pipe.add_component("lexical", ContractLexicalRetriever(store))
    pipe.add_component("joiner", ContractFusionJoiner(top_k=3))
    for sender, receiver in (
        ("embedder.embedding", "dense.query_embedding"),
        ("embedder.fingerprint", "dense.fingerprint"),
        ("embedder.fingerprint", "joiner.fingerprint"),
        ("dense.documents", "joiner.dense_documents"),
        ("lexical.documents", "joiner.lexical_documents"),
        ("lexical.hybrid", "joiner.hybrid"),
    ):
        pipe.connect(sender, receiver)
    found = ask(pipe)
    hybrid = ctxemb_pgvector.open_hybrid(pg, table, minilm)
    assert [d.id for d in found] == [h.id for h in hybrid.query(QUERY, 3)]
    assert found[0].id == "tea"
