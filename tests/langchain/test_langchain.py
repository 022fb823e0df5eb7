"""The LangChain adapter on real stores: ContractEmbeddings in each role (sync and async),
ContractChroma on an embedded store and a Chroma server (refusals with the field named, whole
upserts, re-verification after a raw client changes the stamp), ContractVectorStore around
InMemoryVectorStore on every search path, ContractRetriever in an LCEL chain, and collections
shared with ctxemb_chroma and the Haystack adapter. No mocks: the bundled MiniLM, tiny models built
in code, real Chroma. The standard suites are in test_langchain_standard.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest
from conftest import DOCS, fresh_name
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_chroma import open_collection
from ctxemb_core import Embedder, IndexStamp, contract_for
from ctxemb_core import demo as demo_data
from ctxemb_core.documents import FINGERPRINT_KEY, TEXT_KEY, text_digest
from ctxemb_core.errors import (
    ContractMismatchError,
    InvalidInputError,
    MissingStampError,
)
from ctxemb_langchain import (
    ContractChroma,
    ContractEmbeddings,
    ContractRetriever,
    ContractVectorStore,
)

REPO = Path(__file__).resolve().parents[2]
QUESTION = "how are green tea leaves processed"


@pytest.fixture(scope="module")
def emb(minilm_contract) -> ContractEmbeddings:
    """One ContractEmbeddings for the module: the model loads once."""
    return ContractEmbeddings(minilm_contract)


def documents() -> list[Document]:
    return [Document(id=k, page_content=v, metadata={"topic": k}) for k, v in DOCS.items()]


def chroma_store(client: Any, emb: ContractEmbeddings, name: str | None = None, **kwargs: Any):
    """A ContractChroma on ``client``; sample=0 where opening speed matters more than sampling."""
    kwargs.setdefault("sample", 0)
    return ContractChroma(name or fresh_name(), emb, client=client, **kwargs)


def memory_store(emb: ContractEmbeddings) -> ContractVectorStore:
    return ContractVectorStore(InMemoryVectorStore(emb))


def snapshot(client: Any, name: str) -> tuple[Any, dict[str, tuple]]:
    """A collection's stamp and records as the store has them (read around ctxemb)."""
    raw = client.get_collection(name, embedding_function=None)
    got = raw.get(include=["documents", "metadatas", "embeddings"])
    records = {
        i: (d, m, tuple(np.round(e, 6)))
        for i, d, m, e in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }
    return dict(raw.metadata or {}), records


def restamp(client: Any, name: str, contract: Any) -> None:
    """Replace a collection's stamp with another contract's, as a raw client can."""
    raw = client.get_collection(name, embedding_function=None)
    raw.modify(metadata=IndexStamp.from_embedder(Embedder(contract)).to_metadata())


# -- ContractEmbeddings ---------------------------------------------------------------------------


def test_each_method_embeds_in_its_own_role(minilm_contract):
    contract = minilm_contract.with_(query_prefix="query: ", document_prefix="passage: ")
    embeddings = ContractEmbeddings(contract)
    core = Embedder(contract)
    texts = list(DOCS.values())
    docs = embeddings.embed_documents(texts)
    query = embeddings.embed_query(texts[0])
    assert isinstance(docs, list) and isinstance(docs[0], list) and isinstance(query[0], float)
    np.testing.assert_allclose(docs, core.embed_documents(texts), atol=1e-6)
    np.testing.assert_allclose(query, core.embed_query(texts[0]), atol=1e-6)
    # The same text in the two roles: different prefixes, different vectors.
    assert not np.allclose(query, docs[0], atol=1e-3)
    assert embeddings.fingerprint == contract.fingerprint


async def test_no_texts_give_no_vectors_as_in_every_langchain_embeddings(emb):
    # A store adding nothing (add_texts([])) asks for no vectors; the core Embedder refuses an
    # empty batch as a likely bug, the LangChain interface answers it.
    assert emb.embed_documents([]) == [] and await emb.aembed_documents([]) == []
    store = ContractVectorStore(InMemoryVectorStore(emb))
    assert store.add_texts([]) == [] and store.similarity_search("tea") == []


def test_the_contract_can_be_an_object_a_dict_or_a_json_file(minilm_contract, tmp_path):
    path = tmp_path / "contract.json"
    path.write_text(minilm_contract.to_json())
    for given in (minilm_contract, minilm_contract.to_dict(), str(path), path):
        assert ContractEmbeddings(given).contract == minilm_contract


async def test_async_gives_the_sync_vectors_without_blocking_the_loop(emb):
    texts = [f"Note {k}: green tea, bicycles and the Moon, item {k}." for k in range(64)]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        docs = await emb.aembed_documents(texts)
        query = await emb.aembed_query(QUESTION)
    finally:
        task.cancel()
    # The model ran on a worker thread: the loop kept running other tasks meanwhile.
    assert ticks >= 2
    assert docs == emb.embed_documents(texts)
    assert query == emb.embed_query(QUESTION)


def test_plain_embeddings_are_refused_by_every_guarded_class(tmp_path):
    fake = DeterministicFakeEmbedding(size=384)
    client = chromadb.PersistentClient(path=str(tmp_path))
    with pytest.raises(TypeError, match="ContractEmbeddings"):
        ContractChroma(fresh_name(), fake, client=client)
    with pytest.raises(TypeError, match="ContractEmbeddings"):
        ContractVectorStore(InMemoryVectorStore(fake))
    with pytest.raises(TypeError, match="ContractChroma or a ContractVectorStore"):
        ContractRetriever(vectorstore=InMemoryVectorStore(fake))
    assert client.list_collections() == []  # refused before the collection was made


# -- ContractChroma: refusals -----------------------------------------------------------------


@pytest.mark.transport
@pytest.mark.parametrize(
    "changes",
    [
        {"pooling": "cls"},
        {"query_prefix": "query: "},
        {"normalize": False},
        {"truncate_dim": 128},
    ],
    ids=["pooling", "query_prefix", "normalize", "truncate_dim"],
)
def test_contract_chroma_of_another_recipe_is_refused_with_the_field(
    client, emb, minilm_contract, changes
):
    store = chroma_store(client, emb)
    store.add_documents(documents())
    name = store._collection.name
    before = snapshot(client, name)
    other = minilm_contract.with_(**changes)
    with pytest.raises(ContractMismatchError) as info:
        chroma_store(client, ContractEmbeddings(other), name)
    (field,) = changes
    assert info.value.fields == (field,)
    assert f"{field}: index=" in str(info.value)
    assert info.value.index == minilm_contract and info.value.caller == other
    assert snapshot(client, name) == before  # nothing written, the stamp untouched


def test_contract_chroma_of_another_model_is_refused(client, emb, tiny_st_factory):
    store = chroma_store(client, emb)
    store.add_documents(documents())
    name = store._collection.name
    before = snapshot(client, name)
    tiny = ContractEmbeddings(contract_for(tiny_st_factory()))
    with pytest.raises(ContractMismatchError) as info:
        chroma_store(client, tiny, name)
    assert {"model", "weights"} <= set(info.value.fields)
    assert snapshot(client, name) == before


def test_collection_metadata_and_configuration_are_refused(emb, tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path))
    for kwarg in (
        {"collection_metadata": {"hnsw:space": "l2"}},
        {"collection_configuration": {"hnsw": {"space": "l2"}}},
        {"collection_metadata": {"hnsw:space": "cosine", "team": "search"}},
        {"collection_configuration": {"hnsw": {"space": "cosine", "ef_search": 10}}},
    ):
        with pytest.raises(TypeError, match=r"the contract decides|the contract.s stamp"):
            ContractChroma(fresh_name(), emb, client=client, **kwarg)
    assert client.list_collections() == []
    # Naming the space the contract's collection has anyway (as LangChain tutorials do) is fine.
    for kwarg in (
        {"collection_metadata": {"hnsw:space": "cosine"}},
        {"collection_configuration": {"hnsw": {"space": "cosine"}}},
    ):
        store = ContractChroma(fresh_name(), emb, client=client, **kwarg)
        assert store._collection.configuration["hnsw"]["space"] == "cosine"
        store.delete_collection()
    with pytest.raises(InvalidInputError, match="does not exist"):
        ContractChroma(fresh_name(), emb, client=client, create_collection_if_not_exists=False)
    assert client.list_collections() == []


def test_an_unstamped_collection_written_by_plain_chroma_is_refused(emb, tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path))
    name = fresh_name()
    Chroma(name, emb, client=client).add_documents(documents())  # around ctxemb
    with pytest.raises(MissingStampError):
        chroma_store(client, emb, name)


# -- ContractChroma: writes ------------------------------------------------------------------


@pytest.mark.transport
def test_writes_are_upserts_and_leave_the_callers_documents_alone(client, emb):
    store = chroma_store(client, emb)
    given = [Document(page_content=v, metadata={"topic": k}) for k, v in DOCS.items()]
    before = [d.model_copy(deep=True) for d in given]
    ids = store.add_documents(given)
    assert given == before  # no id, no stamp added to the caller's objects
    assert len(set(ids)) == len(DOCS) and store._collection.count() == len(DOCS)
    assert store.add_texts(["Matcha is ground green tea."], [{"topic": "tea"}], ids=[ids[0]])
    assert store._collection.count() == len(DOCS)  # replaced, not added
    (got,) = store.get_by_ids([ids[0]])
    assert got == Document(
        id=ids[0], page_content="Matcha is ground green tea.", metadata={"topic": "tea"}
    )
    assert store.similarity_search("powdered tea", k=1)[0].id == ids[0]


# langchain_chroma's own Chroma.get_by_ids builds Document(metadata=None) there (a pydantic
# ValidationError); ContractChroma reads such a record as metadata {}.
def test_get_by_ids_of_a_record_added_without_metadata(emb, tmp_path):
    store = chroma_store(chromadb.PersistentClient(path=str(tmp_path)), emb)
    store.add_texts([DOCS["tea"]], ids=["tea"])
    assert store.similarity_search(QUESTION, k=1)[0].metadata == {}  # the search path copes
    assert store.get_by_ids(["tea"]) == [Document(id="tea", page_content=DOCS["tea"])]


@pytest.mark.parametrize(
    "bad",
    [{"note": None}, {"nested": {"a": 1}}, {"$reserved": 1}, {"score": float("nan")}],
    ids=["none", "nested", "reserved", "nan"],
)
def test_a_batch_with_bad_metadata_is_refused_whole(client, emb, bad):
    store = chroma_store(client, emb)
    store.add_documents(documents())
    name = store._collection.name
    before = snapshot(client, name)
    # An update of a stored id and a new id, then the bad one: none of them is written.
    batch = [
        Document(id="tea", page_content="Tea, changed.", metadata={"topic": "tea"}),
        Document(id="new", page_content="Oolong is partly oxidised.", metadata={"topic": "new"}),
        Document(id="bad", page_content="A bad record.", metadata=bad),
    ]
    with pytest.raises(ValueError, match="bad"):  # InvalidInputError is a ValueError
        store.add_documents(batch)
    assert snapshot(client, name) == before


@pytest.mark.transport
def test_a_stamp_changed_by_a_raw_client_after_open_is_refused_on_the_next_call(
    client, emb, minilm_contract
):
    store = chroma_store(client, emb)
    store.add_documents(documents())
    name = store._collection.name
    assert store.similarity_search(QUESTION, k=1)[0].id == "tea"
    restamp(client, name, minilm_contract.with_(pooling="cls"))
    _, records = snapshot(client, name)
    retriever = store.as_retriever(k=2)
    calls = [
        lambda: store.similarity_search(QUESTION, k=1),
        lambda: store.similarity_search_with_relevance_scores(QUESTION, k=1),
        lambda: store.max_marginal_relevance_search(QUESTION, k=1),
        lambda: store.get_by_ids(["tea"]),
        lambda: retriever.invoke(QUESTION),
        lambda: store.add_texts(["Oolong is partly oxidised."], ids=["new"]),
    ]
    for call in calls:
        with pytest.raises(ContractMismatchError) as info:
            call()
        assert info.value.fields == ("pooling",)
    with pytest.raises(ContractMismatchError):
        asyncio.run(store.asimilarity_search(QUESTION, k=1))
    assert snapshot(client, name)[1] == records  # the refused write wrote nothing
    raw = client.get_collection(name, embedding_function=None)
    raw.modify(metadata={"note": "stamp gone"})
    with pytest.raises(MissingStampError):
        store.similarity_search(QUESTION, k=1)


# -- ContractVectorStore ---------------------------------------------------------------------


def test_documents_come_out_exactly_as_they_went_in(emb):
    store = memory_store(emb)
    given = documents()
    before = [d.model_copy(deep=True) for d in given]
    store.add_documents(given)
    assert given == before
    inner = store.store.get_by_ids(["tea"])[0]
    assert inner.metadata == {  # stored stamped
        "topic": "tea",
        FINGERPRINT_KEY: emb.fingerprint,
        TEXT_KEY: text_digest(DOCS["tea"]),
    }
    found = store.similarity_search(QUESTION, k=len(DOCS))
    assert found[0] == Document(id="tea", page_content=DOCS["tea"], metadata={"topic": "tea"})
    assert sorted(found, key=lambda d: d.id) == sorted(given, key=lambda d: d.id)
    assert store.get_by_ids(["moon"]) == [given[2]]


@pytest.fixture(params=["memory", "chroma"])
def guarded(request, emb, tmp_path) -> ContractVectorStore:
    """A ContractVectorStore holding DOCS, around an InMemoryVectorStore or a plain Chroma."""
    if request.param == "memory":
        inner: Any = InMemoryVectorStore(emb)
    else:
        client = chromadb.PersistentClient(path=str(tmp_path))
        # Cosine, so LangChain's relevance scores of unit vectors fall in [0, 1].
        space = {"hnsw": {"space": "cosine"}}
        inner = Chroma(fresh_name(), emb, client=client, collection_configuration=space)
    store = ContractVectorStore(inner)
    store.add_documents(documents())
    return store


#: The foreign record's text, and a query it answers best (so that MMR, which skips a near
#: duplicate of a better hit, picks it too: a result check can only refuse what is returned).
FOREIGN = "Sourdough bread rises with wild yeast kept alive in a starter."
FOREIGN_QUERY = "how does sourdough bread rise"


def sneak(store: ContractVectorStore, embeddings: ContractEmbeddings, meta: dict) -> None:
    """Put a record embedded by ``embeddings`` into the inner store, around the guard."""
    vector = embeddings.embed_documents([FOREIGN])[0]
    if isinstance(store.store, InMemoryVectorStore):
        store.store.store["foreign"] = {
            "id": "foreign",
            "vector": vector,
            "text": FOREIGN,
            "metadata": meta,
        }
    else:
        raw = store.store._collection
        raw.upsert(ids=["foreign"], embeddings=[vector], documents=[FOREIGN], metadatas=[meta])


def _every_search_path(store: ContractVectorStore, query: str, relevance: bool = True):
    """Each way to read a ContractVectorStore, sync and async, by name."""
    vector = store.embeddings.embed_query(query)
    retriever = store.as_retriever(k=3)
    mmr = store.as_retriever(search_type="mmr", k=3)
    threshold = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.0}
    )
    sync: dict[str, Any] = {
        "similarity_search": lambda: store.similarity_search(query, k=3),
        "with_score": lambda: store.similarity_search_with_score(query, k=3),
        "by_vector": lambda: store.similarity_search_by_vector(vector, k=3),
        "mmr": lambda: store.max_marginal_relevance_search(query, k=3),
        "mmr_by_vector": lambda: store.max_marginal_relevance_search_by_vector(vector, k=3),
        "search": lambda: store.search(query, "similarity", k=3),
        "retriever": lambda: retriever.invoke(query),
        "mmr_retriever": lambda: mmr.invoke(query),
    }
    asynchronous: dict[str, Any] = {
        "asimilarity_search": lambda: store.asimilarity_search(query, k=3),
        "awith_score": lambda: store.asimilarity_search_with_score(query, k=3),
        "aby_vector": lambda: store.asimilarity_search_by_vector(vector, k=3),
        "ammr": lambda: store.amax_marginal_relevance_search(query, k=3),
        "ammr_by_vector": lambda: store.amax_marginal_relevance_search_by_vector(vector, k=3),
        "asearch": lambda: store.asearch(query, "mmr", k=3),
        "aretriever": lambda: retriever.ainvoke(query),
        "ammr_retriever": lambda: mmr.ainvoke(query),
    }
    if relevance:
        sync["relevance"] = lambda: store.similarity_search_with_relevance_scores(query, k=3)
        sync["threshold_retriever"] = lambda: threshold.invoke(query)
        asynchronous["arelevance"] = lambda: store.asimilarity_search_with_relevance_scores(
            query, k=3
        )
        asynchronous["athreshold_retriever"] = lambda: threshold.ainvoke(query)
    return sync, asynchronous


def _refused_everywhere(store, error, **attrs) -> None:
    sync, asynchronous = _every_search_path(store, FOREIGN_QUERY)
    calls = [(n, c) for n, c in sync.items()]
    calls += [(n, lambda c=c: asyncio.run(c())) for n, c in asynchronous.items()]
    for name, call in calls:
        with pytest.raises(error) as info:
            call()
            pytest.fail(f"{name} returned results")
        for attr, value in attrs.items():
            assert getattr(info.value, attr) == value, name
    with pytest.raises(error):
        store.get_by_ids(["tea", "foreign"])
    with pytest.raises(error):
        asyncio.run(store.aget_by_ids(["foreign"]))
    assert [d.id for d in store.get_by_ids(["tea"])] == ["tea"]  # the contract's own: fine


def test_every_search_path_returns_the_contracts_documents_unstamped(guarded):
    # InMemoryVectorStore has no relevance-score function of its own (NotImplementedError in
    # LangChain itself), so those paths are proven on Chroma only.
    relevance = not isinstance(guarded.store, InMemoryVectorStore)
    sync, asynchronous = _every_search_path(guarded, QUESTION, relevance)
    results = {name: call() for name, call in sync.items()}
    results |= {name: asyncio.run(call()) for name, call in asynchronous.items()}
    for name, result in results.items():
        docs = [d[0] if isinstance(d, tuple) else d for d in result]
        assert docs and docs[0] == documents()[0], name
        assert all(FINGERPRINT_KEY not in d.metadata for d in docs), name


def test_a_document_written_around_the_guard_refuses_every_search(guarded):
    sneak(guarded, guarded.embeddings, {"source": "raw"})  # no stamp
    _refused_everywhere(guarded, MissingStampError)


def test_documents_of_another_contract_of_the_same_width_refuse_every_search(
    guarded, minilm_contract
):
    other = ContractEmbeddings(minilm_contract.with_(pooling="cls"))  # 384 wide, as ours
    sneak(guarded, other, {FINGERPRINT_KEY: other.fingerprint})
    _refused_everywhere(guarded, ContractMismatchError, fields=("pooling",))


def test_a_foreign_document_the_pre_search_sample_misses_is_caught_in_the_result(emb):
    # More records than the guard samples before searching: the result check still refuses.
    store = memory_store(emb)
    store.add_texts([f"Filler record {k} about bicycles." for k in range(12)])
    store.store.add_documents([Document(id="raw", page_content=DOCS["tea"])])
    store.add_texts([f"Filler record {k} about the Moon." for k in range(12, 24)])
    assert [d.id for d in store.similarity_search("bicycle filler", k=2)]  # raw not found: fine
    with pytest.raises(MissingStampError, match="'raw'"):
        store.similarity_search(QUESTION, k=2)
    with pytest.raises(MissingStampError, match="'raw'"):
        asyncio.run(store.amax_marginal_relevance_search(QUESTION, k=2, fetch_k=24))


def test_another_width_is_refused_before_the_inner_search_fails(emb, tiny_st_factory):
    store = memory_store(emb)
    store.add_documents(documents())
    tiny = memory_store(ContractEmbeddings(contract_for(tiny_st_factory())))
    tiny.add_texts(["tiny"], ids=["tiny"])
    store.store.store.update(tiny.store.store)
    with pytest.raises(ContractMismatchError) as info:
        store.similarity_search(QUESTION, k=2)
    assert "dimension" in info.value.fields
    with pytest.raises(ContractMismatchError):
        asyncio.run(store.as_retriever().ainvoke(QUESTION))


def test_writing_another_contracts_document_is_refused_and_nothing_is_written(emb, minilm_contract):
    store = memory_store(emb)
    other = minilm_contract.with_(normalize=False)
    ContractEmbeddings(other)  # built in this process: the error names the field
    stamped = Document(page_content="x", metadata={FINGERPRINT_KEY: other.fingerprint})
    with pytest.raises(ContractMismatchError) as info:
        store.add_documents([Document(page_content="y"), stamped])
    assert info.value.fields == ("normalize",)
    with pytest.raises(ContractMismatchError):
        store.add_texts(["x"], [{FINGERPRINT_KEY: other.fingerprint}])
    assert store.store.store == {}


def test_the_inner_store_must_embed_under_the_guards_contract(emb, minilm_contract):
    other = ContractEmbeddings(minilm_contract.with_(pooling="max"))
    with pytest.raises(TypeError, match="same ContractEmbeddings"):
        ContractVectorStore(InMemoryVectorStore(other), emb)
    # Another object with the same contract is the same recipe: accepted.
    same = ContractEmbeddings(minilm_contract)
    assert ContractVectorStore(InMemoryVectorStore(same), emb).embeddings is emb
    # So is a label-only twin (the one rule: a copied folder under its own name).
    twin = ContractEmbeddings(minilm_contract.with_(model="acme/minilm-copy"))
    assert ContractVectorStore(InMemoryVectorStore(twin), emb).embeddings is emb
    # A store without a contract of its own embeds under no guard's: refused.
    with pytest.raises(TypeError, match="same ContractEmbeddings"):
        ContractVectorStore(InMemoryVectorStore(DeterministicFakeEmbedding(size=384)), emb)


# -- sync and async agree ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["chroma", "memory"])
async def test_async_search_gives_the_sync_results(emb, kind, tmp_path):
    if kind == "chroma":
        store = chroma_store(chromadb.PersistentClient(path=str(tmp_path)), emb)
    else:
        store = memory_store(emb)
    await store.aadd_documents(documents())
    for query in (QUESTION, "slugs in the garden", "interest rates"):
        sync = store.similarity_search_with_score(query, k=4)
        assert await store.asimilarity_search_with_score(query, k=4) == sync
        vector = await store.embeddings.aembed_query(query)
        assert vector == store.embeddings.embed_query(query)
        assert await store.asimilarity_search_by_vector(vector, k=4) == [d for d, _ in sync]
        assert await store.as_retriever(k=4).ainvoke(query) == [d for d, _ in sync]


async def test_contract_chromas_relevance_score_is_the_contracts_cosine(emb, tmp_path):
    # The contract (normalised) decided the collection's space: cosine, so LangChain's
    # relevance score is the cosine similarity itself, in [0, 1] for related texts.
    store = chroma_store(chromadb.PersistentClient(path=str(tmp_path)), emb)
    store.add_documents(documents())
    found = store.similarity_search_with_relevance_scores(QUESTION, k=3)
    assert await store.asimilarity_search_with_relevance_scores(QUESTION, k=3) == found
    query = emb.embed_query(QUESTION)
    for doc, score in found:
        cosine = float(np.dot(query, emb.embed_documents([DOCS[doc.id]])[0]))
        assert score == pytest.approx(cosine, abs=1e-4)
    assert found[0][0].id == "tea"


# -- ContractRetriever in an LCEL chain -----------------------------------------------------------


def _chain(retriever: ContractRetriever, seen: list[str]):
    def format_docs(docs: list[Document]) -> str:
        text = "\n".join(f"[{d.id}] {d.page_content}" for d in docs)
        seen.append(text)
        return text

    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from the context.\n{context}"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=["Steamed soon after picking."])
    context = retriever | RunnableLambda(format_docs)
    return (
        {"context": context, "question": RunnablePassthrough()} | prompt | model | StrOutputParser()
    )


@pytest.fixture(params=["chroma", "memory"])
def filled(request, emb, tmp_path):
    """A store of each kind holding DOCS, and how to make it another contract's."""
    if request.param == "chroma":
        client = chromadb.PersistentClient(path=str(tmp_path))
        store = chroma_store(client, emb)
        store.add_documents(documents())

        def spoil(contract):
            restamp(client, store._collection.name, contract)

    else:
        store = memory_store(emb)
        store.add_documents(documents())

        def spoil(contract):
            other = memory_store(ContractEmbeddings(contract))
            other.add_texts([DOCS["tea"]], ids=["other"])
            store.store.store.update(other.store.store)

    return store, spoil


async def test_a_retriever_feeds_a_real_chain(filled):
    store, _ = filled
    seen: list[str] = []
    chain = _chain(store.as_retriever(k=2), seen)
    assert chain.invoke(QUESTION) == "Steamed soon after picking."
    assert await chain.ainvoke(QUESTION) == "Steamed soon after picking."
    assert len(seen) == 2 and seen[0] == seen[1]
    assert seen[0].startswith(f"[tea] {DOCS['tea']}") and seen[0].count("\n") == 1
    # k per call reaches the store through the chain's config-free invoke of the retriever.
    assert len(ContractRetriever(vectorstore=store, k=1).invoke(QUESTION, k=3)) == 3


async def test_a_chain_over_a_mismatched_store_raises_the_contract_error(filled, minilm_contract):
    store, spoil = filled
    seen: list[str] = []
    chain = _chain(store.as_retriever(k=2), seen)
    spoil(minilm_contract.with_(query_prefix="query: "))
    with pytest.raises(ContractMismatchError) as info:
        chain.invoke(QUESTION)
    assert type(info.value) is ContractMismatchError  # not wrapped by LangChain
    assert info.value.fields == ("query_prefix",)
    with pytest.raises(ContractMismatchError):
        await chain.ainvoke(QUESTION)
    assert seen == []  # no document reached the prompt


# -- one collection, three adapters --------------------------------------------------------------


def _corpus() -> tuple[list[str], list[str], list[dict[str, Any]]]:
    rows = [json.loads(line) for line in demo_data.corpus_path().open()]
    return (
        [r["_id"] for r in rows],
        [r["text"] for r in rows],
        [{"title": r["title"]} for r in rows],
    )


def _queries() -> list[str]:
    return [json.loads(line)["text"] for line in demo_data.queries_path().open()]


def test_a_collection_written_by_ctxemb_chroma_opens_in_contract_chroma(
    client, emb, minilm, minilm_contract
):
    ids, texts, metas = _corpus()
    assert len(ids) == 24
    name = fresh_name()
    collection = open_collection(client, name, minilm)
    collection.add(ids, texts, metas)
    # The default sample: stored records re-embedded and compared on open.
    store = ContractChroma(name, emb, client=client, create_collection_if_not_exists=False)
    for query in _queries():
        expected = collection.query([query], n_results=10)["ids"][0]
        assert [d.id for d in store.similarity_search(query, k=10)] == expected
    found = store.similarity_search(_queries()[0], k=1)[0]
    assert found.metadata == metas[ids.index(found.id)]
    with pytest.raises(ContractMismatchError) as info:
        chroma_store(client, ContractEmbeddings(minilm_contract.with_(pooling="max")), name)
    assert info.value.fields == ("pooling",)


def test_a_contract_chroma_collection_opens_in_ctxemb_chroma_and_haystack(
    emb, minilm, minilm_contract, tmp_path
):
    from haystack import Pipeline
    from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
    from haystack_integrations.document_stores.chroma import ChromaDocumentStore

    from ctxemb_haystack import ContractRetriever as HaystackRetriever
    from ctxemb_haystack import ContractTextEmbedder

    ids, texts, metas = _corpus()
    client = chromadb.PersistentClient(path=str(tmp_path))
    name = fresh_name()
    ContractChroma(name, emb, client=client).add_texts(texts, metas, ids=ids)

    collection = open_collection(client, name, minilm, create=False, sample=100)
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(contract=minilm_contract))
    store = ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path))
    pipe.add_component("retriever", HaystackRetriever(ChromaEmbeddingRetriever(store, top_k=10)))
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("embedder.fingerprint", "retriever.fingerprint")
    reader = chroma_store(client, emb, name)
    for query in _queries():
        expected = [d.id for d in reader.similarity_search(query, k=10)]
        assert collection.query([query], n_results=10)["ids"][0] == expected
        found = pipe.run({"embedder": {"text": query}})["retriever"]["documents"]
        assert [d.id for d in found] == expected
    with pytest.raises(ContractMismatchError) as info:
        open_collection(client, name, minilm_contract.with_(truncate_dim=64), create=False)
    assert info.value.fields == ("truncate_dim",)


def test_a_collection_written_through_haystack_opens_in_contract_chroma(emb, tmp_path):
    from haystack import Document as HaystackDocument
    from haystack import Pipeline
    from haystack_integrations.document_stores.chroma import ChromaDocumentStore

    from ctxemb_haystack import ContractDocumentEmbedder, ContractDocumentWriter

    name = fresh_name()
    store = ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path))
    pipe = Pipeline()
    pipe.add_component(
        "embedder", ContractDocumentEmbedder(contract=emb.contract, progress_bar=False)
    )
    pipe.add_component("writer", ContractDocumentWriter(store))
    pipe.connect("embedder.documents", "writer.documents")
    given = [HaystackDocument(id=k, content=v, meta={"topic": k}) for k, v in DOCS.items()]
    pipe.run({"embedder": {"documents": given}})
    client = chromadb.PersistentClient(path=str(tmp_path))
    reader = ContractChroma(name, emb, client=client, create_collection_if_not_exists=False)
    assert [d.id for d in reader.similarity_search("slugs eat my lettuce", k=1)] == ["slug"]
    assert reader.as_retriever(k=1).invoke(QUESTION)[0].id == "tea"


def test_update_documents_goes_through_the_checked_write(emb, tmp_path):
    store = chroma_store(chromadb.PersistentClient(path=str(tmp_path)), emb)
    store.add_documents(documents())
    name = store._collection.name
    client = chromadb.PersistentClient(path=str(tmp_path))
    before = snapshot(client, name)
    bad = [Document(page_content="Tea, changed.", metadata={"t": None})]
    with pytest.raises(InvalidInputError):
        store.update_documents(["tea"], bad)
    assert snapshot(client, name) == before
    store.update_documents(
        ["tea", "not-stored"],
        [Document(page_content="Tea, changed."), Document(page_content="Skipped.")],
    )
    got = store.get_by_ids(["tea", "not-stored"])
    # Chroma keeps a record's metadata when an upsert brings none (as langchain_chroma's own).
    assert [(d.id, d.page_content, d.metadata) for d in got] == [
        ("tea", "Tea, changed.", {"topic": "tea"})
    ]


# -- inputs that must be refused whole -----------------------------------------------------------


def test_a_single_string_is_refused_not_split_into_characters(emb, tmp_path):
    chroma = chroma_store(chromadb.PersistentClient(path=str(tmp_path)), emb)
    memory = ContractVectorStore(InMemoryVectorStore(emb))
    with pytest.raises(InvalidInputError, match="got one string"):
        emb.embed_documents("hello")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="got one string"):
        asyncio.run(emb.aembed_documents("abc"))  # type: ignore[arg-type]
    for store in (chroma, memory):
        with pytest.raises(InvalidInputError, match="got one string"):
            store.add_texts("hey")  # type: ignore[arg-type]
    assert chroma._collection.count() == 0 and memory.store.store == {}
    # Any iterable of texts is still a batch, as LangChain's interface promises.
    assert len(memory.add_texts(t for t in ["a", "b"])) == 2


def test_contract_vector_store_refuses_batches_that_would_lose_texts(emb):
    store = ContractVectorStore(InMemoryVectorStore(emb))
    for ids in (["y"], ["z", "z"]):
        with pytest.raises(InvalidInputError):
            store.add_texts(["a", "b"], ids=ids)
    with pytest.raises(InvalidInputError, match="3 metadatas for 2 texts"):
        store.add_texts(["a", "b"], [{}, {}, {}])
    twice = [Document(id="d", page_content="a"), Document(id="d", page_content="b")]
    with pytest.raises(InvalidInputError):
        store.add_documents(twice)
    assert store.store.store == {}


def test_another_width_outside_the_in_memory_sample_is_named_as_a_contract(emb, tiny_st_factory):
    store = ContractVectorStore(InMemoryVectorStore(emb))
    store.add_texts([f"filler {k}" for k in range(10)])
    tiny = ContractVectorStore(
        InMemoryVectorStore(ContractEmbeddings(contract_for(tiny_st_factory())))
    )
    tiny.add_texts(["tiny"], ids=["tiny"])
    store.store.store.update(tiny.store.store)  # around the guard, in the middle of the store
    store.add_texts([f"filler {k}" for k in range(10, 20)])
    for search in (
        lambda: store.similarity_search("tea"),
        lambda: store.max_marginal_relevance_search("tea", k=2),
        lambda: store.as_retriever(k=2).invoke("tea"),
    ):
        with pytest.raises(ContractMismatchError) as info:
            search()
        assert info.value.documents == ("tiny",)


def test_contract_chroma_takes_persist_directory_positionally_and_resets_after_delete(
    emb, tmp_path
):
    store = ContractChroma(fresh_name(), emb, str(tmp_path))
    assert store._client.get_settings().is_persistent
    store.add_texts(["Green tea is steamed."], ids=["tea"])
    store.delete_collection()
    store.reset_collection()  # after a delete, as after anything: an empty stamped collection
    assert store._collection.count() == 0
    assert IndexStamp.is_stamped(store._collection.metadata)
    with pytest.raises(InvalidInputError, match="no image role"):
        store.add_images(["x.png"])


def test_contract_embeddings_copy_and_pickle_as_their_recipe(emb, minilm_contract):
    import copy
    import pickle

    emb.embed_query("warm")  # a loaded network is not part of a copy
    for again in (pickle.loads(pickle.dumps(emb)), copy.deepcopy(emb)):
        assert again.contract == minilm_contract and not again.lazy.loaded
        assert again.embed_query("tea") == emb.embed_query("tea")


def test_contract_embeddings_check_their_settings_when_built(minilm_contract):
    for bad in ({"backend": "bogus"}, {"batch_size": 0}, {"token_budget": -1}, {"device": ""}):
        with pytest.raises(InvalidInputError):
            ContractEmbeddings(minilm_contract, **bad)


def test_contract_chroma_get_checks_limit_and_offset(emb, tmp_path):
    store = chroma_store(chromadb.PersistentClient(path=str(tmp_path)), emb)
    store.add_texts(list(DOCS.values()), ids=list(DOCS))
    for bad in ({"limit": -1}, {"offset": -2}, {"limit": "3"}):
        with pytest.raises(InvalidInputError):
            store.get(**bad)
    assert len(store.get(limit=2, offset=1)["ids"]) == 2


def test_langchain_in_memory_store_accepts_a_label_only_difference():
    from langchain_core.vectorstores import InMemoryVectorStore

    from ctxemb_langchain import ContractEmbeddings, ContractVectorStore

    hub = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    inner = InMemoryVectorStore(ContractEmbeddings(hub))
    ContractVectorStore(inner).add_texts(["Green tea is steamed.", "Chains like oil."])
    local = hub.with_(model="acme/minilm-copy")
    inner.embedding = ContractEmbeddings(local)
    found = ContractVectorStore(inner).similarity_search("how is green tea made", k=1)
    assert found[0].page_content == "Green tea is steamed."
