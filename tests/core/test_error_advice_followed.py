"""Every piece of advice an error gives is a step that works: each test does what the message
says (the Python calls as printed, or the ``ctxemb`` command) and the refused operation then
succeeds.

The situations are the ones a first-day user meets: a raw client wrote over a stamped
collection (``ForeignVectorsError``), a collection written by plain ``langchain_chroma.Chroma``
or Haystack's own ``DocumentWriter`` (``MissingStampError``), and a model folder whose weights
changed under its contract (``ContractMismatchError`` with no index involved).
"""

from __future__ import annotations

import dataclasses
import re
import shutil

import chromadb
import numpy as np
import pytest
from conftest import DOCS, MINILM, fresh_name
from haystack import Document as HaystackDocument
from haystack import Pipeline
from haystack.components.writers import DocumentWriter
from haystack.core.errors import PipelineRuntimeError
from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
from haystack_integrations.document_stores.chroma import ChromaDocumentStore
from langchain_chroma import Chroma
from langchain_core.documents import Document
from tiny_models import build_sentence_transformer

import ctxemb_chroma
from ctxemb_core import Embedder, contract_for
from ctxemb_core.cli import main
from ctxemb_core.errors import ContractMismatchError, ForeignVectorsError, MissingStampError
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
)
from ctxemb_langchain import ContractChroma, ContractEmbeddings

QUESTION = "how are green tea leaves processed"


def python_lines(message: str) -> str:
    """The indented lines of a message: the calls it tells a Python caller to run."""
    return "\n".join(line[4:] for line in message.splitlines() if line.startswith("    "))


def cli_command(message: str, command: str) -> list[str]:
    """The ``ctxemb <command> ...`` the message gives, as argv (placeholders still in it)."""
    found = re.search(rf"ctxemb {command} ([^();]+)", message)
    assert found, message
    return [command, *found.group(1).split()]


@pytest.fixture
def tampered(tmp_path, minilm_contract):
    """A stamped collection of which one record was overwritten by a raw client."""
    client = chromadb.PersistentClient(path=str(tmp_path))
    name = fresh_name()
    docs = ctxemb_chroma.open_collection(client, name, minilm_contract)
    docs.add(list(DOCS), list(DOCS.values()))
    rng = np.random.default_rng(0)
    foreign = rng.normal(size=minilm_contract.dimension)
    docs.raw.update(ids=["tea"], embeddings=[(foreign / np.linalg.norm(foreign)).tolist()])
    return tmp_path, client, name


def test_foreign_vectors_advice_for_python_repairs_the_collection(tampered, minilm_contract):
    _, client, name = tampered
    with pytest.raises(ForeignVectorsError) as info:
        ctxemb_chroma.open_collection(client, name, minilm_contract)
    assert info.value.ids == ("tea",)
    # Run the calls the message gives, as printed.
    scope = {"ctxemb_chroma": ctxemb_chroma, "client": client, "name": name}
    exec(python_lines(str(info.value)), {**scope, "contract": minilm_contract})
    # The open that was refused now succeeds, and every record is this contract's.
    docs = ctxemb_chroma.open_collection(client, name, minilm_contract, sample=len(DOCS))
    assert ctxemb_chroma.verify(docs, minilm_contract, all=True).bad_ids == ()
    assert docs.query([QUESTION], n_results=1)["ids"] == [["tea"]]


def test_foreign_vectors_advice_for_the_cli_rebuilds_the_collection(tampered, minilm_contract):
    path, client, name = tampered
    with pytest.raises(ForeignVectorsError) as info:
        ctxemb_chroma.open_collection(client, name, minilm_contract)
    message = info.value.message_for("cli")
    argv = cli_command(message, "migrate")
    argv = [a.replace("<name>", name).replace("<new", "clean").replace("name>", "") for a in argv]
    argv = [a for a in argv if a]
    assert argv == ["migrate", "--collection", name, "--to", "clean", "--sample", "0"]
    assert main([*argv, "--path", str(path)]) == 0
    rebuilt = ctxemb_chroma.open_collection(client, "clean", minilm_contract, sample=len(DOCS))
    assert ctxemb_chroma.verify(rebuilt, minilm_contract, all=True).bad_ids == ()
    assert rebuilt.query([QUESTION], n_results=1)["ids"] == [["tea"]]


@pytest.fixture
def langchain_unstamped(tmp_path):
    """A collection written by plain ``langchain_chroma.Chroma`` with the contract's vectors."""
    client = chromadb.PersistentClient(path=str(tmp_path))
    name = fresh_name()
    emb = ContractEmbeddings(model_name=MINILM)
    plain = Chroma(name, emb, client=client)
    plain.add_documents([Document(id=k, page_content=v) for k, v in DOCS.items()])
    return tmp_path, client, name, emb


def test_an_unstamped_langchain_collection_is_adopted_as_the_message_says(langchain_unstamped):
    _, client, name, emb = langchain_unstamped
    with pytest.raises(MissingStampError) as info:
        ContractChroma(name, emb, client=client)
    assert "ContractChroma(..., adopt=True)" in str(info.value)
    store = ContractChroma(name, emb, client=client, adopt=True)
    assert store.similarity_search(QUESTION, k=1)[0].id == "tea"
    # Stamped now: it opens as any ctxemb collection, without adopt.
    assert ContractChroma(name, emb, client=client).similarity_search(QUESTION, k=1)[0].id == "tea"


def test_an_unstamped_collection_is_adopted_with_the_cli_command_the_message_gives(
    langchain_unstamped,
):
    path, client, name, emb = langchain_unstamped
    with pytest.raises(MissingStampError) as info:
        ContractChroma(name, emb, client=client)
    argv = cli_command(info.value.message_for("cli"), "detect")
    assert argv == ["detect", "--collection", name, "--model", "<model>", "--adopt"]
    argv[argv.index("<model>")] = MINILM
    assert main([*argv, "--path", str(path)]) == 0
    assert ContractChroma(name, emb, client=client).similarity_search(QUESTION, k=1)[0].id == "tea"


@pytest.fixture
def haystack_unstamped(tmp_path):
    """A ChromaDocumentStore written by Haystack's own DocumentWriter."""
    store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
    indexing = Pipeline()
    indexing.add_component("embedder", ContractDocumentEmbedder(model=MINILM, progress_bar=False))
    indexing.add_component("writer", DocumentWriter(store))
    indexing.connect("embedder.documents", "writer.documents")
    documents = [HaystackDocument(id=k, content=v) for k, v in DOCS.items()]
    indexing.run({"embedder": {"documents": documents}})
    return tmp_path, store


def querying(store, **options) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(model=MINILM))
    retriever = ContractRetriever(ChromaEmbeddingRetriever(store, top_k=1), **options)
    pipe.add_component("retriever", retriever)
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("embedder.fingerprint", "retriever.fingerprint")
    return pipe


def answer(pipe: Pipeline) -> str:
    return pipe.run({"embedder": {"text": QUESTION}})["retriever"]["documents"][0].id


def test_a_haystack_collection_of_the_stock_writer_is_adopted_as_the_message_says(
    haystack_unstamped,
):
    _, store = haystack_unstamped
    with pytest.raises(PipelineRuntimeError) as info:
        answer(querying(store))
    error = info.value.__cause__
    assert isinstance(error, MissingStampError)
    assert "ContractRetriever(..., adopt=True)" in str(error)
    assert "LangChain" not in str(error) and "LlamaIndex" not in str(error)  # its own words
    assert "will not mix" not in str(error)
    assert answer(querying(store, adopt=True)) == "tea"
    assert answer(querying(store)) == "tea"  # stamped now


def test_a_haystack_collection_of_the_stock_writer_is_adopted_by_the_cli(haystack_unstamped):
    path, store = haystack_unstamped
    with pytest.raises(PipelineRuntimeError) as info:
        answer(querying(store))
    argv = cli_command(info.value.__cause__.message_for("cli"), "detect")
    argv[argv.index("<model>")] = MINILM
    assert main([*argv, "--path", str(path)]) == 0
    assert answer(querying(store)) == "tea"


def test_a_folder_with_other_weights_names_the_folder_not_an_index(tmp_path):
    folder = build_sentence_transformer(tmp_path / "model", seed=1)
    contract = contract_for(folder)
    kept = shutil.copytree(folder, tmp_path / "original")
    build_sentence_transformer(folder, seed=2)  # other weights in the same folder
    with pytest.raises(ContractMismatchError) as info:
        Embedder(contract, path=folder, backend="torch")
    message = str(info.value)
    assert "index" not in message.split("\n")[0]
    assert f"the model folder {folder.resolve()} holds other weights" in message
    assert info.value.fields == ("weights",) and info.value.folder == str(folder.resolve())
    assert "Embedder(contract, path='<that folder>')" in message
    # Both ways out work: the folder the contract was read from, or this folder's contract.
    Embedder(contract, path=kept, backend="torch").embed_query("tea")
    assert f"contract_for({str(folder.resolve())!r})" in message
    Embedder(contract_for(folder), path=folder, backend="torch").embed_query("tea")
    assert "--model" in info.value.message_for("cli")
    # Pickled and back, the message and the folder stay.
    import pickle

    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == message and again.folder == info.value.folder


def test_the_stock_writers_collection_takes_new_documents_through_an_adopting_writer(
    haystack_unstamped,
):
    _, store = haystack_unstamped
    fresh = [HaystackDocument(id="new", content="Oolong is partly oxidised before drying.")]
    embedded = ContractDocumentEmbedder(model=MINILM, progress_bar=False).run(fresh)["documents"]
    with pytest.raises(MissingStampError) as info:
        ContractDocumentWriter(store).run(embedded)
    assert "ContractDocumentWriter(..., adopt=True)" in str(info.value)
    assert ContractDocumentWriter(store, adopt=True).run(embedded)["documents_written"] == 1
    assert store.count_documents() == len(DOCS) + 1
    assert answer(querying(store)) == "tea"


def test_a_mistyped_model_name_on_the_cli_names_the_model_meant(tmp_path, capsys):
    from ctxemb_core import demo as demo_data

    store = ["--path", str(tmp_path / "db"), "--collection", "docs"]
    corpus = str(demo_data.corpus_path())
    assert main(["index", corpus, *store, "--model", "all-MiniLM-L6-v3"]) == 2
    err = capsys.readouterr().err
    assert "nearest known names are 'all-MiniLM-L6-v2'" in err
    meant = re.search(r"If you meant '[^']+': (--model \S+)\.", err)
    assert meant, err
    assert main(["index", corpus, *store, *meant.group(1).split()]) == 0


def test_an_in_memory_store_written_around_ctxemb_is_repaired_as_the_message_says():
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.document_stores.types import DuplicatePolicy

    store = InMemoryDocumentStore()
    embedder = ContractDocumentEmbedder(model=MINILM, progress_bar=False)
    given = [HaystackDocument(id=k, content=v) for k, v in DOCS.items()]
    embedded = embedder.run(given)["documents"]
    # Written around ctxemb: the contract's vectors, but no fingerprint on the documents.
    DocumentWriter(store).run([dataclasses.replace(d, meta={}) for d in embedded[:2]])
    query = ContractTextEmbedder(model=MINILM).run(QUESTION)
    retriever = ContractRetriever(InMemoryEmbeddingRetriever(store, top_k=1))
    with pytest.raises(MissingStampError) as info:
        retriever.run(query["embedding"], query["fingerprint"])
    exec(python_lines(str(info.value)), {"store": store})
    writer = ContractDocumentWriter(store, policy=DuplicatePolicy.OVERWRITE)
    assert writer.run(embedded)["documents_written"] == len(DOCS)
    assert retriever.run(query["embedding"], query["fingerprint"])["documents"][0].id == "tea"


def test_a_langchain_in_memory_store_written_around_ctxemb_is_repaired_as_the_message_says():
    from langchain_core.vectorstores import InMemoryVectorStore

    from ctxemb_langchain import ContractVectorStore

    emb = ContractEmbeddings(model_name=MINILM)
    inner = InMemoryVectorStore(emb)
    documents = [Document(id=k, page_content=v) for k, v in DOCS.items()]
    inner.add_documents(documents[:2])  # around ctxemb: the contract's vectors, no fingerprint
    store = ContractVectorStore(inner)
    with pytest.raises(MissingStampError) as info:
        store.similarity_search(QUESTION, k=1)
    message = str(info.value)
    assert "store.delete(ids=[...]), then store.add_documents(documents)" in message
    store.delete(ids=[d.id for d in documents[:2]])
    store.add_documents(documents)
    assert store.similarity_search(QUESTION, k=1)[0].id == "tea"
