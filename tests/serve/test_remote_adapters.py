"""Every adapter takes a remote encoder (issue 27, item 3): Chroma's embedding function,
Haystack's embedders, LangChain's embeddings and the CLI embed through ``ctxemb serve`` with
``url=``; their serialised forms carry the URL and the key's variable, never the key; and what
one side writes through the server the other reads with a local model, under one contract."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
from embedding_server import REPO, serving

from ctxemb_core import Embedder

pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

DOCS = ["slugs eat lettuce at night", "tea leaves brew best below boiling", "tyres wear out"]


@pytest.fixture(scope="module")
def served(minilm):
    with serving(minilm) as service:
        yield service


def test_chromas_embedding_function_embeds_through_the_server(served, minilm, tmp_path):
    import chromadb

    from ctxemb_chroma import ContractEmbeddingFunction, open_collection

    remote = ContractEmbeddingFunction(minilm.contract, url=served.url)
    np.testing.assert_allclose(remote(DOCS), minilm.embed_documents(DOCS), atol=1e-6)
    # Chroma persists the function's config and rebuilds it on reopen: still the server.
    config = remote.get_config()
    assert config["remote"]["url"] == served.url
    rebuilt = ContractEmbeddingFunction.build_from_config(json.loads(json.dumps(config)))
    assert rebuilt.embedder.remote is not None
    # A collection written through the server opens, and is queried, with the local model.
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    written = open_collection(client, "docs", remote.embedder)
    written.add(["d0", "d1", "d2"], DOCS)
    local = open_collection(client, "docs", minilm, sample=3)
    assert local.query(["keeping slugs away"], n_results=1)["ids"][0] == ["d0"]


def test_haystack_embedders_embed_through_the_server_and_serialise_the_url(
    served, minilm, monkeypatch
):
    from haystack import Document, Pipeline
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from ctxemb_haystack import ContractDocumentEmbedder, ContractTextEmbedder

    monkeypatch.setenv("CTXEMB_SERVER_KEY", "sk-do-not-store")
    text = ContractTextEmbedder(
        model=minilm.contract.model, url=served.url, api_key_env="CTXEMB_SERVER_KEY"
    )
    out = text.run("keeping slugs away")
    np.testing.assert_allclose(
        out["embedding"], minilm.embed_query("keeping slugs away"), atol=1e-6
    )
    data = text.to_dict()
    assert data["init_parameters"]["url"] == served.url
    assert data["init_parameters"]["api_key_env"] == "CTXEMB_SERVER_KEY"
    assert "sk-do-not-store" not in json.dumps(data)
    pipe = Pipeline()
    pipe.add_component("embedder", text)
    again = Pipeline.loads(pipe.dumps())
    np.testing.assert_allclose(
        again.run({"embedder": {"text": "keeping slugs away"}})["embedder"]["embedding"],
        out["embedding"],
        atol=1e-6,
    )
    documents = ContractDocumentEmbedder(model=minilm.contract.model, url=served.url)
    embedded = documents.run([Document(content=d) for d in DOCS])["documents"]
    got = np.array([d.embedding for d in embedded], dtype=np.float32)
    np.testing.assert_allclose(got, minilm.embed_documents(DOCS), atol=1e-6)
    assert {d.meta["ctxemb_fingerprint"] for d in embedded} == {minilm.contract.fingerprint}
    # A local embedder leaves url out of to_dict (its serialised form is what it was).
    assert (
        "url" not in ContractTextEmbedder(model=minilm.contract.model).to_dict()["init_parameters"]
    )
    store = InMemoryDocumentStore()
    store.write_documents(embedded)
    assert store.count_documents() == 3


def test_langchain_embeddings_embed_through_the_server(served, minilm, tmp_path):
    import chromadb

    from ctxemb_langchain import ContractChroma, ContractEmbeddings

    remote = ContractEmbeddings(model_name=minilm.contract.model, url=served.url)
    np.testing.assert_allclose(
        remote.embed_documents(DOCS), minilm.embed_documents(DOCS), atol=1e-6
    )
    assert remote.config["remote"]["url"] == served.url
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = ContractChroma("docs", remote, client=client)
    store.add_texts(DOCS, ids=["d0", "d1", "d2"])
    local = ContractChroma(
        "docs", ContractEmbeddings(model_name=minilm.contract.model), client=client
    )
    assert local.similarity_search("keeping slugs away", k=1)[0].page_content == DOCS[0]


def _ctxemb(*args: str) -> tuple[int, str, str]:
    """``ctxemb ARGS`` through the CLI's entry point, in this process: (exit code, stdout,
    stderr). The server is this process's too; a new process per command would only add its
    start-up (what a command does with ``--url`` is the same in either)."""
    from ctxemb_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_the_cli_indexes_and_queries_through_the_server(served, minilm_contract, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCS)),
        encoding="utf-8",
    )
    where = ["--collection", "docs", "--path", str(tmp_path / "chroma")]
    code, out, err = _ctxemb("index", str(corpus), *where, "--url", served.url)
    assert code == 0, err
    assert "3 documents added" in out or "3 added" in out, out
    query = ["query", "keeping slugs away", *where, "-k", "1", "--json"]
    remote = _ctxemb(*query, "--url", served.url)
    local = _ctxemb(*query)
    assert remote[0] == 0 and local[0] == 0, remote[2] + local[2]
    assert json.loads(remote[1])["results"][0]["id"] == "d0"
    assert json.loads(remote[1])["results"] == json.loads(local[1])["results"]
    code, out, err = _ctxemb("verify", *where, "--all", "--url", served.url)
    assert code == 0, err
    assert json.loads(out)["ok"] is True


def test_the_cli_refuses_a_server_of_another_contract(minilm_contract, tmp_path):
    cls = Embedder(minilm_contract.with_(pooling="cls"))
    with serving(cls) as other:
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text(json.dumps({"_id": "d0", "text": DOCS[0]}) + "\n", encoding="utf-8")
        args = ["index", str(corpus), "--collection", "docs", "--path", str(tmp_path / "c")]
        code, _, err = _ctxemb(*args, "--model", minilm_contract.model, "--url", other.url)
    assert code == 2
    assert "ContractMismatchError" in err
    assert "pooling: server='cls', caller='mean'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("via", ["memory", "haystack", "langchain"])
def test_ctxemb_eval_through_a_server_gives_the_local_figures(served, tmp_path, via):
    from ctxemb_core.cli import main

    # The first 40 pairs of STS-B's test split, as their own STS folder.
    source = REPO.parent / "shared" / "data" / "stsbenchmark" / "sts-test.csv"
    if not source.is_file():
        pytest.skip(f"no STS Benchmark at {source}")
    data = tmp_path / "sts"
    data.mkdir()
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)[:40]
    (data / "sts-test.csv").write_text("".join(lines), encoding="utf-8")
    figures = {}
    for side, extra in (("local", []), ("remote", ["--url", served.url])):
        out = io.StringIO()
        args = ["eval", "--via", via, "--task", "sts", "--data", str(data), "--no-cache", *extra]
        with contextlib.redirect_stdout(out):
            assert main(args) == 0
        figures[side] = json.loads(out.getvalue().strip().splitlines()[-1])
    assert figures["remote"]["fingerprint"] == figures["local"]["fingerprint"]
    assert figures["remote"]["spearman"] == pytest.approx(figures["local"]["spearman"], abs=1e-6)


@pytest.mark.heavy
def test_the_url_forms_and_the_cli_pass_the_served_model_id_on(minilm):
    # A third-party server answers to its own model id (--served-model-name), not the
    # contract's model name: every url= form and the CLI's --served-model pass it on.
    question = "where do herons nest"
    with serving(minilm, name="minilm-served") as named:
        from ctxemb_chroma import ContractEmbeddingFunction
        from ctxemb_haystack import ContractTextEmbedder
        from ctxemb_langchain import ContractEmbeddings

        chroma = ContractEmbeddingFunction(
            minilm.contract, url=named.url, api="openai", served_model="minilm-served"
        )
        assert chroma.get_config()["remote"]["served_model"] == "minilm-served"
        haystack = ContractTextEmbedder(
            contract=minilm.contract, url=named.url, api="openai", served_model="minilm-served"
        )
        assert haystack.to_dict()["init_parameters"]["served_model"] == "minilm-served"
        langchain = ContractEmbeddings(
            minilm.contract, url=named.url, api="openai", served_model="minilm-served"
        )
        expected = minilm.embed_query(question)
        np.testing.assert_allclose(chroma.embed_query([question])[0], expected, atol=1e-5)
        assert langchain.config["remote"]["served_model"] == "minilm-served"

        # The CLI builds the embedder of index, query, verify and eval from these options.
        from ctxemb_core.cli.app import build_parser
        from ctxemb_core.cli.common import embedder

        options = ["--url", named.url, "--api", "openai", "--served-model", "minilm-served"]
        args = build_parser().parse_args(
            ["query", "q", "--collection", "d", "--no-cache", *options]
        )
        through = embedder(args, minilm.contract)
        np.testing.assert_allclose(through.embed_query(question), expected, atol=1e-5)
