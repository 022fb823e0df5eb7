"""An alias over a hybrid index (issue 45, item 5): writes through the alias reach the lexical
side of every index it writes; an upgrade of the dense contract, of the lexical recipe or of
both builds a hybrid shadow from the stored texts, gates its lexical side, switches both sides
at once, and rollback and retire handle both; readers query the pair under the alias's
recorded hybrid contract. On embedded Chroma (SQLite beside it) and PostgreSQL (joint tables)."""

from __future__ import annotations

import pytest
from conftest import DOCS

import ctxemb_chroma
from ctxemb_core import Embedder
from ctxemb_core.aliases import (
    AliasedIndex,
    Encoders,
    backfill,
    begin_upgrade,
    create_alias,
    cutover,
    read_alias,
    retire,
    rollback,
)
from ctxemb_core.errors import AliasStateError, InvalidInputError
from ctxemb_core.hybrid import Fusion, LexicalContract
from ctxemb_core.testing.conformance import tiny_embedder

QUERY = "how is green tea made"


@pytest.fixture(scope="module")
def old() -> Embedder:
    return tiny_embedder()


@pytest.fixture(scope="module")
def new(old: Embedder) -> Embedder:
    return Embedder(old.contract.with_(truncate_dim=8))


@pytest.fixture(params=["chroma", "pgvector"])
def store(request, tmp_path, old):
    """``(catalog, open_hybrid)``: a store holding hybrid index ``docs-v1`` (the DOCS) and alias
    ``docs`` over it."""
    if request.param == "chroma":
        client = ctxemb_chroma.connect(path=str(tmp_path / "chroma"))
        catalog = ctxemb_chroma.catalog(client)
    else:
        import ctxemb_pgvector

        catalog = ctxemb_pgvector.catalog(request.getfixturevalue("pg"))
    hybrid = catalog.open_hybrid("docs-v1", old, lexical=LexicalContract(k1=1.2))
    hybrid.sync(list(DOCS), list(DOCS.values()))
    create_alias(catalog, "docs", "docs-v1")
    return catalog


def _lexical_ids(catalog, index: str) -> set[str]:
    return set(catalog.lexical(index).ids())


def test_an_alias_over_a_hybrid_index_writes_both_sides_and_upgrades_them(
    store, old, new, tmp_path, request
):
    store_kind = request.node.callspec.params["store"]
    catalog = store
    record = read_alias(catalog, "docs")
    assert record.target.hybrid is not None and record.target.hybrid.lexical.k1 == 1.2
    aliased = AliasedIndex.open(catalog, "docs", Encoders(old, new))
    assert aliased.hybrid_query(QUERY, 1)[0].id == "tea"

    # Dense and lexical recipe together: the shadow is a hybrid index under both.
    begin_upgrade(catalog, "docs", new, lexical=LexicalContract(k1=0.9, stemmer="none"))
    shadow = read_alias(catalog, "docs").shadow
    assert shadow is not None and shadow.hybrid is not None and shadow.hybrid.lexical.k1 == 0.9
    aliased.upsert(["kettle"], ["A kettle boils water for green tea."])  # dual-write
    aliased.delete(["slug"])
    for index in ("docs-v1", shadow.index):
        assert "kettle" in _lexical_ids(catalog, index)
        assert "slug" not in _lexical_ids(catalog, index)
    gates = []
    after = cutover(catalog, "docs", Encoders(old, new), sample=4, on_gate=gates.append)
    assert after.target == shadow
    lexical = next(g for g in gates if g.name == "lexical")
    assert lexical.passed and lexical.figure == 0.0
    assert _lexical_ids(catalog, shadow.index) == set(DOCS) - {"slug"} | {"kettle"}

    # The reader follows: the pair it queries is the shadow's, under the new recipe.
    found = aliased.hybrid_search("kettle boils", 1)
    assert found.index == shadow.index and found.fingerprint == shadow.hybrid.fingerprint
    assert found.hits[0].id == "kettle" and found.hits[0].lexical_rank == 1

    # Rollback keeps both sides of the previous target in step; retire drops both.
    aliased.delete(["kettle"])
    rollback(catalog, "docs", Encoders(old, new))
    assert "kettle" not in _lexical_ids(catalog, "docs-v1")
    folder = tmp_path / "chroma" / "ctxemb-lexical" / shadow.index  # embedded Chroma's side
    assert folder.is_dir() == (store_kind == "chroma")
    retire(catalog, "docs")
    assert not catalog.exists(shadow.index) and not catalog.lexical(shadow.index).exists()
    assert not folder.exists()  # its folder too


def test_a_lexical_recipe_alone_or_the_same_hybrid_contract(store, old, monkeypatch):
    catalog = store
    with pytest.raises(AliasStateError, match="already serves"):
        begin_upgrade(catalog, "docs", old, lexical=LexicalContract(k1=1.2))
    record = begin_upgrade(catalog, "docs", old, fusion=Fusion(k=20))  # one side alone
    assert record.shadow is not None and record.shadow.contract == record.target.contract
    assert record.shadow.index != record.target.index
    embedded: list[int] = []
    real = old.embed_documents
    monkeypatch.setattr(
        old, "embed_documents", lambda t, *a, **k: embedded.append(len(t)) or real(t, *a, **k)
    )
    report = backfill(catalog, "docs", Encoders(old))
    assert report.written == len(DOCS) and embedded == []  # the dense vectors carried as stored
    assert report.carried and "carried over" in report.describe()
    after = cutover(catalog, "docs", Encoders(old), sample=2)
    assert after.target.hybrid is not None and after.target.hybrid.fusion.k == 20


def test_a_dense_alias_takes_no_lexical_recipe(tmp_path, old):
    client = ctxemb_chroma.connect(path=str(tmp_path / "chroma"))
    catalog = ctxemb_chroma.catalog(client)
    ctxemb_chroma.open_collection(client, "plain", old).add(["a"], ["green tea"])
    create_alias(catalog, "p", "plain")
    record = read_alias(catalog, "p")
    assert record.target.hybrid is None and record.to_dict()["schema"] == 1  # as before
    with pytest.raises(InvalidInputError, match="dense index"):
        begin_upgrade(catalog, "p", old, lexical=LexicalContract(k1=0.9))
    with pytest.raises(InvalidInputError, match="no lexical"):
        AliasedIndex.open(catalog, "p", old).hybrid_query("tea")


def test_the_cli_indexes_and_upgrades_an_alias_over_a_hybrid_index(tmp_path, capsys):
    import json

    from conftest import MINILM

    from ctxemb_core.cli import main

    def run(*args: str) -> str:
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    store = ("--path", str(tmp_path / "chroma"))
    run("index", str(corpus), *store, "--collection", "docs-v1", "--model", MINILM, "--hybrid")
    assert "+ lexical [" in run("alias", "create", "docs", "--collection", "docs-v1", *store)

    rows = [{"_id": i, "text": t} for i, t in DOCS.items()]
    rows.append({"_id": "kettle", "text": "A kettle boils water for green tea."})
    corpus.write_text("\n".join(json.dumps(r) for r in rows))
    out = run("index", str(corpus), *store, "--alias", "docs", "--hybrid")
    assert "1 added" in out and f"lexical side: {len(rows)} documents" in out

    out = run("upgrade", "docs", *store, "--k1", "0.9", "--stemmer", "none", "--dry-run")
    assert (
        "copy with their stored vectors" in out and "gates: canary, parity, sample, lexical" in out
    )
    out = run("upgrade", "docs", *store, "--k1", "0.9", "--stemmer", "none", "--sample", "2")
    assert "pass  lexical: 0 records differ" in out and "k1=0.9" in out
    record = json.loads(run("alias", "show", "docs", *store, "--json"))
    assert record["target"]["hybrid"]["lexical"]["k1"] == 0.9
    assert record["schema"] == 2  # a ctxemb that knows no lexical side refuses it
    assert record["previous"]["index"] == "docs-v1"
    out = run("query", "kettle boils", *store, "--alias", "docs", "--hybrid", "--json")
    found = json.loads(out)
    assert found["results"][0]["id"] == "kettle" and found["results"][0]["lexical_rank"] == 1
    assert "already upgraded" in run("upgrade", "docs", *store, "--k1", "0.9", "--stemmer", "none")
    assert main(["index", str(corpus), *store, "--alias", "docs", "--hybrid", "--k1", "1"]) != 0
    assert "give no lexical recipe" in capsys.readouterr().err


def test_a_lexical_side_an_alias_cannot_keep_in_step_is_refused_before_anything_is_written(
    tmp_path, old
):
    # A side in a folder the caller named (as on a Chroma server, which has no folder of its
    # own here): the alias could not follow it, so it is not created.
    client = ctxemb_chroma.connect(path=str(tmp_path / "chroma"))
    catalog = ctxemb_chroma.catalog(client)
    hybrid = ctxemb_chroma.open_hybrid(
        client, "elsewhere", old, lexical_path=str(tmp_path / "side")
    )
    hybrid.sync(list(DOCS), list(DOCS.values()))
    with pytest.raises(InvalidInputError, match="cannot reach it"):
        create_alias(catalog, "docs", "elsewhere")
    assert catalog.aliases.names() == []


@pytest.mark.parametrize("kind", ["chroma", "pgvector"])
def test_a_side_built_after_a_dense_alias_is_refused_rather_than_left_stale(
    request, tmp_path, old, kind
):
    if kind == "chroma":
        catalog = ctxemb_chroma.catalog(ctxemb_chroma.connect(path=str(tmp_path / "chroma")))
    else:
        import ctxemb_pgvector

        catalog = ctxemb_pgvector.catalog(request.getfixturevalue("pg"))
    from ctxemb_core.index import GuardedIndex

    GuardedIndex.open(catalog.driver("plain"), old).add(list(DOCS), list(DOCS.values()))
    create_alias(catalog, "plain-docs", "plain")
    assert AliasedIndex.open(catalog, "plain-docs", old).search(QUERY).index == "plain"
    catalog.open_hybrid("plain", old)  # a lexical side, built around the alias
    with pytest.raises(InvalidInputError, match="stale"):
        AliasedIndex.open(catalog, "plain-docs", old).upsert(["x"], ["a new document"])


def test_the_lexical_gate_compares_the_stored_texts_the_sides_analyse(tmp_path, old):
    """A record whose vector was made from another text than the one stored (a title joined
    in: the digest it carries names that text) passes the lexical gate of an upgrade of the
    lexical recipe: the shadow's side holds the stored text's digest, and the gate compares
    that, not the carried one."""
    from ctxemb_core.documents import text_digest

    client = ctxemb_chroma.connect(path=str(tmp_path / "chroma"))
    catalog = ctxemb_chroma.catalog(client)
    catalog.open_hybrid("docs-v1", old).sync(list(DOCS), list(DOCS.values()))
    raw = client.get_collection("docs-v1")
    meta = {**raw.get(ids=["bike"])["metadatas"][0]}
    meta["ctxemb_text"] = text_digest("Bikes. " + DOCS["bike"])
    raw.update(ids=["bike"], metadatas=[meta])
    create_alias(catalog, "docs", "docs-v1")
    begin_upgrade(catalog, "docs", old, lexical=LexicalContract(k1=0.9))
    gates = []
    cutover(catalog, "docs", Encoders(old), sample=2, on_gate=gates.append)
    lexical = next(g for g in gates if g.name == "lexical")
    assert lexical.passed and lexical.figure == 0.0, lexical
