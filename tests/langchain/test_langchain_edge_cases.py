"""An independent review of the LangChain adapter, written from the issue text: ContractChroma
built every way LangChain users build a Chroma (keywords, ``client=``, ``persist_directory``,
``client_settings``, host/port of a real server, ``from_texts``/``from_documents`` and their async
forms), reopened, reset and shared by two stores; writes of every metadata shape and the bad
batches that must leave the collection as it was; filters, scores, MMR and every retriever
search type; LCEL chains in batch, async and streaming, with a mismatch raised as itself;
quantised and tiny-model contracts; ContractVectorStore upserts and async writes; text edge
cases. No mocks: the bundled MiniLM, real Chroma.
"""

from __future__ import annotations

import asyncio
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings
from conftest import DOCS, MINILM, fresh_name
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp, contract_for
from ctxemb_core.documents import FINGERPRINT_KEY, TEXT_KEY, text_digest
from ctxemb_core.errors import ContractMismatchError, InvalidInputError
from ctxemb_langchain import ContractChroma, ContractEmbeddings, ContractVectorStore

# Long texts are truncated as the contract says (and warned about): expected here.
pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

QUESTION = "how is green tea made"


@pytest.fixture(scope="module")
def emb(minilm_contract: EmbeddingContract) -> ContractEmbeddings:
    return ContractEmbeddings(minilm_contract)


def documents() -> list[Document]:
    return [
        Document(id=k, page_content=v, metadata={"topic": k, "n": n})
        for n, (k, v) in enumerate(DOCS.items())
    ]


def ids_of(docs: list[Any]) -> list[str]:
    return [(d[0] if isinstance(d, tuple) else d).id for d in docs]


def records(client: Any, name: str) -> dict[str, tuple]:
    """A collection's records as the store holds them, read around ctxemb."""
    raw = client.get_collection(name, embedding_function=None)
    got = raw.get(include=["documents", "metadatas", "embeddings"])
    return {
        i: (d, m, tuple(np.round(e, 6)))
        for i, d, m, e in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }


def stamped_under(client: Any, name: str) -> EmbeddingContract:
    """The contract a collection's stamp names (read around ctxemb)."""
    raw = client.get_collection(name, embedding_function=None)
    return IndexStamp.from_metadata(raw.metadata).contract


def restamp(client: Any, name: str, contract: EmbeddingContract) -> None:
    raw = client.get_collection(name, embedding_function=None)
    raw.modify(metadata=IndexStamp.from_embedder(Embedder(contract)).to_metadata())


@pytest.fixture
def store(emb, tmp_path) -> ContractChroma:
    """A ContractChroma on an embedded client holding DOCS."""
    client = chromadb.PersistentClient(path=str(tmp_path))
    filled = ContractChroma(fresh_name(), emb, client=client, sample=0)
    filled.add_documents(documents())
    return filled


# -- every way to build a ContractChroma -----------------------------------------------------------


BUILDS = [
    "persist_directory",
    "client",
    "client_settings",
    "from_texts",
    "from_documents",
    "afrom_texts",
    "afrom_documents",
]


@pytest.mark.parametrize("how", BUILDS)
def test_every_way_langchain_builds_chroma_gives_a_stamped_store(emb, tmp_path, how):
    name, path = fresh_name(), str(tmp_path / "db")
    texts, ids = list(DOCS.values()), list(DOCS)
    metas = [{"topic": k} for k in DOCS]
    given = [Document(id=k, page_content=v, metadata={"topic": k}) for k, v in DOCS.items()]
    built: ContractChroma
    if how == "persist_directory":
        built = ContractChroma(collection_name=name, embedding_function=emb, persist_directory=path)
        built.add_texts(texts, metas, ids=ids)
    elif how == "client":
        built = ContractChroma(name, emb, client=chromadb.PersistentClient(path=path))
        built.add_documents(given)
    elif how == "client_settings":
        settings = Settings(is_persistent=True, persist_directory=path, anonymized_telemetry=False)
        built = ContractChroma(name, emb, client_settings=settings)
        built.add_texts(texts, metas, ids=ids)
    elif how == "from_texts":
        built = ContractChroma.from_texts(
            texts, emb, metas, ids, collection_name=name, persist_directory=path
        )
    elif how == "from_documents":
        built = ContractChroma.from_documents(
            given, emb, collection_name=name, persist_directory=path
        )
    elif how == "afrom_texts":
        built = asyncio.run(
            ContractChroma.afrom_texts(
                texts, emb, metas, ids=ids, collection_name=name, persist_directory=path
            )
        )
    else:
        built = asyncio.run(
            ContractChroma.afrom_documents(given, emb, collection_name=name, persist_directory=path)
        )
    assert isinstance(built, ContractChroma)
    assert stamped_under(built._client, name) == emb.contract
    assert built._collection.configuration["hnsw"]["space"] == "cosine"
    hit = built.similarity_search(QUESTION, k=1)[0]
    assert (hit.id, hit.metadata) == ("tea", {"topic": "tea"})
    # Reopened the way it was built (a new store object), the full open sample passes.
    again = ContractChroma(name, emb, client=built._client, create_collection_if_not_exists=False)
    assert ids_of(again.similarity_search(QUESTION, k=2)) == ids_of(
        built.similarity_search(QUESTION, k=2)
    )


def test_from_texts_refuses_another_contracts_collection_and_writes_nothing(
    emb, minilm_contract, tmp_path
):
    path = str(tmp_path)
    name = fresh_name()
    ContractChroma.from_texts(
        list(DOCS.values()), emb, ids=list(DOCS), collection_name=name, persist_directory=path
    )
    client = chromadb.PersistentClient(path=path)
    before = records(client, name)
    other = ContractEmbeddings(minilm_contract.with_(precision="int8"))
    with pytest.raises(ContractMismatchError) as info:
        ContractChroma.from_texts(
            ["Oolong is partly oxidised."],
            other,
            ids=["oolong"],
            collection_name=name,
            persist_directory=path,
        )
    assert info.value.fields == ("precision",)
    with pytest.raises(ContractMismatchError):
        asyncio.run(
            ContractChroma.afrom_texts(["x"], other, collection_name=name, persist_directory=path)
        )
    assert records(client, name) == before


def test_contract_chroma_by_host_and_port_of_a_real_server(emb, server):
    name = fresh_name()
    store = ContractChroma(name, emb, host="127.0.0.1", port=server, sample=0)
    try:
        store.add_documents(documents())
        assert ids_of(store.similarity_search(QUESTION, k=1)) == ["tea"]
        client = chromadb.HttpClient(host="127.0.0.1", port=server)
        assert stamped_under(client, name) == emb.contract
        other = ContractEmbeddings(emb.contract.with_(normalize=False))
        with pytest.raises(ContractMismatchError) as info:
            ContractChroma(name, other, host="127.0.0.1", port=server)
        assert info.value.fields == ("normalize",)
    finally:
        store.delete_collection()


# -- lifecycle: reset, delete, two stores on one collection ----------------------------------------


def test_reset_collection_leaves_an_empty_stamped_collection(store):
    name = store._collection.name
    store.reset_collection()
    assert store._collection.count() == 0
    assert stamped_under(store._client, name) == store.contract_embeddings.contract
    store.add_texts([DOCS["moon"]], ids=["moon"])
    assert ids_of(store.similarity_search("lunar phases", k=3)) == ["moon"]


def test_a_deleted_collection_is_refused_with_a_typed_error(store):
    store.delete_collection()
    with pytest.raises(Exception, match="deleted") as info:
        store.similarity_search(QUESTION, k=1)
    assert type(info.value).__module__.startswith("ctxemb")
    with pytest.raises(Exception, match="deleted"):
        store.add_texts(["x"])


def test_two_stores_on_one_collection_see_each_other_and_each_others_changes(
    emb, minilm_contract, tmp_path
):
    client = chromadb.PersistentClient(path=str(tmp_path))
    name = fresh_name()
    a = ContractChroma(name, emb, client=client, sample=0)
    b = ContractChroma(name, emb, client=client, sample=0)

    def write(k: int) -> list[str]:
        return (a if k % 2 else b).add_texts([f"Record {k} about tea."], ids=[f"r{k}"])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(16)))
    assert a._collection.count() == b._collection.count() == 16
    assert {d.id for d in b.get_by_ids([f"r{k}" for k in range(16)])} == {
        f"r{k}" for k in range(16)
    }
    b.reset_collection()  # a new collection under the name, stamped the same: a re-verifies
    assert a.similarity_search(QUESTION, k=1) == []
    a.add_texts([DOCS["tea"]], ids=["tea"])
    assert ids_of(b.similarity_search(QUESTION, k=1)) == ["tea"]
    # Recreated under another contract behind a's back: a refuses reads and writes.
    b.delete_collection()
    with pytest.raises(InvalidInputError, match="no longer exists"):
        a.similarity_search(QUESTION, k=1)
    other = ContractEmbeddings(minilm_contract.with_(pooling="cls"))
    ContractChroma(name, other, client=client, sample=0).add_texts(["cls"], ids=["cls"])
    before = records(client, name)
    for call in (
        lambda: a.similarity_search(QUESTION, k=1),
        lambda: a.add_texts(["mean"], ids=["mean"]),
        lambda: a.get_by_ids(["cls"]),
        lambda: a.reset_collection(),  # nor is another contract's collection reset by it
    ):
        with pytest.raises(ContractMismatchError) as info:
            call()
        assert info.value.fields == ("pooling",)
    assert records(client, name) == before


# -- writes: metadata shapes, ids, refusals that change nothing ------------------------------------


def test_metadatas_shorter_than_texts_and_empty_dicts(store):
    store.add_texts(["One.", "Two.", "Three."], [{"k": 1}], ids=["one", "two", "three"])
    store.add_texts(["Four.", "Five."], [{}, {}], ids=["four", "five"])
    got = {d.id: d.metadata for d in store.get_by_ids(["one", "two", "three", "four", "five"])}
    assert got == {"one": {"k": 1}, "two": {}, "three": {}, "four": {}, "five": {}}
    # An id of None gets a fresh one, as in Chroma; the given one is kept.
    ids = store.add_texts(["Six.", "Seven."], ids=["six", None])
    assert ids[0] == "six" and ids[1] and ids[1] != "six"
    assert len(store.get_by_ids(ids)) == 2
    assert store.add_texts([]) == []


@pytest.mark.parametrize(
    "texts, metadatas, ids",
    [
        (["a", "b"], None, ["dup", "dup"]),
        (["a", "b"], None, ["only-one"]),
        (["a"], [{"k": 1}, {"k": 2}], ["x"]),
        (["fine", None], None, ["p", "q"]),
        (["fine", 5], None, ["p", "q"]),
        (["fine", "a\ud800b"], None, ["p", "q"]),
        (["fine", "fine"], [{"k": 1}, "not a dict"], ["p", "q"]),
    ],
    ids=[
        "duplicate-ids",
        "fewer-ids",
        "more-metadatas",
        "none-text",
        "int-text",
        "surrogate",
        "non-dict-metadata",
    ],
)
def test_a_bad_batch_is_refused_typed_and_changes_nothing(store, texts, metadatas, ids):
    name = store._collection.name
    before = records(store._client, name)
    with pytest.raises(InvalidInputError):
        store.add_texts(texts, metadatas, ids=ids)
    assert records(store._client, name) == before


def test_update_document_and_missing_ids(store):
    store.update_document(
        "tea",
        Document(page_content="Matcha is ground green tea.", metadata={"topic": "tea", "n": 0}),
    )
    (got,) = store.get_by_ids(["tea"])
    assert got.page_content == "Matcha is ground green tea."
    assert ids_of(store.similarity_search("powdered green tea", k=1)) == ["tea"]
    count = store._collection.count()
    store.update_document("absent", Document(page_content="Not stored."))
    assert store._collection.count() == count and store.get_by_ids(["absent"]) == []
    with pytest.raises(InvalidInputError, match="one id per document"):
        store.update_documents(["tea", "bike"], [Document(page_content="x")])


def test_delete_by_ids_and_by_filter(store):
    store.delete(ids=["tea", "not-there"])
    assert store.get_by_ids(["tea"]) == []
    store.delete(where={"topic": "bike"})
    assert store.get_by_ids(["bike"]) == []
    assert store._collection.count() == len(DOCS) - 2
    asyncio.run(store.adelete(["moon"]))
    assert store.get_by_ids(["moon"]) == []


# -- reads: filters, scores, MMR, retriever variants ----------------------------------------------


def test_filters_reach_every_chroma_search(store):
    only_moon = {"filter": {"topic": "moon"}}
    assert ids_of(store.similarity_search(QUESTION, k=3, **only_moon)) == ["moon"]
    assert ids_of(store.similarity_search_with_score(QUESTION, k=3, **only_moon)) == ["moon"]
    assert ids_of(store.max_marginal_relevance_search(QUESTION, k=2, **only_moon)) == ["moon"]
    bank = {"where_document": {"$contains": "bank"}}
    assert sorted(ids_of(store.similarity_search(QUESTION, k=5, **bank))) == ["bank", "river"]
    ranged = {"filter": {"n": {"$gte": 4}}}
    assert sorted(ids_of(store.similarity_search(QUESTION, k=6, **ranged))) == ["bank", "river"]
    retriever = store.as_retriever(search_kwargs={"k": 3, "filter": {"topic": "slug"}})
    assert ids_of(retriever.invoke(QUESTION)) == ["slug"]


def test_scores_are_cosine_distance_and_cosine_relevance(store, emb):
    query = np.asarray(emb.embed_query(QUESTION))
    with_score = store.similarity_search_with_score(QUESTION, k=len(DOCS))
    relevance = store.similarity_search_with_relevance_scores(QUESTION, k=len(DOCS))
    assert ids_of(with_score) == ids_of(relevance)
    for (doc, distance), (_, score) in zip(with_score, relevance, strict=True):
        cosine = float(query @ np.asarray(emb.embed_documents([doc.page_content])[0]))
        assert distance == pytest.approx(1 - cosine, abs=1e-4)
        assert score == pytest.approx(cosine, abs=1e-4)
    assert [s for _, s in relevance] == sorted((s for _, s in relevance), reverse=True)


def test_every_retriever_search_type_and_k(store):
    assert ids_of(store.as_retriever(k=2).invoke(QUESTION)) == ["tea", "river"]
    assert len(store.as_retriever().invoke(QUESTION)) == 4  # LangChain's default k
    assert len(store.as_retriever(search_kwargs={"k": 1}).invoke(QUESTION)) == 1
    assert len(store.as_retriever(k=1).invoke(QUESTION, k=3)) == 3
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 6})
    assert ids_of(mmr.invoke(QUESTION))[0] == "tea" and len(mmr.invoke(QUESTION)) == 2
    threshold = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.5, "k": 6}
    )
    assert ids_of(threshold.invoke(QUESTION)) == ["tea"]
    assert asyncio.run(threshold.ainvoke(QUESTION)) == threshold.invoke(QUESTION)
    with pytest.raises(ValueError, match="search_type"):
        store.as_retriever(search_type="bogus")


# -- LCEL -----------------------------------------------------------------------------------------


def _chain(retriever: Any):
    fmt = RunnableLambda(lambda docs: "\n".join(f"[{d.id}] {d.page_content}" for d in docs))
    prompt = ChatPromptTemplate.from_messages([("human", "{context}\n\nQ: {question}")])
    model = FakeListChatModel(responses=["Steamed."])
    return (
        {"context": retriever | fmt, "question": RunnablePassthrough()}
        | prompt
        | model
        | StrOutputParser()
    )


async def test_chains_batch_and_stream_and_a_mismatch_is_raised_as_itself(store, minilm_contract):
    chain = _chain(store.as_retriever(k=2))
    assert chain.batch([QUESTION, "bicycle chains"]) == ["Steamed.", "Steamed."]
    assert await chain.abatch([QUESTION, "bicycle chains"]) == ["Steamed.", "Steamed."]
    assert "".join([c async for c in chain.astream(QUESTION)]) == "Steamed."
    restamp(store._client, store._collection.name, minilm_contract.with_(query_prefix="q: "))
    with pytest.raises(ContractMismatchError):
        chain.batch([QUESTION, "bicycle chains"])
    with pytest.raises(ContractMismatchError):
        await chain.abatch([QUESTION])
    with pytest.raises(ContractMismatchError):
        _ = [c async for c in chain.astream(QUESTION)]
    errors = chain.batch([QUESTION], return_exceptions=True)
    assert type(errors[0]) is ContractMismatchError
    assert errors[0].fields == ("query_prefix",)


async def test_a_memory_chain_refuses_a_document_of_another_contract(emb, minilm_contract):
    memory = ContractVectorStore(InMemoryVectorStore(emb))
    memory.add_documents(documents())
    chain = _chain(memory.as_retriever(k=2))
    assert await chain.ainvoke(QUESTION) == "Steamed."
    other = ContractVectorStore(
        InMemoryVectorStore(ContractEmbeddings(minilm_contract.with_(document_prefix="passage: ")))
    )
    other.add_texts([DOCS["tea"]], ids=["impostor"])
    memory.store.store.update(other.store.store)
    with pytest.raises(ContractMismatchError) as info:
        chain.invoke(QUESTION)
    assert info.value.fields == ("document_prefix",)
    with pytest.raises(ContractMismatchError) as info:
        await chain.ainvoke(QUESTION)
    assert info.value.fields == ("document_prefix",)


# -- async agrees with sync -----------------------------------------------------------------------


async def test_async_writes_store_the_sync_vectors_and_async_reads_agree(emb, tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path))
    sync = ContractChroma(fresh_name(), emb, client=client, sample=0)
    asyn = ContractChroma(fresh_name(), emb, client=client, sample=0)
    sync.add_documents(documents())
    assert await asyn.aadd_documents(documents()) == list(DOCS)
    a = records(client, sync._collection.name)
    b = records(client, asyn._collection.name)
    assert a == b
    assert await asyn.asimilarity_search_with_score(QUESTION, k=3) == (
        sync.similarity_search_with_score(QUESTION, k=3)
    )
    assert await asyn.asimilarity_search_with_relevance_scores(QUESTION, k=3) == (
        sync.similarity_search_with_relevance_scores(QUESTION, k=3)
    )
    assert await asyn.amax_marginal_relevance_search(QUESTION, k=2) == (
        sync.max_marginal_relevance_search(QUESTION, k=2)
    )
    assert await asyn.aget_by_ids(["tea", "moon"]) == sync.get_by_ids(["tea", "moon"])


@pytest.mark.heavy
async def test_concurrent_async_embeddings_equal_the_sync_ones(minilm_contract):
    fresh = ContractEmbeddings(minilm_contract)  # the model is built by the first of many
    rng = random.Random(7)
    batches = [
        [f"note {k} " * rng.randint(1, 200) for k in range(rng.randint(1, 6))] for _ in range(8)
    ]
    got = await asyncio.gather(
        *(fresh.aembed_documents(b) for b in batches), *(fresh.aembed_query(b[0]) for b in batches)
    )
    want = [fresh.embed_documents(b) for b in batches] + [fresh.embed_query(b[0]) for b in batches]
    assert got == want


def test_threads_sharing_one_embeddings_get_the_same_vectors(emb):
    texts = [f"Thread text {k}: green tea and bicycles." for k in range(12)]
    want = emb.embed_documents(texts)
    barrier = threading.Barrier(3)

    def embed(_: int) -> list[list[float]]:
        barrier.wait()
        return emb.embed_documents(texts)

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(embed, range(3))) == [want] * 3


# -- contracts beyond float32 MiniLM --------------------------------------------------------------


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_a_quantised_contract_indexes_searches_and_is_told_apart(emb, tmp_path, precision):
    quantised = ContractEmbeddings(contract_for(MINILM, precision=precision))
    vector = quantised.embed_query(QUESTION)
    assert len(vector) == 384
    if precision == "binary":
        assert set(vector) <= {-1.0, 1.0}
    else:
        assert all(float(v).is_integer() and -128 <= v <= 127 for v in vector)
    assert asyncio.run(quantised.aembed_query(QUESTION)) == vector
    client = chromadb.PersistentClient(path=str(tmp_path))
    name = fresh_name()
    chroma = ContractChroma(name, quantised, client=client, sample=0)
    chroma.add_documents(documents())
    assert ids_of(chroma.similarity_search(QUESTION, k=1)) == ["tea"]
    assert ids_of(chroma.max_marginal_relevance_search(QUESTION, k=1)) == ["tea"]
    # Reopened with the default sample (stored records re-embedded): passes.
    assert ids_of(
        ContractChroma(name, quantised, client=client).as_retriever(k=1).invoke(QUESTION)
    ) == ["tea"]
    before = records(client, name)
    with pytest.raises(ContractMismatchError) as info:
        ContractChroma(name, emb, client=client)
    assert info.value.fields == ("precision",)
    assert records(client, name) == before
    memory = ContractVectorStore(InMemoryVectorStore(quantised))
    memory.add_documents(documents())
    assert ids_of(memory.similarity_search(QUESTION, k=1)) == ["tea"]


def test_a_tiny_model_contract_on_chroma_and_memory(emb, tiny_st_factory, tmp_path):
    tiny = ContractEmbeddings(contract_for(tiny_st_factory()))
    width = tiny.contract.output_dim
    assert width != 384 and len(tiny.embed_query("tea")) == width
    client = chromadb.PersistentClient(path=str(tmp_path))
    name = fresh_name()
    chroma = ContractChroma(name, tiny, client=client)
    chroma.add_documents(documents())
    assert len(chroma.similarity_search(QUESTION, k=3)) == 3
    with pytest.raises(ContractMismatchError) as info:
        ContractChroma(name, emb, client=client)
    assert "model" in info.value.fields
    memory = ContractVectorStore(InMemoryVectorStore(tiny))
    memory.add_texts(list(DOCS.values()), ids=list(DOCS))
    assert len(memory.similarity_search(QUESTION, k=2)) == 2


# -- ContractVectorStore ---------------------------------------------------------------------------


async def test_memory_guard_upserts_async_writes_and_filters_without_the_stamp(emb):
    memory = ContractVectorStore(InMemoryVectorStore(emb))
    ids = await memory.aadd_texts(["Async tea note."], [{"k": 1}], ids=["note"])
    assert ids == ["note"]
    (inner,) = memory.store.get_by_ids(["note"])
    assert inner.metadata == {  # stamped on the way in
        "k": 1,
        FINGERPRINT_KEY: emb.fingerprint,
        TEXT_KEY: text_digest("Async tea note."),
    }
    # Re-adding an id replaces the record whole (no stale metadata).
    memory.add_documents([Document(id="note", page_content="Green tea note.", metadata={"v": 2})])
    assert memory.get_by_ids(["note"]) == [
        Document(id="note", page_content="Green tea note.", metadata={"v": 2})
    ]
    memory.add_documents(documents())
    # A callable filter (InMemoryVectorStore's) works through the guard.
    found = memory.similarity_search(QUESTION, k=3, filter=lambda d: d.id in {"bike", "moon"})
    assert sorted(ids_of(found)) == ["bike", "moon"]
    assert memory.get_by_ids(["absent"]) == []
    assert await memory.aget_by_ids(["tea"]) == memory.get_by_ids(["tea"])
    await memory.adelete(["tea"])
    assert memory.get_by_ids(["tea"]) == []


def test_memory_guard_from_documents_and_afrom_texts_are_guarded(emb, minilm_contract):
    built = ContractVectorStore.from_documents(documents(), emb)
    assert isinstance(built, ContractVectorStore)
    assert ids_of(built.similarity_search(QUESTION, k=1)) == ["tea"]
    abuilt = asyncio.run(ContractVectorStore.afrom_texts(list(DOCS.values()), emb, ids=list(DOCS)))
    assert ids_of(abuilt.similarity_search(QUESTION, k=1)) == ["tea"]
    foreign = {
        FINGERPRINT_KEY: ContractEmbeddings(minilm_contract.with_(pooling="max")).fingerprint
    }
    with pytest.raises(ContractMismatchError):
        ContractVectorStore.from_texts(["x", "y"], emb, [{}, foreign])


# -- text edge cases ----------------------------------------------------------------------------


def test_edge_case_texts_embed_and_round_trip(store, emb):
    texts = {
        "empty": "",
        "spaces": "   \n\t ",
        "unicode": "Grüner Tee 緑茶 🍵 — naïve café",
        "nul": "tea\x00leaf",
        "long": "Green tea leaves are steamed. " * 800,
    }
    vectors = emb.embed_documents(list(texts.values()))
    assert all(len(v) == 384 and np.all(np.isfinite(v)) for v in vectors)
    store.add_texts(list(texts.values()), ids=list(texts))
    assert {d.id: d.page_content for d in store.get_by_ids(list(texts))} == texts
    assert ids_of(store.similarity_search("緑茶 🍵", k=1)) == ["unicode"]
    assert len(emb.embed_query("")) == 384
    # Longer than the contract's max_tokens: truncated, so equal to a shorter text's vector.
    long = "tea " * 5000
    np.testing.assert_allclose(emb.embed_query(long), emb.embed_query("tea " * 1000), atol=1e-6)
    for bad in (None, 5, ["a list"]):
        with pytest.raises(InvalidInputError):
            emb.embed_query(bad)  # type: ignore[arg-type]
