"""Haystack over PostgreSQL: ContractDocumentWriter and ContractRetriever guarding a
``PgvectorDocumentStore`` through ``ctxemb_pgvector`` (one table, one stamp, either path)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from conftest import DOCS, fresh_name
from haystack import Document, Pipeline
from haystack.components.writers import DocumentWriter
from haystack.core.errors import PipelineRuntimeError
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils import Secret
from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

import ctxemb_pgvector
from ctxemb_core import Embedder
from ctxemb_core.errors import (
    ContractMismatchError,
    ForeignVectorsError,
    InvalidInputError,
    MissingStampError,
)
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
    DuplicateDocumentsError,
    eval_path,
)

ENV = "CTXEMB_TEST_PG_CONN_STR"


@pytest.fixture
def dsn(pg, monkeypatch) -> str:
    """The fresh database's DSN, also in the environment a serialisable Secret reads."""
    monkeypatch.setenv(ENV, pg.ctxemb_dsn)
    return pg.ctxemb_dsn


def store_for(dsn: str, table: str | None = None, **options) -> PgvectorDocumentStore:
    return PgvectorDocumentStore(
        connection_string=Secret.from_env_var(ENV),
        table_name=table or fresh_name(),
        embedding_dimension=384,
        **options,
    )


def documents() -> list[Document]:
    return [Document(id=k, content=v, meta={"topic": k}) for k, v in DOCS.items()]


def indexing(contract, store, policy=DuplicatePolicy.NONE) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractDocumentEmbedder(contract=contract, progress_bar=False))
    pipe.add_component("writer", ContractDocumentWriter(store, policy=policy))
    pipe.connect("embedder.documents", "writer.documents")
    return pipe


def querying(contract, store, top_k=3, **options) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embedder", ContractTextEmbedder(contract=contract))
    retriever = PgvectorEmbeddingRetriever(document_store=store, top_k=top_k)
    pipe.add_component("retriever", ContractRetriever(retriever, **options))
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("embedder.fingerprint", "retriever.fingerprint")
    return pipe


def ask(pipe: Pipeline, text: str, **retriever) -> list[Document]:
    inputs = {"embedder": {"text": text}, "retriever": retriever}
    return pipe.run(inputs)["retriever"]["documents"]


def cause(info: pytest.ExceptionInfo) -> BaseException:
    assert isinstance(info.value, PipelineRuntimeError)
    assert info.value.__cause__ is not None
    return info.value.__cause__


def rows(pg, table: str) -> int:
    found = pg.execute(f'SELECT count(*) FROM public."{table}"').fetchone()
    return int(found[0])


# -- the guarded write and read ------------------------------------------------------------------


def test_the_writer_creates_a_stamped_table_and_the_retriever_scores_by_cosine(
    pg, dsn, minilm_contract, minilm
):
    store = store_for(dsn)
    out = indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    assert out["writer"]["documents_written"] == len(DOCS)
    stored = ctxemb_pgvector.stored_or_none(pg, store.table_name)
    assert stored is not None and stored.stamped and stored.seq  # ctxemb's table, stamped
    # Haystack's store then finds the table existing, and reads the rows as its own.
    assert store.count_documents() == len(DOCS)
    assert {d.id for d in store.filter_documents()} == set(DOCS)

    found = ask(querying(minilm_contract, store), "how are green tea leaves processed")
    assert found[0].id == "tea" and len(found) == 3
    assert found[0].content == DOCS["tea"] and found[0].meta["topic"] == "tea"
    query = minilm.embed_queries(["how are green tea leaves processed"])[0]
    for d in found:
        vector = minilm.embed_documents([DOCS[d.id]])[0]
        assert d.score == pytest.approx(float(np.dot(query, vector)), abs=1e-4)
        assert len(d.embedding) == 384
    assert [d.score for d in found] == sorted((d.score for d in found), reverse=True)


def test_a_pipeline_dropped_without_closing_closes_the_guards_connection(pg, dsn, minilm_contract):
    # The guard's own connection to the store's database (made on the first write) goes with
    # the pipeline that holds it: closed, not left to psycopg's "deleted while still open".
    store = store_for(dsn)
    pipe = indexing(minilm_contract, store)
    pipe.run({"embedder": {"documents": documents()}})
    store.close()  # Haystack's own connection is the store's to close
    gc.collect()  # what earlier tests of this process left behind is collected unwatched
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        del pipe
        gc.collect()
    assert not [w for w in caught if "psycopg" in str(w.message)], [str(w.message) for w in caught]


def test_another_contract_is_refused_by_writer_and_retriever_naming_the_field(
    pg, dsn, minilm_contract
):
    store = store_for(dsn)
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    other = minilm_contract.with_(pooling="cls")
    extra = [Document(id="new", content="Owls hunt at night.")]
    with pytest.raises(PipelineRuntimeError) as info:
        indexing(other, store).run({"embedder": {"documents": extra}})
    assert isinstance(cause(info), ContractMismatchError) and "pooling" in str(cause(info))
    assert rows(pg, store.table_name) == len(DOCS)  # nothing written
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(other, store), "tea")
    assert isinstance(cause(info), ContractMismatchError) and "pooling" in str(cause(info))


def test_duplicate_policies_as_in_haystack(pg, dsn, minilm_contract):
    store = store_for(dsn)
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()[:2]}})
    changed = [Document(id="tea", content="Black tea is oxidised.", meta={"topic": "black"})]
    with pytest.raises(PipelineRuntimeError) as info:
        indexing(minilm_contract, store).run({"embedder": {"documents": changed}})
    assert isinstance(cause(info), DuplicateDocumentsError)
    skip = indexing(minilm_contract, store, DuplicatePolicy.SKIP)
    assert skip.run({"embedder": {"documents": changed}})["writer"]["documents_written"] == 0
    over = indexing(minilm_contract, store, DuplicatePolicy.OVERWRITE)
    assert over.run({"embedder": {"documents": changed}})["writer"]["documents_written"] == 1
    (tea,) = [d for d in store.filter_documents() if d.id == "tea"]
    assert tea.content == "Black tea is oxidised." and tea.meta["topic"] == "black"
    assert rows(pg, store.table_name) == 2


def test_filters_by_meta_equality_and_beyond(dsn, minilm_contract):
    store = store_for(dsn)
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    pipe = querying(minilm_contract, store, top_k=5)
    equal = {"field": "meta.topic", "operator": "==", "value": "bank"}
    assert [d.id for d in ask(pipe, "tea", filters=equal)] == ["bank"]
    either = {"field": "meta.topic", "operator": "in", "value": ["moon", "slug"]}
    assert {d.id for d in ask(pipe, "tea", filters=either)} == {"moon", "slug"}
    nothing = {"field": "meta.topic", "operator": "in", "value": ["none"]}
    assert ask(pipe, "tea", filters=nothing) == []
    assert len(ask(pipe, "tea", top_k=2)) == 2


def test_a_table_not_yet_written_returns_nothing_and_creates_nothing(pg, dsn, minilm_contract):
    store = store_for(dsn)
    assert ask(querying(minilm_contract, store), "tea") == []
    assert ctxemb_pgvector.stored_or_none(pg, store.table_name) is None


def test_an_empty_table_the_store_created_first_is_refused_with_advice(pg, dsn, minilm_contract):
    store = store_for(dsn)
    assert store.count_documents() == 0  # Haystack creates its table, unstamped
    with pytest.raises(PipelineRuntimeError) as info:
        indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    assert isinstance(cause(info), MissingStampError) and "delete_table" in str(cause(info))
    assert rows(pg, store.table_name) == 0


def test_a_store_of_another_width_is_refused(dsn, minilm_contract):
    store = PgvectorDocumentStore(connection_string=Secret.from_env_var(ENV))  # 768 wide
    with pytest.raises(PipelineRuntimeError) as info:
        indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    assert isinstance(cause(info), InvalidInputError) and "embedding_dimension" in str(cause(info))


# -- one table, either path ----------------------------------------------------------------------


def test_a_table_written_through_haystack_opens_through_ctxemb_pgvector(pg, dsn, minilm):
    store = store_for(dsn)
    indexing(minilm.contract, store).run({"embedder": {"documents": documents()}})
    table = ctxemb_pgvector.open_table(pg, store.table_name, minilm, create=False)
    assert table.count() == len(DOCS)
    assert table.query("how are green tea leaves processed", 1)["ids"] == [["tea"]]
    with pytest.raises(ContractMismatchError, match="pooling"):
        ctxemb_pgvector.open_table(
            pg, store.table_name, Embedder(minilm.contract.with_(pooling="cls")), create=False
        )


def test_a_table_written_by_ctxemb_pgvector_is_read_by_the_haystack_retriever(pg, dsn, minilm):
    name = fresh_name()
    table = ctxemb_pgvector.open_table(pg, name, minilm)
    table.add(list(DOCS), list(DOCS.values()), [{"topic": k} for k in DOCS])
    found = ask(querying(minilm.contract, store_for(dsn, name)), "a bike chain needs oil")
    assert found[0].id == "bike" and found[0].meta["topic"] == "bike"
    expected = table.query("a bike chain needs oil", 3)
    assert [d.id for d in found] == expected["ids"][0]
    np.testing.assert_allclose(
        [d.score for d in found], 1 - np.asarray(expected["distances"][0]), atol=1e-5
    )


def test_haystacks_own_writer_with_another_embedder_is_caught_on_the_next_open(
    pg, dsn, minilm_contract, minilm
):
    store = store_for(dsn)
    indexing(minilm_contract, store).run({"embedder": {"documents": documents()}})
    # Around ctxemb: another recipe's vectors (same width), through Haystack's plain writer.
    plain = Pipeline()
    other = minilm_contract.with_(pooling="cls")
    plain.add_component("embedder", ContractDocumentEmbedder(contract=other, progress_bar=False))
    plain.add_component("writer", DocumentWriter(store))
    plain.connect("embedder.documents", "writer.documents")
    extra = [Document(id="owl", content="Owls hunt at night by sound.")]
    assert plain.run({"embedder": {"documents": extra}})["writer"]["documents_written"] == 1
    with pytest.raises(ForeignVectorsError):
        ctxemb_pgvector.open_table(pg, store.table_name, minilm, create=False)
    with pytest.raises(PipelineRuntimeError) as info:  # a new pipeline opens it afresh
        ask(querying(minilm_contract, store), "owls")
    assert isinstance(cause(info), ForeignVectorsError)
    with pytest.raises(PipelineRuntimeError) as info:
        more = [Document(id="new", content="Moss grows on the north side.")]
        indexing(minilm_contract, store).run({"embedder": {"documents": more}})
    assert isinstance(cause(info), ForeignVectorsError)
    assert rows(pg, store.table_name) == len(DOCS) + 1  # the guarded write added nothing


def test_an_unstamped_table_is_refused_and_adopted_on_request(pg, dsn, minilm_contract, minilm):
    store = store_for(dsn)
    # Haystack's own pipeline, vectors of this very contract, no stamp.
    plain = Pipeline()
    plain.add_component(
        "embedder", ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    )
    plain.add_component("writer", DocumentWriter(store))
    plain.connect("embedder.documents", "writer.documents")
    plain.run({"embedder": {"documents": documents()}})
    with pytest.raises(PipelineRuntimeError) as info:
        ask(querying(minilm_contract, store), "tea")
    assert isinstance(cause(info), MissingStampError)
    found = ask(querying(minilm_contract, store, adopt=True), "how is green tea processed")
    assert found[0].id == "tea"
    assert ctxemb_pgvector.open_table(pg, store.table_name, minilm, create=False).count() == 6


# -- serialisation -------------------------------------------------------------------------------


def test_to_dict_and_from_dict_round_trip_exactly(dsn, minilm_contract):
    store = store_for(dsn, "ser")
    for component in (
        ContractDocumentWriter(store, policy=DuplicatePolicy.SKIP, sample=4),
        ContractRetriever(PgvectorEmbeddingRetriever(document_store=store, top_k=5), sample=0),
        ContractRetriever(PgvectorEmbeddingRetriever(document_store=store), adopt=True),
    ):
        data = component.to_dict()
        assert json.loads(json.dumps(data)) == data  # plain JSON, YAML-ready
        back = type(component).from_dict(json.loads(json.dumps(data)))
        assert back.to_dict() == data


_CHILD = """
import json, sys
from haystack import Document, Pipeline
import ctxemb_haystack
indexing = Pipeline.loads(open(sys.argv[1]).read())
query = Pipeline.loads(open(sys.argv[2]).read())
docs = [Document(id=k, content=v) for k, v in json.loads(sys.argv[3]).items()]
indexing.run({"embedder": {"documents": docs}})
out = query.run({"embedder": {"text": "how are green tea leaves processed"}})
print(json.dumps({
    "ids": [d.id for d in out["retriever"]["documents"]],
    "scores": [d.score for d in out["retriever"]["documents"]],
}))
"""


@pytest.mark.heavy
def test_pipelines_dumped_to_yaml_run_in_a_new_process(pg, dsn, minilm_contract, tmp_path):
    store = store_for(dsn)
    files = (tmp_path / "indexing.yaml", tmp_path / "query.yaml")
    files[0].write_text(indexing(minilm_contract, store, DuplicatePolicy.OVERWRITE).dumps())
    query = querying(minilm_contract, store)
    files[1].write_text(query.dumps())
    assert Pipeline.loads(files[1].read_text()).to_dict() == query.to_dict()
    assert dsn not in files[0].read_text() + files[1].read_text()  # the secret stays out
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(_CHILD))
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False"}
    done = subprocess.run(
        [sys.executable, str(script), str(files[0]), str(files[1]), json.dumps(DOCS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads(done.stdout.splitlines()[-1])
    assert child["ids"][0] == "tea" and len(child["ids"]) == 3
    here = ask(query, "how are green tea leaves processed")
    assert [d.id for d in here] == child["ids"]
    np.testing.assert_allclose([d.score for d in here], child["scores"], atol=1e-5)
    assert ctxemb_pgvector.stored_or_none(pg, store.table_name).stamped


# -- the evaluation path -------------------------------------------------------------------------


def test_the_eval_path_indexes_searches_and_scores_pairs(pg, dsn, minilm):
    name = fresh_name()
    path = eval_path(minilm, "pgvector", collection=name, dsn=dsn)
    try:
        assert path.via == "haystack-pgvector" and path.fingerprint == minilm.fingerprint
        assert path.index(DOCS) == len(DOCS)
        assert path.index(DOCS) == 0  # a re-run writes nothing
        run = path.search({"q1": "how are green tea leaves processed"}, 3)
        assert max(run["q1"], key=run["q1"].get) == "tea" and len(run["q1"]) == 3
        first = ["A man plays a guitar.", "The cat sleeps."]
        second = ["Someone plays an instrument.", "Stocks fell sharply."]
        scores = path.pair_scores(first, second)
        expected = [
            float(np.dot(minilm.embed_queries([a])[0], minilm.embed_documents([b])[0]))
            for a, b in zip(first, second, strict=True)
        ]
        np.testing.assert_allclose(scores, expected, atol=1e-4)
    finally:
        path.close()
    # Both tables are ctxemb's, stamped: the CLI's own path opens them.
    for table in (name, f"{name}-pairs"):
        assert ctxemb_pgvector.open_table(pg, table, minilm, create=False).count() > 0


def test_the_eval_path_refuses_another_contracts_table(pg, dsn, minilm):
    name = fresh_name()
    ctxemb_pgvector.open_table(pg, name, Embedder(minilm.contract.with_(pooling="cls")))
    path = eval_path(minilm, "pgvector", collection=name, dsn=dsn)
    try:
        with pytest.raises(ContractMismatchError, match="pooling"):
            path.index(DOCS)
    finally:
        path.close()


def test_an_unnormalised_contract_scores_by_inner_product(dsn, minilm_contract):
    embedder = Embedder(minilm_contract.with_(normalize=False))
    path = eval_path(embedder, "pgvector", collection=fresh_name(), dsn=dsn)
    try:
        path.index(DOCS)
        query = "how are green tea leaves processed"
        run = path.search({"q": query}, len(DOCS))
        exact = embedder.embed_documents(list(DOCS.values())) @ embedder.embed_queries([query])[0]
        assert set(run["q"]) == set(DOCS)
        for doc_id, want in zip(DOCS, exact, strict=True):
            assert run["q"][doc_id] == pytest.approx(float(want), rel=1e-5, abs=1e-4)
        assert max(exact) > 1.5  # an inner product of unnormalised vectors, not a cosine
    finally:
        path.close()
