"""ctxemb detect: which contract wrote a collection that raw chromadb filled with vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import DOCS, fresh_name
from tiny_models import build_bert

from ctxemb_chroma import detect, open_collection
from ctxemb_core import DetectReport, Embedder, IndexStamp, Pooling, Precision, detect_contract
from ctxemb_core.cli import main
from ctxemb_core.detect import candidate_contracts
from ctxemb_core.errors import ContractMismatchError, InvalidInputError
from ctxemb_core.guard import NO_TEXT, OTHER_WIDTH, stored_form

TEXTS = list(DOCS.values())

#: Recipes a raw chromadb user may have written with, as changes to MiniLM's own contract.
RECIPES = {
    "mean-normalised": {},
    "cls": {"pooling": "cls"},
    "not-normalised": {"normalize": False},
    "e5-passage": {"document_prefix": "passage: ", "query_prefix": "query: "},
    "truncated-128": {"truncate_dim": 128},
}


def raw_collection(client, contract, *, texts=TEXTS, name=None):
    """A collection written by raw chromadb: vectors computed under ``contract``, no stamp."""
    name = name or fresh_name()
    raw = client.create_collection(name, embedding_function=None)
    raw.add(
        ids=list(DOCS)[: len(texts)],
        documents=list(texts),
        embeddings=stored_form(Embedder(contract), texts, "document"),
    )
    return name


def cli(capsys, client, *args):
    """``ctxemb detect --json``: the exit code, stdout, stderr and the report stdout is."""
    code = main(["detect", *client.ctxemb_args, "--json", *args])
    out = capsys.readouterr()
    return code, out.out, out.err, json.loads(out.out)


def table(capsys, client, *args):
    """``ctxemb detect`` as a person runs it: the exit code, stdout (the table) and stderr."""
    code = main(["detect", *client.ctxemb_args, *args])
    out = capsys.readouterr()
    assert "{" not in out.out, out.out  # the JSON only behind --json
    return code, out.out, out.err


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    """A random BERT of MiniLM's width: vectors no MiniLM recipe explains."""
    return build_bert(tmp_path_factory.mktemp("other") / "bert", hidden=384, heads=4, layers=1)


@pytest.mark.transport
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_detect_names_the_recipe_of_a_raw_collection(client, base, recipe):
    written = base.with_(**RECIPES[recipe])
    name = raw_collection(client, written)
    before = client.get_collection(name).metadata

    report = detect(client, name)

    assert isinstance(report, DetectReport)
    assert report.conclusive, report.unknown
    best = report.best.contract
    assert best.fingerprint == written.fingerprint
    assert (best.pooling, best.normalize, best.document_prefix, best.truncate_dim) == (
        written.pooling,
        written.normalize,
        written.document_prefix,
        written.truncate_dim,
    )
    assert report.best.agreeing == report.checked == len(TEXTS)
    assert report.best.norms_agree and report.best.min_cosine > 0.9999
    assert report.width == written.output_dim and report.precision is Precision.FLOAT32
    assert [c for c in report.ranked[1:] if c.explains] == []
    assert report.stamped is None and report.stamp_match is None
    # What stays unknown even so: the query side is an assumption, not an observation.
    assert any(
        u.startswith("query side: not observable")
        and f"query_prefix {written.query_prefix!r} is assumed" in u
        for u in report.unknown
    )
    assert client.get_collection(name).metadata == before  # detection never writes


def test_normalisation_is_told_apart_by_the_stored_lengths(client, base):
    name = raw_collection(client, base.with_(normalize=False))
    report = detect(client, name)
    normalised = next(c for c in report.candidates if c.contract == base)
    # The angle alone cannot tell them apart; the lengths can.
    assert normalised.min_cosine > 0.9999
    assert not normalised.norms_agree and not normalised.explains
    assert normalised.norm_ratio < 0.5


def test_indistinguishable_candidates_are_named_not_ranked(client, base):
    report = detect(client, raw_collection(client, base))
    assert report.best.contract == base  # the model's own choice stands for its group
    twin = next(c for c in report.candidates if c.contract.pooling is Pooling.MEAN_SQRT_LEN)
    assert twin.contract.normalize and twin.same_as == report.best.contract.fingerprint
    assert twin not in report.ranked
    assert any(u.startswith("indistinguishable") for u in report.unknown)
    # BGE's families share MiniLM's empty document side: their query prefix is named as such.
    assert any("bge-en" in u for u in report.unknown)


def test_a_recipe_no_candidate_explains_is_inconclusive(client, other_model):
    from ctxemb_core import contract_for

    name = raw_collection(client, contract_for(other_model, pooling="mean"))
    report = detect(client, name)
    assert not report.conclusive
    assert report.best is not None and report.best.agreeing == 0
    (finding,) = [u for u in report.unknown if u.startswith("no candidate explains")]
    assert "another model or weights" in finding and "best was" in finding
    assert "median cosine" in finding


def test_the_other_model_is_found_when_it_is_a_candidate(base, other_model):
    from ctxemb_core import contract_for

    written = contract_for(other_model, pooling="max")
    vectors = stored_form(Embedder(written), TEXTS, "document")
    # A plain transformers folder says no pooling; every pooling is tried anyway.
    report = detect_contract(TEXTS, vectors, [base, other_model])
    assert report.conclusive, report.unknown
    assert report.best.contract.fingerprint == written.fingerprint
    assert report.models == (base.model, written.model)


def test_recipes_the_sample_cannot_tell_apart_are_inconclusive(other_model):
    from ctxemb_core import contract_for

    # A random one-layer network's first token barely feels a prefix read before the text:
    # with and without E5's "passage: ", CLS vectors agree beyond the tolerance.
    written = contract_for(other_model, pooling="cls")
    report = detect_contract(TEXTS, stored_form(Embedder(written), TEXTS, "document"), [written])
    assert not report.conclusive
    rivals = [c for c in report.ranked if c.explains]
    assert len(rivals) >= 2 and {c.contract.pooling for c in rivals} == {Pooling.CLS}
    assert any("with different document vectors all reproduce" in u for u in report.unknown)


def test_records_without_text_are_reported_not_crashing(client, base):
    name = raw_collection(client, base)
    raw = client.get_collection(name)
    raw.add(ids=["bare1", "bare2"], embeddings=np.ones((2, 384), np.float32).tolist())
    report = detect(client, name, sample=32)
    assert report.skipped == {"bare1": NO_TEXT, "bare2": NO_TEXT}
    assert report.best.contract == base and report.best.explains
    assert not report.conclusive  # adopting would refuse the records it cannot check
    assert any("could not be re-embedded" in u and "bare1" in u for u in report.unknown)


def test_vectors_of_another_width_are_reported(base):
    vectors = list(stored_form(Embedder(base), TEXTS, "document"))
    vectors[0] = vectors[0][:128]
    report = detect_contract(TEXTS, vectors, [base], ids=list(DOCS))
    assert report.skipped == {"tea": OTHER_WIDTH}
    assert report.width == 384 and report.checked == len(TEXTS) - 1
    wide = np.zeros((2, 512), np.float32)
    wider = detect_contract(TEXTS[:2], wide, [base])
    assert not wider.conclusive and wider.candidates == ()
    assert any("512 components" in u and "emits 384" in u for u in wider.unknown)


def test_precision_is_read_from_the_stored_values(base):
    written = base.with_(precision="int8")
    report = detect_contract(TEXTS, stored_form(Embedder(written), TEXTS, "document"), [base])
    assert report.precision is Precision.INT8 and report.conclusive
    assert report.best.contract.fingerprint == written.fingerprint


def test_last_token_pooling_of_a_decoder(tiny_decoder):
    from ctxemb_core import contract_for

    written = contract_for(tiny_decoder, pooling="last_token")
    report = detect_contract(TEXTS, stored_form(Embedder(written), TEXTS, "document"), [written])
    assert report.conclusive, report.unknown
    assert report.best.contract.pooling is Pooling.LAST_TOKEN


def test_candidates_and_kept_fields(base):
    every = candidate_contracts(base, 384)
    assert every[0][0] == base  # the model's own contract comes first
    assert {c.pooling for c, _, _ in every} == set(Pooling)
    assert {c.normalize for c, _, _ in every} == {True, False}
    assert {c.document_prefix for c, _, _ in every} == {
        "",
        "passage: ",
        "search_document: ",
        "Represent the document for retrieval: ",
    }
    narrow = candidate_contracts(base, 128)
    assert {c.truncate_dim for c, _, _ in narrow} == {128}
    kept = candidate_contracts(base.with_(pooling="cls"), 384, keep=("pooling", "normalize"))
    assert {(c.pooling, c.normalize) for c, _, _ in kept} == {(Pooling.CLS, True)}
    assert candidate_contracts(base, 512) == []
    with pytest.raises(InvalidInputError, match="keep: unknown fields"):
        detect_contract(TEXTS, np.zeros((len(TEXTS), 384)), [base], keep=("weights",))
    with pytest.raises(InvalidInputError, match="documents and"):
        detect_contract(TEXTS, np.zeros((1, 384)), [base])
    with pytest.raises(InvalidInputError, match="tolerance"):
        detect_contract(TEXTS, np.zeros((len(TEXTS), 384)), [base], tolerance=1.5)


def test_a_stamp_is_checked_against_the_best_match(client, base):
    col = open_collection(client, fresh_name(), base)
    col.add(list(DOCS), TEXTS)
    report = detect(client, col.name)
    assert report.conclusive and report.stamp_match is True
    assert report.best.contract == base

    # A stamp that lies: it says MiniLM's own recipe, the vectors are CLS.
    cls = base.with_(pooling="cls")
    name = raw_collection(client, cls)
    raw = client.get_collection(name)
    raw.modify(metadata=IndexStamp.from_embedder(Embedder(base)).to_metadata())
    report = detect(client, name)
    assert report.conclusive and report.best.contract == cls
    assert report.stamp_match is False


@pytest.mark.transport
def test_cli_adopts_a_conclusive_match(client, base, capsys):
    cls = base.with_(pooling="cls")
    name = raw_collection(client, cls)

    code, out, err, last = cli(capsys, client, "--collection", name, "--adopt", "--sample", "8")

    assert code == 0, err
    assert last["conclusive"] is True and last["adopted"] is True
    assert last["best"]["fingerprint"] == cls.fingerprint
    assert last["best"]["contract"]["pooling"] == "cls"
    assert last["candidates"][0]["min_cosine"] > 0.9999
    assert {"min_cosine", "median_cosine", "label", "fingerprint"} <= set(last["candidates"][1])
    assert any(u.startswith("query side") for u in last["unknown"])
    stamp = IndexStamp.from_metadata(client.get_collection(name).metadata)
    assert stamp.contract == cls
    # Opened under the detected contract, and refused under any other.
    opened = open_collection(client, name, cls, create=False)
    assert opened.query(["night garden pests"], n_results=1)["ids"][0][0] == "slug"
    with pytest.raises(ContractMismatchError, match="pooling"):
        open_collection(client, name, base, create=False)

    # Detected again: the stamp is the best match, and there is nothing left to adopt.
    code, out, _, last = cli(capsys, client, "--collection", name, "--adopt")
    assert code == 0 and last["stamp_match"] is True and last["adopted"] is False
    code, out, _ = table(capsys, client, "--collection", name, "--adopt", "--sample", "8")
    assert code == 0 and "nothing to adopt" in out
    assert "conclusive: " in out and "cls, normalised, no document prefix" in out


def test_cli_adopt_on_an_inconclusive_match_writes_nothing(client, other_model, capsys):
    from ctxemb_core import contract_for

    name = raw_collection(client, contract_for(other_model, pooling="mean"))
    before = client.get_collection(name).metadata

    code, out, err = table(capsys, client, "--collection", name)
    assert code == 1
    assert "inconclusive" in out and "no candidate explains" in out

    code, out, err, last = cli(capsys, client, "--collection", name, "--adopt")
    assert code == 2
    assert "inconclusive, nothing was written" in err and "no candidate explains" in err
    assert last["conclusive"] is False and last["adopted"] is False
    assert client.get_collection(name).metadata == before
    assert not IndexStamp.is_stamped(client.get_collection(name).metadata)


def test_cli_refuses_to_adopt_over_another_stamp(client, base, capsys):
    cls = base.with_(pooling="cls")
    name = raw_collection(client, cls)
    lying = IndexStamp.from_embedder(Embedder(base)).to_metadata()
    client.get_collection(name).modify(metadata=lying)

    code, out, err, last = cli(capsys, client, "--collection", name, "--adopt")

    assert code == 2 and "never overwrites a stamp" in err and "pooling" in err
    assert last["conclusive"] is True and last["stamp_match"] is False
    code, out, err = table(capsys, client, "--collection", name, "--adopt")
    assert code == 2 and "never overwrites a stamp" in err and "NOT the best match" in out
    assert IndexStamp.from_metadata(client.get_collection(name).metadata).contract == base


def test_cli_contract_options_hold_fields_fixed(client, base, capsys):
    name = raw_collection(client, base.with_(pooling="cls"))
    code, _, _, last = cli(capsys, client, "--collection", name, "--pooling", "mean")
    assert code == 1 and last["conclusive"] is False
    assert {c["fingerprint"] for c in last["candidates"]} <= {
        c.fingerprint for c, _, _ in candidate_contracts(base, 384, keep=("pooling",))
    }


def test_cli_errors(client, capsys, tmp_path):
    code = main(["detect", "--collection", "nope", "--path", str(tmp_path / "none")])
    assert code == 2 and "no Chroma store at" in capsys.readouterr().err
    code = main(["detect", *client.ctxemb_args, "--collection", fresh_name()])
    assert code == 2 and "does not exist" in capsys.readouterr().err
    code = main(["detect", *client.ctxemb_args, "--collection", "abc", "--sample", "0"])
    assert code == 2 and "--sample" in capsys.readouterr().err


def test_cli_prints_the_table_by_default_and_the_report_with_json(client, base, capsys):
    # The table is for a person: no JSON after it (it was ~15 KB on one line). The whole report
    # is behind --json: one indented object on stdout, every candidate in it.
    name = raw_collection(client, base)
    code, out, _ = table(capsys, client, "--collection", name, "--sample", "4")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"collection {name!r}: 4 of")
    assert any(line.startswith("conclusive: ") for line in lines)
    assert "assumed / not observable:" in lines
    assert max(len(line) for line in lines) < 1000 and len(lines) < 30  # the JSON was 15 KB
    assert "more recipes with --json" in out

    code, out, _, report = cli(capsys, client, "--collection", name, "--sample", "4")
    assert code == 0 and report["conclusive"] is True and report["collection"] == name
    assert len(report["candidates"]) == len(candidate_contracts(base, 384))
    assert out.startswith("{\n  ") and out.endswith("}\n")  # indented, like verify's report
