"""Store-agnostic guard pieces: sampling, record checks, reports."""

from __future__ import annotations

import pytest

from ctxemb_core import IndexStamp
from ctxemb_core.errors import (
    ContractMismatchError,
    ForeignVectorsError,
    InvalidInputError,
    MissingStampError,
)
from ctxemb_core.guard import adopt_stamp, check_records, open_stamp, sample_ranges, verify_index


@pytest.mark.parametrize(
    ("count", "size"), [(0, 4), (1, 16), (5, 1), (24, 32), (100, 16), (1000, 7)]
)
def test_sample_ranges_cover_the_newest_and_exactly_the_size_asked(count, size):
    ranges = list(sample_ranges(count, size))
    offsets = [o for a, b in ranges for o in range(a, b)]
    assert len(offsets) == len(set(offsets)) == min(count, size)
    assert all(0 <= o < count for o in offsets)
    if count:
        assert count - 1 in offsets  # the newest record is always looked at


def test_check_records_refuses_bad_batches():
    assert check_records(["a"], ["x"], None) == (["a"], None)
    for ids, docs, metas, msg in [
        ("a", ["x"], None, "must be a list"),
        ([], [], None, "empty"),
        (["a", "b"], ["x"], None, "same length"),
        (["a"], ["x"], [{}, {}], "same length"),
        ([""], ["x"], None, "non-empty strings"),
        ([3], ["x"], None, "non-empty strings"),
        (["a", "a"], ["x", "y"], None, "duplicate id 'a'"),
    ]:
        with pytest.raises(InvalidInputError, match=msg):
            check_records(ids, docs, metas)


def test_verify_index_reports_every_finding(minilm, minilm_contract):
    from ctxemb_core import Embedder

    md = IndexStamp.from_embedder(minilm).to_metadata()
    texts = ["green tea", "bike chains"]
    good = minilm.embed_documents(texts)
    report = verify_index(md, minilm, (["a", "b"], texts, good))
    assert report.ok and report.sample_size == 2 and report.sample_min_cosine > 0.9999
    other = Embedder(minilm_contract.with_(pooling="max"))
    mixed = [good[0], other.embed_documents(texts[1:])[0]]
    report = verify_index(md, minilm, (["a", "b"], texts, mixed))
    assert not report.ok and report.bad_ids == ("b",)
    with pytest.raises(ForeignVectorsError, match="1 of 2 checked"):
        open_stamp(md, minilm, (["a", "b"], texts, mixed))
    report = verify_index(md, other)
    assert not report.ok and report.diff.fields == ("pooling",) and report.canary_cosine is None
    with pytest.raises(ContractMismatchError):
        open_stamp(md, other)
    unstamped = verify_index({}, minilm)
    assert not unstamped.stamped and not unstamped.ok


def test_adopt_stamp_needs_a_sample_that_proves_the_stored_vectors(minilm, minilm_contract):
    from ctxemb_core import Embedder

    texts = ["green tea", "bike chains"]
    good = minilm.embed_documents(texts)
    stamp = adopt_stamp(minilm, (["a", "b"], texts, good), stored=2, name="docs")
    assert stamp.verify(minilm).min_cosine > 0.9999
    other = Embedder(minilm_contract.with_(pooling="max")).embed_documents(texts)
    with pytest.raises(MissingStampError, match=r"cannot adopt 'docs'.*1 of 2 sampled"):
        adopt_stamp(minilm, (["a", "b"], texts, [good[0], other[1]]), stored=2, name="docs")
    with pytest.raises(MissingStampError, match="no documents to re-embed") as untexted:
        adopt_stamp(minilm, (["a"], [None], good[:1]), stored=1, name="docs")
    # Nothing was compared: the refusal says so, not that the vectors are another contract's.
    assert "1 of 1 sampled records carry no text" in str(untexted.value)
    assert "not this contract's" not in str(untexted.value)
    with pytest.raises(MissingStampError, match="none of its 3 records was sampled"):
        adopt_stamp(minilm, ([], [], []), stored=3, name="docs")
    with pytest.raises(MissingStampError, match=r"1 of 2 sampled documents differ, 1 has"):
        adopt_stamp(minilm, (["a", "b"], [texts[0], None], [other[0], good[1]]), 2, "docs")
    assert adopt_stamp(minilm, ([], [], []), stored=0, name="empty").contract == minilm_contract
