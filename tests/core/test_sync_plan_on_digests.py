"""One sync rule for every planner: ``plan_sync`` on texts (an adapter's batch) and on digests
(the Ray driver, which holds only the digests its shards were checked with) decide alike."""

from __future__ import annotations

import pytest

from ctxemb_core.documents import TEXT_KEY, text_digest
from ctxemb_core.sync import SyncReport, digest_unchanged, plan_sync

OLD = "Green tea is steamed to stop oxidation."
NEW = "Green tea is pan-fired in China and steamed in Japan."

# id -> (corpus text, stored text or None, stored metadata or None); "new" is not stored.
CASES = {
    "same-digest": (OLD, OLD, {TEXT_KEY: text_digest(OLD)}),
    "same-legacy-text": (OLD, OLD, None),  # written before the digest existed
    "same-digest-no-text": (OLD, None, {TEXT_KEY: text_digest(OLD)}),
    "edited": (NEW, OLD, {TEXT_KEY: text_digest(OLD)}),
    "edited-legacy": (NEW, OLD, {"k": 1}),
    "vector-of-another-text": (OLD, OLD, {TEXT_KEY: text_digest(NEW)}),
    "nothing-to-compare": (OLD, None, None),
}


def _legacy_digest(document, metadata):
    # What the Ray driver stores per id: the stored text's digest only where no digest is kept.
    if document is None or (metadata or {}).get(TEXT_KEY):
        return None
    return text_digest(document)


def test_planning_on_digests_decides_as_planning_on_texts():
    ids = [*CASES, "new"]
    texts = [*(c[0] for c in CASES.values()), "A new document."]
    on_texts = plan_sync(ids, texts, {i: (d, m) for i, (_, d, m) in CASES.items()})
    on_digests = plan_sync(
        ids,
        [text_digest(t) for t in texts],
        {i: (_legacy_digest(d, m), m) for i, (_, d, m) in CASES.items()},
        same=digest_unchanged,
    )
    assert on_digests == on_texts
    assert on_texts == SyncReport(
        added=("new",),
        updated=("edited", "edited-legacy", "vector-of-another-text", "nothing-to-compare"),
        unchanged=3,
    )


def test_the_comparison_is_the_callers():
    stored = {"a": ("x", None), "b": ("y", None)}
    seen = []

    def same(text, document, metadata):
        seen.append((text, document, metadata))
        return text == "keep"

    plan = plan_sync(["a", "b", "c"], ["keep", "change", "add"], stored, same=same)
    assert plan == SyncReport(added=("c",), updated=("b",), unchanged=1)
    assert seen == [("keep", "x", None), ("change", "y", None)]  # never asked of a new id


def test_ids_and_documents_must_pair():
    with pytest.raises(ValueError):
        plan_sync(["a", "b"], ["only one"], {}, same=digest_unchanged)
