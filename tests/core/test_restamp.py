"""Re-stamping: a collection deliberately accepts a new query side, and nothing else."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DOCS, fresh_name

from ctxemb_chroma import open_collection, restamp, stamped_contract
from ctxemb_core import Embedder, IndexStamp, contract_for
from ctxemb_core.contract import DiffKind
from ctxemb_core.errors import (
    ContractMismatchError,
    EncoderDriftError,
    InvalidInputError,
    MissingStampError,
)
from ctxemb_core.guard import RestampReport, restamp_stamp, verify_index

QUESTION = "how are tea leaves processed"


@pytest.fixture(scope="module")
def e5(tiny_st_factory):
    """A tiny E5-style model: its folder saves 'query: ' / 'passage: ' prompts."""
    # ("document", not "passage": sentence-transformers 6 saves "document": "" by default.)
    folder = tiny_st_factory(
        prompts={"query": "query: ", "document": "passage: "}, max_seq_length=128, seed=5
    )
    return contract_for(folder)


def written(client, contract, **metadata):
    col = open_collection(client, fresh_name(), contract)
    col.add(list(DOCS), list(DOCS.values()))
    if metadata:  # keys of the collection's own, beside the stamp
        raw = col.stored()
        raw.modify(metadata={**(raw.metadata or {}), **metadata})
    return col


def records(col):
    got = col.stored().get(include=["documents", "embeddings"])
    return dict(
        zip(
            got["ids"],
            zip(got["documents"], np.asarray(got["embeddings"]).round(6).tolist(), strict=True),
            strict=True,
        )
    )


@pytest.mark.transport
def test_a_forgotten_query_prefix_is_accepted_by_restamping(client, e5):
    # Indexed with the documents' prefix right and the query prefix forgotten.
    old = e5.with_(query_prefix="")
    col = written(client, old, owner="team-a")
    before = records(col)
    with pytest.raises(ContractMismatchError) as refused:
        open_collection(client, col.name, e5)
    assert refused.value.diff.kind is DiffKind.QUERY_ONLY

    report = restamp(client, col.name, e5)
    assert isinstance(report, RestampReport) and report.changed
    assert report.old_fingerprint == old.fingerprint
    assert report.new_fingerprint == e5.fingerprint
    assert report.fields == ("query_prefix",) and report.kind is DiffKind.QUERY_ONLY
    assert report.changes[0].index == "" and report.changes[0].caller == "query: "
    assert report.to_dict()["changes"] == [{"field": "query_prefix", "old": "", "new": "query: "}]

    # The stamp is the new contract's, whole: its canary re-embeds under the new embedder.
    stored = col.stored()
    stamp = IndexStamp.from_metadata(stored.metadata)
    assert stamp.contract == e5 and stamped_contract(client, col.name) == e5
    assert stamp.verify(Embedder(e5)).min_cosine >= 0.9995
    assert stored.metadata["owner"] == "team-a"
    assert records(col) == before  # no stored record was touched

    reopened = open_collection(client, col.name, e5)
    hits = reopened.query([QUESTION], n_results=3, include=["distances"])
    assert verify_index(stored.metadata, Embedder(e5)).fingerprint_match
    with pytest.raises(ContractMismatchError):  # the old query side is now the other one
        open_collection(client, col.name, old)

    # Chroma's persisted function follows: a raw get_collection embeds with the new query side.
    raw = client.get_collection(col.name)
    assert raw.configuration_json["embedding_function"]["config"]["contract"] == e5.to_dict()
    theirs = raw.query(query_texts=[QUESTION], n_results=3, include=["distances"])
    assert theirs["ids"] == hits["ids"]
    np.testing.assert_allclose(theirs["distances"], hits["distances"], atol=1e-5)


def test_a_collection_opened_before_the_restamp_notices_it(client, e5):
    old = e5.with_(query_prefix="")
    col = written(client, old)
    restamp(client, col.name, e5)
    with pytest.raises(ContractMismatchError):
        col.query([QUESTION], n_results=1)


def test_a_change_that_needs_re_embedding_is_refused_and_nothing_written(client, e5):
    col = written(client, e5)
    before = dict(col.stored().metadata)
    for other in (e5.with_(pooling="cls"), e5.with_(document_prefix=""), e5.with_(truncate_dim=16)):
        with pytest.raises(ContractMismatchError) as info:
            restamp(client, col.name, other)
        assert info.value.diff.kind is DiffKind.REEMBED
        assert "ctxemb_chroma.migrate(" in str(info.value)
        assert "ctxemb migrate --collection" in info.value.message_for("cli")
        assert "restamp" not in str(info.value)
    assert dict(col.stored().metadata) == before


def test_the_same_contract_changes_nothing(client, e5):
    col = written(client, e5)
    before = IndexStamp.metadata_items(col.stored().metadata)
    report = restamp(client, col.name, Embedder(e5))
    assert not report.changed and report.kind is DiffKind.IDENTICAL and report.changes == ()
    assert str(report).startswith("unchanged: ")
    assert IndexStamp.metadata_items(col.stored().metadata) == before


def test_a_separate_query_encoder_is_a_query_side_restamp(client, tiny_dpr):
    query_folder, document_folder = tiny_dpr
    shared = contract_for(document_folder, pooling="cls")
    paired = contract_for(document_folder, pooling="cls", query_encoder=query_folder)
    col = written(client, shared)
    report = restamp(client, col.name, paired)
    assert set(report.fields) == {"query_model", "query_weights"}
    assert report.kind is DiffKind.QUERY_ONLY
    open_collection(client, col.name, paired).query([QUESTION], n_results=2)


@pytest.mark.transport
def test_a_collection_written_through_langchain_restamps_the_same_way(client, e5):
    from ctxemb_langchain import ContractChroma, ContractEmbeddings

    old = e5.with_(query_prefix="")
    name = fresh_name()
    store = ContractChroma(name, ContractEmbeddings(old), client=client, sample=0)
    store.add_texts(list(DOCS.values()), ids=list(DOCS))
    assert restamp(client, name, e5).fields == ("query_prefix",)
    again = ContractChroma(name, ContractEmbeddings(e5), client=client, sample=0)
    assert len(again.similarity_search(QUESTION, k=2)) == 2
    with pytest.raises(ContractMismatchError):
        ContractChroma(name, ContractEmbeddings(old), client=client, sample=0)


def test_restamp_refuses_what_it_cannot_prove(client, e5):
    import chromadb

    with pytest.raises(InvalidInputError, match="does not exist"):
        restamp(client, fresh_name(), e5)
    plain = client.create_collection(fresh_name(), embedding_function=None)
    with pytest.raises(MissingStampError):
        restamp(client, plain.name, e5)
    col = written(client, e5.with_(query_prefix=""))
    with pytest.raises(InvalidInputError, match="embedder must embed under the contract"):
        restamp(client, col.name, e5, embedder=Embedder(e5.with_(query_prefix="q: ")))
    with pytest.raises(InvalidInputError, match="must be an Embedder"):
        restamp(client, col.name, e5, embedder=e5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="client must be a chromadb client"):
        restamp(object(), col.name, e5)  # type: ignore[arg-type]
    assert isinstance(client, chromadb.api.ClientAPI)


def test_an_encoder_that_does_not_reproduce_the_documents_is_never_stamped(e5):
    # The core decision: the stored canary's document rows must re-embed under the new contract.
    stamp = IndexStamp.from_embedder(Embedder(e5.with_(query_prefix="")))
    half = len(stamp.probes)
    drifted = stamp.canary.copy()
    drifted[:half] = drifted[:half] + 0.05 * np.sign(drifted[:half])
    bad = IndexStamp(stamp.contract, stamp.probes, drifted)
    with pytest.raises(EncoderDriftError, match="document: "):
        restamp_stamp(bad, Embedder(e5))
    # The query rows may differ: that is what a query-side change changes.
    other_queries = stamp.canary.copy()
    other_queries[half:] = -other_queries[half:]
    new, report = restamp_stamp(
        IndexStamp(stamp.contract, stamp.probes, other_queries), Embedder(e5)
    )
    assert new.contract == e5 and report.kind is DiffKind.QUERY_ONLY
    assert new.probes == stamp.probes


def test_a_name_only_change_checks_the_whole_canary(e5):
    stamp = IndexStamp.from_embedder(Embedder(e5))
    renamed = e5.with_(model="acme/e5-tiny")
    new, report = restamp_stamp(stamp, Embedder(renamed))
    assert report.kind is DiffKind.LABEL and new.contract.model == "acme/e5-tiny"
    flipped = stamp.canary.copy()
    flipped[len(stamp.probes) :] *= -1
    with pytest.raises(EncoderDriftError, match="query: "):
        restamp_stamp(IndexStamp(stamp.contract, stamp.probes, flipped), Embedder(renamed))


def test_a_collection_written_through_haystack_restamps_the_same_way(e5, tmp_path):
    import chromadb
    from haystack import Document, Pipeline
    from haystack.core.errors import PipelineRuntimeError
    from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
    from haystack_integrations.document_stores.chroma import ChromaDocumentStore

    from ctxemb_haystack import (
        ContractDocumentEmbedder,
        ContractDocumentWriter,
        ContractRetriever,
        ContractTextEmbedder,
    )

    def ask(contract, store):
        pipe = Pipeline()
        pipe.add_component("embedder", ContractTextEmbedder(contract=contract))
        retriever = ContractRetriever(ChromaEmbeddingRetriever(store, top_k=2))
        pipe.add_component("retriever", retriever)
        pipe.connect("embedder.embedding", "retriever.query_embedding")
        pipe.connect("embedder.fingerprint", "retriever.fingerprint")
        return pipe.run({"embedder": {"text": QUESTION}})["retriever"]["documents"]

    old = e5.with_(query_prefix="")
    name = fresh_name()
    store = ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path))
    index = Pipeline()
    index.add_component("embedder", ContractDocumentEmbedder(contract=old, progress_bar=False))
    index.add_component("writer", ContractDocumentWriter(store))
    index.connect("embedder.documents", "writer.documents")
    index.run({"embedder": {"documents": [Document(id=k, content=v) for k, v in DOCS.items()]}})

    report = restamp(chromadb.PersistentClient(str(tmp_path)), name, e5)
    assert report.fields == ("query_prefix",)
    fresh = ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path))
    assert len(ask(e5, fresh)) == 2
    with pytest.raises(PipelineRuntimeError) as info:  # wrapping the component's error
        ask(old, ChromaDocumentStore(collection_name=name, persist_path=str(tmp_path)))
    assert isinstance(info.value.__cause__, ContractMismatchError)


def test_restamp_keeps_a_collection_created_with_hnsw_metadata(tmp_path):
    """A stamped collection whose metadata also names hnsw:space (made by a tool that passed
    both at creation) re-stamps: Chroma refuses any modify whose metadata names hnsw:space."""
    import chromadb

    from ctxemb_chroma import open_collection, restamp
    from ctxemb_core import Embedder, IndexStamp, contract_for

    contract = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    embedder = Embedder(contract)
    client = chromadb.PersistentClient(str(tmp_path / "store"))
    stamp = IndexStamp.from_embedder(embedder).to_metadata()
    raw = client.create_collection(
        "raw-docs", metadata={"hnsw:space": "cosine", "team": "a", **stamp}
    )
    texts = ["Green tea is steamed.", "Chains like oil.", "Slugs eat lettuce."]
    raw.add(
        ids=["t", "b", "s"], documents=texts, embeddings=embedder.embed_documents(texts).tolist()
    )
    report = restamp(client, "raw-docs", contract.with_(query_prefix="query: "))
    assert report.fields == ("query_prefix",)
    again = client.get_collection("raw-docs")
    assert again.metadata["team"] == "a"
    assert again.configuration_json["hnsw"]["space"] == "cosine"
    docs = open_collection(client, "raw-docs", contract.with_(query_prefix="query: "))
    assert docs.query(["green tea"], n_results=1)["ids"] == [["t"]]
