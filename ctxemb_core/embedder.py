"""The embedder: one contract, both roles, the same path for every text."""

from __future__ import annotations

import json
import re
import threading
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core._batches import plan_batches, with_progress
from ctxemb_core._validate import check_text, check_texts
from ctxemb_core.backends import load_encoder
from ctxemb_core.backends._tokenize import Tokenizer
from ctxemb_core.backends.base import Encoder, TokenBatch
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.contract import LAST_LAYER, EmbeddingContract, Role, layer_terms
from ctxemb_core.errors import (
    ContractMismatchError,
    CtxembError,
    CtxembWarning,
    DataFormatError,
    InvalidInputError,
    MissingDependencyError,
    TruncationWarning,
    UnsupportedModelError,
)
from ctxemb_core.folders.digests import weights_digest
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.locate import locate_model
from ctxemb_core.folders.manifest import is_export, read_manifest
from ctxemb_core.folders.static import is_static_folder
from ctxemb_core.pooling import DenseHead, l2_normalize, pool, quantize
from ctxemb_core.resolve import check_fits, export_contract

__all__ = ["Embedder", "TokenEmbeddings", "WordVector"]


# Loaded networks, keyed by the weights digest (the part of the fingerprint that names the
# network), backend and device: never by name. Contracts that differ only in pooling, prefixes
# or normalisation share one loaded network.
class _Network(NamedTuple):
    encoder: Encoder
    dense: tuple[DenseHead, ...]
    folder: Path
    # What the loaded network emits (after its dense heads), and the most tokens it has
    # positions for: every contract served from the cache is checked against both.
    dimension: int
    max_positions: int | None
    # What the embedding cache adds to the backend's name: the digest of an export's graph,
    # tokenizer and heads, so that a cache hit is always what this very export computes.
    label: str = ""


_ENCODERS: dict[tuple[str, str, str], _Network] = {}
_ENCODERS_LOCK = threading.Lock()

_AGGREGATES = ("mean", "median", "max")
# How one occurrence's word-piece vectors become the occurrence's vector.
_PIECES = ("mean", "first")

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


class Embedder:
    """Embeds texts exactly as one contract says, for documents and for queries.

    The role decides the prefix, so a query can never be embedded with the document prefix; the
    pooling, dense head, Matryoshka truncation, normalisation and precision follow the contract.

    Args:
        contract: the recipe, usually from :func:`ctxemb_core.contract_for`.
        path: the model folder; found from the contract (its weights digest or name) if omitted.
        query_path: the folder of a separate query encoder, for contracts that have one.
        backend: ``"auto"`` (ONNX Runtime when it is installed and the model exports, else
            torch, with a :class:`~ctxemb_core.errors.CtxembWarning` that says why: ONNX
            measured 1.95x sentence-transformers' documents/s and a third of its
            single-query latency on 2 CPU cores, see benchmarks/throughput.py), ``"onnx"`` or
            ``"torch"``. A static model's folder (a lookup table, no network) is served by
            ``"static"`` (numpy), which ``"auto"`` picks for it and ``"onnx"``/``"torch"`` refuse.
            Not part of the fingerprint: the stamp's canary proves a backend
            reproduces the vectors.
        device: where the network runs (``"cpu"``).
        batch_size: the most texts in one forward pass.
        token_budget: the most padded tokens in one forward pass; long texts go in smaller
            batches, short ones in larger (up to ``batch_size``). On 2 CPU cores both backends
            ran fastest at 512-2,048 (MiniLM, SciFact: 2,048 was 7 % faster than 8,192 on
            ONNX and 13 % on torch; shapes that fit the CPU caches beat fewer, larger calls).
        show_progress: a progress bar on long batches; ``None`` shows one for 1,000 texts or more
            when stderr is a terminal.
        cache: an :class:`~ctxemb_core.cache.EmbeddingCache`; texts already embedded under this
            contract and role are read from it instead of being encoded again.

    Example:
        >>> from ctxemb_core import Embedder, contract_for
        >>> emb = Embedder(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
        >>> emb.embed_query("hello").shape
        (384,)
        >>> emb.embed_documents(["a cat", "a dog"]).shape
        (2, 384)
    """

    def __init__(
        self,
        contract: EmbeddingContract,
        *,
        path: str | Path | None = None,
        query_path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 64,
        token_budget: int = 2048,
        show_progress: bool | None = None,
        cache: EmbeddingCache | None = None,
    ) -> None:
        if not isinstance(contract, EmbeddingContract):
            raise InvalidInputError(
                "Embedder needs an EmbeddingContract (see contract_for), got "
                f"{type(contract).__name__}"
            )
        for name, value in (("batch_size", batch_size), ("token_budget", token_budget)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
        self.contract = contract
        #: The backend asked for (``"auto"``, ``"onnx"`` or ``"torch"``), kept for :meth:`config`.
        self.requested_backend = backend
        self.device = device
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.show_progress = show_progress
        self.cache = cache
        #: How many texts the last call truncated to ``max_tokens``.
        self.last_truncated = 0
        #: The backend in use (``"auto"`` resolved to ``"onnx"``, ``"torch"`` or ``"static"``).
        self.backend: str
        self.backend, self._doc = _load_auto(
            contract, contract.model, contract.weights, path, backend, device
        )
        # The backend is not in the fingerprint; keep each backend's vectors apart in the cache
        # so a hit is always bit-identical to what this embedder would compute.
        self._cache_key = f"{contract.fingerprint}:{self.backend}{self._doc.label}"
        if contract.query_model is not None and contract.query_weights is not None:
            self._query = _load(
                contract,
                contract.query_model,
                contract.query_weights,
                query_path,
                self.backend,
                device,
            )
        else:
            self._query = self._doc

    def __repr__(self) -> str:
        return f"Embedder({self.contract.describe()}, backend={self.backend!r})"

    @property
    def fingerprint(self) -> str:
        """The contract's fingerprint."""
        return self.contract.fingerprint

    @property
    def model_path(self) -> Path:
        """The local folder of the (document) encoder; machine-specific, never fingerprinted."""
        return self._doc.folder

    # -- serialisation -----------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """JSON-ready settings :meth:`from_config` rebuilds this embedder from.

        What every framework's ``to_dict`` stores: the whole contract, where its model folders
        were found on this machine (a hint: the weights digest decides, never the path), and
        the run settings. The cache is not part of it (it is a local resource).

        Example:
            >>> config = json.loads(json.dumps(embedder.config()))  # doctest: +SKIP
            >>> Embedder.from_config(config).contract == embedder.contract  # doctest: +SKIP
            True
        """
        return self.config_for(
            self.contract,
            path=self._doc.folder,
            query_path=self._query.folder if self._query is not self._doc else None,
            backend=self.requested_backend,
            device=self.device,
            batch_size=self.batch_size,
            token_budget=self.token_budget,
        )

    @staticmethod
    def config_for(
        contract: EmbeddingContract,
        *,
        path: str | Path | None = None,
        query_path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 64,
        token_budget: int = 2048,
    ) -> dict[str, Any]:
        """The :meth:`config` of an embedder not built yet (nothing is loaded).

        For a framework component that builds its embedder lazily: the model folders are
        located (not read) when no path is given, and a folder that cannot be located yet is
        left out (``None``); :meth:`from_config` then finds the model as any contract's.
        """
        if not isinstance(contract, EmbeddingContract):
            raise InvalidInputError(
                f"config_for needs an EmbeddingContract, got {type(contract).__name__}"
            )
        return {
            "contract": contract.to_dict(),
            "path_hint": _hint(path, contract.model, contract.weights),
            "query_path_hint": (
                _hint(query_path, contract.query_model, contract.query_weights)
                if contract.query_model is not None
                else None
            ),
            "backend": backend,
            "device": device,
            "batch_size": batch_size,
            "token_budget": token_budget,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any], **options: Any) -> Embedder:
        """Rebuild an embedder from :meth:`config` (``options`` override its run settings).

        A path hint is used only when the folder there has the contract's weights digest;
        otherwise the model is found as any contract's is (bundled, registered, by digest).

        Raises:
            DataFormatError: not a mapping, no contract, or keys :meth:`config` does not write.
        """
        if not isinstance(config, Mapping) or not isinstance(config.get("contract"), Mapping):
            raise DataFormatError(
                "an Embedder config is a mapping with a 'contract' (see Embedder.config()), got "
                f"{type(config).__name__}"
            )
        unknown = sorted(set(config) - set(_CONFIG_KEYS))
        if unknown:
            raise DataFormatError(
                f"unknown Embedder config keys {unknown}; the keys are {sorted(_CONFIG_KEYS)}"
            )
        contract = EmbeddingContract.from_dict(dict(config["contract"]))
        settings = {k: config[k] for k in _CONFIG_KEYS[3:] if k in config}
        path = _hinted(config.get("path_hint"), contract.weights)
        query_path = None
        if contract.query_weights is not None:
            query_path = _hinted(config.get("query_path_hint"), contract.query_weights)
        return cls(contract, path=path, query_path=query_path, **{**settings, **options})

    @classmethod
    def from_export(cls, directory: str | Path, **options: Any) -> Embedder:
        """The embedder of a folder :func:`ctxemb_core.export.export_model` wrote.

        It needs only numpy, ``tokenizers`` and onnxruntime (no torch, transformers or onnx):
        every file is checked against the export's manifest before it is served, and the
        contract is the one the folder was exported under (same fingerprint, so indexes
        stamped through any backend open through it).

        Args:
            directory: the export's folder.
            options: run settings, as for :class:`Embedder` (``batch_size``, ``cache``, …);
                ``backend`` may be ``"auto"`` or ``"onnx"``.

        Raises:
            ModelNotFoundError: ``directory`` is not an export.
            MalformedModelError: a file of the export is missing or not the one exported.

        Example:
            >>> emb = Embedder.from_export("minilm-export")  # doctest: +SKIP
            >>> emb.embed_query("hello").shape  # doctest: +SKIP
            (384,)
        """
        if "path" in options or "query_path" in options:
            raise InvalidInputError("from_export takes the folder as directory, not path=")
        contract = export_contract(directory)
        return cls(contract, path=directory, **options)

    # -- text vectors ------------------------------------------------------------------------

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents (with the document prefix); ``(len(texts), output_dim)``."""
        return self._embed(_check_texts(texts), Role.DOCUMENT)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed queries (with the query prefix); ``(len(texts), output_dim)``."""
        return self._embed(_check_texts(texts), Role.QUERY)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query; ``(output_dim,)``."""
        text = _check_text(text, "text")
        return self._embed([text], Role.QUERY)[0]

    def embed(self, texts: Sequence[str], role: Role | str) -> np.ndarray:
        """Embed texts under an explicit role (what adapters with a role argument call)."""
        return self._embed(_check_texts(texts), Role.parse(role, "role"))

    def _embed(self, texts: list[str], role: Role) -> np.ndarray:
        # One TruncationWarning per public call, for every text it cut (the cache's misses
        # and every batch summed), pointing at the caller's line.
        if self.cache is None:
            vectors = self._embed_float(texts, role)
            self._warn_truncated(len(texts), stacklevel=4)
            return quantize(vectors, self.contract.precision)
        cut, encoded = 0, 0  # only the texts encoded now, however the cache asks for them

        def compute(missing: list[str]) -> np.ndarray:
            nonlocal cut, encoded
            computed = self._embed_float(missing, role)
            cut, encoded = cut + self.last_truncated, encoded + len(missing)
            return computed

        vectors = self.cache.get_or_compute(self._cache_key, role, texts, compute)
        self.last_truncated = cut
        self._warn_truncated(encoded, stacklevel=4)
        return quantize(vectors, self.contract.precision)

    def embed_float(
        self, texts: Sequence[str], role: Role | str, *, warn: bool = True
    ) -> np.ndarray:
        """The contract's vectors before the precision step (what the stamp's canary holds).

        ``warn=False`` raises no :class:`~ctxemb_core.errors.TruncationWarning`: for texts that
        are not the caller's input (stored records re-embedded to verify an index), whose
        truncation would otherwise be reported as if the caller's own texts were cut.
        """
        texts = check_texts(texts)  # public too (stamp, guard): checked here, an empty batch ok
        vectors = self._embed_float(texts, Role.parse(role, "role"))
        if warn:
            self._warn_truncated(len(texts), stacklevel=3)
        return vectors

    def _warn_truncated(self, total: int, *, stacklevel: int) -> None:
        if self.last_truncated:
            warnings.warn(
                TruncationWarning(self.last_truncated, total, self.contract.max_tokens),
                stacklevel=stacklevel,
            )

    def _embed_float(self, texts: list[str], role: Role) -> np.ndarray:
        """:meth:`embed_float` without its checks and warning; sets :attr:`last_truncated`."""
        c = self.contract
        network = self._query if role is Role.QUERY else self._doc
        encoder, dense = network.encoder, network.dense
        prefix = c.prefix(role)
        prefixed = [prefix + t for t in texts] if prefix else list(texts)
        # include_prompt=False: the prefix's tokens are read by the network but not pooled.
        skip = 0 if c.include_prompt or not prefix else _prompt_tokens(encoder.tokenizer, prefix, c)
        out = np.empty((len(prefixed), c.output_dim), dtype=np.float32)
        truncated = 0
        batches = self._plan(encoder, prefixed)
        for idx in _progress(batches, len(prefixed), self.show_progress):
            batch = _encode(encoder, [prefixed[i] for i in idx], c.max_tokens, c.layers)
            truncated += int(batch.truncated.sum())
            vectors = pool(batch.hidden, batch.mask, c.pooling, skip=skip)
            for head in dense:
                vectors = head(vectors)
            if c.truncate_dim is not None:
                vectors = vectors[:, : c.truncate_dim]
            if c.normalize:
                vectors = l2_normalize(vectors)
            out[idx] = vectors
        self.last_truncated = truncated
        return out

    def _plan(
        self, encoder: Encoder, texts: list[str], max_tokens: int | None = None
    ) -> list[np.ndarray]:
        """Index batches: by token length, longest first, each within the token budget.

        Sorting by real token counts and filling each batch up to ``token_budget`` padded
        tokens (at most ``batch_size`` texts) keeps padding low on corpora of mixed lengths;
        results are written back by index, so the output order is always the input order.
        """
        if len(texts) == 1:
            return [np.zeros(1, dtype=np.int64)]
        limit = self.contract.max_tokens if max_tokens is None else max_tokens
        lengths = encoder.tokenizer.lengths(texts, limit)
        return plan_batches(lengths, self.batch_size, self.token_budget)

    # -- token vectors -----------------------------------------------------------------------

    def embed_tokens(self, text: str, *, role: Role | str = Role.DOCUMENT) -> TokenEmbeddings:
        """The contextual per-token vectors of one text, with tokens and character offsets.

        The role's prefix is applied (the encoder sees what it sees when embedding the text),
        and its tokens are dropped from the result, as are special tokens. The one-text case of
        :meth:`embed_token_batch`.
        """
        text = _check_text(text, "text")
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
        texts = _check_texts(texts)
        parsed = Role.parse(role, "role")
        marker = _check_text(marker, "marker")
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
        network = self._query if role is Role.QUERY else self._doc
        encoder = network.encoder
        prefix = self.contract.prefix(role)
        lead = prefix + marker
        read = [lead + t for t in texts]
        if expand:
            read = _expanded(network, read, limit, self.contract.max_tokens)
        out: list[TokenEmbeddings | None] = [None] * len(read)
        truncated = 0
        for idx in _progress(self._plan(encoder, read, limit), len(read), self.show_progress):
            batch = _encode(
                encoder, [read[i] for i in idx], limit, self.contract.layers, with_tokens=True
            )
            truncated += int(batch.truncated.sum())
            rows, picked = [], []
            for row, i in enumerate(idx):
                picked.append(
                    _pick_tokens(batch, row, texts[i], len(prefix), len(lead), keep_special)
                )
                rows.append(np.full(len(picked[-1].positions), row))
            flat = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
            positions = np.concatenate([p.positions for p in picked])
            vectors = batch.hidden[flat, positions].astype(np.float32)
            if dense:
                vectors = _apply_dense(network, vectors)
            ends = np.cumsum([len(p.positions) for p in picked])[:-1]
            for i, p, v in zip(idx, picked, np.split(vectors, ends), strict=True):
                out[i] = TokenEmbeddings(
                    texts[i],
                    p.tokens,
                    p.offsets,
                    v,
                    bool(batch.truncated[p.row]),
                    special=p.special,
                    marker=p.marker,
                    expansion=p.expansion,
                )
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
        word = _check_text(word, "word")
        if not word.strip():
            raise InvalidInputError("word must not be empty")
        if aggregate not in _AGGREGATES:
            raise InvalidInputError(
                f"aggregate={aggregate!r} is not valid; valid values are {_AGGREGATES}"
            )
        if pieces not in _PIECES:
            raise InvalidInputError(f"pieces={pieces!r} is not valid; valid values are {_PIECES}")
        contexts = _check_texts(contexts, "contexts")
        pattern = re.compile(rf"(?<!\w){re.escape(word.strip())}(?!\w)", re.IGNORECASE)
        found = []
        for context in contexts:
            matches = list(pattern.finditer(context))
            if not matches:
                continue
            toks = self.embed_tokens(context)
            for m in matches:
                idx = toks.span(m.start(), m.end())
                if len(idx):
                    rows = toks.vectors[idx]
                    found.append(rows[0] if pieces == "first" else rows.mean(axis=0))
        if not found:
            raise InvalidInputError(f"{word!r} occurs in none of the {len(contexts)} contexts")
        stack = np.stack(found)
        if aggregate == "median":
            vector = np.median(stack, axis=0)
        elif aggregate == "max":
            vector = stack.max(axis=0)
        else:
            vector = stack.mean(axis=0)
        return WordVector(word, vector.astype(np.float32), aggregate, len(found), pieces)


# -- helpers ---------------------------------------------------------------------------------


# The first three locate the network; the rest are run settings passed to __init__.
_CONFIG_KEYS = (
    "contract",
    "path_hint",
    "query_path_hint",
    "backend",
    "device",
    "batch_size",
    "token_budget",
)


def _hint(path: str | Path | None, model: str, weights: str | None) -> str | None:
    """Where a model folder is (``path`` as given, else located), or ``None`` if not found."""
    if path is not None:
        return str(path)
    try:
        return str(locate_model(model, weights))
    except CtxembError:
        return None


def _hinted(hint: Any, weights: str) -> Path | None:
    """The hinted folder if it holds exactly these weights, else ``None`` (found another way)."""
    if not isinstance(hint, str) or not hint:
        return None
    folder = Path(hint)
    try:
        if is_export(folder):
            # Verified in full when it is loaded; here only whose weights it says it holds.
            return folder if read_manifest(folder).contract.weights == weights else None
        if folder.is_dir() and weights_digest(folder) == weights:
            return folder
    except CtxembError:
        pass  # a folder that changed or broke since: the hint is only a hint
    return None


class _BackendFailed(Exception):
    """The backend could not load a network the folder and contract are fine for."""


def _load_auto(
    contract: EmbeddingContract,
    model: str,
    weights: str,
    path: str | Path | None,
    backend: str,
    device: str,
) -> tuple[str, _Network]:
    """Load with the backend asked for; ``"auto"`` prefers ONNX Runtime and falls back to torch.

    Any failure of the onnx backend (no onnxruntime, a model no export reproduces, a cached
    export that cannot be made again) falls back with a warning that says why; a failure of the
    contract or the folder is raised, since torch would refuse it too. A quantised contract has
    nothing to fall back to: torch does not run int8 weights. A static model's folder is served
    by the ``"static"`` backend.
    """
    static = _load_static(contract, model, weights, path, backend, device)
    if static is not None:
        return "static", static
    if backend != "auto":
        return backend, _load(contract, model, weights, path, backend, device)
    if device == "cpu":
        try:
            return "onnx", _load(contract, model, weights, path, "onnx", device, fallible=True)
        except _BackendFailed as failed:
            error = failed.__cause__
            if contract.quantization is not None and isinstance(error, BaseException):
                raise error from None
            if not _torch_installed():
                # Nothing to fall back to: one error saying what to install, not a warning
                # about the onnx path followed by the torch backend's own import error.
                raise MissingDependencyError(
                    f"embedding with the model folder of {model} needs torch and transformers, "
                    "which the base install leaves out (it serves exports): pip install "
                    "'ctxemb[torch]' (after pip install torch==2.13.0, the CPU build). To serve "
                    "without them, export the model where torch is installed, "
                    "ctxemb_core.export.export_model(contract, DIR), and use "
                    "Embedder.from_export(DIR) here",
                    cli=f"embedding with the model folder of {model} needs torch and "
                    "transformers, which the base install leaves out: pip install "
                    "'ctxemb[torch]'. To serve without them, run ctxemb export MODEL DIR where "
                    "torch is installed and pass --model DIR here",
                ) from None
            reason = (weights, type(error).__name__)
            with _ENCODERS_LOCK:
                first = reason not in _FALLBACKS_WARNED
                _FALLBACKS_WARNED.add(reason)
            if first:  # once per network and reason in a process, not once per Embedder
                warnings.warn(
                    CtxembWarning(
                        f"backend='auto': the onnx backend cannot serve {model} "
                        f"({type(error).__name__}: {error}); the torch backend serves it "
                        "instead (same network, slower). Pass backend='torch' to choose it, "
                        "or backend='onnx' to raise."
                    ),
                    stacklevel=3,
                )
    return "torch", _load(contract, model, weights, path, "torch", device)


def _load_static(
    contract: EmbeddingContract,
    model: str,
    weights: str,
    path: str | Path | None,
    backend: str,
    device: str,
) -> _Network | None:
    """The lookup table of a static model's folder, or ``None`` when the folder is a network's.

    Raises:
        UnsupportedModelError: ``backend="onnx"``/``"torch"`` for a static folder (there is no
            network to run), or ``backend="static"`` for a network's folder.
    """
    from ctxemb_core.backends.static import StaticEncoder

    key = (weights, "static", device)
    if path is None and backend in ("auto", "static"):
        with _ENCODERS_LOCK:
            cached = _ENCODERS.get(key)
        if cached is not None:
            return _fits(contract, cached)
    try:
        folder = locate_model(path) if path is not None else locate_model(model, weights)
    except CtxembError:
        if backend == "static":
            raise
        return None  # the network's path says what is missing
    if not is_static_folder(folder):
        if backend == "static":
            raise UnsupportedModelError(
                f"backend='static' serves static models (a lookup table in model2vec's format); "
                f"{folder} holds a network: use backend='auto', 'onnx' or 'torch'"
            )
        return None
    if backend not in ("auto", "static"):
        raise UnsupportedModelError(
            f"{model} is a static model (a lookup table, no network): backend={backend!r} has "
            "nothing to run. It is served by backend='static' (numpy), which backend='auto' "
            "picks for it"
        )
    encoder = StaticEncoder(folder, device=device)
    if encoder.weights != weights:
        # The folder found is not the table the contract pins: same name, other files.
        raise ContractMismatchError(
            contract, contract.with_(weights=encoder.weights), folder=folder
        )
    network = _Network(encoder, (), folder, encoder.hidden_size, None)
    check_fits(contract, network.dimension, network.max_positions, folder)
    with _ENCODERS_LOCK:
        return _ENCODERS.setdefault(key, network)


#: (weights digest, error type) pairs whose fall-back to torch was already reported.
_FALLBACKS_WARNED: set[tuple[str, str]] = set()


def _torch_installed() -> bool:
    """Whether torch and transformers can be imported (looked up, not imported)."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
    except (ImportError, ValueError):
        return False


def _load(
    contract: EmbeddingContract,
    model: str,
    weights: str,
    path: str | Path | None,
    backend: str,
    device: str,
    *,
    fallible: bool = False,
) -> _Network:
    """The network the contract pins, loaded once per weights digest, backend and device.

    Args:
        fallible: raise a failure of the backend itself as :class:`_BackendFailed` (from the
            original error), for ``"auto"`` to fall back on.
    """
    # The quantised network is another network: it gets its own place in the cache.
    quant = f"+{contract.quantization.value}" if contract.quantization else ""
    key = (weights, backend + quant, device)
    if path is None:
        with _ENCODERS_LOCK:
            cached = _ENCODERS.get(key)
        if cached is not None:
            # Loaded from bytes whose digest was checked when they were read; the contract
            # asking for it now may still be one the network cannot serve.
            return _fits(contract, cached)
    folder = locate_model(path) if path is not None else locate_model(model, weights)
    if is_export(folder):
        if backend == "onnx" or path is not None:
            return _load_export(contract, folder, weights, backend, device)
        # An export registered for these weights serves onnxruntime only; torch needs the
        # model folder, which may still be found by the model's name (bundled, hub cache).
        folder = _model_folder(model, folder)
        if is_export(folder):
            return _load_export(contract, folder, weights, backend, device)
    layout = read_layout(folder)
    actual = weights_digest(layout)
    if actual != weights:
        # The folder found is not the network the contract pins: same name, other weights.
        field = "weights" if weights == contract.weights else "query_weights"
        raise ContractMismatchError(contract, contract.with_(**{field: actual}), folder=folder)
    with _ENCODERS_LOCK:
        cached = _ENCODERS.get(key)
    if cached is not None:
        return _fits(contract, cached)
    # What the folder says, checked before a load that may cost an export.
    check_fits(contract, layout.dimension, layout.max_positions, folder)
    quantization = contract.quantization.value if contract.quantization else None
    try:
        encoder = load_encoder(layout.transformer, backend, device, quantization)
        if contract.layers != LAST_LAYER:
            # Now, where "auto" can still fall back: the onnx backend exports the graph of
            # every hidden state on its first use, and a layer the network lacks is refused.
            _encode(encoder, ["layers"], contract.max_tokens, contract.layers)
    except Exception as exc:
        if fallible:
            raise _BackendFailed() from exc
        raise
    dense = tuple(DenseHead(d.path, d.activation) for d in layout.dense)
    width = dense[-1].weight.shape[1] if dense else encoder.hidden_size
    network = _Network(encoder, dense, folder, int(width), layout.max_positions)
    check_fits(contract, network.dimension, network.max_positions, folder)
    with _ENCODERS_LOCK:
        return _ENCODERS.setdefault(key, network)


def _load_export(
    contract: EmbeddingContract, folder: Path, weights: str, backend: str, device: str
) -> _Network:
    """The network of a ctxemb export folder (onnxruntime only), loaded once per folder."""
    from ctxemb_core.backends.exported import ExportEncoder

    if contract.layers != LAST_LAYER:
        raise UnsupportedModelError(
            f"{folder} is a ctxemb export, which serves its network's last layer only; "
            f"layers={contract.layers!r} needs the model folder it was exported from "
            "(Embedder(contract, path=<model folder>), backend 'torch' or 'onnx')"
        )
    if backend != "onnx" or device != "cpu":
        raise UnsupportedModelError(
            f"{folder} is a ctxemb export, served by onnxruntime on the CPU (backend='auto' or "
            f"'onnx', device='cpu'); backend={backend!r}, device={device!r} needs the model "
            "folder it was exported from"
        )
    quant = f"+{contract.quantization.value}" if contract.quantization else ""
    key = (weights, f"export{quant}:{folder}", device)
    with _ENCODERS_LOCK:
        cached = _ENCODERS.get(key)
    if cached is not None:
        return _fits(contract, cached)
    encoder = ExportEncoder(folder, device=device)  # every file checked against the manifest
    served = encoder.contract
    if encoder.weights != weights or served.quantization != contract.quantization:
        # Another network than the contract pins, or its int8 twin where float was asked for.
        field = "weights" if weights == contract.weights else "query_weights"
        raise ContractMismatchError(
            contract,
            contract.with_(**{field: encoder.weights, "quantization": served.quantization}),
            folder=folder,
        )
    network = _Network(
        encoder,
        encoder.dense,
        folder,
        encoder.dimension,
        encoder.max_positions,
        label=f":export:{encoder.network_digest[:16]}",
    )
    check_fits(contract, network.dimension, network.max_positions, folder)
    with _ENCODERS_LOCK:
        return _ENCODERS.setdefault(key, network)


def _model_folder(model: str, export: Path) -> Path:
    """The folder ``model`` names when it is not an export, else ``export`` (refused later)."""
    try:
        folder = locate_model(model)
    except CtxembError:
        return export
    return export if is_export(folder) else folder


def _encode(
    encoder: Encoder,
    texts: list[str],
    max_tokens: int,
    layers: str,
    *,
    with_tokens: bool = False,
) -> TokenBatch:
    """The encoder's token vectors from the hidden layers a contract's ``layers`` names."""
    if layers == LAST_LAYER:
        return encoder.encode(texts, max_tokens, with_tokens=with_tokens)
    # Backends that can mix hidden layers (torch, onnx) have encode_layers; others refuse.
    encode_layers = getattr(encoder, "encode_layers", None)
    if encode_layers is None:
        raise UnsupportedModelError(
            f"layers={layers!r}: the {type(encoder).__name__} network gives its last layer "
            "only; embed from the model folder with backend='torch' or 'onnx' for this contract"
        )
    batch: TokenBatch = encode_layers(
        texts, max_tokens, layer_terms(layers), with_tokens=with_tokens
    )
    return batch


def _prompt_tokens(tokenizer: Tokenizer, prefix: str, contract: EmbeddingContract) -> int:
    """How many leading tokens of each ``prefix + text`` are the prefix's, for pooling without
    them, counted as sentence-transformers counts a prompt's: the prefix tokenized alone (its
    leading special tokens included, cut to ``max_tokens``), less a trailing special token."""
    encodings, _ = tokenizer([prefix], contract.max_tokens)
    ids = encodings[0].ids
    special = {i for i, t in tokenizer.tokenizer.get_added_tokens_decoder().items() if t.special}
    return len(ids) - 1 if ids and ids[-1] in special else len(ids)


def _fits(contract: EmbeddingContract, network: _Network) -> _Network:
    check_fits(contract, network.dimension, network.max_positions, network.folder)
    return network


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


def _expanded(network: _Network, texts: list[str], length: int, max_tokens: int) -> list[str]:
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


def _mask_token(network: _Network) -> str:
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


def _apply_dense(network: _Network, vectors: np.ndarray) -> np.ndarray:
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


def _check_text(text: Any, what: str) -> str:
    # The one text of a call, as a plain, encodable str (rules in ctxemb_core._validate).
    return check_text(text, what)


def _check_texts(texts: Any, what: str = "texts") -> list[str]:
    # A batch as a new list of plain, encodable strs; an Embedder call refuses an empty one.
    if what == "texts":
        single = "use embed_query for a single query or wrap it in a list"
    else:
        single = "wrap a single text in a list"
    return check_texts(texts, what, single=single, allow_empty=False)


def _progress(batches: list[np.ndarray], total: int, show: bool | None) -> Iterable[np.ndarray]:
    return with_progress(batches, total, show, unit="text", desc="embedding")
