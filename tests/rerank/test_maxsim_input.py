"""MaxSim refuses non-finite input and overflowing scores on every kernel.

``maxsim`` picks a kernel by the shape of its input: a padded array is multiplied in chunks; in
a list, candidates of ``_GATHER_BELOW`` (32) tokens or more are multiplied where they lie (one
product, or several when longer than a chunk) and shorter ones are gathered side by side. Each
case below runs on every one of those kernels, so a check that only one of them makes fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.rerank import maxsim
from ctxemb_core.rerank.late import _GATHER_BELOW, EMPTY_SCORE

DIM = 4
Q = np.full((3, DIM), 0.5, dtype=np.float32)

# (label, tokens per candidate, chunk_elements): each list kernel once; the padded path apart.
LIST_KERNELS = [
    ("gathered", 4, None),
    ("in place", _GATHER_BELOW + 8, None),
    ("in place, chunked", _GATHER_BELOW + 8, 2 * (DIM + len(Q))),
]


def _candidates(tokens: int, dtype=np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(tokens)
    return [rng.standard_normal((tokens, DIM)).astype(dtype) for _ in range(3)]


def _run(kernel: str, q: np.ndarray, docs: list[np.ndarray], chunk) -> np.ndarray:
    """``docs`` as a list, or stacked into one padded array for the padded kernels."""
    given = np.stack(docs) if kernel.startswith("padded") else docs
    return maxsim(q, given, chunk_elements=chunk)


ALL_KERNELS = [*LIST_KERNELS, ("padded", 4, None), ("padded, long", _GATHER_BELOW + 8, None)]


@pytest.mark.parametrize(
    ("kernel", "tokens", "chunk"), ALL_KERNELS, ids=[k[0] for k in ALL_KERNELS]
)
@pytest.mark.parametrize("bad", [-np.inf, np.inf, np.nan], ids=["-inf", "inf", "nan"])
def test_a_non_finite_value_is_refused_on_every_kernel(kernel, tokens, chunk, bad):
    docs = _candidates(tokens)
    docs[1][tokens // 2, 1] = bad  # one token among finite ones: a max over tokens hides -inf
    with pytest.raises(InvalidInputError, match=r"doc_vectors\[1\]"):
        _run(kernel, Q, docs, chunk)


@pytest.mark.parametrize(
    ("kernel", "tokens", "chunk"), ALL_KERNELS, ids=[k[0] for k in ALL_KERNELS]
)
@pytest.mark.parametrize("big", [-1e300, 1e300], ids=["-1e300", "1e300"])
def test_a_float64_value_that_overflows_float32_is_refused(kernel, tokens, chunk, big):
    docs = _candidates(tokens, np.float64)  # finite in float64, +-inf once cast to float32
    docs[2][tokens - 1, 0] = big
    with pytest.raises(InvalidInputError, match=r"doc_vectors\[2\]"):
        _run(kernel, Q, docs, chunk)


@pytest.mark.parametrize("padded", [False, True], ids=["list", "padded"])
def test_an_overflowing_value_is_refused_with_an_empty_query(padded):
    docs = [np.ones((2, DIM)), np.ones((2, DIM))]
    docs[1][0, 0] = 1e300  # no product is computed for an empty query: the cast is checked
    given = np.stack(docs) if padded else docs
    with pytest.raises(InvalidInputError, match="NaN or infinite"):
        maxsim(np.zeros((0, DIM)), given)


@pytest.mark.parametrize(
    ("kernel", "tokens", "chunk"), LIST_KERNELS, ids=[k[0] for k in LIST_KERNELS]
)
@pytest.mark.parametrize("bad", [np.nan, -np.inf], ids=["nan", "-inf"])
def test_a_non_finite_value_in_a_masked_token_of_a_list_is_refused(kernel, tokens, chunk, bad):
    docs = _candidates(tokens)
    docs[0][-1, 2] = bad
    masks = [np.ones(tokens, bool) for _ in docs]
    masks[0][-1] = False  # masked out, as padding: the docstring says padding is checked too
    with pytest.raises(InvalidInputError, match=r"doc_vectors\[0\].*padding"):
        maxsim(Q, docs, masks, chunk_elements=chunk)
    # With an empty query too (no product is computed then).
    with pytest.raises(InvalidInputError, match=r"doc_vectors\[0\]"):
        maxsim(np.zeros((0, DIM)), docs, masks)


@pytest.mark.parametrize(
    ("kernel", "tokens", "chunk"), ALL_KERNELS, ids=[k[0] for k in ALL_KERNELS]
)
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["+", "-"])
def test_a_sum_that_overflows_float32_is_refused(kernel, tokens, chunk, sign):
    # Every product fits in float32 (about 2.6e38 < 3.4e38); their sum over 3 query tokens
    # does not: it came back as inf and ranked first.
    q = np.ones((3, DIM), dtype=np.float32)
    docs = [np.zeros((tokens, DIM), np.float32) for _ in range(3)]
    docs[0][:, 0] = 1.0
    docs[1][:, 0] = sign * 2.6e38
    docs[2][:, 0] = 2.0
    with pytest.raises(InvalidInputError, match=r"doc_vectors\[1\].*float32"):
        _run(kernel, q, docs, chunk)


@pytest.mark.parametrize(
    ("kernel", "tokens", "chunk"), ALL_KERNELS, ids=[k[0] for k in ALL_KERNELS]
)
def test_large_finite_scores_still_score(kernel, tokens, chunk):
    # The checks refuse only what cannot be represented: a large sum that fits is kept.
    q = np.ones((3, DIM), dtype=np.float32)
    docs = [np.zeros((tokens, DIM), np.float32) for _ in range(2)]
    docs[0][:, 0] = 1e38
    docs[1][:, 0] = -1e38
    scores = _run(kernel, q, docs, chunk)
    np.testing.assert_allclose(scores, [3e38, -3e38], rtol=1e-6)


def test_masked_finite_tokens_and_empty_candidates_keep_their_scores():
    docs = _candidates(_GATHER_BELOW + 8)
    masks = [np.ones(len(d), bool) for d in docs]
    masks[1][:] = False
    scores = maxsim(Q, docs, masks)
    assert scores[1] == np.float32(EMPTY_SCORE)
    expected = [float((d @ Q.T).max(axis=0).sum()) for d in docs]
    np.testing.assert_allclose(scores[[0, 2]], [expected[0], expected[2]], rtol=1e-5)
    padded = maxsim(Q, np.stack(docs), np.stack(masks))
    np.testing.assert_allclose(padded, scores, rtol=1e-5)
