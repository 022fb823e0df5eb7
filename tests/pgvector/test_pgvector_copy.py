"""A copy between stores under one contract is compared within the stated tolerance (issue 42,
item 17): into PostgreSQL bit for bit, into Chroma (which re-normalises a cosine collection's
vectors on write) within ``COPY_TOLERANCE`` of each vector's length; a target that changes the
vectors more is refused."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DOCS

import ctxemb_chroma
import ctxemb_pgvector
from ctxemb_core.errors import StorageMismatchError
from ctxemb_core.migrate import COPY_TOLERANCE, check_copied


def vectors(index, ids):
    got = index.get(ids=ids, include=["embeddings"])
    order = [list(got["ids"]).index(i) for i in ids]
    return np.asarray(got["embeddings"], dtype=np.float64)[order]


def test_a_copy_into_chroma_is_within_the_tolerance_and_back_is_exact(pg, minilm, tmp_path):
    ids = list(DOCS)
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    table.add(ids, list(DOCS.values()))
    client = ctxemb_chroma.connect(path=str(tmp_path / "chroma"))
    copy = ctxemb_chroma.migrate(table, minilm, "docs", client=client, progress=False)
    source, copied = vectors(table, ids), vectors(copy, ids)
    # Chroma divides each vector by its length on write: not bit for bit, within the bound.
    assert 0 <= np.abs(source - copied).max() <= COPY_TOLERANCE
    assert check_copied(ids, list(source), copy.get(ids=ids, include=["embeddings"])) >= 0
    # PostgreSQL keeps what it is given: Chroma's vectors come back bit for bit.
    back = ctxemb_pgvector.migrate(copy, minilm, "back", conn=pg, progress=False)
    assert np.array_equal(vectors(back, ids), copied)


def test_a_target_that_changed_the_vectors_is_refused(pg, minilm):
    ids = ["tea", "moon"]
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    table.add(ids, [DOCS[i] for i in ids])
    stored = table.get(ids=ids, include=["embeddings"])
    sent = list(vectors(table, ids))
    assert check_copied(ids, sent, stored) == 0.0
    off = [v + np.where(np.arange(v.size) == 0, 1e-4, 0.0) for v in sent]
    with pytest.raises(StorageMismatchError, match="'tea' differs by"):
        check_copied(ids, off, stored)
    with pytest.raises(StorageMismatchError, match="'bank'"):
        check_copied(["bank"], sent[:1], stored)
