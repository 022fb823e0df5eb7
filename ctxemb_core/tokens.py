"""Token vectors and word vectors: what an Embedder gives besides one vector per text.

:class:`TokenEmbeddings` holds one text's contextual token vectors with what each token is
(special, marker, query expansion); :class:`WordVector` is a word type's vector aggregated over
its occurrences. The helpers here pick a batch's tokens, pad queries with mask tokens (ColBERT's
query expansion), apply dense heads per token and aggregate occurrences; the
:class:`~ctxemb_core.Embedder` methods that use them plan the batches and report truncation.

This module sits below :mod:`ctxemb_core.embedder` (which imports it) and never imports it.
"""

from __future__ import annotations

import json
import re
import warnings
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core._batches import with_progress
from ctxemb_core.backends.base import Encoder, TokenBatch
from ctxemb_core.contract import EmbeddingContract, Role
from ctxemb_core.errors import InvalidInputError, TruncationWarning, UnsupportedModelError
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.manifest import is_export
from ctxemb_core.networks import Network, encode
from ctxemb_core.validate import check_text, check_texts

__all__ = [
    "AGGREGATES",
    "PIECES",
    "TokenEmbeddings",
    "TokenVectorsMixin",
    "WordVector",
    "check_batch",
    "embedding_progress",
]

AGGREGATES = ("mean", "median", "max")
# How one occurrence's word-piece vectors become the occurrence's vector.
PIECES = ("mean", "first")

# The default of TokenEmbeddings' flags: replaced by one False per token.
_NO_FLAGS = np.zeros(0, dtype=bool)


@dataclass(frozen=True)
class TokenEmbeddings:
    """The contextual vectors of one text's tokens, with what each token is.

    By default only the text's own tokens are here (no special, prefix or marker tokens);
    :meth:`Embedder.embed_token_batch` can keep special tokens, a marker's tokens and query
    expansion tokens too, each flagged, so a caller (late interaction) decides what to keep.

    Attributes:
        text: the text as given (without the role's prefix or a marker).
        tokens: the token strings.
        offsets: ``(start, end)`` character offsets of each token in ``text``; ``(0, 0)`` for a
            special or marker token, ``(len(text), len(text))`` for an expansion token.
        vectors: ``(len(tokens), width)`` float32 vectors from the hidden layers the
            contract's ``layers`` names (the last layer by default), after the network's dense
            heads when they were asked for.
        truncated: whether the text was cut to the token limit.
        special: per token, whether it is a special token ([CLS], [SEP], <s>, …).
        marker: per token, whether it comes from the marker prepended to the text.
        expansion: per token, whether it is a query expansion (mask) token.
    """

    text: str
    tokens: list[str]
    offsets: list[tuple[int, int]]
    vectors: np.ndarray
    truncated: bool
    special: np.ndarray = field(default_factory=lambda: _NO_FLAGS)
    marker: np.ndarray = field(default_factory=lambda: _NO_FLAGS)
    expansion: np.ndarray = field(default_factory=lambda: _NO_FLAGS)

    def __post_init__(self) -> None:
        # Flags left out mean "none": all False, one per token.
        n = len(self.tokens)
        for name in ("special", "marker", "expansion"):
            value = getattr(self, name)
            flags = np.zeros(n, dtype=bool) if value is _NO_FLAGS else np.asarray(value, bool)
            if flags.shape != (n,):
                raise InvalidInputError(
                    f"TokenEmbeddings.{name} needs one flag per token ({n}), got shape "
                    f"{flags.shape}"
                )
            object.__setattr__(self, name, flags)

    def span(self, start: int, end: int) -> np.ndarray:
        """Indices of the tokens that overlap characters ``start:end`` of the text."""
        return np.array(
            [i for i, (s, e) in enumerate(self.offsets) if s < end and e > start], dtype=int
        )


@dataclass(frozen=True)
class WordVector:
    """A word-type vector derived from the word's occurrences: a statistic, not a model output.

    Two aggregations make it, and both are recorded: ``pieces`` combines the word-piece
    (token) vectors of one occurrence into the occurrence's vector, ``aggregate`` combines the
    occurrences. With a single context the result is that occurrence's vector. It is never a
    text vector: no pooling over the context's other tokens goes into it.

    Attributes:
        word: the word.
        vector: the aggregate of the occurrence vectors.
        aggregate: how occurrences were combined (``"mean"``, ``"median"`` or ``"max"``).
        occurrences: how many occurrences went into it.
        pieces: how each occurrence's word-piece vectors were combined (``"mean"``: the mean
            of the word's word-piece vectors; ``"first"``: its first word piece's vector).
    """

    word: str
    vector: np.ndarray
    aggregate: str
    occurrences: int
    pieces: str = "mean"


class _Picked(NamedTuple):
    """The tokens of one row of a batch that a token call keeps, and what each one is."""

    row: int
    positions: np.ndarray
    tokens: list[str]
    offsets: list[tuple[int, int]]
    special: np.ndarray
    marker: np.ndarray
    expansion: np.ndarray


def _pick_tokens(
    batch: TokenBatch,
    row: int,
    text: str,
    n_prefix: int,
    n_lead: int,
    keep_special: bool,
) -> _Picked:
    """The tokens of ``batch`` row ``row`` (read as ``prefix + marker + text [+ masks]``).

    Dropped: the role prefix's tokens, zero-width tokens, and special ones unless kept. Offsets
    are moved into ``text``; a special or marker token gets ``(0, 0)``, a query expansion token
    (one starting after the text) ``(len(text), len(text))``.
    """
    assert batch.tokens is not None and batch.offsets is not None and batch.special is not None
    real = np.flatnonzero(batch.mask[row])
    end = n_lead + len(text)
    keep: list[int] = []
    tokens: list[str] = []
    offsets: list[tuple[int, int]] = []
    kinds: list[int] = []  # 0 text, 1 special, 2 marker, 3 expansion
    for j, (tok, (s, e), sp) in enumerate(
        zip(batch.tokens[row], batch.offsets[row], batch.special[row], strict=True)
    ):
        if e > s and s >= end:
            kind, where = 3, (len(text), len(text))
        elif sp:
            if not keep_special:
                continue
            kind, where = 1, (0, 0)
        elif s < n_prefix or e <= s:
            continue
        elif s < n_lead:
            kind, where = 2, (0, 0)
        else:
            kind, where = 0, (s - n_lead, e - n_lead)
        keep.append(int(real[j]))
        tokens.append(tok)
        offsets.append(where)
        kinds.append(kind)
    k = np.array(kinds, dtype=np.int8)
    return _Picked(row, np.array(keep, dtype=np.int64), tokens, offsets, k == 1, k == 2, k == 3)


def _expanded(network: Network, texts: list[str], length: int, max_tokens: int) -> list[str]:
    """Each text padded with the tokenizer's mask token up to ``length`` tokens.

    The masks go into the text (so the network reads and attends to them), after a space: a
    text already ``length`` tokens long or longer is left to be cut there.
    """
    tokenizer = network.encoder.tokenizer
    mask = _mask_token(network)
    counts = tokenizer.lengths(texts, length)
    out = [
        t + " " + " ".join([mask] * (length - int(n))) if n < length else t
        for t, n in zip(texts, counts, strict=True)
    ]
    padded = [t for t, n in zip(out, counts, strict=True) if n < length]
    if padded:
        # Read without a cut short of the padding: a mask read as more than one token shows.
        got = tokenizer.lengths(padded, 2 * max(length, max_tokens) + 2)
        if (got != length).any():
            raise UnsupportedModelError(
                f"query expansion: the tokenizer of {network.folder} does not read its mask "
                f"token {mask!r} as one token after a space ({int(got.max())} tokens where "
                f"{length} were planned); use query_length=None for this encoder"
            )
    return out


# Read once per loaded encoder (a new load, of other weights in the same folder, reads again).
_MASK_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _mask_token(network: Network) -> str:
    """The mask token the folder's tokenizer names (``tokenizer_config.json``, else
    ``special_tokens_map.json``), checked to be in its vocabulary."""
    cached = _MASK_TOKENS.get(network.encoder)
    if cached is not None:
        return cached
    if is_export(network.folder):
        # An export keeps the mask token its tokenizer names in its manifest.
        value = network.encoder.tokenizer.mask_token
        if value and network.encoder.tokenizer.tokenizer.token_to_id(value) is not None:
            _MASK_TOKENS[network.encoder] = value
            return value
        raise UnsupportedModelError(
            f"query expansion needs a mask token, and the export in {network.folder} names "
            "none in its vocabulary; use query_length=None for this encoder"
        )
    folder = read_layout(network.folder).transformer
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        value = data.get("mask_token") if isinstance(data, dict) else None
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and value:
            if network.encoder.tokenizer.tokenizer.token_to_id(value) is None:
                break
            _MASK_TOKENS[network.encoder] = value
            return value
    raise UnsupportedModelError(
        f"query expansion needs a mask token, and the tokenizer in {folder} names none in its "
        "vocabulary; use query_length=None for this encoder"
    )


def _apply_dense(network: Network, vectors: np.ndarray) -> np.ndarray:
    """The network's dense heads applied to each row (the rows unchanged if it has none)."""
    for i, head in enumerate(network.dense):
        if vectors.shape[1] != head.weight.shape[0]:
            raise UnsupportedModelError(
                f"dense head {i} of {network.folder} takes vectors of width "
                f"{head.weight.shape[0]}, not the {vectors.shape[1]} the tokens have; its "
                "heads cannot be applied per token"
            )
        vectors = head(vectors)
    return vectors


class TokenVectorsMixin:
    """The token-vector and word-vector calls of :class:`~ctxemb_core.Embedder`.

    Mixed into the Embedder (as sentence-transformers mixes ``FitMixin`` into its model): the
    calls read the Embedder's contract, networks and batch plan, which it sets up.
    """

    # Set by the Embedder: what the calls read.
    contract: EmbeddingContract
    show_progress: bool | None
    last_truncated: int
    _doc: Network
    _query: Network

    def _plan(
        self, encoder: Encoder, texts: list[str], max_tokens: int | None = None
    ) -> list[np.ndarray]:
        raise NotImplementedError  # the Embedder's batch plan

    def embed_tokens(self, text: str, *, role: Role | str = Role.DOCUMENT) -> TokenEmbeddings:
        """The contextual per-token vectors of one text, with tokens and character offsets.

        The role's prefix is applied (the encoder sees what it sees when embedding the text),
        and its tokens are dropped from the result, as are special tokens. The one-text case of
        :meth:`embed_token_batch`.
        """
        text = check_text(text, "text")
        parsed = Role.parse(role, "role")
        return self._token_batch([text], parsed, limit=self.contract.max_tokens, stacklevel=3)[0]

    def embed_token_batch(
        self,
        texts: Sequence[str],
        *,
        role: Role | str = Role.DOCUMENT,
        keep_special: bool = False,
        marker: str = "",
        expand_to: int | None = None,
        dense: bool = False,
    ) -> list[TokenEmbeddings]:
        """The per-token vectors of many texts, batched by token budget, in input order.

        Each text is read as ``prefix(role) + marker + text`` and cut to the contract's
        ``max_tokens``; batches are planned like :meth:`embed_documents`' (by real token
        counts, within ``token_budget``), a progress bar shows on long work and a
        :class:`~ctxemb_core.errors.TruncationWarning` reports cut texts. The role prefix's
        tokens are always dropped; what else is kept is flagged in the result, so late
        interaction can choose (see :class:`TokenEmbeddings`).

        Args:
            texts: the texts.
            role: whose prefix (and, for a DPR-style pair, whose encoder) reads them.
            keep_special: keep the special tokens ([CLS], [SEP], …), flagged ``special``.
            marker: a text read between the role's prefix and each text (ColBERT's ``[Q] ``
                or ``[D] ``); its tokens are kept, flagged ``marker``.
            expand_to: cut each text at this many tokens (every token the encoder reads,
                prefix and special tokens included) and pad shorter ones up to it with the
                tokenizer's mask token (ColBERT's query expansion). The mask tokens are read
                by the network like the text's (it attends to them) and kept, flagged
                ``expansion``. ``None``: no expansion, the contract's ``max_tokens``.
            dense: apply the network's dense heads (a sentence-transformers folder's ``Dense``
                modules, ColBERT's linear projection) to every token vector, so each has the
                contract's ``dimension``; without heads the vectors are unchanged.

        Raises:
            InvalidInputError: not a non-empty batch of texts, a marker that is not text, an
                ``expand_to`` outside ``1..max_tokens``.
            UnsupportedModelError: ``expand_to`` with a tokenizer that has no mask token, or
                does not read it as one token.

        Example:
            >>> toks = emb.embed_token_batch(["a cat", "a dog"], keep_special=True)
            >>> toks[0].tokens, toks[0].special.tolist()  # doctest: +SKIP
            (['[CLS]', 'a', 'cat', '[SEP]'], [True, False, False, True])
        """
        texts = check_batch(texts)
        parsed = Role.parse(role, "role")
        marker = check_text(marker, "marker")
        limit = self.contract.max_tokens
        if expand_to is not None:
            if isinstance(expand_to, bool) or not isinstance(expand_to, int):
                raise InvalidInputError(f"expand_to must be an integer, got {expand_to!r}")
            if not 1 <= expand_to <= limit:
                raise InvalidInputError(
                    f"expand_to={expand_to} is out of range; valid values are 1..{limit} "
                    "(the contract's max_tokens)"
                )
            limit = expand_to
        return self._token_batch(
            texts,
            parsed,
            keep_special=bool(keep_special),
            marker=marker,
            limit=limit,
            expand=expand_to is not None,
            dense=bool(dense),
            stacklevel=3,
        )

    def _token_batch(
        self,
        texts: list[str],
        role: Role,
        *,
        limit: int,
        keep_special: bool = False,
        marker: str = "",
        expand: bool = False,
        dense: bool = False,
        stacklevel: int,
    ) -> list[TokenEmbeddings]:
        remote = getattr(self, "remote", None)
        if remote is not None:
            raise InvalidInputError(
                f"token vectors are not served over HTTP: this embedder embeds through "
                f"{remote.url}. Build an Embedder where the model folder is for token vectors, "
                "word vectors or late-interaction reranking"
            )
        network = self._query if role is Role.QUERY else self._doc
        encoder = network.encoder
        prefix = self.contract.prefix(role)
        lead = prefix + marker
        read = [lead + t for t in texts]
        if expand:
            read = _expanded(network, read, limit, self.contract.max_tokens)
        out: list[TokenEmbeddings | None] = [None] * len(read)
        truncated = 0
        for idx in embedding_progress(
            self._plan(encoder, read, limit), len(read), self.show_progress
        ):
            batch = encode(
                encoder, [read[i] for i in idx], limit, self.contract.layers, with_tokens=True
            )
            truncated += int(batch.truncated.sum())
            rows = _token_rows(
                network,
                batch,
                [texts[i] for i in idx],
                len(prefix),
                len(lead),
                keep_special=keep_special,
                dense=dense,
            )
            for i, toks in zip(idx, rows, strict=True):
                out[i] = toks
        self.last_truncated = truncated
        if truncated:
            warnings.warn(TruncationWarning(truncated, len(read), limit), stacklevel=stacklevel)
        return [t for t in out if t is not None]

    def word_vector(
        self,
        word: str,
        contexts: Sequence[str],
        aggregate: str = "mean",
        *,
        pieces: str = "mean",
    ) -> WordVector:
        """A vector for a word type, aggregated over its occurrences in ``contexts``.

        A contextual model has no single vector per word: each occurrence has its own, computed
        from the text it sits in. This derives one in two recorded steps: each occurrence's
        vector combines the word's word-piece vectors from :meth:`embed_tokens` (``pieces``),
        and the occurrences are combined (``aggregate``). Pass one context for the vector of
        one occurrence. A static model's word-piece vectors are its table's rows, the same in
        every context, so there every occurrence of a word has the same vector.

        Args:
            word: the word, matched case-insensitively as a whole word.
            contexts: the texts it occurs in.
            aggregate: how occurrences are combined: ``"mean"``, ``"median"`` or ``"max"``.
            pieces: how one occurrence's word-piece vectors are combined: ``"mean"`` (the mean
                of the word's word-piece vectors) or ``"first"`` (its first word piece's).

        Returns:
            A :class:`WordVector` that states both aggregations and the occurrence count.

        Raises:
            InvalidInputError: the word is empty, ``aggregate`` or ``pieces`` is unknown, or the
                word occurs in none of the contexts.
        """
        word = check_text(word, "word")
        _check_word_options(word, aggregate, pieces)
        contexts = check_batch(contexts, "contexts")
        pattern = _word_pattern(word)
        found = []
        for context in contexts:
            matches = list(pattern.finditer(context))
            if matches:
                found += _occurrence_vectors(self.embed_tokens(context), matches, pieces)
        return _word_vector_of(word, found, aggregate, pieces, len(contexts))


def check_batch(texts: Any, what: str = "texts") -> list[str]:
    """A batch of an Embedder call as a new list of plain, encodable strs (an empty one is
    refused; rules in :mod:`ctxemb_core.validate`)."""
    if what == "texts":
        single = "use embed_query for a single query or wrap it in a list"
    else:
        single = "wrap a single text in a list"
    return check_texts(texts, what, single=single, allow_empty=False)


def embedding_progress(
    batches: list[np.ndarray], total: int, show: bool | None
) -> Iterable[np.ndarray]:
    """The batches of an Embedder call, on a progress bar when ``show`` (or a long call) asks."""
    return with_progress(batches, total, show, unit="text", desc="embedding")


def _token_rows(
    network: Network,
    batch: TokenBatch,
    texts: Sequence[str],
    n_prefix: int,
    n_lead: int,
    *,
    keep_special: bool,
    dense: bool,
) -> list[TokenEmbeddings]:
    """The :class:`TokenEmbeddings` of each row of ``batch``, read as ``texts`` (one per row).

    Args:
        network: the network that encoded the batch (its tokenizer, its dense heads).
        batch: the encoder's output, with tokens.
        texts: the texts of the rows as given (without prefix or marker).
        n_prefix: characters of the role's prefix at the start of each row's input.
        n_lead: characters of the prefix and the marker together.
        keep_special: keep special tokens (flagged).
        dense: apply the network's dense heads to every token vector.
    """
    rows, picked = [], []
    for row, text in enumerate(texts):
        picked.append(_pick_tokens(batch, row, text, n_prefix, n_lead, keep_special))
        rows.append(np.full(len(picked[-1].positions), row))
    flat = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    positions = np.concatenate([p.positions for p in picked])
    vectors = batch.hidden[flat, positions].astype(np.float32)
    if dense:
        vectors = _apply_dense(network, vectors)
    ends = np.cumsum([len(p.positions) for p in picked])[:-1]
    return [
        TokenEmbeddings(
            text,
            p.tokens,
            p.offsets,
            v,
            bool(batch.truncated[p.row]),
            special=p.special,
            marker=p.marker,
            expansion=p.expansion,
        )
        for text, p, v in zip(texts, picked, np.split(vectors, ends), strict=True)
    ]


def _check_word_options(word: str, aggregate: str, pieces: str) -> None:
    """Refuse an empty word, or an ``aggregate`` or ``pieces`` that is not known."""
    if not word.strip():
        raise InvalidInputError("word must not be empty")
    if aggregate not in AGGREGATES:
        raise InvalidInputError(
            f"aggregate={aggregate!r} is not valid; valid values are {AGGREGATES}"
        )
    if pieces not in PIECES:
        raise InvalidInputError(f"pieces={pieces!r} is not valid; valid values are {PIECES}")


def _word_pattern(word: str) -> re.Pattern[str]:
    """The word matched case-insensitively as a whole word."""
    return re.compile(rf"(?<!\w){re.escape(word.strip())}(?!\w)", re.IGNORECASE)


def _occurrence_vectors(
    toks: TokenEmbeddings, matches: Sequence[re.Match[str]], pieces: str
) -> list[np.ndarray]:
    """One vector per occurrence of the word (``matches`` in ``toks.text``) that has tokens."""
    found = []
    for m in matches:
        idx = toks.span(m.start(), m.end())
        if len(idx):
            rows = toks.vectors[idx]
            found.append(rows[0] if pieces == "first" else rows.mean(axis=0))
    return found


def _word_vector_of(
    word: str, found: list[np.ndarray], aggregate: str, pieces: str, contexts: int
) -> WordVector:
    """The :class:`WordVector` of the occurrence vectors ``found`` in ``contexts`` texts."""
    if not found:
        raise InvalidInputError(f"{word!r} occurs in none of the {contexts} contexts")
    stack = np.stack(found)
    if aggregate == "median":
        vector = np.median(stack, axis=0)
    elif aggregate == "max":
        vector = stack.max(axis=0)
    else:
        vector = stack.mean(axis=0)
    return WordVector(word, vector.astype(np.float32), aggregate, len(found), pieces)
