"""The reranker contract: the whole recipe that gives a rerank score its meaning.

A cross-encoder score is only comparable with scores made by the same network and weights, the
same way of forming the (query, document) pair, the same truncation and the same activation on
the logits; a late-interaction (MaxSim) score, with the same token encoder, markers, query
expansion, skipped tokens and per-token normalisation. :class:`RerankerContract` pins all of them
in one frozen object; every :class:`~ctxemb_core.rerank.Reranking` carries its fingerprint, and a
:class:`ScoreThreshold` remembers the contract it was set under.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ctxemb_core.contract import (
    MAX_CONTRACT_JSON,
    ContractDiff,
    DiffKind,
    EmbeddingContract,
    FieldChange,
    _check_digest,
    _check_int,
    _check_str,
    _StrEnum,
    _unique_keys,
    same_contract,
)
from ctxemb_core.errors import DataFormatError, InvalidContractError, RerankerMismatchError

__all__ = [
    "RERANK_SCHEMA",
    "Activation",
    "PairFormat",
    "RerankKind",
    "RerankerContract",
    "ScoreThreshold",
    "SkipTokens",
]

#: Version of the reranker contract's JSON format; part of the fingerprint.
RERANK_SCHEMA = 1


class RerankKind(_StrEnum):
    """The retrieval regime of a reranker (the bi-encoder regime is the Embedder's).

    ``cross_encoder`` reads query and document jointly (nothing is pre-computable);
    ``late_interaction`` scores per-token vectors with MaxSim, ``Σ_i max_j q_i · d_j``.
    """

    CROSS_ENCODER = "cross_encoder"
    LATE_INTERACTION = "late_interaction"


class Activation(_StrEnum):
    """What turns a cross-encoder's logits into its score.

    ``none`` keeps the logit, ``sigmoid`` maps it to (0, 1), ``softmax`` normalises over the
    labels and keeps the probability of the contract's ``label``.
    """

    NONE = "none"
    SIGMOID = "sigmoid"
    SOFTMAX = "softmax"


class PairFormat(_StrEnum):
    """How a (query, document) pair becomes the network's input.

    ``tokenizer`` uses the tokenizer's own pair encoding (``[CLS] q [SEP] d [SEP]`` with segment
    ids for BERT, ``<s> q </s></s> d </s>`` for RoBERTa; truncation takes from the longer side
    first), as sentence-transformers' CrossEncoder does. ``template`` fills the contract's
    ``template`` (``{query}`` and ``{document}``) into one text.
    """

    TOKENIZER = "tokenizer"
    TEMPLATE = "template"


class SkipTokens(_StrEnum):
    """Tokens left out of a late-interaction token matrix.

    ``special`` drops [CLS]/[SEP]/<s>… (never the query's expansion tokens), ``punctuation``
    drops tokens made only of punctuation (ColBERT's document side), ``marker`` drops the tokens
    of the query/document prefix (the ColBERT markers).
    """

    SPECIAL = "special"
    PUNCTUATION = "punctuation"
    MARKER = "marker"


# Fields whose change leaves stored document token vectors valid.
_QUERY_SIDE = frozenset({"query_prefix", "query_length"})
# Fields that belong to one regime only; the other regime leaves them at these values.
_CROSS_ONLY = {"pair_format": None, "template": None, "activation": None, "label": None}
_LATE_ONLY = {"encoder": None, "token_normalize": None, "query_length": None, "skip": ()}


@dataclass(frozen=True)
class RerankerContract:
    """The full recipe of a rerank score, pinned and fingerprinted.

    Build one with :func:`ctxemb_core.rerank.rerank_contract_for` rather than by hand: it reads
    the activation and limits a cross-encoder folder saved, and for late interaction takes the
    token encoder's own :class:`~ctxemb_core.EmbeddingContract`.

    Attributes:
        kind: the regime (:class:`RerankKind`).
        model: the model's identity (a hub-style name or a label), never a local path.
        weights: ``sha256:`` digest over the weight, config and tokenizer files.
        max_tokens: truncation length of a pair (cross-encoder) or of a document (late
            interaction; equal to the encoder contract's ``max_tokens``).
        query_prefix: prepended to the query (a cross-encoder instruction, ColBERT's ``[Q]``).
        document_prefix: prepended to the document (ColBERT's ``[D]``).
        pair_format: cross-encoder only: how the pair is formed (:class:`PairFormat`).
        template: cross-encoder with ``pair_format="template"`` only: one text holding
            ``{query}`` and ``{document}`` exactly once each.
        activation: cross-encoder only: :class:`Activation` on the logits.
        num_labels: the network's outputs per pair (1 for late interaction).
        label: the label whose score is kept, set exactly when ``num_labels > 1``.
        encoder: late interaction only: the token encoder's embedding contract.
        token_normalize: late interaction only: L2-normalise each token vector.
        query_length: late interaction only: pad queries with the tokenizer's mask token up to
            this many tokens and cut them there (ColBERT's query expansion), or ``None``.
        skip: late interaction only: tokens left out (:class:`SkipTokens`), sorted.
        schema: version of the format.

    Example:
        >>> from ctxemb_core.rerank import rerank_contract_for
        >>> c = rerank_contract_for("./my-cross-encoder")  # doctest: +SKIP
        >>> c.activation, c.with_(activation="none").diff(c).fields  # doctest: +SKIP
        (<Activation.SIGMOID: 'sigmoid'>, ('activation',))
    """

    kind: RerankKind
    model: str
    weights: str
    max_tokens: int
    query_prefix: str = ""
    document_prefix: str = ""
    pair_format: PairFormat | None = None
    template: str | None = None
    activation: Activation | None = None
    num_labels: int = 1
    label: int | None = None
    encoder: EmbeddingContract | None = None
    token_normalize: bool | None = None
    query_length: int | None = None
    skip: tuple[SkipTokens, ...] = ()
    schema: int = RERANK_SCHEMA

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: coercion happens once, here
        set_(self, "kind", RerankKind.parse(self.kind, "kind"))
        _check_str(self.model, "model", nonempty=True)
        _check_digest(self.weights, "weights")
        _check_int(self.max_tokens, "max_tokens")
        _check_str(self.query_prefix, "query_prefix")
        _check_str(self.document_prefix, "document_prefix")
        _check_int(self.num_labels, "num_labels")
        if self.kind is RerankKind.CROSS_ENCODER:
            self._check_cross()
        else:
            self._check_late()
        if type(self.schema) is not int or self.schema != RERANK_SCHEMA:
            raise InvalidContractError(
                f"reranker contract schema {self.schema!r} is not supported; this ctxemb "
                f"reads schema {RERANK_SCHEMA}"
            )

    def _check_cross(self) -> None:
        set_ = object.__setattr__
        _only(self, _LATE_ONLY, "a cross_encoder")
        set_(self, "pair_format", PairFormat.parse(self.pair_format, "pair_format"))
        if self.activation is None:
            raise InvalidContractError(
                "a cross_encoder contract needs activation= one of "
                + ", ".join(repr(a.value) for a in Activation)
                + "; ctxemb never guesses it"
            )
        set_(self, "activation", Activation.parse(self.activation, "activation"))
        if self.pair_format is PairFormat.TEMPLATE:
            _check_str(self.template, "template", nonempty=True)
            assert self.template is not None
            for slot in ("{query}", "{document}"):
                if self.template.count(slot) != 1:
                    raise InvalidContractError(
                        f"template must hold {slot} exactly once, got {self.template!r}"
                    )
        elif self.template is not None:
            raise InvalidContractError(
                "template is only used with pair_format='template'; leave it None for the "
                "tokenizer's pair encoding"
            )
        if self.num_labels == 1:
            if self.label is not None:
                raise InvalidContractError("label is only set for a network of several labels")
            if self.activation is Activation.SOFTMAX:
                raise InvalidContractError(
                    "softmax over one label is always 1.0; a one-label network takes "
                    "activation='none' or 'sigmoid'"
                )
        else:
            if isinstance(self.label, bool) or not isinstance(self.label, int):
                raise InvalidContractError(
                    f"a network of {self.num_labels} labels needs label= the index of the "
                    f"relevant label (0..{self.num_labels - 1}), got {self.label!r}"
                )
            if not 0 <= self.label < self.num_labels:
                raise InvalidContractError(
                    f"label={self.label} is out of range; valid values are 0..{self.num_labels - 1}"
                )

    def _check_late(self) -> None:
        set_ = object.__setattr__
        _only(self, _CROSS_ONLY, "a late_interaction")
        if not isinstance(self.encoder, EmbeddingContract):
            if isinstance(self.encoder, Mapping):
                set_(self, "encoder", EmbeddingContract.from_dict(dict(self.encoder)))
            else:
                raise InvalidContractError(
                    "a late_interaction contract needs encoder= the token encoder's "
                    f"EmbeddingContract, got {type(self.encoder).__name__}"
                )
        enc = self.encoder
        assert enc is not None
        if (self.model, self.weights, self.max_tokens) != (enc.model, enc.weights, enc.max_tokens):
            raise InvalidContractError(
                "a late_interaction contract's model, weights and max_tokens are its encoder's "
                f"({enc.model!r}, {enc.weights[:19]}…, {enc.max_tokens}); change the encoder "
                "contract instead"
            )
        if self.num_labels != 1:
            raise InvalidContractError("num_labels is 1 for late interaction (one MaxSim score)")
        if self.token_normalize is None:
            set_(self, "token_normalize", True)
        if not isinstance(self.token_normalize, bool):
            raise InvalidContractError(
                f"token_normalize must be True or False, got {self.token_normalize!r}"
            )
        if self.query_length is not None:
            _check_int(self.query_length, "query_length")
            if self.query_length > self.max_tokens:
                raise InvalidContractError(
                    f"query_length={self.query_length} exceeds max_tokens={self.max_tokens}"
                )
        if isinstance(self.skip, (str, bytes)) or not isinstance(self.skip, (list, tuple)):
            raise InvalidContractError(
                f"skip must be a list of token kinds, got {type(self.skip).__name__}"
            )
        skip = {SkipTokens.parse(s, "skip") for s in self.skip}
        set_(self, "skip", tuple(sorted(skip, key=lambda s: s.value)))

    # -- derived -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, every field included (the encoder as its own dict)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, EmbeddingContract):
                value = value.to_dict()
            elif isinstance(value, _StrEnum):
                value = value.value
            elif f.name == "skip":
                value = [s.value for s in value]
            out[f.name] = value
        return out

    def to_json(self) -> str:
        """The canonical JSON: sorted keys, compact separators, UTF-8 kept as is."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 hex digest of :meth:`to_json`; equal fingerprints mean comparable scores."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    def pair_text(self, query: str, document: str) -> tuple[str, str | None]:
        """The network's input for one pair: two texts (pair encoding) or one (template)."""
        q, d = self.query_prefix + query, self.document_prefix + document
        if self.pair_format is PairFormat.TEMPLATE:
            assert self.template is not None
            # Filled in one pass: a "{document}" inside the query is the query's text.
            parts = self.template.split("{query}")
            return parts[0].replace("{document}", d) + q + parts[1].replace("{document}", d), None
        return q, d

    def describe(self) -> str:
        """A short human-readable summary, e.g. for logs and the CLI."""
        if self.kind is RerankKind.CROSS_ENCODER:
            assert self.activation is not None and self.pair_format is not None
            parts = [
                "cross_encoder",
                self.model,
                f"activation={self.activation.value}",
                f"pair={self.pair_format.value}",
            ]
        else:
            parts = ["late_interaction", self.model, f"token_normalize={self.token_normalize}"]
            if self.query_length:
                parts.append(f"query_length={self.query_length}")
        parts.append(f"max_tokens={self.max_tokens}")
        return " ".join(parts) + f" [{self.fingerprint[:12]}]"

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any) -> RerankerContract:
        """Rebuild a contract; missing or unknown fields are an error, never a default."""
        if not isinstance(data, Mapping):
            raise DataFormatError(
                f"a reranker contract must be a JSON object, got {type(data).__name__}"
            )
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        missing = [n for n in names if n not in data]
        if unknown or missing:
            parts = []
            if missing:
                parts.append(f"missing fields {missing}")
            if unknown:
                parts.append(f"unknown fields {unknown}")
            raise DataFormatError(
                "not a ctxemb reranker contract: "
                + " and ".join(parts)
                + f"; the fields are {names}"
            )
        values = dict(data)
        if isinstance(values["skip"], list):
            values["skip"] = tuple(values["skip"])
        try:
            return cls(**values)
        except TypeError as exc:  # e.g. a list where a string belongs
            raise DataFormatError(f"not a ctxemb reranker contract: {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> RerankerContract:
        """Rebuild a contract from its JSON."""
        if isinstance(text, (str, bytes, bytearray)) and len(text) > MAX_CONTRACT_JSON:
            raise DataFormatError(
                f"reranker contract JSON of {len(text):,} characters is refused; at most "
                f"{MAX_CONTRACT_JSON:,} are read"
            )
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except RecursionError:
            raise DataFormatError("reranker contract JSON is nested too deeply") from None
        except (TypeError, ValueError) as exc:
            raise DataFormatError(f"reranker contract JSON cannot be parsed: {exc}") from None
        return cls.from_dict(data)

    def with_(self, **changes: Any) -> RerankerContract:
        """A copy with some fields changed (and validated again)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise InvalidContractError(
                f"unknown reranker contract fields {unknown}; the fields are {sorted(names)}"
            )
        return dataclasses.replace(self, **changes)

    # -- comparison --------------------------------------------------------------------------

    def diff(self, other: RerankerContract) -> ContractDiff:
        """The fields in which ``other`` differs from ``self``.

        The kind is ``query_only`` when only the query side changed (stored document token
        vectors stay valid; scores still change), else ``reembed``.
        """
        if not isinstance(other, RerankerContract):
            raise InvalidContractError(
                f"can only diff two reranker contracts, got {type(other).__name__}"
            )
        a, b = self.to_dict(), other.to_dict()
        changes = tuple(
            FieldChange(f.name, a[f.name], b[f.name])
            for f in dataclasses.fields(self)
            if a[f.name] != b[f.name]
        )
        if not changes:
            kind = DiffKind.IDENTICAL
        elif all(c.field in _QUERY_SIDE for c in changes):
            kind = DiffKind.QUERY_ONLY
        else:
            kind = DiffKind.REEMBED
        return ContractDiff(changes, kind)

    def check(self, other: RerankerContract, *, what: str = "scores") -> None:
        """Raise :class:`~ctxemb_core.errors.RerankerMismatchError` unless ``other`` is this."""
        if not same_contract(self, other):
            raise RerankerMismatchError(self, other, what=what)


def _only(contract: RerankerContract, fields: Mapping[str, Any], kind: str) -> None:
    """Refuse fields of the other regime (they would change the fingerprint for nothing)."""
    stray = [name for name, empty in fields.items() if getattr(contract, name) != empty]
    if stray:
        raise InvalidContractError(
            f"{kind} contract does not use {stray}; leave them unset (they belong to the "
            "other regime)"
        )


@dataclass(frozen=True)
class ScoreThreshold:
    """A score threshold together with the reranker contract it was set under.

    Scores of two contracts are not on one scale (a sigmoid score of 0.5 is a logit of 0), so a
    threshold never travels alone: a reranker under another contract refuses it with
    :class:`~ctxemb_core.errors.RerankerMismatchError`.

    Example:
        >>> t = ScoreThreshold(0.5, reranker.contract)  # doctest: +SKIP
        >>> reranker.rerank(query, docs, score_threshold=t)  # doctest: +SKIP
    """

    value: float
    contract: RerankerContract

    def __post_init__(self) -> None:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise InvalidContractError(f"a score threshold is a number, got {value!r}")
        object.__setattr__(self, "value", float(value))
        if not isinstance(self.contract, RerankerContract):
            object.__setattr__(self, "contract", load_reranker_contract(self.contract))

    def check(self, contract: RerankerContract) -> float:
        """The value, if ``contract`` is the one it was set under; else the mismatch error."""
        self.contract.check(contract, what="a score threshold")
        return self.value

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "contract": self.contract.to_dict()}

    @classmethod
    def from_dict(cls, data: Any) -> ScoreThreshold:
        if not isinstance(data, Mapping) or set(data) != {"value", "contract"}:
            raise DataFormatError(
                "a score threshold is a mapping of 'value' and 'contract' (see "
                f"ScoreThreshold.to_dict()), got {data!r:.80}"
            )
        return cls(data["value"], load_reranker_contract(data["contract"]))


def load_reranker_contract(value: Any) -> RerankerContract:
    """A reranker contract from what a configuration holds: a contract, its ``to_dict()``, or
    the path of its JSON file (what ``RerankerContract.to_json()`` writes), as
    :func:`~ctxemb_core.contract.load_contract` reads an embedding contract.

    Raises:
        DataFormatError: a file that cannot be read or is not a reranker contract's JSON, or a
            value of another type.
        InvalidContractError: the fields are there but a value is not valid.
    """
    if isinstance(value, RerankerContract):
        return value
    if isinstance(value, Mapping):
        return RerankerContract.from_dict(value)
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        try:
            with path.open("rb") as handle:
                text = handle.read(MAX_CONTRACT_JSON + 1)
        except OSError as exc:
            raise DataFormatError(
                f"cannot read the reranker contract file {str(path)!r}: {exc.strerror or exc}"
            ) from None
        return RerankerContract.from_json(text)
    raise DataFormatError(
        "a reranker contract is a RerankerContract, its to_dict(), or the path of its JSON "
        f"file; got {type(value).__name__}"
    )
