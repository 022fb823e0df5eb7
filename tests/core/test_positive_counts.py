"""The positive-integer check is one function: every caller's message and error class as before.

Callers that took a copy of the check now call ``check_positive_int``; those that accept numpy
integers (counts read from arrays) or raise a contract error pass ``kinds`` / ``error``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from tiny_models import build_cross_encoder

from ctxemb_core._validate import check_positive_int
from ctxemb_core.errors import InvalidContractError, InvalidInputError
from ctxemb_core.eval.metrics import ndcg_at_k, search_topk
from ctxemb_core.rerank import rerank_contract_for


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "3", None])
def test_the_one_check_refuses_what_is_not_a_count(bad):
    with pytest.raises(InvalidInputError, match=rf"^n must be a positive integer, got {bad!r}$"):
        check_positive_int(bad, "n")


def test_kinds_and_error_widen_the_check_without_changing_its_words():
    assert check_positive_int(np.int64(3), "k", kinds=(int, np.integer)) == 3
    three = re.escape(repr(np.int64(3)))
    with pytest.raises(InvalidInputError, match=rf"^k must be a positive integer, got {three}$"):
        check_positive_int(np.int64(3), "k")  # numpy integers only where a caller asks
    with pytest.raises(InvalidContractError, match=r"^f must be a positive integer, got 0$"):
        check_positive_int(0, "f", error=InvalidContractError)


def test_metrics_take_numpy_counts_and_refuse_the_rest_as_before():
    run = {"q": {"d1": 1.0, "d2": 0.5}}
    qrels = {"q": {"d1": 1}}
    assert ndcg_at_k(run, qrels, np.int64(1)) == 1.0
    with pytest.raises(InvalidInputError, match=r"^k must be a positive integer, got True$"):
        ndcg_at_k(run, qrels, True)
    vectors = np.eye(2, dtype=np.float32)
    for name in ("query_block", "doc_block"):
        with pytest.raises(InvalidInputError, match=rf"^{name} must be a positive integer, got 0$"):
            search_topk(vectors, vectors, 1, **{name: 0})


def test_a_rerankers_max_tokens_is_refused_as_a_contract_error(tmp_path):
    folder = build_cross_encoder(tmp_path / "ce", seed=3)
    with pytest.raises(
        InvalidContractError, match=r"^max_tokens must be a positive integer, got 0$"
    ):
        rerank_contract_for(folder, max_tokens=0)


def test_a_chroma_migration_refuses_a_batch_size_that_is_not_a_count():
    from ctxemb_chroma import migrate

    with pytest.raises(InvalidInputError, match=r"^batch_size must be a positive integer, got 0$"):
        migrate(None, None, "target", batch_size=0)  # type: ignore[arg-type]
