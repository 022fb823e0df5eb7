"""A lexical baseline: BM25 over the same BEIR split, with ``bm25s``.

The seed's failure-mode table says dense retrieval can trail BM25 on a new corpus, and that the
remedy is to measure both on one's own corpus before committing. This is the BM25 half of that
measurement: ``bm25s`` (Lucene's BM25 variant, ``k1=1.5``, ``b=0.75``), lower-cased word tokens,
English stop words removed and the Snowball English stemmer (``PyStemmer``), over the same text
the dense paths embed (:func:`~ctxemb_core.eval.document_text`). Documents that share no term
with a query score 0 and are left out of its run, as a search engine returns only matches.

Needs the ``eval`` extra: ``pip install 'ctxemb[eval]'``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxemb_core.errors import InvalidInputError, MissingDependencyError
from ctxemb_core.eval.beir import BeirDataset, document_text
from ctxemb_core.validate import check_positive_int

__all__ = ["Bm25Settings", "bm25_run"]


@dataclass(frozen=True)
class Bm25Settings:
    """How the baseline scores: reported beside its figures so they can be reproduced."""

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stemmer: str = "english"
    stopwords: str = "en"

    def describe(self) -> str:
        """One line naming the library, its version and every setting."""
        bm25s, _ = _modules()
        version = getattr(bm25s, "__version__", "?")
        return (
            f"bm25s {version} {self.method} k1={self.k1} b={self.b}, "
            f"{self.stemmer} Snowball stemmer (PyStemmer), stop words {self.stopwords!r}"
        )


def bm25_run(
    dataset: BeirDataset, k: int = 100, *, settings: Bm25Settings | None = None
) -> dict[str, dict[str, float]]:
    """BM25's top ``k`` documents for every query of ``dataset``.

    Args:
        dataset: a BEIR split (:func:`~ctxemb_core.eval.load_beir`).
        k: documents per query (clipped to the corpus size).
        settings: BM25's parameters; the defaults are ``bm25s``'s.

    Returns:
        ``{query_id: {doc_id: score}}``, a run for :func:`~ctxemb_core.eval.evaluate`; a query
        that shares no term with any document has an empty run.

    Raises:
        MissingDependencyError: ``bm25s`` or ``PyStemmer`` is not installed.
        InvalidInputError: ``k`` is not a positive integer, or the corpus is empty.

    Example:
        >>> from ctxemb_core.eval import evaluate, load_beir
        >>> from ctxemb_core.eval.bm25 import bm25_run
        >>> data = load_beir("../shared/data/scifact")        # doctest: +SKIP
        >>> evaluate(bm25_run(data), data.qrels)["ndcg@10"]   # doctest: +SKIP
        0.6863
    """
    k = check_positive_int(k, "k")
    settings = settings or Bm25Settings()
    bm25s, stemmer_module = _modules()
    doc_ids = list(dataset.corpus)
    if not doc_ids:
        raise InvalidInputError("the corpus is empty; BM25 has nothing to index")
    stemmer = stemmer_module.Stemmer(settings.stemmer)
    tokens = bm25s.tokenize(
        [document_text(dataset.corpus[i]) for i in doc_ids],
        stopwords=settings.stopwords,
        stemmer=stemmer,
        show_progress=False,
    )
    retriever = bm25s.BM25(k1=settings.k1, b=settings.b, method=settings.method)
    retriever.index(tokens, show_progress=False)
    query_ids = list(dataset.queries)
    if not query_ids:
        return {}
    # As strings: the queries' terms are looked up in the corpus vocabulary (unknown ones drop).
    query_tokens = bm25s.tokenize(
        [dataset.queries[q] for q in query_ids],
        stopwords=settings.stopwords,
        stemmer=stemmer,
        show_progress=False,
        return_ids=False,
    )
    found, scores = retriever.retrieve(query_tokens, k=min(k, len(doc_ids)), show_progress=False)
    return {
        qid: {
            doc_ids[j]: float(s)
            for j, s in zip(found[n].tolist(), scores[n].tolist(), strict=True)
            if s > 0
        }
        for n, qid in enumerate(query_ids)
    }


def _modules() -> tuple[Any, Any]:
    try:
        import bm25s
        import Stemmer
    except ImportError as exc:
        raise MissingDependencyError(
            f"the BM25 baseline needs bm25s and PyStemmer ({exc.name} is missing): "
            "pip install 'ctxemb[eval]'"
        ) from None
    return bm25s, Stemmer
