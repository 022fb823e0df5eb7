"""An independent tester's probes of the Haystack adapter: unusual but legitimate inputs, run-time
filters and top_k, async pipelines, store settings, quantised contracts, serialisation."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import DOCS, fresh_name
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.core.errors import PipelineRuntimeError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_core import Embedder
from ctxemb_core.documents import FINGERPRINT_KEY, TEXT_KEY
from ctxemb_core.errors import (
    ContractMismatchError,
    CtxembError,
    InvalidInputError,
)
from ctxemb_core.guard import storable
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
    DuplicateDocumentsError,
)

QUESTION = "how are green tea leaves processed"


@pytest.fixture(params=["memory", "chroma-embedded", "chroma-server"])
def make_store(request, tmp_path):
    """A fresh empty store of the parametrised kind, and the retriever class that reads it."""

    def make(**options):
        if request.param == "memory":
            return InMemoryDocumentStore(**options), InMemoryEmbeddingRetriever
        if request.param == "chroma-embedded":
            where = {"persist_path": str(tmp_path)}
        else:
            where = {"host": "127.0.0.1", "port": request.getfixturevalue("server")}
        return ChromaDocumentStore(collection_name=fresh_name(), **where, **options), (
            ChromaEmbeddingRetriever
        )

    return make


@pytest.fixture(scope="module")
def embed(minilm_contract):
    return ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)


@pytest.fixture(scope="module")
def text(minilm_contract):
    return ContractTextEmbedder(contract=minilm_contract)


def documents() -> list[Document]:
    water = {"tea", "river"}
    return [
        Document(
            id=k,
            content=v,
            meta={"topic": k, "group": "water" if k in water else "land", "n": len(k)},
        )
        for k, v in DOCS.items()
    ]


def contents(store) -> dict[str, str | None]:
    return {d.id: d.content for d in store.filter_documents()}


def query_pipeline(contract, retriever) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(contract=contract))
    pipe.add_component("retriever", ContractRetriever(retriever))
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("embedder.fingerprint", "retriever.fingerprint")
    return pipe


def index_pipeline(contract, store, policy=DuplicatePolicy.NONE) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractDocumentEmbedder(contract=contract, progress_bar=False))
    pipe.add_component("writer", ContractDocumentWriter(store, policy=policy))
    pipe.connect("embedder.documents", "writer.documents")
    return pipe


def retrieve(retriever, text_embedder, question=QUESTION, **kwargs) -> list[Document]:
    q = text_embedder.run(question)
    return ContractRetriever(retriever).run(q["embedding"], q["fingerprint"], **kwargs)["documents"]


# -- embedders: unusual inputs -------------------------------------------------------------------


def test_a_document_without_content_is_embedded_as_empty_text_like_haystack(minilm_contract, embed):
    given = Document(id="blank", content=None, meta={"k": 1})
    (got,) = embed.run([given])["documents"]
    assert given.embedding is None and given.meta == {"k": 1}  # input unchanged
    assert got.content is None and got.meta[FINGERPRINT_KEY] == minilm_contract.fingerprint
    expected = Embedder(minilm_contract).embed_documents([""])[0]
    np.testing.assert_allclose(got.embedding, expected, atol=1e-6)


def test_a_document_without_content_is_refused_by_chroma_and_nothing_is_written(embed, tmp_path):
    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    batch = embed.run([Document(id="a", content="alpha"), Document(id="b", content=None)])
    with pytest.raises(InvalidInputError, match="'b' has no text content"):
        ContractDocumentWriter(store).run(batch["documents"])
    assert store.count_documents() == 0


def test_meta_with_lists_none_and_nested_values_is_copied_not_shared_at_top_level(embed):
    meta = {"tags": ["a", "b"], "none": None, "nested": {"x": {"y": 1}}}
    given = Document(id="m", content="tea", meta=meta)
    (got,) = embed.run([given])["documents"]
    assert given.meta == meta and FINGERPRINT_KEY not in given.meta
    assert {k: v for k, v in got.meta.items() if k not in (FINGERPRINT_KEY, TEXT_KEY)} == meta
    got.meta["added"] = True
    assert "added" not in given.meta


def test_meta_fields_follow_haystack_none_skipped_other_values_stringified(minilm_contract):
    embedder = ContractDocumentEmbedder(
        contract=minilm_contract,
        meta_fields_to_embed=["tags", "none", "zero"],
        embedding_separator=" | ",
        progress_bar=False,
    )
    doc = Document(content="body", meta={"tags": ["a", "b"], "none": None, "zero": 0})
    (got,) = embedder.run([doc])["documents"]
    expected = Embedder(minilm_contract).embed_documents(["['a', 'b'] | 0 | body"])[0]
    np.testing.assert_allclose(got.embedding, expected, atol=1e-6)


def test_duplicate_ids_inside_a_batch_are_embedded_each(embed):
    got = embed.run([Document(id="a", content="one"), Document(id="a", content="two")])
    assert [d.id for d in got["documents"]] == ["a", "a"]
    assert got["documents"][0].embedding != got["documents"][1].embedding


def test_texts_beyond_the_token_limit_are_truncated_not_refused(embed, text):
    long, longer = "tea " * 2_000, "tea " * 20_000
    a, b = embed.run([Document(content=long), Document(content=longer)])["documents"]
    np.testing.assert_allclose(a.embedding, b.embedding, atol=1e-6)
    np.testing.assert_allclose(text.run(long)["embedding"], text.run(longer)["embedding"], 1e-6)


def test_unicode_and_empty_queries_embed_and_split_surrogates_are_a_typed_error(text):
    for query in ("", "   ", "緑茶 🍵 مرحبا \u200b", "a\x00b"):
        out = text.run(query)
        assert len(out["embedding"]) == 384 and np.isfinite(out["embedding"]).all()
    with pytest.raises(InvalidInputError, match="surrogate"):
        text.run("a\ud800b")


def test_pipeline_warm_up_twice_builds_one_model(minilm_contract):
    pipe = query_pipeline(minilm_contract, InMemoryEmbeddingRetriever(InMemoryDocumentStore()))
    embedder = pipe.get_component("embedder")
    assert embedder.embedder is None
    pipe.warm_up()
    loaded = embedder.embedder
    assert loaded is not None
    pipe.warm_up()
    embedder.warm_up()
    pipe.run({"embedder": {"text": "tea"}})
    assert embedder.embedder is loaded


# -- the writer: policies, empty and failing batches ---------------------------------------------


@pytest.mark.parametrize("policy", [DuplicatePolicy.NONE, DuplicatePolicy.FAIL])
def test_a_repeated_id_inside_one_batch_fails_whole(embed, make_store, policy):
    store, _ = make_store()
    batch = embed.run(
        [Document(id="a", content="one"), Document(id="b", content="b"), Document(id="a")]
    )["documents"]
    with pytest.raises(DuplicateDocumentsError) as info:
        ContractDocumentWriter(store, policy=policy).run(batch)
    assert info.value.ids == ("a",)
    assert store.count_documents() == 0


def test_a_repeated_id_inside_one_batch_skip_keeps_first_overwrite_keeps_last(embed, make_store):
    batch = embed.run(
        [
            Document(id="a", content="first"),
            Document(id="a", content="second"),
            Document(id="b", content="other"),
        ]
    )["documents"]
    store, _ = make_store()
    skip = ContractDocumentWriter(store, policy=DuplicatePolicy.SKIP).run(batch)
    assert skip == {"documents_written": 2}
    assert contents(store) == {"a": "first", "b": "other"}
    store, _ = make_store()
    over = ContractDocumentWriter(store).run(batch, policy=DuplicatePolicy.OVERWRITE)
    assert over == {"documents_written": 2}
    assert contents(store) == {"a": "second", "b": "other"}


def test_an_empty_batch_writes_nothing_and_creates_no_collection(embed, tmp_path):
    import chromadb

    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    assert ContractDocumentWriter(store).run([]) == {"documents_written": 0}
    assert asyncio.run(ContractDocumentWriter(store).run_async([])) == {"documents_written": 0}
    assert chromadb.PersistentClient(str(tmp_path)).list_collections() == []
    memory = InMemoryDocumentStore()
    assert ContractDocumentWriter(memory).run(embed.run([])["documents"]) == {
        "documents_written": 0
    }
    assert memory.count_documents() == 0


def test_a_failing_overwrite_loses_and_changes_nothing(minilm_contract, embed, make_store):
    store, _ = make_store()
    ContractDocumentWriter(store).run(embed.run(documents())["documents"])
    before = {d.id: (d.content, tuple(d.embedding)) for d in store.filter_documents()}
    new_tea, slug = embed.run(
        [Document(id="tea", content="Tea, rewritten."), Document(id="slug", content="x")]
    )["documents"]
    short = Document(id="short", content="s", meta=dict(slug.meta), embedding=[0.5] * 10)
    writer = ContractDocumentWriter(store, policy=DuplicatePolicy.OVERWRITE)
    with pytest.raises(InvalidInputError, match="'short'"):
        writer.run([new_tea, short])
    nan = Document(id="nan", content="n", meta=dict(slug.meta), embedding=[float("nan")] * 384)
    with pytest.raises(InvalidInputError, match="NaN"):
        writer.run([new_tea, nan])
    after = {d.id: (d.content, tuple(d.embedding)) for d in store.filter_documents()}
    assert after == before


def test_chroma_refuses_unstorable_meta_before_overwriting_anything(embed, tmp_path):
    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    ContractDocumentWriter(store).run(embed.run(documents()[:2])["documents"])
    before = contents(store)
    batch = embed.run(
        [
            Document(id="tea", content="Tea, rewritten."),
            Document(id="new", content="n", meta={"score": float("inf")}),
        ]
    )["documents"]
    with pytest.raises(InvalidInputError, match="'score' = inf"):
        ContractDocumentWriter(store, policy=DuplicatePolicy.OVERWRITE).run(batch)
    bad_key = embed.run([Document(id="k", content="k", meta={"$where": 1})])["documents"]
    with pytest.raises(InvalidInputError, match="reserved by Chroma"):
        ContractDocumentWriter(store).run(bad_key)
    assert contents(store) == before


def test_meta_chroma_cannot_hold_is_left_out_with_a_warning_lists_kept(
    minilm_contract, embed, make_store, caplog
):
    store, retriever_cls = make_store()
    meta = {"tags": ["a", "b"], "w": [1.5, 2.5], "flag": True, "none": None, "nested": {"x": 1}}
    batch = embed.run([Document(id="日本🍵", content="緑茶は蒸される", meta=meta)])["documents"]
    with caplog.at_level(logging.WARNING):
        assert ContractDocumentWriter(store).run(batch) == {"documents_written": 1}
    (found,) = retrieve(retriever_cls(store), ContractTextEmbedder(contract=minilm_contract), "茶")
    assert found.id == "日本🍵" and found.content == "緑茶は蒸される"
    assert {k: found.meta[k] for k in ("tags", "w", "flag")} == {
        "tags": ["a", "b"],
        "w": [1.5, 2.5],
        "flag": True,
    }
    if isinstance(store, ChromaDocumentStore):
        assert "none" not in found.meta and "nested" not in found.meta
        assert "'nested'" in caplog.text
    else:
        assert found.meta["nested"] == {"x": 1}


# -- the retriever: filters, top_k, scores -------------------------------------------------------


def test_run_time_filters_and_top_k_apply_through_the_guard(minilm_contract, make_store, text):
    store, retriever_cls = make_store()
    ContractDocumentWriter(store).run(
        ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False).run(documents())[
            "documents"
        ]
    )
    retriever = retriever_cls(store, top_k=5)
    water = {"field": "meta.group", "operator": "==", "value": "water"}
    assert [d.id for d in retrieve(retriever, text, "bank", filters=water)] == ["river", "tea"]
    assert [d.id for d in retrieve(retriever, text, "bank", filters=water, top_k=1)] == ["river"]
    longer = {"field": "meta.n", "operator": ">", "value": 4}
    assert {d.id for d in retrieve(retriever, text, "bank", filters=longer)} == {"river"}
    assert len(retrieve(retriever, text, "bank", top_k=100)) == len(DOCS)
    land = retriever_cls(
        store, top_k=10, filters={"field": "meta.group", "operator": "==", "value": "land"}
    )
    assert {d.id for d in retrieve(land, text, "bank")} == set(DOCS) - {"tea", "river"}


@pytest.mark.parametrize("distance", ["l2", "cosine", "ip"])
def test_a_chroma_store_of_any_distance_function_scores_cosine(
    minilm_contract, minilm, embed, text, tmp_path, distance
):
    store = ChromaDocumentStore(
        collection_name=fresh_name(), persist_path=str(tmp_path), distance_function=distance
    )
    ContractDocumentWriter(store).run(embed.run(documents())["documents"])
    found = retrieve(ChromaEmbeddingRetriever(store, top_k=6), text)
    query = minilm.embed_query(QUESTION)
    vectors = dict(zip(DOCS, minilm.embed_documents(list(DOCS.values())), strict=True))
    expected = sorted(DOCS, key=lambda k: -float(query @ vectors[k]))
    assert [d.id for d in found] == expected
    for d in found:
        assert d.score == pytest.approx(float(query @ vectors[d.id]), abs=1e-4)


def test_an_in_memory_cosine_store_and_scale_score_give_the_same_cosine(minilm, embed, text):
    query = minilm.embed_query(QUESTION)
    scores = []
    for store, scale in (
        (InMemoryDocumentStore(embedding_similarity_function="cosine"), True),
        (InMemoryDocumentStore(), True),
        (InMemoryDocumentStore(), False),
    ):
        ContractDocumentWriter(store).run(embed.run(documents())["documents"])
        found = retrieve(InMemoryEmbeddingRetriever(store, top_k=3, scale_score=scale), text)
        for d in found:
            cosine = float(query @ minilm.embed_documents([DOCS[d.id]])[0])
            assert d.score == pytest.approx(cosine, abs=1e-4)
        scores.append([(d.id, round(d.score, 4)) for d in found])
    assert scores[0] == scores[1] == scores[2]


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_a_quantised_contract_in_chroma_scores_the_cosine_of_its_stored_form(
    minilm_contract, tmp_path, precision
):
    contract = minilm_contract.with_(precision=precision)
    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    index_pipeline(contract, store).run({"embedder": {"documents": documents()}})
    embedder = ContractTextEmbedder(contract=contract)
    found = retrieve(ChromaEmbeddingRetriever(store, top_k=6), embedder)
    core = Embedder(contract)
    query = storable(core.embed_query(QUESTION), contract.precision)
    rows = storable(core.embed_documents(list(DOCS.values())), contract.precision)
    if precision == "binary":
        assert set(np.unique(rows)) == {-1.0, 1.0}
    vectors = dict(zip(DOCS, rows, strict=True))
    assert found[0].id == "tea"
    for d in found:
        v = vectors[d.id]
        cosine = float(query @ v / (np.linalg.norm(query) * np.linalg.norm(v)))
        assert d.score == pytest.approx(cosine, abs=1e-4)
        assert d.embedding == pytest.approx(v.tolist(), abs=1e-4)
    memory = InMemoryDocumentStore()
    index_pipeline(contract, memory).run({"embedder": {"documents": documents()}})
    in_memory = retrieve(InMemoryEmbeddingRetriever(memory, top_k=6), embedder)
    assert [d.id for d in in_memory] == [d.id for d in found]


def test_a_query_of_another_recipe_is_refused_on_every_store_even_with_filters(
    minilm_contract, make_store
):
    store, retriever_cls = make_store()
    index_pipeline(minilm_contract, store).run({"embedder": {"documents": documents()}})
    other = ContractTextEmbedder(contract=minilm_contract.with_(max_tokens=128))
    nothing = {"field": "meta.group", "operator": "==", "value": "nowhere"}
    with pytest.raises(ContractMismatchError) as info:
        retrieve(retriever_cls(store), other, filters=nothing)
    assert info.value.fields == ("max_tokens",)


def test_a_bad_fingerprint_input_is_a_typed_error(minilm_contract, minilm, make_store, text):
    store, retriever_cls = make_store()
    index_pipeline(minilm_contract, store).run({"embedder": {"documents": documents()[:2]}})
    retriever = ContractRetriever(retriever_cls(store))
    vector = text.run("tea")["embedding"]
    with pytest.raises(TypeError, match="fingerprint must be a string"):
        retriever.run(vector, None)  # type: ignore[arg-type]
    for junk in ("", "junk", minilm_contract.fingerprint.upper()):
        with pytest.raises(CtxembError):
            retriever.run(vector, junk)


def test_a_warm_retriever_sees_a_collection_recreated_under_another_contract(
    minilm_contract, embed, text, tmp_path
):
    import chromadb

    from ctxemb_chroma import open_collection

    name = fresh_name()
    store = ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path))
    writer = ContractDocumentWriter(store, policy=DuplicatePolicy.OVERWRITE)
    writer.run(embed.run(documents()[:2])["documents"])
    retriever = ContractRetriever(ChromaEmbeddingRetriever(store, top_k=2))
    q = text.run("tea")
    assert len(retriever.run(q["embedding"], q["fingerprint"])["documents"]) == 2
    client = chromadb.PersistentClient(str(tmp_path))
    client.delete_collection(name)
    other = minilm_contract.with_(pooling="cls")
    open_collection(client, name, Embedder(other), create=True).add(["x"], ["other"])
    with pytest.raises(ContractMismatchError) as info:
        retriever.run(q["embedding"], q["fingerprint"])
    assert info.value.fields == ("pooling",)
    with pytest.raises(ContractMismatchError):
        writer.run(embed.run([Document(id="z", content="z")])["documents"])
    assert client.get_collection(name).get()["ids"] == ["x"]


def test_an_ephemeral_chroma_store_is_guarded_like_a_persistent_one(minilm_contract, embed, text):
    store = ChromaDocumentStore(collection_name=fresh_name())
    assert ContractDocumentWriter(store).run(embed.run(documents())["documents"]) == {
        "documents_written": len(DOCS)
    }
    assert store.count_documents() == len(DOCS)
    assert retrieve(ChromaEmbeddingRetriever(store), text)[0].id == "tea"
    other = ContractTextEmbedder(contract=minilm_contract.with_(normalize=False))
    with pytest.raises(ContractMismatchError):
        retrieve(ChromaEmbeddingRetriever(store), other)


# -- async pipelines -----------------------------------------------------------------------------


def test_async_pipelines_index_query_and_refuse(minilm_contract, make_store):
    store, retriever_cls = make_store()
    indexing = index_pipeline(minilm_contract, store)
    written = asyncio.run(indexing.run_async({"embedder": {"documents": documents()}}))
    assert written["writer"]["documents_written"] == len(DOCS)
    query = query_pipeline(minilm_contract, retriever_cls(store, top_k=2))
    out = asyncio.run(
        query.run_async(
            {
                "embedder": {"text": QUESTION},
                "retriever": {
                    "filters": {"field": "meta.group", "operator": "==", "value": "land"}
                },
            }
        )
    )
    assert [d.id for d in out["retriever"]["documents"]] == [
        d.id
        for d in query.run(
            {
                "embedder": {"text": QUESTION},
                "retriever": {
                    "filters": {"field": "meta.group", "operator": "==", "value": "land"}
                },
            }
        )["retriever"]["documents"]
    ]
    other = minilm_contract.with_(document_prefix="passage: ")
    with pytest.raises(PipelineRuntimeError) as info:
        asyncio.run(
            index_pipeline(other, store).run_async(
                {"embedder": {"documents": [Document(id="new", content="x")]}}
            )
        )
    assert isinstance(info.value.__cause__, ContractMismatchError)
    with pytest.raises(PipelineRuntimeError) as info:
        asyncio.run(
            query_pipeline(other, retriever_cls(store)).run_async({"embedder": {"text": "x"}})
        )
    assert info.value.__cause__.fields == ("document_prefix",)  # type: ignore[attr-defined]
    assert store.count_documents() == len(DOCS)


def test_concurrent_async_queries_share_one_model(minilm_contract, embed):
    store = InMemoryDocumentStore()
    ContractDocumentWriter(store).run(embed.run(documents())["documents"])
    embedder = ContractTextEmbedder(contract=minilm_contract)
    retriever = ContractRetriever(InMemoryEmbeddingRetriever(store, top_k=1))

    async def ask(question: str) -> str:
        q = await embedder.run_async(question)
        found = await retriever.run_async(q["embedding"], q["fingerprint"])
        return found["documents"][0].id

    async def main() -> list[str]:
        return await asyncio.gather(ask("green tea"), ask("slugs"), ask("moon phases"))

    assert asyncio.run(main()) == ["tea", "slug", "moon"]
    assert embedder.embedder is not None


# -- serialisation -------------------------------------------------------------------------------


def test_components_from_a_json_contract_file_serialise_the_contract_whole(
    minilm_contract, tmp_path
):
    contract = minilm_contract.with_(query_prefix="query: ")
    path = tmp_path / "contract.json"
    path.write_text(contract.to_json())
    for component in (
        ContractTextEmbedder(contract=path),
        ContractDocumentEmbedder(contract=str(path), meta_fields_to_embed=["t"]),
    ):
        data = component.to_dict()
        assert data["init_parameters"]["contract"] == contract.to_dict()
        path.unlink(missing_ok=True)  # the dict no longer needs the file
        back = type(component).from_dict(json.loads(json.dumps(data)))
        assert back.contract == contract and back.to_dict() == data
        path.write_text(contract.to_json())


def test_pipelines_with_both_stores_round_trip_through_yaml(minilm_contract, tmp_path):
    memory = InMemoryDocumentStore(embedding_similarity_function="cosine")
    chroma = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    water = {"field": "meta.group", "operator": "==", "value": "water"}
    for store, retriever in (
        (memory, InMemoryEmbeddingRetriever(memory, top_k=4, filters=water)),
        (chroma, ChromaEmbeddingRetriever(chroma, top_k=4, filters=water)),
    ):
        for pipe in (
            index_pipeline(minilm_contract, store, DuplicatePolicy.SKIP),
            query_pipeline(minilm_contract, retriever),
        ):
            loaded = Pipeline.loads(pipe.dumps())
            assert loaded.to_dict() == pipe.to_dict()
            assert loaded.dumps() == pipe.dumps()


_CHILD = """
import json, sys
from haystack import Document, Pipeline
import ctxemb_haystack
indexing = Pipeline.loads(open(sys.argv[1]).read())
query = Pipeline.loads(open(sys.argv[2]).read())
docs = [Document(id=k, content=v) for k, v in json.loads(sys.argv[3]).items()]
written = indexing.run({"embedder": {"documents": docs}})["writer"]["documents_written"]
out = query.run({"embedder": {"text": sys.argv[4]}}, include_outputs_from={"embedder"})
print(json.dumps({
    "written": written,
    "embedding": out["embedder"]["embedding"],
    "found": [[d.id, d.score] for d in out["retriever"]["documents"]],
}))
"""


@pytest.mark.heavy
def test_an_in_memory_pipeline_pair_loaded_from_yaml_in_a_new_process(
    minilm_contract, minilm, tmp_path
):
    # Two pipelines loaded from YAML share an InMemoryDocumentStore through its index name.
    store = InMemoryDocumentStore(index=fresh_name())
    files = (tmp_path / "indexing.yaml", tmp_path / "query.yaml")
    files[0].write_text(index_pipeline(minilm_contract, store).dumps())
    files[1].write_text(
        query_pipeline(minilm_contract, InMemoryEmbeddingRetriever(store, top_k=2)).dumps()
    )
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(_CHILD))
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    env.pop("HAYSTACK_DESERIALIZATION_ALLOWLIST", None)
    done = subprocess.run(
        [sys.executable, str(script), *map(str, files), json.dumps(DOCS), QUESTION],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads(done.stdout.splitlines()[-1])
    assert child["written"] == len(DOCS)
    query = minilm.embed_query(QUESTION)
    np.testing.assert_allclose(child["embedding"], query, atol=1e-6)
    assert child["found"][0][0] == "tea"
    for doc_id, score in child["found"]:
        assert score == pytest.approx(
            float(query @ minilm.embed_documents([DOCS[doc_id]])[0]), abs=1e-4
        )
