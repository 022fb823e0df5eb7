"""The frameworks' own OpenAI embedders work against ``ctxemb serve`` unchanged (issue 27):
Haystack's ``OpenAITextEmbedder``/``OpenAIDocumentEmbedder`` and LangChain's
``OpenAIEmbeddings``, each giving the contract's vectors; and ctxemb's adapters embed through
the server with ``url=`` where a stamped collection written locally is read back."""

from __future__ import annotations

import numpy as np
import pytest
from embedding_server import serving

pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

DOCS = ["slugs eat lettuce at night", "tea leaves brew best below boiling", "tyres wear out"]


@pytest.fixture(scope="module")
def served(minilm):
    with serving(minilm) as service:
        yield service


def test_haystacks_openai_embedders_get_the_contracts_vectors(served, minilm):
    from haystack import Document
    from haystack.components.embedders import OpenAIDocumentEmbedder, OpenAITextEmbedder
    from haystack.utils import Secret

    options = {
        "api_key": Secret.from_token("unused"),
        "api_base_url": served.url + "/v1",
        "model": minilm.contract.model,
    }
    text = OpenAITextEmbedder(**options).run(text=DOCS[0])
    np.testing.assert_allclose(text["embedding"], minilm.embed_query(DOCS[0]), atol=1e-6)
    assert text["meta"]["usage"]["prompt_tokens"] == int(minilm.token_counts(DOCS[:1], "query")[0])
    documents = OpenAIDocumentEmbedder(**options).run(documents=[Document(content=d) for d in DOCS])
    got = np.array([d.embedding for d in documents["documents"]], dtype=np.float32)
    np.testing.assert_allclose(got, minilm.embed_documents(DOCS), atol=1e-6)


def test_langchains_openai_embeddings_get_the_contracts_vectors(served, minilm):
    from langchain_openai import OpenAIEmbeddings

    # check_embedding_ctx_length=False: send texts, not tiktoken's token ids (the server's own
    # tokenizer is part of the contract; it refuses token ids).
    embeddings = OpenAIEmbeddings(
        model=minilm.contract.model,
        base_url=served.url + "/v1",
        api_key="unused",
        check_embedding_ctx_length=False,
    )
    np.testing.assert_allclose(
        embeddings.embed_documents(DOCS), minilm.embed_documents(DOCS), atol=1e-6
    )
    np.testing.assert_allclose(
        embeddings.embed_query(DOCS[1]), minilm.embed_query(DOCS[1]), atol=1e-6
    )


def test_a_role_model_id_serves_an_asymmetric_contract_through_langchain(minilm_contract):
    from langchain_openai import OpenAIEmbeddings

    from ctxemb_core import Embedder

    e5ish = Embedder(minilm_contract.with_(query_prefix="query: ", document_prefix="passage: "))
    with serving(e5ish) as service:
        options = {
            "base_url": service.url + "/v1",
            "api_key": "unused",
            "check_embedding_ctx_length": False,
        }
        queries = OpenAIEmbeddings(model=f"{minilm_contract.model}:query", **options)
        documents = OpenAIEmbeddings(model=f"{minilm_contract.model}:document", **options)
        np.testing.assert_allclose(
            queries.embed_query("slugs"), e5ish.embed_query("slugs"), atol=1e-6
        )
        np.testing.assert_allclose(
            documents.embed_documents(DOCS), e5ish.embed_documents(DOCS), atol=1e-6
        )
        plain = OpenAIEmbeddings(model=minilm_contract.model, **options)
        with pytest.raises(Exception, match="input_type"):  # the 400, as openai raises it
            plain.embed_query("slugs")
