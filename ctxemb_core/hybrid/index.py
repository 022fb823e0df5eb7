"""The lexical side of a hybrid index: BM25 postings fitted under a :class:`LexicalContract`.

:meth:`LexicalIndex.fit` analyses each document once (:class:`~ctxemb_core.hybrid.Analyzer`),
counts its terms, and keeps term-major postings (document, term frequency) with each document's
length; the BM25 weights follow from the contract's ``k1`` and ``b``. Fitting yields the fitted
contract: the recipe plus the digest of the vocabulary and document-frequency table and the
number of documents, so an index fitted on another corpus (or an older copy of this one) is a
different contract.

Each document carries the digest of its text (:func:`~ctxemb_core.documents.text_digest`, the
one the dense side stores), so :attr:`LexicalIndex.state` can be compared with the dense side's
ids and digests: the two sides of a hybrid index hold the same documents, or it is refused.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ctxemb_core.documents import text_digest
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.hybrid.lexical import Analyzer, LexicalContract

__all__ = ["LexicalIndex", "corpus_state", "term_hash", "terms_sum", "vocabulary_digest"]

#: Sums of :func:`term_hash` are taken modulo this (256-bit words).
HASH_MODULUS = 1 << 256


def corpus_state(pairs: Iterable[tuple[str, str]]) -> str:
    """``sha256:`` over ``(id, text digest)`` pairs, in id order: what both sides must share."""
    h = hashlib.sha256()
    for doc_id, digest in sorted(pairs):
        h.update(doc_id.encode("utf-8", "surrogatepass") + b"\x00" + digest.encode() + b"\n")
    return "sha256:" + h.hexdigest()


def term_hash(term: str, df: int, cf: int) -> int:
    """One vocabulary entry (a term, its document frequency and its total frequency) as a
    256-bit number; :func:`terms_sum` adds them up."""
    data = f"{term}\x00{df}\x00{cf}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=32).digest(), "big")


def terms_sum(entries: Iterable[tuple[str, int, int]]) -> int:
    """The sum (mod 2**256) of :func:`term_hash` over a vocabulary's ``(term, df, cf)``.

    A sum, not a hash of the sorted table: a write changes it by the entries it touches (the
    old entry's hash out, the new one's in), so a store keeps it current without reading its
    whole vocabulary, and a check recomputes it from the postings in any order.
    """
    total = 0
    for term, df, cf in entries:
        total += term_hash(term, df, cf)
    return total % HASH_MODULUS


def vocabulary_digest(documents: int, length: int, total: int) -> str:
    """The fitted contract's ``vocabulary``: ``sha256:`` over the number of documents, their
    total length (in terms) and :func:`terms_sum` of the vocabulary."""
    text = f"{documents}:{length}:{total:064x}"
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class LexicalIndex:
    """BM25 over a corpus, under a fitted :class:`LexicalContract`.

    Build one with :meth:`fit`; :meth:`updated` gives the index of the corpus with documents
    added, changed or deleted (the vocabulary and document frequencies fitted again, so the
    contract's ``vocabulary`` digest follows the corpus). Instances are immutable.
    """

    def __init__(
        self,
        contract: LexicalContract,
        ids: Sequence[str],
        digests: Sequence[str],
        vocabulary: Sequence[str],
        indptr: np.ndarray,
        postings: np.ndarray,
        frequencies: np.ndarray,
        lengths: np.ndarray,
    ) -> None:
        self.contract = contract
        self.ids = list(ids)
        self.digests = list(digests)
        self.vocabulary = list(vocabulary)
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.postings = np.asarray(postings, dtype=np.int32)
        self.frequencies = np.asarray(frequencies, dtype=np.int32)
        self.lengths = np.asarray(lengths, dtype=np.int32)
        self._terms = {t: i for i, t in enumerate(self.vocabulary)}
        self._analyzer: Analyzer | None = None
        self._weights = self._bm25_weights()

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def fit(
        cls,
        ids: Sequence[str],
        texts: Sequence[str],
        recipe: LexicalContract | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> LexicalIndex:
        """Analyse ``texts`` and fit BM25 on them.

        Raises:
            InvalidInputError: ids and texts of different lengths, a repeated id, a text that is
                not a string.
        """
        recipe = (recipe or LexicalContract()).recipe()
        ids, texts = list(ids), list(texts)
        if len(ids) != len(texts):
            raise InvalidInputError(f"{len(ids)} ids but {len(texts)} texts")
        if len(set(ids)) != len(ids):
            repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
            raise InvalidInputError(f"ids repeat: {repeated[:5]}")
        analyzer = Analyzer(recipe)
        counts = []
        for n, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInputError(
                    f"text of {ids[n]!r} must be a string, got {type(text).__name__}"
                )
            counts.append(Counter(analyzer.terms(text)))
            if progress is not None and (n + 1) % 256 == 0:
                progress(256)
        if progress is not None and len(texts) % 256:
            progress(len(texts) % 256)
        index = cls._from_counts(recipe, ids, [text_digest(t) for t in texts], counts)
        index._analyzer = analyzer
        return index

    @classmethod
    def _from_counts(
        cls,
        recipe: LexicalContract,
        ids: list[str],
        digests: list[str],
        counts: Sequence[Mapping[str, int]],
    ) -> LexicalIndex:
        vocabulary = sorted(set().union(*counts)) if counts else []
        term_of = {t: i for i, t in enumerate(vocabulary)}
        df = np.zeros(len(vocabulary), dtype=np.int64)
        for c in counts:
            for t in c:
                df[term_of[t]] += 1
        indptr = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        postings = np.empty(int(indptr[-1]), dtype=np.int32)
        frequencies = np.empty(int(indptr[-1]), dtype=np.int32)
        fill = indptr[:-1].copy()
        for d, c in enumerate(counts):
            for t, f in c.items():
                i = term_of[t]
                postings[fill[i]] = d
                frequencies[fill[i]] = f
                fill[i] += 1
        lengths = np.array([sum(c.values()) for c in counts], dtype=np.int32)
        cf = np.add.reduceat(frequencies, indptr[:-1]) if len(frequencies) else df
        total = terms_sum(zip(vocabulary, df.tolist(), cf.tolist(), strict=True))
        fitted = replace(
            recipe,
            vocabulary=vocabulary_digest(len(ids), int(lengths.sum()), total),
            documents=len(ids),
        )
        return cls(fitted, ids, digests, vocabulary, indptr, postings, frequencies, lengths)

    def counts(self) -> list[dict[str, int]]:
        """Each document's term counts (decoded from the postings)."""
        out: list[dict[str, int]] = [{} for _ in self.ids]
        for t, term in enumerate(self.vocabulary):
            lo, hi = self.indptr[t], self.indptr[t + 1]
            for d, f in zip(
                self.postings[lo:hi].tolist(), self.frequencies[lo:hi].tolist(), strict=True
            ):
                out[d][term] = f
        return out

    def updated(
        self,
        ids: Sequence[str] = (),
        texts: Sequence[str] = (),
        *,
        delete: Iterable[str] = (),
    ) -> LexicalIndex:
        """This corpus with ``ids`` added or replaced by ``texts`` and ``delete`` removed."""
        ids, texts = list(ids), list(texts)
        if len(ids) != len(texts):
            raise InvalidInputError(f"{len(ids)} ids but {len(texts)} texts")
        gone = set(delete) | set(ids)
        counts = self.counts()
        keep = [n for n, i in enumerate(self.ids) if i not in gone]
        analyzer = self.analyzer
        new_ids = [self.ids[n] for n in keep] + ids
        new_digests = [self.digests[n] for n in keep] + [text_digest(t) for t in texts]
        new_counts = [counts[n] for n in keep] + [Counter(analyzer.terms(t)) for t in texts]
        index = self._from_counts(self.contract.recipe(), new_ids, new_digests, new_counts)
        index._analyzer = analyzer
        return index

    # -- reading -----------------------------------------------------------------------------

    @property
    def analyzer(self) -> Analyzer:
        if self._analyzer is None:
            self._analyzer = Analyzer(self.contract)
        return self._analyzer

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def state(self) -> str:
        """:func:`corpus_state` of this index's documents."""
        return corpus_state(zip(self.ids, self.digests, strict=True))

    def _bm25_weights(self) -> np.ndarray:
        c = self.contract
        n = len(self.ids)
        if not n:
            return np.zeros(0, dtype=np.float32)
        df = np.diff(self.indptr).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        avg = float(self.lengths.mean()) or 1.0
        tf = self.frequencies.astype(np.float64)
        norm = c.k1 * (1.0 - c.b + c.b * self.lengths[self.postings] / avg)
        per_term = np.repeat(idf, np.diff(self.indptr))
        return (per_term * tf / (tf + norm)).astype(np.float32)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (terms not in the vocabulary score 0)."""
        return self.term_scores(self.analyzer.terms(query))

    def term_scores(self, terms: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for query terms already analysed (repeats count, as
        in bm25s); terms not in the vocabulary score 0. A caller that analyses with another
        recipe than the index's gets other terms: what the hybrid guard refuses."""
        out = np.zeros(len(self.ids), dtype=np.float32)
        for term in terms:
            t = self._terms.get(term)
            if t is None:
                continue
            lo, hi = self.indptr[t], self.indptr[t + 1]
            out[self.postings[lo:hi]] += self._weights[lo:hi]
        return out

    def search(self, query: str, k: int = 10) -> list[tuple[str, float]]:
        """The ``k`` best documents that share a term with ``query``: ``(id, score)``, best
        first, ties in corpus order."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"k must be an integer >= 1, got {k!r}")
        if not isinstance(query, str):
            raise InvalidInputError(f"a query must be a string, got {type(query).__name__}")
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if hits.size > k:
            hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
        order = hits[np.lexsort((hits, -scores[hits]))]
        return [(self.ids[d], float(scores[d])) for d in order[:k]]

    # -- the on-disk form (see ctxemb_core.hybrid.store) ---------------------------------------

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "indptr": self.indptr,
            "postings": self.postings,
            "frequencies": self.frequencies,
            "lengths": self.lengths,
        }

    @classmethod
    def from_parts(
        cls,
        contract: LexicalContract,
        documents: Sequence[Sequence[str]],
        vocabulary: Sequence[str],
        arrays: Mapping[str, Any],
    ) -> LexicalIndex:
        """Rebuild from what :mod:`~ctxemb_core.hybrid.store` wrote (checked there)."""
        ids = [d[0] for d in documents]
        digests = [d[1] for d in documents]
        return cls(
            contract,
            ids,
            digests,
            vocabulary,
            arrays["indptr"],
            arrays["postings"],
            arrays["frequencies"],
            arrays["lengths"],
        )
