"""The pgvector adapter on a real PostgreSQL 18 + pgvector: create stamped, open verified,
write in transactions, search, and refuse another contract with the field named."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DOCS

import ctxemb_pgvector
from ctxemb_core import Embedder
from ctxemb_core.errors import (
    ContractMismatchError,
    ExistingIdsError,
    ForeignVectorsError,
    InvalidInputError,
    MissingStampError,
    StorageMismatchError,
)
from ctxemb_core.guard import similarity


def _open(pg, embedder, name="docs", **kw):
    return ctxemb_pgvector.open_table(pg, name, embedder, **kw)


def test_create_add_query_and_reopen(pg, minilm):
    docs = _open(pg, minilm)
    docs.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
    assert docs.count() == len(DOCS)
    found = docs.query(["how is green tea made"], 2)
    assert found["ids"][0][0] == "tea"
    # The distance is the contract's cosine distance, in the row's own vector.
    tea = minilm.embed_documents([DOCS["tea"]])[0]
    q = minilm.embed_queries(["how is green tea made"])[0]
    score = similarity(found["distances"][0][:1], docs.layout.space, docs.contract)[0]
    assert score == pytest.approx(float(tea @ q), abs=1e-5)
    again = _open(ctxemb_pgvector.connect(pg.ctxemb_dsn), minilm)
    assert again.open_check.checked == len(DOCS)
    assert again.get(ids=["moon"])["documents"] == [DOCS["moon"]]
    stored = np.asarray(again.get(ids=["tea"], include=["embeddings"])["embeddings"][0])
    assert np.array_equal(stored, tea.astype(np.float32))


def test_another_contract_is_refused_on_open_naming_the_field(pg, minilm):
    _open(pg, minilm).add(["tea"], [DOCS["tea"]])
    with pytest.raises(ContractMismatchError) as err:
        _open(pg, Embedder(minilm.contract.with_(pooling="cls")))
    assert err.value.fields == ("pooling",)


def test_add_refuses_stored_ids_and_upsert_replaces(pg, minilm):
    docs = _open(pg, minilm)
    docs.add(["tea"], [DOCS["tea"]])
    with pytest.raises(ExistingIdsError):
        docs.add(["tea", "moon"], [DOCS["tea"], DOCS["moon"]])
    assert docs.ids() == {"tea"}
    docs.upsert(["tea"], [DOCS["moon"]])
    assert docs.get(ids=["tea"])["documents"] == [DOCS["moon"]]
    assert docs.add_missing(["tea", "moon"], [DOCS["moon"], DOCS["moon"]]) == 1


def test_bad_input_writes_nothing(pg, minilm):
    docs = _open(pg, minilm)
    for ids, texts, metas in (
        (["a"], ["nul \x00 inside"], None),
        (["x" * 129], ["long id"], None),
        (["a"], ["t"], [{"v": float("nan")}]),
        (["a", "a"], ["t", "t"], None),
        (["a"], [3], None),
    ):
        with pytest.raises(InvalidInputError):
            docs.add(ids, texts, metas)
    assert docs.count() == 0


def test_postgresqls_own_refusals_come_before_embedding_through_any_interface(pg, minilm):
    # The table's rules are its driver's (check_batch), asked by the guard itself: a framework
    # writing through GuardedIndex meets them before anything is embedded, in the words the
    # table's own add uses, not as PostgreSQL's error after the batch was embedded.
    from ctxemb_core.index import GuardedIndex

    index = GuardedIndex.open(ctxemb_pgvector.driver(pg, "docs"), minilm)
    for write in (index.add, index.upsert, index.add_missing, index.sync):
        with pytest.raises(InvalidInputError, match="PostgreSQL text cannot store"):
            write(["a"], ["nul \x00 inside"])
        with pytest.raises(InvalidInputError, match="the id column holds"):
            write(["x" * 129], ["long id"])
    assert index.count() == 0


def test_an_unstamped_table_is_refused_then_adopted(pg, minilm):
    docs = _open(pg, minilm)
    docs.add(list(DOCS), list(DOCS.values()))
    pg.execute("DELETE FROM ctxemb_stamps")
    with pytest.raises(MissingStampError):
        docs.count()
    adopted = _open(pg, minilm, adopt=True)
    assert adopted.count() == len(DOCS)


def test_a_table_made_without_ctxemb_gains_its_write_mark_and_indexes_when_adopted(pg, minilm):
    # Haystack's layout, written by another tool: no ctxemb_seq. Adopted, it gets the column,
    # its trigger and the indexes that keep an open proportional to what was written.
    pg.execute(
        "CREATE TABLE plain (id VARCHAR(128) PRIMARY KEY, embedding vector(384), content TEXT, "
        "blob_data BYTEA, blob_meta JSONB, blob_mime_type VARCHAR(255), meta JSONB)"
    )
    vectors = minilm.embed_documents(list(DOCS.values()))
    for (key, text), vector in zip(DOCS.items(), vectors, strict=True):
        pg.execute(
            "INSERT INTO plain (id, embedding, content) VALUES (%s, %s, %s)", (key, vector, text)
        )
    assert _open(pg, minilm, "plain", adopt=True).count() == len(DOCS)
    indexes = {
        r[0] for r in pg.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'plain'")
    }
    assert {"plain_ctxemb_seq", "plain_ctxemb_novec"} <= indexes


@pytest.mark.parametrize(
    ("columns", "said"),
    [
        ("id SERIAL PRIMARY KEY, body TEXT", "lacks the columns embedding, content, meta"),
        ("id TEXT PRIMARY KEY, embedding vector(384), content TEXT", "lacks the column meta"),
        ("id TEXT PRIMARY KEY, embedding real[], content TEXT, meta JSONB", "not a pgvector"),
    ],
)
def test_another_tools_table_is_refused_by_its_columns_before_detect_or_adopt(
    pg, minilm, columns, said
):
    # "carries no stamp: ctxemb detect ... --adopt" was the advice for any table of the name;
    # detect then met UndefinedColumn as a traceback, and a table lacking only ``meta`` was
    # adopted (stamped, given ctxemb_seq) and failed every later call. Now each is one
    # InvalidInputError naming the columns, and the table is left as it was.
    pg.execute(f"CREATE TABLE theirs ({columns})")
    before = [
        r[0]
        for r in pg.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'theirs'::regclass AND attnum > 0"
        )
    ]
    for attempt in (
        lambda: _open(pg, minilm, "theirs"),
        lambda: _open(pg, minilm, "theirs", adopt=True),
        lambda: ctxemb_pgvector.detect(pg, "theirs"),
    ):
        with pytest.raises(InvalidInputError, match=said) as err:
            attempt()
        assert "another name (open_table(conn, '<new name>', ...))" in str(err.value)
        assert "--collection <new name>" in err.value.message_for("cli")
    after = [
        r[0]
        for r in pg.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'theirs'::regclass AND attnum > 0"
        )
    ]
    assert after == before
    assert ctxemb_pgvector.stored_or_none(pg, "theirs").metadata is None  # no stamp row


def test_the_record_of_a_verified_open_is_keyed_by_the_cluster_not_the_servers_start(pg, minilm):
    # A restart keeps the cluster's identifier: the record of a verified open stays usable.
    driver = ctxemb_pgvector.driver(pg, "docs")
    (system,) = pg.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
    assert f"cluster {system}, database oid " in driver.describe()
    assert "started" not in driver.describe()


def test_a_vector_updated_around_the_guard_is_caught_on_the_next_open(pg, minilm):
    docs = _open(pg, minilm)
    docs.add(list(DOCS), list(DOCS.values()))
    _open(pg, minilm)  # passes, and is remembered
    cls = Embedder(minilm.contract.with_(pooling="cls")).embed_documents([DOCS["bank"]])[0]
    pg.execute("UPDATE docs SET embedding = %s WHERE id = 'bank'", (cls.astype(np.float32),))
    with pytest.raises(ForeignVectorsError) as err:
        _open(pg, minilm, sample=2)
    assert "bank" in str(err.value)


def test_rows_a_replication_subscriber_applies_are_checked_on_the_next_open(pg, minilm):
    # A subscriber applies rows under session_replication_role = replica, where an ordinary
    # trigger does not fire: the write mark and the stamp version must move all the same.
    docs = _open(pg, minilm)
    docs.add(list(DOCS), list(DOCS.values()))
    _open(pg, minilm)  # passes, and is remembered
    enabled = pg.execute(
        "SELECT tgname, tgenabled FROM pg_trigger WHERE tgname LIKE 'ctxemb%%' ORDER BY 1"
    ).fetchall()
    assert enabled == [("ctxemb_row_seq", "A"), ("ctxemb_stamp_version", "A")]
    with pg.transaction():
        pg.execute("SET LOCAL session_replication_role = replica")
        pg.execute("UPDATE docs SET embedding = (SELECT embedding FROM docs WHERE id = 'tea')")
    with pytest.raises(ForeignVectorsError):
        _open(pg, minilm, sample=2)
    # A table made before: its triggers are made to fire always when it is repaired.
    pg.execute("ALTER TABLE docs ENABLE TRIGGER ctxemb_row_seq")
    pg.execute("ALTER TABLE ctxemb_stamps ENABLE TRIGGER ctxemb_stamp_version")
    stored = ctxemb_pgvector.stored_table(pg, "docs")
    from ctxemb_core import IndexStamp
    from ctxemb_pgvector._store import repair

    done = repair(stored, IndexStamp.from_metadata(stored.metadata))
    assert "trigger ctxemb_row_seq fires always" in done
    assert "trigger ctxemb_stamp_version fires always" in done


def test_an_altered_column_is_refused(pg, minilm):
    _open(pg, minilm).add(["tea"], [DOCS["tea"]])
    pg.execute('DROP INDEX "docs_ctxemb_hnsw"')
    pg.execute("ALTER TABLE docs ALTER COLUMN embedding TYPE halfvec(384)")
    with pytest.raises(StorageMismatchError) as err:
        _open(pg, minilm)
    assert err.value.fields == ("column",)


def test_advice_names_this_adapter(pg, minilm):
    _open(pg, minilm).add(["tea"], [DOCS["tea"]])
    with pytest.raises(ContractMismatchError) as err:
        _open(pg, Embedder(minilm.contract.with_(query_prefix="q: ")))
    assert "ctxemb_pgvector.restamp(client, name, contract)" in str(err.value)
    assert "ctxemb_chroma" not in str(err.value)
    assert "--store pgvector and the same --dsn" in err.value.message_for("cli")


def test_the_local_server_command_prints_a_dsn_and_stops_on_ctrl_c(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from embedding_server import interruptible

    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxemb_pgvector.server", str(tmp_path / "pgdata")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        preexec_fn=interruptible,
    )
    try:
        dsn = proc.stdout.readline().strip()  # type: ignore[union-attr]
        conn = ctxemb_pgvector.connect(dsn)
        assert conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    assert "ctxemb index --store pgvector" in proc.stderr.read()  # type: ignore[union-attr]


def test_repair_puts_back_the_index_and_the_layout_record_not_the_column(pg, minilm):
    _open(pg, minilm).add(list(DOCS), list(DOCS.values()))
    pg.execute('DROP INDEX "docs_ctxemb_hnsw"')
    pg.execute('UPDATE ctxemb_stamps SET layout = \'{"column": "vector(128)"}\'')
    with pytest.raises(StorageMismatchError):
        _open(pg, minilm)
    docs = _open(pg, minilm, repair=True)
    assert len(docs.repaired) == 2 and _open(pg, minilm).repaired == []
    (definition,) = pg.execute("SELECT indexdef FROM pg_indexes WHERE indexdef LIKE '%hnsw%'")
    assert "vector_cosine_ops" in definition[0]
    # A column of another type holds other vectors: not repaired.
    pg.execute('DROP INDEX "docs_ctxemb_hnsw_cosine"')
    pg.execute("ALTER TABLE docs ALTER COLUMN embedding TYPE halfvec(384)")
    with pytest.raises(StorageMismatchError):
        _open(pg, minilm, repair=True)


def test_a_table_in_another_schema(pg, minilm):
    pg.execute("CREATE SCHEMA rag")
    docs = _open(pg, minilm, schema="rag")
    docs.add(["tea"], [DOCS["tea"]])
    assert pg.execute("SELECT count(*) FROM rag.docs").fetchone()[0] == 1
    assert pg.execute("SELECT count(*) FROM rag.ctxemb_stamps").fetchone()[0] == 1
    assert ctxemb_pgvector.stored_or_none(pg, "docs") is None
    assert _open(pg, minilm, schema="rag", create=False).count() == 1


def test_the_advice_for_a_table_in_another_schema_reaches_that_table(pg, minilm):
    # Followed as printed, advice without schema= would reach public's table of that name
    # (and an open with create=True would make a new, empty one there).
    pg.execute("CREATE SCHEMA adv")
    pg.execute(
        "CREATE TABLE adv.raw (id text PRIMARY KEY, embedding vector(384), content TEXT, "
        "meta JSONB)"
    )
    with pytest.raises(MissingStampError) as unstamped:
        _open(pg, minilm, "raw", schema="adv")
    said = str(unstamped.value)
    assert "open_table(client, 'raw', contract, adopt=True, schema='adv')" in said
    assert "detect(client, 'raw', model, schema='adv')" in said
    _open(pg, minilm, "docs", schema="adv").add(["tea"], [DOCS["tea"]])
    with pytest.raises(ContractMismatchError) as mismatch:
        _open(pg, Embedder(minilm.contract.with_(query_prefix="q: ")), "docs", schema="adv")
    said = str(mismatch.value)
    assert "stamped_contract(client, name, schema='adv')" in said
    assert "restamp(client, name, contract, schema='adv')" in said
    assert "ctxemb_stamps" in said and "metadata[" not in said  # where this store keeps it
    # The advised call, as printed, reads the stamp of the table the refusal was about.
    assert ctxemb_pgvector.stamped_contract(pg, "docs", schema="adv") == minilm.contract
    # In public, nothing is added: the calls as a user types them there.
    with pytest.raises(MissingStampError) as public:
        pg.execute(
            "CREATE TABLE raw (id text PRIMARY KEY, embedding vector(384), content TEXT, "
            "meta JSONB)"
        )
        _open(pg, minilm, "raw")
    assert "open_table(client, 'raw', contract, adopt=True)" in str(public.value)
