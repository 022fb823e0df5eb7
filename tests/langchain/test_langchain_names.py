"""LangChain components built the way LangChain users build them: ``model_name=`` plus options.

``HuggingFaceEmbeddings(model_name=...)`` is what a LangChain user writes; ``ContractEmbeddings``
and the rerank compressors take the same, derive the contract with ``contract_for`` and keep
(and pickle) the contract they resolved to. LangChain's own standard suite runs on the
``model_name=`` form too.
"""

from __future__ import annotations

import pickle
from typing import Any

import chromadb
import pytest
from conftest import DOCS, MINILM, fresh_name
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests
from tiny_models import build_cross_encoder

from ctxemb_core import contract_for
from ctxemb_core.errors import InvalidInputError, ModelNotFoundError
from ctxemb_core.rerank import rerank_contract_for
from ctxemb_langchain import (
    ContractChroma,
    ContractCrossEncoderReranker,
    ContractEmbeddings,
    ContractLateInteractionReranker,
)

QUESTION = "how are green tea leaves processed"


class TestModelNameEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return ContractEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"model_name": MINILM}


class TestModelNameEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return ContractEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"model_name": MINILM, "truncate_dim": 128}


def test_model_name_embeddings_equal_the_contract_form_and_keep_its_recipe():
    options = {"truncate_dim": 256, "query_prefix": "query: ", "document_prefix": "passage: "}
    by_name = ContractEmbeddings(model_name=MINILM, **options)
    pinned = contract_for(MINILM, **options)
    by_contract = ContractEmbeddings(pinned)
    assert by_name.contract == pinned
    assert by_name.config == by_contract.config  # what a copy or another process rebuilds from
    texts = list(DOCS.values())
    assert by_name.embed_documents(texts) == by_contract.embed_documents(texts)
    assert by_name.embed_query(QUESTION) == by_contract.embed_query(QUESTION)
    again = pickle.loads(pickle.dumps(by_name))
    assert again.contract == pinned and again.embed_query(QUESTION) == by_name.embed_query(QUESTION)


def test_a_store_written_through_model_name_opens_under_the_contract_form(tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path))
    name = fresh_name()
    writer = ContractChroma(name, ContractEmbeddings(model_name=MINILM), client=client)
    writer.add_documents([Document(id=k, page_content=v) for k, v in DOCS.items()])
    reader = ContractChroma(name, ContractEmbeddings(contract_for(MINILM)), client=client)
    assert reader.similarity_search(QUESTION, k=1)[0].id == "tea"


def test_huggingface_embeddings_habits_map_or_are_refused_with_the_keywords_to_use():
    assert ContractEmbeddings(
        model_name=MINILM, normalize_embeddings=False
    ).contract == contract_for(MINILM, normalize=False)
    with pytest.raises(InvalidInputError, match=r"pass normalize=True as keywords"):
        ContractEmbeddings(model_name=MINILM, encode_kwargs={"normalize_embeddings": True})
    with pytest.raises(InvalidInputError, match=r"pass device='cpu' as keywords"):
        ContractEmbeddings(model_name=MINILM, model_kwargs={"device": "cpu"})
    with pytest.raises(InvalidInputError, match="one contract decides both roles"):
        ContractEmbeddings(model_name=MINILM, query_encode_kwargs={"prompt": "query: "})
    # What HuggingFaceEmbeddings takes by default asks for nothing: accepted.
    ContractEmbeddings(model_name=MINILM, encode_kwargs={}, multi_process=False)


def test_contract_and_model_name_together_or_a_name_as_contract_are_clear_errors(
    minilm_contract,
):
    with pytest.raises(InvalidInputError, match="both contract= and model_name="):
        ContractEmbeddings(minilm_contract, model_name=MINILM)
    with pytest.raises(InvalidInputError, match="needs a model: pass model_name="):
        ContractEmbeddings()
    with pytest.raises(InvalidInputError, match=r"pass model_name='all-MiniLM-L6-v2'"):
        ContractEmbeddings("all-MiniLM-L6-v2")
    with pytest.raises(ModelNotFoundError, match="nearest known names are 'all-MiniLM-L6-v2'"):
        ContractEmbeddings(model_name="all-MiniLM-L6-v3")


def test_rerank_compressors_take_model_name(tmp_path):
    folder = build_cross_encoder(tmp_path / "ce", seed=6)
    pinned = rerank_contract_for(folder, activation="sigmoid")
    by_name = ContractCrossEncoderReranker(model_name=folder, activation="sigmoid", top_n=2)
    by_contract = ContractCrossEncoderReranker(pinned, top_n=2)
    assert by_name.contract == pinned
    assert by_name.model_dump() == by_contract.model_dump()
    docs = [Document(page_content=v) for v in DOCS.values()]
    a = by_name.compress_documents(docs, QUESTION)
    b = by_contract.compress_documents(docs, QUESTION)
    assert [d.metadata for d in a] == [d.metadata for d in b]
    late = ContractLateInteractionReranker(model_name=MINILM, top_n=1)
    assert late.contract == rerank_contract_for(contract_for(MINILM))
    with pytest.raises(InvalidInputError, match="both contract= and model_name="):
        ContractCrossEncoderReranker(pinned, model_name=folder)
