"""The lexical recipe: how text becomes BM25 terms, and BM25's parameters, pinned as a contract.

A lexical score is as much a recipe as a dense vector: the token pattern, lower-casing, the stop
words, the stemmer, ``k1`` and ``b``, and the vocabulary and document frequencies the index was
fitted on. Change any of it on the query side and the scores change silently (a stemmed index
queried with unstemmed terms matches almost nothing). :class:`LexicalContract` pins all of it;
:class:`Analyzer` is the one implementation of its text-to-terms part, used on both sides.

The defaults are the measured baseline of :mod:`ctxemb_core.eval.bm25` (``bm25s``'s Lucene BM25,
``k1`` 1.5, ``b`` 0.75, scikit-learn's token pattern, lower-cased, English stop words, the
Snowball English stemmer), so the two agree term for term.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ctxemb_core.contract import FieldChange
from ctxemb_core.errors import DataFormatError, InvalidContractError, MissingDependencyError

__all__ = ["ANALYZER_PROBES", "Analyzer", "LexicalContract", "stopword_list"]

LEXICAL_SCHEMA = 1
#: scikit-learn's (and bm25s's) word pattern: runs of two or more word characters.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
#: Stop-word lists by name (from ``bm25s``, which took them from NLTK), and "none".
STOPWORD_LISTS = ("en", "none")
#: Snowball stemmers by language (``PyStemmer``), and "none".
STEMMERS = ("english", "none")
METHODS = ("bm25",)
VARIANTS = ("lucene",)
#: Texts the analyzer is run on when an index is stamped and again when it is opened: stop words,
#: inflections, case, digits, accents, punctuation. A different analyzer (another stemmer version,
#: another stop-word list, another pattern) turns them into other terms.
ANALYZER_PROBES = (
    "The running dogs were quickly jumping over the lazy foxes' fences.",
    "Mitochondrial DNA replication in HeLa cells: 3 assays, 12 antibodies and 150 mg/kg doses.",
    "Does the patient's insulin resistance improve after we've reduced carbohydrate intake?",
    "Naïve Bayes classifiers, café résumés and Straße; généralisations of ranking.",
)


def stopword_list(name: str) -> tuple[str, ...]:
    """The stop words of a list named in a contract (``"en"``, or ``"none"`` for none)."""
    if name == "none":
        return ()
    if name != "en":
        raise InvalidContractError(f"stopwords must be one of {STOPWORD_LISTS}, got {name!r}")
    try:
        from bm25s.stopwords import STOPWORDS_EN
    except ImportError:
        raise MissingDependencyError(
            "the lexical side needs bm25s (its stop-word lists) and PyStemmer: "
            "pip install 'ctxemb[hybrid]'"
        ) from None
    return tuple(STOPWORDS_EN)


def words_digest(words: Sequence[str]) -> str:
    """``sha256:`` over a word list, sorted and newline-joined."""
    return "sha256:" + hashlib.sha256("\n".join(sorted(set(words))).encode()).hexdigest()


@dataclass(frozen=True)
class LexicalContract:
    """The full recipe of a lexical (BM25) score, pinned and fingerprinted.

    A contract with ``vocabulary`` unset is a *recipe* (what a query side states); fitting an
    index on a corpus (:meth:`~ctxemb_core.hybrid.LexicalIndex.fit`) gives the *fitted* contract,
    which adds the digest of the vocabulary and document-frequency table and the number of
    documents. A caller's recipe is compared with a stamp's recipe fields; a caller that pins a
    vocabulary is compared on it too.

    Attributes:
        method: ``bm25``.
        variant: the BM25 formula: ``lucene`` (idf ``log(1 + (N - df + 0.5) / (df + 0.5))``,
            term weight ``tf / (tf + k1 (1 - b + b |d| / avgdl))``, as ``bm25s`` and Lucene).
        k1: term-frequency saturation.
        b: document-length normalisation.
        token_pattern: the regular expression whose matches are the tokens.
        lowercase: lower-case the text before matching.
        stopwords: the stop-word list removed after matching (``en`` or ``none``).
        stopwords_digest: ``sha256:`` of that list, so a changed list is a changed recipe.
        stemmer: the Snowball stemmer applied last (``english`` or ``none``).
        vocabulary: ``sha256:`` of the fitted vocabulary with each term's document frequency,
            the number of documents and the total number of terms; ``None`` for a recipe.
        documents: the number of documents fitted on; ``None`` for a recipe.
        schema: version of this format.
    """

    method: str = "bm25"
    variant: str = "lucene"
    k1: float = 1.5
    b: float = 0.75
    token_pattern: str = TOKEN_PATTERN
    lowercase: bool = True
    stopwords: str = "en"
    stopwords_digest: str = ""
    stemmer: str = "english"
    vocabulary: str | None = None
    documents: int | None = None
    schema: int = LEXICAL_SCHEMA

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidContractError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.variant not in VARIANTS:
            raise InvalidContractError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        for name, low, high in (("k1", 0.0, 100.0), ("b", 0.0, 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidContractError(f"{name} must be a number, got {value!r}")
            if not low <= value <= high:
                raise InvalidContractError(f"{name} must be in [{low}, {high}], got {value!r}")
            object.__setattr__(self, name, float(value))
        if not isinstance(self.token_pattern, str) or not self.token_pattern:
            raise InvalidContractError("token_pattern must be a non-empty regular expression")
        try:
            re.compile(self.token_pattern)
        except re.error as exc:
            raise InvalidContractError(
                f"token_pattern is not a regular expression: {exc}"
            ) from None
        if not isinstance(self.lowercase, bool):
            raise InvalidContractError(f"lowercase must be true or false, got {self.lowercase!r}")
        if self.stopwords not in STOPWORD_LISTS:
            raise InvalidContractError(
                f"stopwords must be one of {STOPWORD_LISTS}, got {self.stopwords!r}"
            )
        if self.stemmer not in STEMMERS:
            raise InvalidContractError(f"stemmer must be one of {STEMMERS}, got {self.stemmer!r}")
        if not self.stopwords_digest:
            object.__setattr__(
                self, "stopwords_digest", words_digest(stopword_list(self.stopwords))
            )
        elif not re.fullmatch(r"sha256:[0-9a-f]{64}", str(self.stopwords_digest)):
            raise InvalidContractError(
                "stopwords_digest must be 'sha256:' and 64 hex digits, got "
                f"{self.stopwords_digest!r}"
            )
        if (self.vocabulary is None) != (self.documents is None):
            raise InvalidContractError("vocabulary and documents are set together (a fitted index)")
        if self.vocabulary is not None and not re.fullmatch(
            r"sha256:[0-9a-f]{64}", str(self.vocabulary)
        ):
            raise InvalidContractError(
                f"vocabulary must be 'sha256:' and 64 hex digits, got {self.vocabulary!r}"
            )
        if self.documents is not None and (
            isinstance(self.documents, bool)
            or not isinstance(self.documents, int)
            or self.documents < 0
        ):
            raise InvalidContractError(f"documents must be a count, got {self.documents!r}")
        if self.schema != LEXICAL_SCHEMA:
            raise InvalidContractError(
                f"lexical contract schema {self.schema!r} is not known to this ctxemb "
                f"(it reads schema {LEXICAL_SCHEMA})"
            )

    # -- the recipe and its fitted form ------------------------------------------------------

    @property
    def fitted(self) -> bool:
        return self.vocabulary is not None

    def recipe(self) -> LexicalContract:
        """This contract without what fitting added (vocabulary, documents)."""
        return dataclasses.replace(self, vocabulary=None, documents=None)

    def with_(self, **changes: Any) -> LexicalContract:
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise InvalidContractError(
                f"unknown lexical contract fields {unknown}; the fields are {sorted(names)}"
            )
        if "stopwords" in changes and "stopwords_digest" not in changes:
            changes["stopwords_digest"] = ""  # the new list's digest
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    @classmethod
    def from_dict(cls, data: Any) -> LexicalContract:
        if not isinstance(data, dict):
            raise DataFormatError(
                f"a lexical contract must be a JSON object, got {type(data).__name__}"
            )
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        missing = [n for n in names if n not in data]
        if unknown or missing:
            parts = [f"missing fields {missing}"] if missing else []
            parts += [f"unknown fields {unknown}"] if unknown else []
            raise DataFormatError(
                "not a ctxemb lexical contract: "
                + " and ".join(parts)
                + f"; the fields are {names}"
            )
        return cls(**data)

    def changes(self, caller: LexicalContract) -> tuple[FieldChange, ...]:
        """The fields in which ``caller`` differs; ``vocabulary``/``documents`` only where the
        caller pins them (a recipe states no vocabulary)."""
        a, b = self.to_dict(), caller.to_dict()
        skip = set() if caller.fitted else {"vocabulary", "documents"}
        return tuple(
            FieldChange(name, a[name], b[name])
            for name in a
            if name not in skip and a[name] != b[name]
        )

    def describe(self) -> str:
        stem = "no stemmer" if self.stemmer == "none" else f"{self.stemmer} stemmer"
        stops = "no stop words" if self.stopwords == "none" else f"stop words {self.stopwords!r}"
        text = f"{self.method} {self.variant} k1={self.k1:g} b={self.b:g}, {stem}, {stops}"
        if self.fitted:
            text += f", fitted on {self.documents:,} documents"
        return text


class Analyzer:
    """Text to terms under a :class:`LexicalContract`: lower-case, match, drop stop words, stem.

    The same steps, in the same order, as ``bm25s.tokenize`` with a ``PyStemmer`` stemmer.
    """

    def __init__(self, contract: LexicalContract) -> None:
        self.contract = contract
        self._find = re.compile(contract.token_pattern).findall
        stop = stopword_list(contract.stopwords)
        if words_digest(stop) != contract.stopwords_digest:
            from ctxemb_core.errors import AnalyzerDriftError
            from ctxemb_core.remedy import REBUILD_LEXICAL_SIDE

            raise REBUILD_LEXICAL_SIDE.into(
                AnalyzerDriftError,
                f"the stop-word list {contract.stopwords!r} installed here is not the one the "
                f"lexical contract pins ({contract.stopwords_digest}); another bm25s version "
                "changed it. Install the version the index was built with, or rebuild the "
                "lexical side ({do}).",
                found=words_digest(stop),
                expected=contract.stopwords_digest,
            )
        self._stop = frozenset(stop)
        self._stem = None
        if contract.stemmer != "none":
            try:
                import Stemmer
            except ImportError:
                raise MissingDependencyError(
                    "the lexical side needs PyStemmer for its stemmer: pip install 'ctxemb[hybrid]'"
                ) from None
            self._stem = Stemmer.Stemmer(contract.stemmer).stemWords
        self._cache: dict[str, str] = {}

    def terms(self, text: str) -> list[str]:
        """The terms of one text, in order, repeats kept."""
        if self.contract.lowercase:
            text = text.lower()
        words = [w for w in self._find(text) if w not in self._stop]
        if self._stem is None:
            return words
        cache = self._cache
        new = [w for w in set(words) if w not in cache]
        if new:
            cache.update(zip(new, self._stem(new), strict=True))
        return [cache[w] for w in words]

    def canary(self) -> str:
        """``sha256:`` of the terms of :data:`ANALYZER_PROBES` (stamped; compared on open)."""
        terms = [self.terms(text) for text in ANALYZER_PROBES]
        return "sha256:" + hashlib.sha256(json.dumps(terms).encode()).hexdigest()
