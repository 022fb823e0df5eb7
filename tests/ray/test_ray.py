"""Distributed indexing on a real local Ray instance into a real Chroma server (issue 17).

Both are bound to 127.0.0.1 only (checked with ``ss -ltnp``), Ray gets 2 CPUs at most, and both
are stopped when the module ends. A few hundred SciFact documents in tiny batches keep it short.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Before ray is imported anywhere: Ray otherwise rewrites 127.0.0.1 to the machine's address.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

ray = pytest.importorskip("ray")
pytest.importorskip("ctxemb_chroma")

import chromadb  # noqa: E402
from chroma_server import free_port  # noqa: E402
from conftest import fresh_name  # noqa: E402
from samples import CORPUS, EDITED, altered_weights_folder, write_corpus  # noqa: E402

from ctxemb_chroma import index_with_ray  # noqa: E402
from ctxemb_core import Embedder, contract_for  # noqa: E402
from ctxemb_core.documents import TEXT_KEY, text_digest  # noqa: E402
from ctxemb_core.errors import (  # noqa: E402
    ContractMismatchError,
    DataFormatError,
    InvalidInputError,
    StoreUnavailableError,
)
from ctxemb_core.eval.beir import document_text, load_jsonl_corpus  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
N_DOCS = 64
TEXT_CHARS = 300


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, pp in parents.items() if pp == pid and p not in found]
        found.update(kids)
        todo += kids
    return found


def _listeners(pids: set[int]) -> list[str]:
    """Local addresses that these processes listen on (TCP), from ``ss -ltnp``."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        if any(f"pid={p}," in line for p in pids):
            found.append(line.split()[3])
    return found


@contextlib.contextmanager
def _chroma(path: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A Chroma server on 127.0.0.1:port (a fixed port, so it can be restarted on it)."""
    chroma = Path(sys.executable).with_name("chroma")
    log = open(path.parent / f"chroma-{port}.log", "ab")  # noqa: SIM115 - closed below
    cmd = [str(chroma), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"chroma server exited; see {log.name}"
            try:
                # A client costs ~0.1 s of CPU (its TLS context): one once the port answers.
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:
                assert time.monotonic() < deadline, "chroma server not up after 60 s"
                time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A local Ray instance (2 CPUs) and a Chroma server, both on 127.0.0.1; yields the port."""
    data = tmp_path_factory.mktemp("ray-chroma") / "data"
    port = free_port()
    with _chroma(data, port):
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            _node_ip_address="127.0.0.1",
            _system_config={
                # No metrics agent for the workers to report to every few seconds: no one reads
                # them here.
                "enable_metrics_collection": False,
                # A worker left idle after a job lives on for the next job's tasks and actors
                # (Ray's default kills it after 1 s, and the next job starts a new process).
                "idle_worker_killing_time_threshold_ms": 600_000,
            },
        )
        try:
            yield port
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def corpus_file(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first N_DOCS SciFact documents as a JSONL corpus, each text cut to TEXT_CHARS.

    What these tests check is the job (shards, actors, retries, writes), not the network: texts
    a fifth of SciFact's length (~60 tokens, not the 256 of a truncated abstract) make each
    embedding, on the actors and in the comparisons here, about five times cheaper.
    """
    corpus = load_jsonl_corpus(data_dir / "scifact" / "corpus.jsonl.gz")
    path = tmp_path_factory.mktemp("ray-corpus") / "corpus.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for doc_id in list(corpus)[:N_DOCS]:
            doc = {**corpus[doc_id], "text": corpus[doc_id]["text"][:TEXT_CHARS]}
            f.write(json.dumps({"_id": doc_id, **doc}) + "\n")
    return path


@pytest.fixture(scope="module")
def local(corpus_file: Path) -> dict[str, np.ndarray]:
    """The single-process vectors the actors must write, by text, embedded once for the module:
    every document's, and the first ten's texts alone (a shard without titles)."""
    docs = list(load_jsonl_corpus(corpus_file).values())
    texts = [document_text(d) for d in docs] + [d["text"].strip() for d in docs[:10]]
    vectors = Embedder(contract_for(MINILM)).embed_documents(texts)
    return dict(zip(texts, vectors, strict=True))


def _stored(port: int, name: str) -> dict[str, np.ndarray]:
    client = chromadb.HttpClient(host="127.0.0.1", port=port)
    got = client.get_collection(name, embedding_function=None).get(include=["embeddings"])
    return dict(zip(got["ids"], np.asarray(got["embeddings"], dtype=np.float32), strict=True))


def _wait_for_count(
    port: int, name: str, ready: Callable[[int], bool], stop: threading.Event | None = None
) -> bool:
    """Whether the collection's count came to satisfy ``ready`` within 120 s (before ``stop``).

    One client, asking for the count: a fresh client fetching every vector twenty times a
    second cost the driver and the server more CPU than the job it watches.
    """
    deadline = time.monotonic() + 120
    client, stored = None, None
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        with contextlib.suppress(Exception):  # not created yet, or the server going away
            client = client or chromadb.HttpClient(host="127.0.0.1", port=port)
            stored = stored or client.get_collection(name, embedding_function=None)
            if ready(stored.count()):
                return True
        time.sleep(0.05)
    return False


def _index(corpus_file: Path, port: int, name: str, **kwargs):
    return index_with_ray(
        corpus_file,
        contract_for(MINILM),
        collection=name,
        host="127.0.0.1",
        port=port,
        **{"actors": 1, "batch_size": 16, **kwargs},
    )


def test_everything_listens_on_loopback_only(cluster):
    listening = _listeners(_descendants(os.getpid()))
    assert listening, "found no listener of Ray or Chroma"
    # gRPC binds 127.0.0.1 through an IPv6 socket: [::ffff:127.0.0.1] is the same loopback.
    loopback = ("127.0.0.1:", "[::ffff:127.0.0.1]:")
    assert all(a.startswith(loopback) for a in listening), listening


def test_two_actors_write_the_single_process_vectors_and_a_rerun_adds_nothing(
    cluster, corpus_file, local
):
    name = fresh_name()
    summary = _index(corpus_file, cluster, name, actors=2)
    corpus = load_jsonl_corpus(corpus_file)
    assert (summary.written, summary.skipped, summary.failed) == (N_DOCS, 0, 0)
    assert summary.count == summary.total == N_DOCS
    stored = _stored(cluster, name)
    assert set(stored) == set(corpus)
    ids = list(corpus)
    expect = np.stack([local[document_text(corpus[i])] for i in ids])
    got = np.stack([stored[i] for i in ids])
    cos = np.sum(got * expect, axis=1) / (
        np.linalg.norm(got, axis=1) * np.linalg.norm(expect, axis=1)
    )
    assert cos.min() >= 0.99999
    again = _index(corpus_file, cluster, name, actors=2)
    assert (again.written, again.skipped, again.failed, again.count) == (0, N_DOCS, 0, N_DOCS)


@pytest.fixture(scope="module")
def altered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled model's folder with altered weights, copied once for the module."""
    return altered_weights_folder(tmp_path_factory.mktemp("altered"))


def test_an_actor_with_altered_weights_writes_nothing_and_fails_the_job(
    cluster, corpus_file, altered
):
    # The driver stamps the collection with the bundled model's contract; the actor is given a
    # copy of the folder with one tensor scaled by 1.01, as a node with altered weights has.
    name = fresh_name()
    with pytest.raises(ContractMismatchError) as info:
        _index(corpus_file, cluster, name, model_path=altered)
    assert info.value.fields == ("weights",)
    assert _stored(cluster, name) == {}


def _shard_folders(corpus_file: Path, tmp_path: Path) -> dict[str, Path]:
    """The corpus cut into three shards, as gzip JSONL and as Parquet (one without titles)."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = [{"_id": i, **d} for i, d in load_jsonl_corpus(corpus_file).items()]
    cuts = [docs[:10], docs[10:40], docs[40:]]
    gz, parquet = tmp_path / "gz", tmp_path / "parquet"
    gz.mkdir()
    parquet.mkdir()
    for k, part in enumerate(cuts):
        with gzip.open(gz / f"part-{k}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(d) + "\n" for d in part)
        columns = ["_id", "title", "text"] if k else ["_id", "text"]
        table = pa.table({c: [d[c] for d in part] for c in columns})
        pq.write_table(table, parquet / f"part-{k}.parquet")
    return {"gz": gz, "parquet": parquet}


def test_sharded_gzip_and_parquet_corpora_are_read_by_the_workers(
    cluster, corpus_file, local, tmp_path
):
    # One actor a job: what is proven is that the workers read both formats (each actor start
    # is a new process importing Ray Data, ~3.5 CPU-s); the ranges that several workers are
    # dealt from inside a shard are tests/core/test_shards.py's, in-process.
    corpus = load_jsonl_corpus(corpus_file)
    ids = sorted(corpus)
    for kind, folder in _shard_folders(corpus_file, tmp_path).items():
        name = fresh_name()
        summary = _index(folder, cluster, name)
        assert (summary.written, summary.skipped, summary.total) == (N_DOCS, 0, N_DOCS), kind
        stored = _stored(cluster, name)
        assert sorted(stored) == ids, kind
        # The first shard has no titles in Parquet: those documents are their text alone.
        untitled = set(list(corpus)[:10]) if kind == "parquet" else set()
        expect = [
            corpus[i]["text"].strip() if i in untitled else document_text(corpus[i]) for i in ids
        ]
        got = np.stack([stored[i] for i in ids])
        assert np.min(np.sum(got * np.stack([local[t] for t in expect]), axis=1)) >= 0.99999, kind


def test_a_bad_shard_is_refused_before_anything_is_written(cluster, corpus_file, tmp_path):
    import gzip

    folder = _shard_folders(corpus_file, tmp_path)["gz"]
    first = next(iter(load_jsonl_corpus(corpus_file)))
    with gzip.open(folder / "part-9.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"_id": first, "title": "", "text": "the same id again"}) + "\n")
    name = fresh_name()
    with pytest.raises(DataFormatError, match=f"{first}.*also in"):
        _index(folder, cluster, name)
    client = chromadb.HttpClient(host="127.0.0.1", port=cluster)
    assert name not in [c.name for c in client.list_collections()]
    with pytest.raises(DataFormatError, match="holds no corpus"):
        _index(tmp_path / "gz" / "..", cluster, name)


def _actor_pids() -> list[int]:
    found = []
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):
            title = (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace")
            if title.startswith("ray::") and "MapWorker" in title:
                found.append(pid)
    return found


def test_an_actor_killed_mid_job_is_retried_and_the_ids_are_exactly_the_corpus(
    cluster, corpus_file
):
    name = fresh_name()
    killed: list[int] = []
    done = threading.Event()

    def kill_once_writing() -> None:
        if _wait_for_count(cluster, name, lambda n: 0 < n < N_DOCS, done):
            for pid in _actor_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    killer = threading.Thread(target=kill_once_writing)
    killer.start()
    try:
        # One document per write: 64 writes leave the watcher a window of seconds, where eight
        # batches of eight short texts could all land between two of its looks on a fast host.
        summary = _index(corpus_file, cluster, name, batch_size=1)
    finally:
        done.set()
        killer.join()
    assert killed, "no actor was killed while the job wrote"
    assert sorted(_stored(cluster, name)) == sorted(load_jsonl_corpus(corpus_file))
    assert summary.count == N_DOCS and summary.failed == 0


def test_a_chroma_server_restarted_mid_job_loses_nothing_once_rerun(cluster, corpus_file, tmp_path):
    port = free_port()
    name = fresh_name()
    data = tmp_path / "restarted"
    first: list[object] = []

    def run() -> None:
        try:
            first.append(_index(corpus_file, port, name, batch_size=8))
        except Exception as exc:  # the server went away under the job: said, not hidden
            first.append(exc)

    with _chroma(data, port) as proc:
        job = threading.Thread(target=run)
        job.start()
        _wait_for_count(port, name, lambda n: n > 0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with _chroma(data, port):
            job.join()
            outcome = first[0]
            if not isinstance(outcome, Exception):
                assert outcome.failed + outcome.written + outcome.skipped == N_DOCS
            else:
                assert isinstance(outcome, StoreUnavailableError | ray.exceptions.RayError)
            summary = _index(corpus_file, port, name, batch_size=8)
            assert summary.failed == 0 and summary.count == N_DOCS
            assert sorted(_stored(port, name)) == sorted(load_jsonl_corpus(corpus_file))


def test_cli_index_ray_prints_written_skipped_and_failed(cluster, corpus_file, capsys):
    from ctxemb_core.cli import main

    name = fresh_name()
    args = ["index", str(corpus_file), "--ray", "--host", "127.0.0.1", "--port", str(cluster)]
    args += ["--collection", name, "--batch-size", "16", "--model", MINILM]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{name}: {N_DOCS} added, 0 updated, 0 unchanged, 0 failed" in out
    assert main(args) == 0
    again = capsys.readouterr().out
    assert f"{name}: 0 added, 0 updated, {N_DOCS} unchanged, 0 failed" in again
    assert f"{N_DOCS} documents" in again


def test_cli_index_ray_needs_a_server(corpus_file, capsys):
    from ctxemb_core.cli import main

    assert main(["index", str(corpus_file), "--ray", "--collection", "c", "--path", "x"]) == 2
    assert "--ray writes to a Chroma server" in capsys.readouterr().err


def test_index_with_ray_syncs_with_the_same_rules_and_deletes_on_request(
    cluster, tmp_path, minilm, minilm_contract
):
    name = fresh_name()
    corpus = write_corpus(tmp_path / "c.jsonl", CORPUS)

    def run(**kwargs: Any) -> Any:
        return index_with_ray(
            corpus,
            minilm_contract,
            collection=name,
            host="127.0.0.1",
            port=cluster,
            batch_size=2,
            cache=False,
            **kwargs,
        )

    first = run()
    assert (first.added, first.updated, first.skipped, first.failed) == (4, 0, 0, 0)
    write_corpus(
        corpus, {**{k: v for k, v in CORPUS.items() if k != "moon"}, "tea": EDITED, "mate": "Mate."}
    )
    client = chromadb.HttpClient(host="127.0.0.1", port=cluster)
    raw = client.get_collection(name, embedding_function=None)
    before = raw.get(include=["documents", "metadatas", "embeddings"])
    # The dry run embeds and writes nothing.
    plan = run(dry_run=True, delete_missing=True)
    assert (plan.added, plan.updated, plan.skipped, plan.deleted) == (1, 1, 2, ("moon",))
    after = raw.get(include=["documents", "metadatas", "embeddings"])
    assert after["ids"] == before["ids"] and after["documents"] == before["documents"]
    done = run(delete_missing=True)
    assert (done.added, done.updated, done.skipped, done.deleted) == (1, 1, 2, ("moon",))
    got = raw.get(ids=["tea"], include=["documents", "metadatas", "embeddings"])
    assert got["documents"] == [EDITED] and got["metadatas"][0][TEXT_KEY] == text_digest(EDITED)
    np.testing.assert_allclose(got["embeddings"][0], minilm.embed_documents([EDITED])[0], atol=1e-6)
    assert sorted(raw.get(include=[])["ids"]) == ["bank", "mate", "slug", "tea"]
    again = run()  # nothing changed: decided by the driver, no actor started
    assert (again.written, again.skipped, again.count) == (0, 4, 4)


def test_actors_embed_through_an_embedding_server_held_to_the_contract(
    cluster, corpus_file, local, minilm
):
    from embedding_server import serving

    from ctxemb_core.errors import ContractMismatchError

    name = fresh_name()
    with serving(minilm) as served:
        summary = _index(corpus_file, cluster, name, url=served.url)
    assert (summary.written, summary.failed) == (N_DOCS, 0)
    corpus = load_jsonl_corpus(corpus_file)
    stored = _stored(cluster, name)
    got = np.stack([stored[i] for i in corpus])
    expect = np.stack([local[document_text(corpus[i])] for i in corpus])
    assert np.min(np.sum(got * expect, axis=1)) >= 0.99999
    # A server of another recipe is refused by the driver before any actor starts.
    cls = Embedder(contract_for(MINILM, pooling="cls"))
    with serving(cls) as other, pytest.raises(ContractMismatchError, match="server='cls'"):
        _index(corpus_file, cluster, fresh_name(), url=other.url)


def test_the_same_job_writes_a_postgresql_table_through_its_driver(
    cluster, tmp_path, pg, minilm, minilm_contract, capsys
):
    # The job is ctxemb_ray's, over any driver: a table is another store's session, with the
    # same sync, the same canary check on every actor and the same refusal of another contract.
    import ctxemb_pgvector

    corpus = write_corpus(tmp_path / "c.jsonl", CORPUS)
    name, dsn = fresh_name(), pg.ctxemb_dsn

    def run(**kwargs: Any) -> Any:
        return ctxemb_pgvector.index_with_ray(
            corpus, minilm_contract, table=name, dsn=dsn, batch_size=2, cache=False, **kwargs
        )

    first = run()
    assert (first.added, first.skipped, first.failed, first.count) == (4, 0, 0, 4)
    table = ctxemb_pgvector.open_table(pg, name, minilm, sample=100)
    rows = {r.id: r for r in table.index.get(list(CORPUS), include=("vector", "text"))}
    assert set(rows) == set(CORPUS)
    for doc_id, text in CORPUS.items():
        np.testing.assert_allclose(
            rows[doc_id].vector, minilm.embed_documents([text])[0], atol=1e-6
        )
    write_corpus(corpus, {**CORPUS, "tea": EDITED})
    # The command line's --ray takes the store's session from its options (here --dsn).
    from ctxemb_core.cli import main

    args = ["index", str(corpus), "--ray", "--dsn", dsn, "--collection", name]
    assert main([*args, "--batch-size", "2", "--model", MINILM, "--no-cache"]) == 0
    assert f"{name}: 0 added, 1 updated, 3 unchanged, 0 failed; 4 documents" in (
        capsys.readouterr().out
    )
    other = contract_for(MINILM, pooling="cls")
    with pytest.raises(ContractMismatchError, match="pooling"):
        ctxemb_pgvector.index_with_ray(corpus, other, table=name, dsn=dsn)
    # The session travels to every actor with its DSN; what it prints masks the password.
    from ctxemb_core.cli.stores import store_options

    args = argparse.Namespace(dsn="postgresql://app:s3cret@db/rag", schema="public")
    session = store_options("pgvector").ray_session(args, "docs")
    assert "s3cret" not in repr(session) and "docs" in repr(session)
    assert pickle.loads(pickle.dumps(session)) == session


def test_a_bad_name_or_schema_is_refused_before_the_store_is_reached(tmp_path):
    # No database listens at this DSN: the names are refused first, as typed input errors.
    pytest.importorskip("psycopg")
    import ctxemb_pgvector

    corpus = write_corpus(tmp_path / "corpus.jsonl", CORPUS)
    nowhere = "postgresql://app:s3cret@127.0.0.1:1/rag"
    contract = contract_for(MINILM)
    for keywords, named in (({"table": "no such"}, "table name"), ({"schema": "a;b"}, "schema")):
        given = {"table": "docs", "dsn": nowhere, **keywords}
        with pytest.raises(InvalidInputError, match=named) as refused:
            ctxemb_pgvector.index_with_ray(corpus, contract, **given)
        assert "s3cret" not in str(refused.value)


# The upgrade's backfill on Ray (issue 45, item 4): core's plan and writes, run by actors that
# hold the new contract. Four short documents, MiniLM upgraded to a 128-dimension cut of itself.


def _alias_over(port: int, minilm: Embedder, docs: dict[str, str]) -> tuple[Any, str]:
    """A catalog on the module's server, and a fresh alias over a stamped index of ``docs``."""
    from ctxemb_chroma import catalog as chroma_catalog
    from ctxemb_core.aliases import create_alias
    from ctxemb_core.index import GuardedIndex

    catalog = chroma_catalog(chromadb.HttpClient(host="127.0.0.1", port=port))
    alias = fresh_name()
    GuardedIndex.open(catalog.driver(f"{alias}-v1"), minilm).add(list(docs), list(docs.values()))
    create_alias(catalog, alias, f"{alias}-v1")
    return catalog, alias


@pytest.fixture(scope="module")
def cut(minilm: Embedder) -> Embedder:
    return Embedder(minilm.contract.with_(truncate_dim=128))


def _backfill_on_ray(port: int, catalog: Any, alias: str, encoders: Any, **kwargs: Any) -> Any:
    from ctxemb_ray import AdapterSession, backfill_with_ray

    return backfill_with_ray(
        catalog,
        alias,
        encoders,
        sessions=lambda name: AdapterSession(
            "ctxemb_chroma", name, {"host": "127.0.0.1", "port": port}
        ),
        cache=False,
        **{"batch_size": 2, **kwargs},
    )


def test_cli_upgrade_ray_writes_the_in_process_backfills_vectors_then_gates_and_cuts_over(
    cluster, minilm, cut, capsys
):
    from ctxemb_core.aliases import Encoders, backfill, begin_upgrade, read_alias
    from ctxemb_core.cli import main

    here, alone = _alias_over(cluster, minilm, CORPUS)
    begin_upgrade(here, alone, cut)
    assert backfill(here, alone, Encoders(minilm, cut)).written == len(CORPUS)
    catalog, alias = _alias_over(cluster, minilm, CORPUS)
    args = ["upgrade", alias, "--truncate-dim", "128", "--ray", "--host", "127.0.0.1"]
    args += ["--port", str(cluster), "--batch-size", "2", "--no-cache"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"backfill: {len(CORPUS)} re-embedded" in out
    assert all(f"gate pass  {g}" in out for g in ("canary", "parity", "sample")), out
    record = read_alias(catalog, alias)  # cut over: the shadow serves, the old index is kept
    assert record.previous is not None and record.previous.index == f"{alias}-v1"
    assert record.target.contract == cut.contract
    on_ray = _stored(cluster, record.target.index)
    in_process = _stored(cluster, read_alias(here, alone).shadow.index)
    assert set(on_ray) == set(in_process) == set(CORPUS)
    for doc_id in CORPUS:
        assert on_ray[doc_id].shape == (128,)
        np.testing.assert_allclose(on_ray[doc_id], in_process[doc_id], atol=1e-6)


def test_a_backfill_actor_with_altered_weights_writes_nothing_and_fails_the_job(
    cluster, minilm, cut, altered
):
    from ctxemb_core.aliases import Encoders, begin_upgrade, read_alias

    catalog, alias = _alias_over(cluster, minilm, CORPUS)
    begin_upgrade(catalog, alias, cut)
    with pytest.raises(ContractMismatchError) as info:
        _backfill_on_ray(cluster, catalog, alias, Encoders(minilm, cut), model_path=altered)
    assert info.value.fields == ("weights",)
    assert _stored(cluster, read_alias(catalog, alias).shadow.index) == {}


def test_a_ray_backfill_rerun_after_an_interrupt_does_only_what_is_left(cluster, minilm, cut):
    from ctxemb_core.aliases import Encoders, begin_upgrade, check_gates, cutover, read_alias

    docs = {**CORPUS, **{f"{k}-2": f"{v} Again." for k, v in CORPUS.items()}}
    catalog, alias = _alias_over(cluster, minilm, docs)
    begin_upgrade(catalog, alias, cut)
    encoders = Encoders(minilm, cut)

    def interrupt(done: int) -> None:
        raise KeyboardInterrupt  # Ctrl-C once the first batch is written

    with pytest.raises(KeyboardInterrupt):
        _backfill_on_ray(cluster, catalog, alias, encoders, batch_size=1, progress=interrupt)
    shadow = read_alias(catalog, alias).shadow.index
    partial = len(_stored(cluster, shadow))
    assert partial >= 1
    again = _backfill_on_ray(cluster, catalog, alias, encoders)
    assert again.written + again.unchanged == len(docs) and again.written <= len(docs) - partial
    assert set(_stored(cluster, shadow)) == set(docs)
    assert all(g.passed for g in check_gates(catalog, alias, encoders))
    assert cutover(catalog, alias, encoders).target.index == shadow


def test_cli_upgrade_ray_needs_a_server_before_it_changes_anything(tmp_path, capsys):
    from ctxemb_core.cli import main

    chromadb.PersistentClient(str(tmp_path / "c"))  # an embedded store: one process's
    args = ["upgrade", "docs", "--truncate-dim", "128", "--path", str(tmp_path / "c"), "--ray"]
    assert main(args) == 2
    assert "--ray writes to a Chroma server" in capsys.readouterr().err


def test_the_ray_jobs_embed_through_the_served_model_they_are_given(tmp_path):
    # No actor is started: the driver's own embedder, built with served_model, is what is
    # proven here; the actors are given the same remote settings (--served-model with --url).
    from embedding_server import serving

    from ctxemb_core.aliases import Encoders, MemoryCatalog, backfill, begin_upgrade, create_alias
    from ctxemb_core.errors import InvalidInputError, ModelNotFoundError
    from ctxemb_core.index import GuardedIndex, MemoryStore
    from ctxemb_core.testing.conformance import tiny_embedder
    from ctxemb_ray import backfill_with_ray
    from ctxemb_ray import index_with_ray as index_on_ray

    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = MemoryCatalog(MemoryStore())
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(list(CORPUS), list(CORPUS.values()))
    create_alias(catalog, "docs", "docs-v1")
    begin_upgrade(catalog, "docs", new)
    backfill(catalog, "docs", Encoders(old, new))  # nothing left for actors to do

    @contextlib.contextmanager
    def session(embedder: Embedder) -> Iterator[Any]:
        yield catalog.driver("fresh")

    corpus = write_corpus(tmp_path / "c.jsonl", CORPUS)
    with serving({"tiny": old, "tiny-8": new}) as served:
        run = {"store": session, "dry_run": True, "url": served.url}
        summary = index_on_ray(corpus, new.contract, **run, served_model="tiny-8")
        assert summary.dry_run and summary.written == len(CORPUS)
        with pytest.raises(ModelNotFoundError, match="as model 'tiny-8', not 'tiny'"):
            index_on_ray(corpus, new.contract, **run, served_model="tiny")
        again = {"sessions": lambda name: session, "url": served.url}
        with pytest.raises(InvalidInputError, match="served_model"):
            backfill_with_ray(catalog, "docs", Encoders(old, new), **again, served_model=" ")
        done = backfill_with_ray(catalog, "docs", Encoders(old, new), **again, served_model="m")
        assert done.written == 0
