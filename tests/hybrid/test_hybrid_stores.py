"""A hybrid index on real stores (embedded Chroma, a Chroma server, PostgreSQL): built from one
corpus pass, queried fused, refused under another lexical recipe or fusion (field named), its
two sides kept in step (a write around it refused and named, then mended), its rows checked."""

from __future__ import annotations

import re
import sqlite3

import pytest
from conftest import DOCS, fresh_name

import ctxemb_chroma
from ctxemb_core.documents import text_digest
from ctxemb_core.errors import (
    ContractMismatchError,
    DamagedStampError,
    HybridMismatchError,
    InvalidInputError,
    MissingStampError,
    OutOfStepError,
)
from ctxemb_core.hybrid import Fusion, LexicalContract
from ctxemb_core.hybrid.pair import LexicalPlace
from ctxemb_core.hybrid.pair import open_hybrid as open_pair

QUERY = "how is green tea made"


@pytest.fixture
def hybrid(client, minilm, tmp_path):
    name = fresh_name()
    h = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=tmp_path / "lexical")
    h.sync(list(DOCS), list(DOCS.values()))
    return h


@pytest.mark.transport
def test_fused_results_name_each_sides_rank_and_the_lexical_side_follows_writes(hybrid):
    hits = hybrid.query(QUERY, 3)
    assert hits[0].id == "tea" and hits[0].dense_rank == 1 and hits[0].lexical_rank == 1
    assert hits[0].document == DOCS["tea"]
    assert len(hybrid.lexical) == len(DOCS) == hybrid.count()
    hybrid.upsert(["tea"], ["Black tea leaves are withered, rolled and oxidised."])
    hybrid.add(["kettle"], ["A kettle boils water for green tea."])
    assert hybrid.query("oxidised rolled leaves", 1)[0].id == "tea"
    assert any(h.id == "kettle" and h.lexical_rank for h in hybrid.query("kettle", 3))
    hybrid.delete(["kettle"])
    assert "kettle" not in hybrid.lexical.ids() and hybrid.verify()["ok"]
    assert hybrid.add_missing(list(DOCS), list(DOCS.values())) == 0


def test_a_collection_opened_again_keeps_its_recipe_and_refuses_another(client, minilm, tmp_path):
    name = fresh_name()
    custom = LexicalContract(k1=1.2, stemmer="none")
    first = ctxemb_chroma.open_hybrid(
        client, name, minilm, lexical=custom, fusion=Fusion(k=20), lexical_path=tmp_path / "lx"
    )
    first.sync(list(DOCS), list(DOCS.values()))
    again = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=tmp_path / "lx")
    assert again.contract == first.contract and again.contract.lexical.k1 == 1.2
    with pytest.raises(HybridMismatchError) as err:
        ctxemb_chroma.open_hybrid(
            client,
            name,
            minilm,
            lexical=custom.with_(stemmer="english"),
            lexical_path=tmp_path / "lx",
        )
    assert err.value.fields == ("lexical.stemmer",) and "lexical.stemmer: index='none'" in str(
        err.value
    )
    with pytest.raises(HybridMismatchError) as err:
        again.query(QUERY, fusion=Fusion(k=60))
    assert err.value.fields == ("fusion.k",) and err.value.diff.kind.value == "query_only"
    with pytest.raises(ContractMismatchError) as err:
        ctxemb_chroma.open_hybrid(
            client, name, minilm.contract.with_(pooling="cls"), lexical_path=tmp_path / "lx"
        )
    assert "pooling" in err.value.fields
    assert again.set_fusion(Fusion(k=60)).fusion.k == 60
    # The object opened without a recipe follows the stamp; the one that stated k 20 is
    # refused once another process stamped another fusion.
    follower = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=tmp_path / "lx")
    again.set_fusion(Fusion(k=30))
    assert follower.query(QUERY, 1)[0].id == "tea" and follower.contract.fusion.k == 30
    with pytest.raises(HybridMismatchError, match=r"fusion\.k: index=30, caller=20"):
        first.query(QUERY, 1)


def test_a_write_around_the_hybrid_index_is_refused_naming_ids_then_mended(
    client, minilm, tmp_path
):
    name = fresh_name()
    lx = tmp_path / "lx"
    h = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=lx)
    h.sync(list(DOCS), list(DOCS.values()))
    dense = ctxemb_chroma.open_collection(client, name, minilm)
    dense.add(["extra"], ["Extra notes on green tea."])
    with pytest.raises(OutOfStepError, match="7 documents on the dense side, 6 on the lexical"):
        h.query(QUERY)
    dense.upsert(["moon"], ["The Moon is made of green cheese."])
    with pytest.raises(OutOfStepError) as err:
        ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=lx)
    assert err.value.only_dense == ("extra",) and err.value.changed == ("moon",)
    mended = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=lx, refresh=True)
    assert mended.verify()["ok"] and "extra" in mended.lexical.ids()
    assert mended.query("green cheese", 1)[0].id == "moon"
    # A text changed around the index keeps the count: the documents a query would return are
    # compared on both sides, so stale terms are refused, not fused.
    dense.upsert(["moon"], ["Lunar regolith clings to spacesuits."])
    with pytest.raises(OutOfStepError) as err:
        mended.query("regolith spacesuits", 2)
    assert err.value.changed == ("moon",) and not err.value.only_dense


def test_a_damaged_or_missing_lexical_side_is_refused_never_read(hybrid):
    db = sqlite3.connect(hybrid.folder / "lexical.sqlite3")
    db.execute("UPDATE ctxemb_lexical_terms SET df = df + 1 WHERE term = 'tea'")
    db.commit()
    db.close()
    place = hybrid.place
    with pytest.raises(DamagedStampError, match="terms table"):
        open_pair(hybrid.dense, place)
    place.store.drop()
    unmarked = LexicalPlace(place.store, place.owner, place.remedy)  # a dense side records none
    with pytest.raises(MissingStampError, match=re.escape("create=True")) as err:
        open_pair(hybrid.dense, unmarked, create=False)
    assert "ctxemb index --hybrid" in err.value.message_for("cli")
    assert "ctxemb" not in str(err.value).replace("ctxemb_", "")  # no command for Python


def test_an_embedded_store_keeps_the_lexical_side_beside_it_a_server_needs_a_path(tmp_path, minilm):
    client = ctxemb_chroma.connect(path=str(tmp_path / "store"))
    h = ctxemb_chroma.open_hybrid(client, "docs", minilm)
    assert h.folder == tmp_path / "store" / "ctxemb-lexical" / "docs"
    with pytest.raises(InvalidInputError, match="name"):
        ctxemb_chroma.open_hybrid(client, "../x", minilm)


def test_pgvector_table_with_a_lexical_side(pg, minilm):
    import ctxemb_pgvector

    h = ctxemb_pgvector.open_hybrid(pg, "docs", minilm)
    h.sync(list(DOCS), list(DOCS.values()))
    assert h.query(QUERY, 2)[0].id == "tea"
    with pytest.raises(HybridMismatchError, match=r"lexical\.k1"):
        ctxemb_pgvector.open_hybrid(pg, "docs", minilm, lexical=LexicalContract(k1=0.9))
    pg.execute(
        "INSERT INTO docs (id, content, embedding) "
        "SELECT 'raw', 'raw row', embedding FROM docs LIMIT 1"
    )
    with pytest.raises(OutOfStepError):
        h.query(QUERY)


def test_another_analyzer_behaviour_is_drift_not_a_pass(hybrid):
    import pickle

    from ctxemb_core.errors import AnalyzerDriftError, EncoderDriftError
    from ctxemb_core.hybrid import Analyzer

    db = sqlite3.connect(hybrid.folder / "lexical.sqlite3")
    # As another stemmer version would give.
    db.execute("UPDATE ctxemb_lexical_sides SET canary = ?", ("sha256:" + "0" * 64,))
    db.commit()
    db.close()
    with pytest.raises(AnalyzerDriftError) as err:
        open_pair(hybrid.dense, hybrid.place)
    assert isinstance(err.value, EncoderDriftError) and err.value.expected == "sha256:" + "0" * 64
    assert str(pickle.loads(pickle.dumps(err.value))) == str(err.value)
    with pytest.raises(AnalyzerDriftError, match="stop-word list"):
        Analyzer(LexicalContract(stopwords_digest="sha256:" + "1" * 64))


LUNAR = "Lunar regolith clings to spacesuits."


def test_a_stored_text_rewritten_by_a_raw_client_keeping_its_metadata_is_out_of_step(
    client, minilm, tmp_path
):
    """The sides are compared by the stored text, the text the lexical side analysed: a raw
    rewrite of a document and its vector that keeps the metadata (and so the digest it carries)
    is refused where it would be returned, reported by verify, and mended by refresh."""
    name = fresh_name()
    h = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=tmp_path / "lx")
    h.sync(list(DOCS), list(DOCS.values()))
    raw = client.get_collection(name)
    raw.update(ids=["moon"], documents=[LUNAR], embeddings=minilm.embed_documents([LUNAR]))
    assert raw.get(ids=["moon"])["metadatas"][0]["ctxemb_text"] == text_digest(DOCS["moon"])
    with pytest.raises(OutOfStepError) as err:
        h.query("regolith spacesuits", len(DOCS))
    assert err.value.changed == ("moon",)
    report = h.verify()
    assert not report["ok"] and report["changed"] == ["moon"]
    assert h.refresh() == ([], [], ["moon"])
    assert h.query("regolith spacesuits", 1)[0].id == "moon" and h.verify()["ok"]


def test_a_pgvector_row_whose_text_is_updated_in_sql_is_out_of_step(pg, minilm):
    import ctxemb_pgvector

    h = ctxemb_pgvector.open_hybrid(pg, "docs", minilm)
    h.sync(list(DOCS), list(DOCS.values()))
    pg.execute("UPDATE docs SET content = %s WHERE id = 'moon'", (LUNAR,))
    with pytest.raises(OutOfStepError) as err:
        h.query("moon phases", len(DOCS))
    assert err.value.changed == ("moon",)
    assert h.verify()["changed"] == ["moon"]
    h.refresh()
    assert h.query("regolith spacesuits", 1)[0].id == "moon" and h.verify()["ok"]


def test_a_side_of_the_earlier_form_is_brought_to_the_stored_texts_on_open(
    client, minilm, tmp_path
):
    """A side of schema 2 kept the digest records carry. On open, each document whose row has
    that digest and whose stored text is another is analysed again from the stored text (here a
    record embedded with a title joined in, and a text rewritten raw after it was indexed); a
    row that matches neither is left to be found."""
    name, lx = fresh_name(), tmp_path / "lx"
    h = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=lx)
    h.sync(list(DOCS), list(DOCS.values()))
    raw = client.get_collection(name)
    titled = "Astronomy. " + DOCS["bike"]  # what a record's vector was made from
    meta = raw.get(ids=["bike"])["metadatas"][0]
    raw.update(ids=["bike"], metadatas=[{**meta, "ctxemb_text": text_digest(titled)}])
    raw.update(ids=["moon"], documents=[LUNAR], embeddings=minilm.embed_documents([LUNAR]))
    db = sqlite3.connect(h.folder / "lexical.sqlite3")
    db.execute("UPDATE ctxemb_lexical_sides SET schema = 2")
    for i, digest in (("bike", text_digest(titled)), ("tea", "0" * 64)):
        db.execute("UPDATE ctxemb_lexical_docs SET digest = ? WHERE id = ?", (digest, i))
    db.commit()
    again = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=lx)
    assert again.stamp.schema == 3
    assert db.execute("SELECT schema FROM ctxemb_lexical_sides").fetchall() == [(3,)]
    db.close()
    # moon kept the digest its record carries (the text before the raw rewrite): analysed again.
    assert again.lexical_search("regolith spacesuits", 1)[0][0][0] == "moon"
    with pytest.raises(OutOfStepError) as err:  # tea, left as found, is ranked by the query
        again.query("regolith spacesuits", 1)
    assert err.value.changed == ("tea",)
    assert again.lexical.digests(["bike", "moon"]) == {
        "bike": text_digest(DOCS["bike"]),
        "moon": text_digest(LUNAR),
    }
    assert again.verify()["changed"] == ["tea"]


CHAINS = "Oil the bicycle chain before it rusts."


def test_a_document_rewritten_around_the_index_is_refused_where_it_ranks_not_only_returned(
    client, minilm, tmp_path
):
    """A document rewritten raw (text and vector, metadata kept) that the query would not return
    still changes what it returns: the dense side ranks its new text, the lexical side its old
    terms, and the others' lexical ranks move by it. Every candidate of either ranking is
    checked, so the query is refused (ids named), not served in another order."""
    name = fresh_name()
    h = ctxemb_chroma.open_hybrid(client, name, minilm, lexical_path=tmp_path / "lx")
    h.sync(list(DOCS), list(DOCS.values()))
    client.get_collection(name).update(
        ids=["slug"], documents=[CHAINS], embeddings=minilm.embed_documents([CHAINS])
    )
    with pytest.raises(OutOfStepError) as err:
        h.query(QUERY, 1)  # tea, not slug, would be returned
    assert err.value.changed == ("slug",)
    h.refresh()
    assert h.query(QUERY, 1)[0].id == "tea"


def test_a_pgvector_row_rewritten_in_sql_is_refused_where_it_ranks(pg, minilm):
    import ctxemb_pgvector

    h = ctxemb_pgvector.open_hybrid(pg, "docs", minilm)
    h.sync(list(DOCS), list(DOCS.values()))
    vector = "[" + ",".join(map(str, minilm.embed_documents([CHAINS])[0])) + "]"
    pg.execute(
        "UPDATE docs SET content = %s, embedding = %s::vector WHERE id = 'slug'", (CHAINS, vector)
    )
    with pytest.raises(OutOfStepError) as err:
        h.query(QUERY, 1)
    assert err.value.changed == ("slug",)
