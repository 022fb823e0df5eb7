"""The Haystack adapter in real pipelines: contract-driven embedders, and a guarded write and read
path over InMemoryDocumentStore, ChromaDocumentStore on an embedded path and a Chroma server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DOCS, fresh_name
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.core.errors import PipelineRuntimeError
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.retrievers.chroma import (
    ChromaEmbeddingRetriever,
)
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_core import Embedder, contract_for
from ctxemb_core import demo as demo_data
from ctxemb_core.documents import FINGERPRINT_KEY, TEXT_KEY, text_digest
from ctxemb_core.errors import (
    ContractMismatchError,
    InvalidInputError,
    MissingStampError,
)
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
    DuplicateDocumentsError,
)

REPO = Path(__file__).resolve().parents[2]


# -- stores and pipelines ------------------------------------------------------------------------


@pytest.fixture(params=["memory", "chroma-embedded", "chroma-server"])
def kind(request):
    return request.param


@pytest.fixture
def make_store(kind, tmp_path, request):
    """A fresh empty store of this test's kind, and the retriever class that reads it."""

    def make():
        if kind == "memory":
            return InMemoryDocumentStore(), InMemoryEmbeddingRetriever
        if kind == "chroma-embedded":
            store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
            return store, ChromaEmbeddingRetriever
        port = request.getfixturevalue("server")
        store = ChromaDocumentStore(collection_name=fresh_name(), host="127.0.0.1", port=port)
        return store, ChromaEmbeddingRetriever

    return make


def documents() -> list[Document]:
    return [Document(id=k, content=v, meta={"topic": k}) for k, v in DOCS.items()]


def indexing(contract, store, policy=DuplicatePolicy.NONE) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractDocumentEmbedder(contract=contract, progress_bar=False))
    pipe.add_component("writer", ContractDocumentWriter(store, policy=policy))
    pipe.connect("embedder.documents", "writer.documents")
    return pipe


def querying(contract, store, retriever_cls, top_k=3) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(contract=contract))
    pipe.add_component("retriever", ContractRetriever(retriever_cls(store, top_k=top_k)))
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("embedder.fingerprint", "retriever.fingerprint")
    return pipe


def ask(pipe: Pipeline, text: str) -> list[Document]:
    return pipe.run({"embedder": {"text": text}})["retriever"]["documents"]


def cause(info: pytest.ExceptionInfo) -> BaseException:
    """Haystack wraps a component's error in PipelineRuntimeError; ctxemb's is its cause."""
    assert isinstance(info.value, PipelineRuntimeError)
    assert info.value.__cause__ is not None
    return info.value.__cause__


def snapshot(store) -> dict[str, tuple]:
    docs = store.filter_documents()
    return {d.id: (d.content, tuple(np.round(d.embedding, 6)), dict(d.meta)) for d in docs}


# -- embedders -----------------------------------------------------------------------------------


def test_document_embedder_follows_the_contract_and_stamps_copies(minilm_contract, minilm):
    given = documents()
    before = [(d.id, d.content, dict(d.meta), d.embedding) for d in given]
    out = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False).run(given)
    assert out["fingerprint"] == minilm_contract.fingerprint
    got = out["documents"]
    assert [(d.id, d.content, dict(d.meta), d.embedding) for d in given] == before  # unchanged
    assert [d.id for d in got] == list(DOCS)
    expected = minilm.embed_documents(list(DOCS.values()))
    np.testing.assert_allclose(np.array([d.embedding for d in got]), expected, atol=1e-6)
    for d in got:
        assert d.meta == {
            "topic": d.id,
            FINGERPRINT_KEY: minilm_contract.fingerprint,
            TEXT_KEY: text_digest(d.content),  # what a re-index compares
        }


def test_the_contracts_document_prefix_and_meta_fields_are_embedded(minilm_contract):
    contract = minilm_contract.with_(document_prefix="passage: ", query_prefix="query: ")
    embedder = ContractDocumentEmbedder(
        contract=contract,
        meta_fields_to_embed=["title", "missing"],
        embedding_separator=" | ",
        progress_bar=False,
    )
    doc = Document(content="Steamed leaves.", meta={"title": "Green tea"})
    (got,) = embedder.run([doc])["documents"]
    core = Embedder(contract)
    np.testing.assert_allclose(
        got.embedding, core.embed_documents(["Green tea | Steamed leaves."])[0], atol=1e-6
    )
    assert not np.allclose(got.embedding, core.embed_queries(["Green tea | Steamed leaves."])[0])


def test_text_embedder_uses_the_query_role_and_outputs_the_fingerprint(minilm_contract):
    contract = minilm_contract.with_(query_prefix="query: ")
    embedder = ContractTextEmbedder(contract=contract)
    out = embedder.run("how is green tea made")
    assert out["fingerprint"] == contract.fingerprint
    core = Embedder(contract)
    np.testing.assert_allclose(out["embedding"], core.embed_query("how is green tea made"), 1e-6)
    assert isinstance(out["embedding"], list) and isinstance(out["embedding"][0], float)


def test_wrong_input_types_are_type_errors(minilm_contract):
    docs = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    text = ContractTextEmbedder(contract=minilm_contract)
    for bad in ("a string", ["a string"], Document(content="x"), None):
        with pytest.raises(TypeError, match="list of Documents"):
            docs.run(bad)  # type: ignore[arg-type]
    for bad in (["a"], [Document(content="x")], None, 3):
        with pytest.raises(TypeError, match="expects a string"):
            text.run(bad)  # type: ignore[arg-type]
    assert docs.run([])["documents"] == []


def test_warm_up_is_lazy_and_idempotent(minilm_contract):
    embedder = ContractTextEmbedder(contract=minilm_contract)
    assert embedder.embedder is None
    embedder.run("first")  # warms up on first use
    loaded = embedder.embedder
    assert loaded is not None
    embedder.warm_up()
    assert embedder.embedder is loaded


def test_run_async_gives_what_run_gives(minilm_contract):
    docs = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    text = ContractTextEmbedder(contract=minilm_contract)
    given = documents()[:2]
    sync_docs = docs.run(given)["documents"]
    async_docs = asyncio.run(docs.run_async(given))["documents"]
    assert [d.embedding for d in async_docs] == [d.embedding for d in sync_docs]
    assert asyncio.run(text.run_async("tea")) == text.run("tea")


def test_the_contract_can_be_a_dict_or_a_json_file(minilm_contract, tmp_path):
    path = tmp_path / "contract.json"
    path.write_text(minilm_contract.to_json())
    for given in (minilm_contract.to_dict(), str(path), path):
        assert ContractTextEmbedder(contract=given).contract == minilm_contract


def test_a_document_embedded_under_another_contract_is_not_re_stamped(minilm_contract):
    other = minilm_contract.with_(pooling="cls")
    (stamped,) = ContractDocumentEmbedder(contract=other, progress_bar=False).run(
        [Document(content="x")]
    )["documents"]
    with pytest.raises(ContractMismatchError) as info:
        ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False).run([stamped])
    assert info.value.fields == ("pooling",)


# -- the guarded path, on every store ------------------------------------------------------------


def test_a_query_pipeline_under_the_same_contract_finds_the_answers(
    minilm_contract, minilm, make_store
):
    store, retriever = make_store()
    result = indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    assert result["writer"]["documents_written"] == len(DOCS)
    pipe = querying(minilm_contract, store, retriever)
    found = ask(pipe, "how are green tea leaves processed")
    assert found[0].id == "tea"
    # The score is the cosine similarity under this (normalised) contract, in every store.
    query = minilm.embed_query("how are green tea leaves processed")
    for d in found:
        cosine = float(np.dot(query, minilm.embed_documents([DOCS[d.id]])[0]))
        assert d.score == pytest.approx(cosine, abs=1e-4)
    assert [d.score for d in found] == sorted((d.score for d in found), reverse=True)


@pytest.mark.parametrize(
    "changes",
    [
        {"pooling": "cls"},
        {"query_prefix": "query: "},
        {"normalize": False},
        {"truncate_dim": 128},
    ],
    ids=["pooling", "prefix", "normalize", "truncate"],
)
def test_a_query_pipeline_of_another_recipe_is_refused_with_the_field(
    minilm_contract, make_store, changes
):
    store, retriever = make_store()
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    other = minilm_contract.with_(**changes)
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(other, store, retriever), "how are green tea leaves processed")
    err = cause(info)
    assert isinstance(err, ContractMismatchError)
    (field,) = changes
    assert field in err.fields and f"{field}: index=" in str(err)
    assert err.index == minilm_contract and err.caller == other


def test_a_query_pipeline_of_another_model_is_refused(minilm_contract, make_store, tiny_st_factory):
    store, retriever = make_store()
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    tiny = contract_for(tiny_st_factory())
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(tiny, store, retriever), "tea")
    err = cause(info)
    assert isinstance(err, ContractMismatchError)
    assert {"model", "weights"} <= set(err.fields)


def test_writing_another_contracts_documents_is_refused_and_nothing_changes(
    minilm_contract, make_store
):
    store, _ = make_store()
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    before = snapshot(store)
    other = minilm_contract.with_(query_prefix="query: ", document_prefix="passage: ")
    new = [Document(id="new", content="Oolong is partly oxidised.")]
    with pytest.raises(PipelineRuntimeError) as info:
        indexing(other, store).run({"embedder": {"documents": new}})
    err = cause(info)
    assert isinstance(err, ContractMismatchError)
    assert "document_prefix" in err.fields
    assert snapshot(store) == before


def test_documents_not_embedded_by_ctxemb_are_refused(minilm_contract, minilm, make_store):
    store, _ = make_store()
    writer = ContractDocumentWriter(store)
    vector = minilm.embed_documents(["x"])[0].tolist()
    plain = [Document(id="p", content="x", embedding=vector)]
    with pytest.raises(MissingStampError, match="carries no 'ctxemb_fingerprint'"):
        writer.run(plain)
    assert store.count_documents() == 0


def test_a_mixed_batch_and_a_bad_vector_are_refused_whole(minilm_contract, make_store):
    store, _ = make_store()
    writer = ContractDocumentWriter(store)
    embed = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    other = ContractDocumentEmbedder(
        contract=minilm_contract.with_(pooling="max"), progress_bar=False
    )
    ours = embed.run(documents()[:2])["documents"]
    theirs = other.run(documents()[2:3])["documents"]
    with pytest.raises(ContractMismatchError) as info:
        writer.run([*ours, *theirs])
    assert info.value.fields == ("pooling",)
    short = [ours[0].__class__(id="s", content="x", meta=ours[0].meta, embedding=[0.1] * 12)]
    with pytest.raises(InvalidInputError, match=r"shape \(12,\)"):
        writer.run([ours[1], *short])
    assert store.count_documents() == 0


def test_duplicate_policies_as_in_haystack(minilm_contract, make_store):
    store, _ = make_store()
    embed = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    first = embed.run(documents()[:3])["documents"]
    assert ContractDocumentWriter(store).run(first)["documents_written"] == 3
    before = snapshot(store)
    changed = embed.run([Document(id="tea", content="Tea, changed."), *documents()[3:4]])
    batch = changed["documents"]
    with pytest.raises(DuplicateDocumentsError) as info:
        ContractDocumentWriter(store).run(batch)  # NONE is FAIL, as in Haystack
    assert isinstance(info.value, DuplicateDocumentError) and info.value.ids == ("tea",)
    assert "policy=DuplicatePolicy.OVERWRITE" in str(info.value)
    assert snapshot(store) == before  # nothing written, not even the new id
    skip = ContractDocumentWriter(store, policy=DuplicatePolicy.SKIP).run(batch)
    assert skip["documents_written"] == 1 and store.count_documents() == 4
    assert snapshot(store)["tea"] == before["tea"]
    over = ContractDocumentWriter(store).run(batch, policy=DuplicatePolicy.OVERWRITE)
    assert over["documents_written"] == 2
    assert snapshot(store)["tea"][0] == "Tea, changed."


def test_the_writer_and_retriever_refuse_other_stores_and_types(minilm_contract):
    with pytest.raises(TypeError, match="InMemoryDocumentStore and ChromaDocumentStore"):
        ContractDocumentWriter(object())
    with pytest.raises(TypeError, match="wraps an embedding retriever"):
        ContractRetriever(InMemoryDocumentStore())
    writer = ContractDocumentWriter(InMemoryDocumentStore())
    with pytest.raises(TypeError, match="list of Documents"):
        writer.run("text")  # type: ignore[arg-type]


def test_an_unnormalised_contract_scores_by_inner_product(minilm_contract, make_store):
    contract = minilm_contract.with_(normalize=False)
    store, retriever = make_store()
    indexing(contract, store).run({"embedder": {"documents": documents()}})
    found = ask(querying(contract, store, retriever), "slugs in the garden")
    core = Embedder(contract)
    query = core.embed_query("slugs in the garden")
    assert found[0].id == "slug"
    for d in found:
        dot = float(np.dot(query, core.embed_documents([DOCS[d.id]])[0]))
        assert d.score == pytest.approx(dot, rel=1e-4)


def test_a_chroma_collection_not_yet_written_returns_nothing_and_creates_nothing(
    minilm_contract, tmp_path
):
    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    assert ask(querying(minilm_contract, store, ChromaEmbeddingRetriever), "tea") == []
    import chromadb

    assert chromadb.PersistentClient(str(tmp_path)).list_collections() == []


def test_an_unstamped_chroma_collection_is_refused(minilm_contract, minilm, tmp_path):
    from haystack.components.writers import DocumentWriter

    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    vectors = minilm.embed_documents(list(DOCS.values()))
    plain = [
        Document(id=k, content=v, embedding=e.tolist())
        for (k, v), e in zip(DOCS.items(), vectors, strict=True)
    ]
    DocumentWriter(store).run(plain)  # around ctxemb
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(minilm_contract, store, ChromaEmbeddingRetriever), "tea")
    assert isinstance(cause(info), MissingStampError)


def test_an_in_memory_result_with_a_foreign_document_is_refused_whole(minilm_contract, minilm):
    store = InMemoryDocumentStore()
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    vector = minilm.embed_documents([DOCS["tea"]])[0].tolist()
    store.write_documents([Document(id="raw", content=DOCS["tea"], embedding=vector)])
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(minilm_contract, store, InMemoryEmbeddingRetriever), "green tea")
    err = cause(info)
    assert isinstance(err, MissingStampError) and "'raw'" in str(err)


# -- one collection, two adapters ----------------------------------------------------------------


def _cli(capsys, *args: str) -> str:
    from ctxemb_core.cli import main

    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("where", ["embedded", "server"])
def test_a_collection_indexed_by_ctxemb_chroma_is_read_through_haystack(
    minilm_contract, tmp_path, capsys, request, where
):
    name = fresh_name()
    if where == "embedded":
        args = ["--path", str(tmp_path)]
        store = ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path))
    else:
        port = request.getfixturevalue("server")
        args = ["--host", "127.0.0.1", "--port", str(port)]
        store = ChromaDocumentStore(collection_name=name, host="127.0.0.1", port=port)
    _cli(capsys, "index", str(demo_data.corpus_path()), "--collection", name, *args)
    queries = [json.loads(line)["text"] for line in demo_data.queries_path().open()]
    out = _cli(capsys, "query", *queries, "--collection", name, "-k", "10", "--json", *args)
    expected = [[r["id"] for r in json.loads(line)["results"]] for line in out.splitlines()]
    pipe = querying(minilm_contract, store, ChromaEmbeddingRetriever, top_k=10)
    for query, ids in zip(queries, expected, strict=True):
        found = ask(pipe, query)
        assert [d.id for d in found] == ids
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(minilm_contract.with_(pooling="cls"), store, ChromaEmbeddingRetriever), "x")
    assert cause(info).fields == ("pooling",)  # type: ignore[attr-defined]


def test_a_collection_written_through_haystack_is_opened_by_ctxemb_chroma(
    minilm_contract, tmp_path
):
    import chromadb

    from ctxemb_chroma import open_collection

    name = fresh_name()
    store = ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path))
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    client = chromadb.PersistentClient(str(tmp_path))
    collection = open_collection(client, name, minilm_contract, create=False, sample=100)
    result = collection.query(["slugs eat my lettuce"], n_results=1)
    assert result["ids"] == [["slug"]]
    with pytest.raises(ContractMismatchError) as info:
        open_collection(client, name, minilm_contract.with_(normalize=False), create=False)
    assert info.value.fields == ("normalize",)


# -- serialisation -------------------------------------------------------------------------------


def _components(contract, tmp_path):
    memory = InMemoryDocumentStore()
    chroma = ChromaDocumentStore(collection_name="c-ser", persist_path=str(tmp_path))
    return [
        ContractDocumentEmbedder(
            contract=contract, meta_fields_to_embed=["title"], embedding_separator=" / "
        ),
        ContractTextEmbedder(contract=contract, batch_size=8),
        ContractDocumentWriter(memory, policy=DuplicatePolicy.SKIP, sample=4),
        ContractDocumentWriter(chroma),
        ContractRetriever(InMemoryEmbeddingRetriever(memory, top_k=7)),
        ContractRetriever(ChromaEmbeddingRetriever(chroma, top_k=5), sample=0),
    ]


def test_to_dict_and_from_dict_round_trip_exactly(minilm_contract, tmp_path):
    for component in _components(minilm_contract.with_(query_prefix="query: "), tmp_path):
        data = component.to_dict()
        assert json.loads(json.dumps(data)) == data  # plain JSON, YAML-ready
        back = type(component).from_dict(json.loads(json.dumps(data)))
        assert back.to_dict() == data
    data = _components(minilm_contract, tmp_path)[0].to_dict()
    assert data["init_parameters"]["contract"] == minilm_contract.to_dict()


_CHILD = """
import json, sys
from haystack import Document, Pipeline
from haystack.core.errors import DeserializationError

texts = [open(path).read() for path in sys.argv[1:3]]
docs = [Document(id=k, content=v) for k, v in json.loads(sys.argv[3]).items()]


def run(**trust):
    indexing, query = (Pipeline.loads(text, **trust) for text in texts)
    indexing.run({"embedder": {"documents": docs}})
    out = query.run({"embedder": {"text": "how are green tea leaves processed"}},
                    include_outputs_from={"embedder"})
    return {
        "embedding": out["embedder"]["embedding"],
        "ids": [d.id for d in out["retriever"]["documents"]],
        "scores": [d.score for d in out["retriever"]["documents"]],
    }


refused = []
for text in texts:
    try:
        Pipeline.loads(text)
    except DeserializationError:
        refused.append(True)
    else:
        refused.append(False)
unimported = "ctxemb_haystack" not in sys.modules
allowed = run(allowed_modules=["ctxemb_haystack"])
import ctxemb_haystack
imported = run()
print(json.dumps({
    "refused": refused, "unimported": unimported, "allowed": allowed, "imported": imported,
}))
"""


def _child(tmp_path: Path, files: tuple[Path, Path]):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False"}
    env.pop("HAYSTACK_DESERIALIZATION_ALLOWLIST", None)
    return subprocess.run(
        [sys.executable, str(script), str(files[0]), str(files[1]), json.dumps(DOCS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.mark.heavy
@pytest.mark.parametrize("model", ["bundled", "tiny-folder"])
def test_pipelines_dumped_to_yaml_embed_identically_in_a_new_process(
    minilm_contract, tiny_st_factory, tmp_path, model
):
    # A model folder no name resolves (the tiny one) is found again from the path it was found
    # at, which the YAML carries as a hint (the weights digest decides).
    contract = minilm_contract if model == "bundled" else contract_for(tiny_st_factory(seed=5))
    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path / "db"))
    files = (tmp_path / "indexing.yaml", tmp_path / "query.yaml")
    # Each load in the child indexes the same documents again: the policy travels in the YAML too.
    files[0].write_text(indexing(contract, store, DuplicatePolicy.OVERWRITE).dumps())
    query = querying(contract, store, ChromaEmbeddingRetriever)
    files[1].write_text(query.dumps())
    assert Pipeline.loads(files[1].read_text()).to_dict() == query.to_dict()

    # This process's vectors first: they also leave the network's ONNX export in the run's
    # cache, which the child finds there (it makes the tiny folder's own otherwise).
    here = ContractTextEmbedder(contract=contract).run("how are green tea leaves processed")

    # One new process (each costs seconds: Haystack imports torch) loads the pair three ways,
    # in the order that keeps each one honest: first with neither the import nor an allowlist,
    # where Haystack refuses our module, as it refuses any it does not trust (both files, and
    # before importing anything of ours); then with Haystack's own per-call allowlist argument
    # alone, which is enough without the import (and resolves the model from the YAML in a
    # fresh process); then after ``import ctxemb_haystack``, with no allowlist. (The import
    # first, in a fresh process, is what the YAML children of test_haystack_edge_cases,
    # test_haystack_pgvector and test_haystack_rerank do.)
    done = _child(tmp_path, files)
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads(done.stdout.splitlines()[-1])
    assert child["refused"] == [True, True] and child["unimported"]
    for way in ("allowed", "imported"):
        np.testing.assert_allclose(child[way]["embedding"], here["embedding"], atol=1e-6)
        assert len(child[way]["ids"]) == 3
        if model == "bundled":
            assert child[way]["ids"][0] == "tea"
    assert child["imported"]["ids"] == child["allowed"]["ids"]


def test_an_empty_collection_the_store_created_first_is_refused_with_advice(
    minilm_contract, tmp_path
):
    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    assert store.count_documents() == 0  # creates the collection, unstamped
    embedded = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False).run(
        documents()
    )["documents"]
    with pytest.raises(MissingStampError, match="delete_collection"):
        ContractDocumentWriter(store).run(embedded)
    assert store.count_documents() == 0


def test_a_failed_first_write_creates_no_collection(minilm_contract, tmp_path):
    import chromadb

    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    embed = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    bad_batches = [
        [Document(id="a", content=None)],
        [Document(id="a", content="x", meta={"score": float("inf")})],
        [Document(id="a", content="x", meta={"$key": 1})],
    ]
    for batch in bad_batches:
        with pytest.raises(InvalidInputError):
            ContractDocumentWriter(store).run(embed.run(batch)["documents"])
    # Nothing was created, so nothing claims the name for this contract.
    assert chromadb.PersistentClient(str(tmp_path)).list_collections() == []
    other = minilm_contract.with_(pooling="cls")
    batch = ContractDocumentEmbedder(contract=other, progress_bar=False).run(documents()[:1])
    assert ContractDocumentWriter(store).run(batch["documents"])["documents_written"] == 1


def test_vectors_of_a_contract_this_process_never_built_are_refused(make_store):
    store, _ = make_store()
    bogus = Document(id="z", content="x", meta={FINGERPRINT_KEY: "0" * 64}, embedding=[1.0, 2.0])
    with pytest.raises(InvalidInputError, match="did not build"):
        ContractDocumentWriter(store).run([bogus])
    assert store.count_documents() == 0


def test_a_repeated_id_in_one_batch_is_named_as_such(minilm_contract, make_store):
    store, _ = make_store()
    twice = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False).run(
        [Document(id="a", content="x"), Document(id="a", content="y")]
    )["documents"]
    with pytest.raises(DuplicateDocumentsError, match="more than once in the batch"):
        ContractDocumentWriter(store).run(twice)
    assert store.count_documents() == 0


def test_the_writer_takes_a_policy_by_name_and_from_dict_leaves_its_input_alone():
    store = InMemoryDocumentStore()
    writer = ContractDocumentWriter(store, policy="overwrite")  # type: ignore[arg-type]
    assert writer.policy is DuplicatePolicy.OVERWRITE
    data = writer.to_dict()
    frozen = json.dumps(data, sort_keys=True)
    again = ContractDocumentWriter.from_dict(data)
    assert json.dumps(data, sort_keys=True) == frozen and again.to_dict() == data
    assert ContractDocumentWriter.from_dict(data).policy is DuplicatePolicy.OVERWRITE
    with pytest.raises(InvalidInputError, match="policy must be"):
        ContractDocumentWriter(store, policy="sometimes")  # type: ignore[arg-type]


def test_another_width_outside_the_in_memory_sample_is_named_as_a_contract(
    minilm_contract, tiny_st_factory
):
    store = InMemoryDocumentStore()
    embed = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    filler = [Document(id=f"f{k}", content=f"filler {k}") for k in range(20)]
    ContractDocumentWriter(store).run(embed.run(filler[:10])["documents"])
    tiny = contract_for(tiny_st_factory())
    (odd,) = ContractDocumentEmbedder(contract=tiny, progress_bar=False).run(
        [Document(id="tiny", content="tiny")]
    )["documents"]
    store.write_documents([odd])  # around the guard, in the middle of the store
    store.write_documents(embed.run(filler[10:])["documents"])
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(minilm_contract, store, InMemoryEmbeddingRetriever), "tea")
    err = cause(info)
    assert isinstance(err, ContractMismatchError) and err.documents == ("tiny",)
