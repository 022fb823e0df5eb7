"""Indexing as a sync (issue 25, item 2): edited texts are re-embedded, new ones added, the rest
left alone, ids the corpus lost deleted on request, a dry run writes nothing, records written
before the text digest existed are compared by their stored text, and an interrupted run resumes.

Real Chroma (embedded), the real MiniLM, the ``ctxemb`` command run in-process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest
from conftest import fresh_name
from samples import CORPUS, EDITED, write_corpus

from ctxemb_chroma import open_collection
from ctxemb_core import Embedder
from ctxemb_core.cli import main
from ctxemb_core.documents import TEXT_KEY, text_digest
from ctxemb_core.errors import DataFormatError, InvalidInputError
from ctxemb_core.sync import SyncReport, plan_sync, unchanged


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def records(path: Path, name: str) -> dict[str, tuple[Any, Any, list[float]]]:
    """Every record as the store holds it, read around ctxemb: id -> (text, metadata, vector)."""
    got = (
        chromadb.PersistentClient(path=str(path))
        .get_collection(name)
        .get(include=["documents", "metadatas", "embeddings"])
    )
    return {
        i: (d, m, np.asarray(e).tolist())
        for i, d, m, e in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }


# -- the rules ---------------------------------------------------------------------------------


def test_the_rules_compare_the_stored_text_and_the_stored_digest():
    text = CORPUS["tea"]
    assert unchanged(text, text, {TEXT_KEY: text_digest(text)})
    assert unchanged(text, text, None)  # written before the digest: the stored text decides
    assert unchanged(text, None, {TEXT_KEY: text_digest(text)})  # no text kept: the digest does
    assert not unchanged(EDITED, text, {TEXT_KEY: text_digest(text)})
    assert not unchanged(text, text, {TEXT_KEY: text_digest(EDITED)})  # vector of another text
    assert not unchanged(text, None, None)  # nothing to compare: re-embedded
    plan = plan_sync(["tea", "new"], [EDITED, "x"], {"tea": (text, None)})
    assert plan == SyncReport(added=("new",), updated=("tea",), unchanged=0)
    assert str(plan) == "1 added, 1 updated, 0 unchanged"


def test_the_digest_is_of_the_exact_text_and_refuses_a_non_string():
    assert text_digest("a") != text_digest("a ") != text_digest("A")
    assert len(text_digest("")) == 64
    with pytest.raises(InvalidInputError):
        text_digest(None)  # type: ignore[arg-type]


# -- ctxemb index ------------------------------------------------------------------------------


def test_reindex_re_embeds_only_edited_texts_adds_new_and_reports_each(tmp_path, capsys, minilm):
    store = ["--path", str(tmp_path / "store"), "--collection", "docs"]
    corpus = write_corpus(tmp_path / "c.jsonl", CORPUS)
    code, out, _ = cli(capsys, "index", str(corpus), *store)
    assert code == 0 and "docs: 4 added, 0 updated, 0 unchanged; 4 documents" in out
    before = records(tmp_path / "store", "docs")
    assert before["tea"][1][TEXT_KEY] == text_digest(CORPUS["tea"])  # every record carries it

    write_corpus(corpus, {**CORPUS, "tea": EDITED, "mate": "Mate is brewed from yerba leaves."})
    code, out, err = cli(capsys, "index", str(corpus), *store)
    assert code == 0 and "docs: 1 added, 1 updated, 3 unchanged; 5 documents" in out
    assert "docs/s" in err  # the bar counts documents
    after = records(tmp_path / "store", "docs")
    # The edited record holds the new text, its digest, and the new text's vector.
    text, meta, vector = after["tea"]
    assert text == EDITED and meta[TEXT_KEY] == text_digest(EDITED)
    np.testing.assert_allclose(vector, minilm.embed_documents([EDITED])[0], atol=1e-6)
    # The others were left exactly as they were (not rewritten).
    assert all(after[i] == before[i] for i in ("slug", "bank", "moon"))
    _, hits, _ = cli(capsys, "query", "how is tea made in China", *store, "-k", "1", "--json")
    assert json.loads(hits)["results"][0]["text"] == EDITED

    code, out, _ = cli(capsys, "index", str(corpus), *store)
    assert code == 0 and "0 added, 0 updated, 5 unchanged; 5 documents" in out
    assert records(tmp_path / "store", "docs") == after  # a no-op re-index writes nothing


def test_delete_missing_removes_ids_the_corpus_lost_and_only_when_asked(tmp_path, capsys):
    store = ["--path", str(tmp_path / "store"), "--collection", "docs"]
    corpus = write_corpus(tmp_path / "c.jsonl", CORPUS)
    cli(capsys, "index", str(corpus), *store)
    write_corpus(corpus, {k: v for k, v in CORPUS.items() if k != "moon"})
    _, out, _ = cli(capsys, "index", str(corpus), *store)
    assert "0 added, 0 updated, 3 unchanged; 4 documents" in out  # kept without the flag
    _, out, _ = cli(capsys, "index", str(corpus), *store, "--delete-missing")
    assert "0 added, 0 updated, 3 unchanged, 1 deleted; 3 documents" in out
    assert set(records(tmp_path / "store", "docs")) == {"tea", "slug", "bank"}


def test_a_dry_run_says_what_it_would_do_and_writes_nothing(tmp_path, capsys):
    store = ["--path", str(tmp_path / "store"), "--collection", "docs"]
    corpus = write_corpus(tmp_path / "c.jsonl", CORPUS)
    cli(capsys, "index", str(corpus), *store)
    before = records(tmp_path / "store", "docs")
    write_corpus(corpus, {**{k: v for k, v in CORPUS.items() if k != "moon"}, "tea": EDITED})
    code, out, _ = cli(capsys, "index", str(corpus), *store, "--dry-run", "--delete-missing")
    assert code == 0
    assert "dry run: nothing embedded or written" in out
    assert "would be 0 added, 1 updated, 2 unchanged, 1 deleted; 4 documents now" in out
    assert "  update: tea" in out and "  delete: moon" in out
    assert records(tmp_path / "store", "docs") == before
    # Into a collection that does not exist: every document would be added; none is created.
    code, out, _ = cli(capsys, "index", str(corpus), *store[:2], "--collection", "new", "--dry-run")
    assert code == 0 and "would be 3 added, 0 updated, 0 unchanged; 0 documents now" in out
    names = [c.name for c in chromadb.PersistentClient(str(tmp_path / "store")).list_collections()]
    assert names == ["docs"]
    # Into a store that does not exist yet: the same, and no folder is made.
    code, out, _ = cli(
        capsys,
        "index",
        str(corpus),
        "--path",
        str(tmp_path / "none"),
        "--collection",
        "d",
        "--dry-run",
    )
    assert code == 0 and "would be 3 added, 0 updated, 0 unchanged; 0 documents now" in out
    assert not (tmp_path / "none").exists()


def test_records_written_before_the_digest_are_compared_by_their_text(tmp_path, capsys, minilm):
    """A collection indexed by an earlier ctxemb: records with no text digest in their metadata."""
    path = tmp_path / "store"
    guarded = open_collection(chromadb.PersistentClient(str(path)), "docs", minilm)
    ids = list(CORPUS)
    texts = list(CORPUS.values())
    # As the earlier add wrote them: no metadata at all.
    guarded.raw.add(ids=ids, embeddings=minilm.embed_documents(texts), documents=texts)
    corpus = write_corpus(tmp_path / "c.jsonl", {**CORPUS, "tea": EDITED})
    code, out, _ = cli(capsys, "index", str(corpus), "--path", str(path), "--collection", "docs")
    assert code == 0 and "0 added, 1 updated, 3 unchanged; 4 documents" in out
    after = records(path, "docs")
    assert after["tea"][1] == {TEXT_KEY: text_digest(EDITED)}
    # The unchanged ones are left alone: no digest is backfilled (no write to an old record).
    assert [after[i][1] for i in ("slug", "bank", "moon")] == [None, None, None]


# -- interrupted runs --------------------------------------------------------------------------


def test_a_sync_stopped_by_a_bad_record_in_a_later_batch_resumes(tmp_path, minilm):
    guarded = open_collection(chromadb.PersistentClient(str(tmp_path)), fresh_name(), minilm)
    ids, texts = list(CORPUS), list(CORPUS.values())
    guarded.sync(ids[:2], texts[:2])
    # The second run edits the first batch and meets a record Chroma cannot store in the next.
    edited = [EDITED, texts[1]]
    first = guarded.sync(ids[:2], edited)
    assert (first.updated, first.unchanged) == (("tea",), 1)
    with pytest.raises(InvalidInputError, match="reserved by Chroma"):
        guarded.sync(ids[2:], texts[2:], [{"$bad": 1}, None])
    assert guarded.count() == 2  # the failed batch wrote nothing; the one before is kept
    again = guarded.sync(ids[:2], edited) + guarded.sync(ids[2:], texts[2:])
    assert again == SyncReport(added=("bank", "moon"), updated=(), unchanged=2)
    assert guarded.get(ids=["tea"], include=["documents"])["documents"] == [EDITED]


def test_an_interrupt_while_embedding_loses_nothing_and_a_rerun_converges(tmp_path):
    # Sub-batches of 2 texts, so the interrupt comes between two embedded batches of one write.
    from conftest import MINILM

    from ctxemb_core import contract_for

    embedder = Embedder(contract_for(MINILM), batch_size=2, cache=None)
    name = fresh_name()
    guarded = open_collection(chromadb.PersistentClient(str(tmp_path)), name, embedder)
    ids, texts = list(CORPUS), list(CORPUS.values())
    guarded.sync(ids, texts)
    before = records(tmp_path, name)
    edited = [t + " (revised)" for t in texts]
    seen: list[int] = []

    def interrupt(n: int) -> None:
        seen.append(n)
        if len(seen) == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        guarded.sync(ids, edited, progress=interrupt)
    assert records(tmp_path, name) == before  # the old texts and vectors, all of them
    report = guarded.sync(ids, edited)
    assert report == SyncReport(updated=tuple(ids))
    assert guarded.sync(ids, edited) == SyncReport(unchanged=4)


# -- progress ----------------------------------------------------------------------------------


def test_progress_moves_per_embedded_batch_and_counts_unchanged_documents_at_once(tmp_path):
    from conftest import MINILM

    from ctxemb_core import contract_for

    embedder = Embedder(contract_for(MINILM), batch_size=2, cache=None)
    guarded = open_collection(chromadb.PersistentClient(str(tmp_path)), fresh_name(), embedder)
    ids, texts = list(CORPUS), list(CORPUS.values())
    steps: list[int] = []
    guarded.sync(ids, texts, progress=steps.append)
    assert steps == [2, 2]  # one step per embedded batch of the network, not one per write
    steps.clear()
    guarded.sync(ids, [EDITED, *texts[1:]], progress=steps.append)
    assert steps == [3, 1]  # the three unchanged at once, then the one embedded
    steps.clear()
    guarded.sync(ids, texts, dry_run=True, progress=steps.append)
    assert sum(steps) == 4


def test_the_index_bar_counts_docs_and_the_one_time_onnx_export_is_said_on_stderr(
    tmp_path, capsys, monkeypatch, caplog
):
    import logging

    from tiny_models import build_bert

    from ctxemb_core import contract_for

    # A model no test has exported, in a cache of its own: the export is built in this test.
    monkeypatch.setenv("CTXEMB_CACHE_DIR", str(tmp_path / "cache"))
    folder = build_bert(tmp_path / "bert", seed=7)
    corpus = write_corpus(tmp_path / "c.jsonl", CORPUS)
    store = ["--path", str(tmp_path / "store"), "--collection", "docs"]
    code, out, err = cli(
        capsys, "index", str(corpus), *store, "--model", str(folder), "--pooling", "mean"
    )
    assert code == 0 and "4 added" in out
    lines = [line for line in err.splitlines() if "ONNX export" in line]
    assert lines == [
        "building the ONNX export of bert (one time per model, ~15 s for MiniLM)…",
        lines[1],
    ] and lines[1].startswith("built the ONNX export in ")
    assert "4/4" in err and "docs/s" in err
    # Loaded again: nothing to say.
    code, _, err = cli(
        capsys, "index", str(corpus), *store, "--model", str(folder), "--pooling", "mean"
    )
    assert code == 0 and "ONNX export" not in err
    # A library call prints nothing; the record is there for a caller that asks for it.
    other = build_bert(tmp_path / "other-bert", seed=8)  # (the process keeps loaded networks)
    # The message names the model as the contract does, not the folder it was found in.
    named = contract_for(other, pooling="mean").with_(model="acme/other-bert")
    with caplog.at_level(logging.INFO, logger="ctxemb_core.progress"):
        Embedder(named, path=other).embed_documents(["a text"])
    assert "building the ONNX export of acme/other-bert (" in caplog.text
    assert "ONNX export" not in capsys.readouterr().err


# -- the corpus's id field ---------------------------------------------------------------------


def test_a_corpus_line_may_name_its_id_id_and_one_naming_two_ids_is_refused(tmp_path, capsys):
    store = ["--path", str(tmp_path / "store"), "--collection", "docs"]
    corpus = write_corpus(tmp_path / "c.jsonl", CORPUS, key="id")
    code, out, _ = cli(capsys, "index", str(corpus), *store)
    assert code == 0 and "4 added" in out
    assert set(records(tmp_path / "store", "docs")) == set(CORPUS)
    both = tmp_path / "both.jsonl"
    both.write_text(
        json.dumps({"_id": "a", "id": "a", "text": "same id twice: fine"})
        + "\n"
        + json.dumps({"_id": "b", "id": "c", "text": "two ids"})
        + "\n"
    )
    from ctxemb_core.eval.beir import load_jsonl_corpus

    with pytest.raises(DataFormatError, match=r"both.jsonl:2: .*'_id' 'b' and 'id' 'c'"):
        load_jsonl_corpus(both)
    code, _, err = cli(capsys, "index", str(both), *store)
    assert code == 2 and "both.jsonl:2" in err


# -- the framework writers ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "chroma"])
def test_haystack_overwrite_replaces_an_edited_document_with_its_new_vector_and_digest(
    kind, tmp_path, minilm, minilm_contract
):
    from haystack import Document, Pipeline
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.document_stores.types import DuplicatePolicy
    from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
    from haystack_integrations.document_stores.chroma import ChromaDocumentStore

    from ctxemb_haystack import (
        ContractDocumentEmbedder,
        ContractDocumentWriter,
        ContractRetriever,
        ContractTextEmbedder,
    )

    if kind == "memory":
        store: Any = InMemoryDocumentStore()
        retriever: Any = InMemoryEmbeddingRetriever(store, top_k=1)
    else:
        store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
        retriever = ChromaEmbeddingRetriever(store, top_k=1)
    index = Pipeline()
    index.add_component(
        "embedder", ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    )
    index.add_component("writer", ContractDocumentWriter(store, policy=DuplicatePolicy.OVERWRITE))
    index.connect("embedder.documents", "writer.documents")
    query = Pipeline()
    query.add_component("embedder", ContractTextEmbedder(contract=minilm_contract))
    query.add_component("retriever", ContractRetriever(retriever))
    query.connect("embedder.embedding", "retriever.query_embedding")
    query.connect("embedder.fingerprint", "retriever.fingerprint")

    def ask(text: str) -> Document:
        return query.run({"embedder": {"text": text}})["retriever"]["documents"][0]

    index.run({"embedder": {"documents": [Document(id=i, content=t) for i, t in CORPUS.items()]}})
    old = ask("how is tea made in China")
    assert old.id == "tea" and old.meta[TEXT_KEY] == text_digest(CORPUS["tea"])
    # The user's habit: take the stored document, edit its text, run it through the pipeline.
    edited = Document(id="tea", content=EDITED, meta=dict(old.meta))
    index.run({"embedder": {"documents": [edited]}})
    found = ask("how is tea made in China")
    assert (found.id, found.content) == ("tea", EDITED)
    assert found.meta[TEXT_KEY] == text_digest(EDITED)  # the carried old digest was replaced
    assert store.count_documents() == len(CORPUS)
    if kind == "chroma":
        got = records(tmp_path, store.to_dict()["init_parameters"]["collection_name"])["tea"]
        np.testing.assert_allclose(got[2], minilm.embed_documents([EDITED])[0], atol=1e-6)


@pytest.mark.parametrize("kind", ["memory", "chroma"])
def test_langchain_add_documents_with_the_same_id_and_new_text_updates_it(
    kind, tmp_path, minilm, minilm_contract
):
    from langchain_core.documents import Document
    from langchain_core.vectorstores import InMemoryVectorStore

    from ctxemb_langchain import ContractChroma, ContractEmbeddings, ContractVectorStore

    emb = ContractEmbeddings(minilm_contract)
    name = fresh_name()
    if kind == "memory":
        store: Any = ContractVectorStore(InMemoryVectorStore(emb))
    else:
        store = ContractChroma(name, emb, client=chromadb.PersistentClient(str(tmp_path)), sample=0)
    store.add_documents([Document(id=i, page_content=t) for i, t in CORPUS.items()])

    def digest() -> str:  # as the store keeps it (documents come out without it)
        if kind == "memory":
            return store.store.get_by_ids(["tea"])[0].metadata[TEXT_KEY]
        return records(tmp_path, name)["tea"][1][TEXT_KEY]

    (old,) = store.get_by_ids(["tea"])
    assert TEXT_KEY not in old.metadata and digest() == text_digest(CORPUS["tea"])
    # A digest carried in from the old text (a copied record) is replaced, not kept.
    carried = {**old.metadata, TEXT_KEY: text_digest(CORPUS["tea"])}
    store.add_documents([Document(id="tea", page_content=EDITED, metadata=carried)])
    (new,) = store.get_by_ids(["tea"])
    assert new.page_content == EDITED and digest() == text_digest(EDITED)
    hit = store.similarity_search("how is tea made in China", k=1)[0]
    assert (hit.id, hit.page_content) == ("tea", EDITED)
    if kind == "chroma":
        got = records(tmp_path, name)
        assert len(got) == len(CORPUS)
        np.testing.assert_allclose(got["tea"][2], minilm.embed_documents([EDITED])[0], atol=1e-6)
