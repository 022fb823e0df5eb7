"""A PostgreSQL table is known by what it is, not by its name (issue 42, items 9, 11 and 12).

A table dropped and made again in plain SQL under its name, a column emptied or swapped, a row
stored without a vector, a stamp row written twice: each is seen on open and on the next call of
an open table, and refused with a typed error; nothing crashes and nothing is served twice. The
other client is a plain second connection going around the guard.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DOCS
from psycopg.types.json import Jsonb

import ctxemb_pgvector
from ctxemb_core import Embedder
from ctxemb_core.errors import DamagedStampError, ForeignVectorsError
from ctxemb_core.guard import OTHER_WIDTH

QUERY = "how is green tea made"


@pytest.fixture
def other(pg):
    """Another client of the same database: the one that goes around the guard."""
    conn = ctxemb_pgvector.connect(pg.ctxemb_dsn)
    yield conn
    conn.close()


@pytest.fixture
def docs(pg, minilm):
    """The six DOCS, written by ctxemb, then opened once more (so a record says they passed)."""
    ctxemb_pgvector.open_table(pg, "docs", minilm).add(list(DOCS), list(DOCS.values()))
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert table.open_check.checked == len(DOCS)
    again = ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert again.open_check.reused and again.open_check.checked == 0
    return table


def recreate_with(other, vectors: dict[str, np.ndarray]) -> None:
    """Drop the table and make it again in plain SQL: same columns, ids, texts and order (the
    stamp row is left as it was, version and all), with ``vectors`` as the embeddings."""
    rows = other.execute("SELECT id, content, meta, ctxemb_seq FROM docs ORDER BY ctxemb_seq")
    rows = rows.fetchall()
    other.execute("CREATE TABLE docs_new (LIKE docs INCLUDING ALL)")
    other.execute("DROP TABLE docs")
    other.execute("ALTER TABLE docs_new RENAME TO docs")
    for id_, content, meta, seq in rows:
        other.execute(
            "INSERT INTO docs (id, content, meta, embedding, ctxemb_seq) "
            "VALUES (%s, %s, %s, %s, %s)",
            (id_, content, Jsonb(meta), vectors[id_], seq),
        )


def test_a_table_made_again_under_its_name_with_cls_vectors_is_sampled_and_refused(
    docs, pg, other, minilm
):
    before = other.execute("SELECT version FROM ctxemb_stamps WHERE table_name = 'docs'")
    version = before.fetchone()[0]
    cls = Embedder(minilm.contract.with_(pooling="cls")).embed_documents(list(DOCS.values()))
    recreate_with(other, dict(zip(DOCS, cls, strict=True)))
    after = other.execute("SELECT version FROM ctxemb_stamps WHERE table_name = 'docs'")
    assert after.fetchone()[0] == version  # same name, same stamp row: only the oid tells
    # Before: the record of the old table was used (checked=0) and the CLS vectors served.
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert set(err.value.ids) == set(DOCS)
    # The table opened before the drop sees it too, on its next call.
    with pytest.raises(ForeignVectorsError):
        docs.query([QUERY], 1)


def test_a_table_made_again_with_the_contracts_own_vectors_opens_after_a_sample(
    docs, pg, other, minilm
):
    mine = minilm.embed_documents(list(DOCS.values()))
    recreate_with(other, dict(zip(DOCS, mine, strict=True)))
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert not table.open_check.reused and table.open_check.checked == len(DOCS)
    assert docs.query([QUERY], 1)["ids"] == [["tea"]]


def test_a_table_emptied_and_refilled_in_its_order_is_sampled_and_refused(docs, pg, other, minilm):
    cls = Embedder(minilm.contract.with_(pooling="cls")).embed_documents(list(DOCS.values()))
    rows = other.execute("SELECT id, content FROM docs ORDER BY ctxemb_seq").fetchall()
    other.execute("TRUNCATE docs")  # as DELETE FROM docs: the same oid, new writes
    vectors = dict(zip(DOCS, cls, strict=True))
    for id_, content in rows:  # the same ids and texts, in the same order: new writes
        other.execute(
            "INSERT INTO docs (id, content, embedding) VALUES (%s, %s, %s)",
            (id_, content, vectors[id_]),
        )
    # Before: same ids in the same order, so the record skipped every row (checked=0).
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "docs", minilm, sample=2)
    # The sample is drawn among the rewritten rows (all six changed): both drawn are foreign.
    assert len(err.value.ids) == 2 and set(err.value.ids) <= set(DOCS)


# -- item 11: rows without a vector ------------------------------------------------------------


def test_a_row_inserted_without_a_vector_is_refused_by_query_never_a_type_error(docs, other):
    other.execute("INSERT INTO docs (id, content) VALUES ('ghost', 'An intruding note.')")
    for exact in (False, True):  # the plain search and the transaction's
        # Before: TypeError (float(None)) once the search reached the row.
        with pytest.raises(ForeignVectorsError) as err:
            docs.query([QUERY], 10, exact=exact)
        assert err.value.ids == ("ghost",)
        assert "upsert" in str(err.value)  # the usual advice of a foreign record


def test_a_vector_emptied_in_place_is_found_on_open_though_the_record_skips_it(
    docs, pg, other, minilm
):
    # An UPDATE that keeps the row's place (the row trigger off): the record sees no change.
    other.execute("ALTER TABLE docs DISABLE TRIGGER ctxemb_row_seq")
    other.execute("UPDATE docs SET embedding = NULL WHERE id = 'moon'")
    other.execute("ALTER TABLE docs ENABLE TRIGGER ctxemb_row_seq")
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "docs", minilm, sample=2)
    assert err.value.ids == ("moon",)
    report = ctxemb_pgvector.verify(docs, minilm, all=True, progress=False)
    assert report.reasons == {"moon": OTHER_WIDTH}


def test_an_embedding_column_swapped_for_an_empty_one_is_refused_on_open_and_on_query(
    docs, pg, other, minilm
):
    column = other.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'docs'::regclass AND attname = 'embedding'"
    ).fetchone()[0]
    other.execute("ALTER TABLE docs DROP COLUMN embedding")
    other.execute(f"ALTER TABLE docs ADD COLUMN embedding {column}")
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert set(err.value.ids) == set(DOCS)
    with pytest.raises(ForeignVectorsError):  # before: TypeError
        docs.query([QUERY], 3)


# -- item 12: one stamp row ------------------------------------------------------------------


def test_a_duplicated_stamp_row_is_refused_never_doubles_the_hits(docs, pg, other, minilm):
    assert docs.query([QUERY], 3)["ids"][0][0] == "tea"
    other.execute("ALTER TABLE ctxemb_stamps DROP CONSTRAINT ctxemb_stamps_pkey")
    other.execute("INSERT INTO ctxemb_stamps SELECT * FROM ctxemb_stamps WHERE table_name='docs'")
    assert other.execute("SELECT count(*) FROM ctxemb_stamps").fetchone()[0] == 2
    # Before: every hit came back twice, and the open passed.
    with pytest.raises(DamagedStampError, match="2 stamp rows") as err:
        docs.query([QUERY], 3)
    assert "ADD PRIMARY KEY" in str(err.value) and "DELETE FROM" in str(err.value)
    for call in (
        lambda: docs.query([QUERY], 3, exact=True),
        lambda: docs.add(["fresh"], ["A fresh text."]),
        lambda: ctxemb_pgvector.open_table(pg, "docs", minilm),
    ):
        with pytest.raises(DamagedStampError):
            call()
    assert other.execute("SELECT count(*) FROM docs").fetchone()[0] == len(DOCS)
    # Done as the message says, the table opens again.
    keep = other.execute("SELECT max(version) FROM ctxemb_stamps").fetchone()[0]
    other.execute("DELETE FROM ctxemb_stamps WHERE table_name = 'docs' AND version <> %s", (keep,))
    other.execute("ALTER TABLE ctxemb_stamps ADD PRIMARY KEY (table_name)")
    assert ctxemb_pgvector.open_table(pg, "docs", minilm).query([QUERY], 3)["ids"][0] == [
        "tea",
        *docs.query([QUERY], 3)["ids"][0][1:],
    ]


def test_a_stamps_table_without_its_key_is_named_when_a_table_is_created(docs, pg, other, minilm):
    other.execute("ALTER TABLE ctxemb_stamps DROP CONSTRAINT ctxemb_stamps_pkey")
    with pytest.raises(DamagedStampError, match="ADD PRIMARY KEY"):
        ctxemb_pgvector.open_table(pg, "fresh", minilm)
    assert other.execute("SELECT to_regclass('fresh')").fetchone()[0] is None


# -- one guard: open_table is core's GuardedIndex over the table's driver -----------------------


def test_open_table_and_the_driver_are_one_guard_with_one_record(docs, pg, minilm):
    from ctxemb_core.index import GuardedIndex

    assert isinstance(docs.index, GuardedIndex) and docs.index.driver is docs.driver
    # The record the opens through open_table left is the driver's: nothing is re-embedded.
    again = GuardedIndex.open(ctxemb_pgvector.driver(pg, "docs"), minilm)
    assert again.open_check is not None and again.open_check.reused
    assert again.open_check.checked == 0


def test_verify_with_sample_0_says_no_row_was_chosen(docs, minilm):
    report = ctxemb_pgvector.verify(docs, minilm, sample=0)
    assert report.ok and report.mode == "none" and report.sample_size == 0
