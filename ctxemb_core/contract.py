"""The embedding contract: the whole recipe that gives a vector its meaning.

A vector is only comparable with vectors made by the same encoder and weights, pooling,
instruction prefix per role, normalisation, truncation and precision. The contract pins all of
them in one frozen object whose :attr:`~EmbeddingContract.fingerprint` an index remembers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from ctxemb_core.errors import DataFormatError, InvalidContractError, InvalidInputError

__all__ = [
    "CONTRACT_SCHEMA",
    "LAST_LAYER",
    "MAX_CONTRACT_INT",
    "MAX_CONTRACT_JSON",
    "ContractDiff",
    "DiffKind",
    "EmbeddingContract",
    "FieldChange",
    "Pooling",
    "Precision",
    "Quantization",
    "Role",
    "canonical_layers",
    "layer_terms",
    "same_contract",
]

#: Version of the contract's JSON format; part of the fingerprint.
CONTRACT_SCHEMA = 1

# Matched with fullmatch: "$" would also accept a digest followed by a newline.
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Largest value of an integer field: a width, a token count. Beyond it no model exists, numpy
#: cannot shape an array, and a store's metadata (64-bit at most) cannot hold the contract.
MAX_CONTRACT_INT = 2**31 - 1
#: Largest contract JSON read back; a contract is a few hundred bytes, a stamp is not a file store.
MAX_CONTRACT_JSON = 1 << 20
#: The default of :attr:`EmbeddingContract.layers`: the encoder's last hidden layer.
LAST_LAYER = "last"


class _StrEnum(str, Enum):
    """A string enum whose constructor error lists the valid values."""

    @classmethod
    def parse(cls, value: Any, field: str) -> Any:
        if isinstance(value, cls):
            return value
        # Only strings are looked up: a list or a dict from JSON is unhashable (a TypeError).
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                pass
        valid = ", ".join(repr(m.value) for m in cls)
        raise InvalidContractError(f"{field}={value!r} is not valid; valid values are {valid}")

    def __str__(self) -> str:
        return str(self.value)


class Pooling(_StrEnum):
    """How token vectors become one text vector.

    ``cls`` takes the first token, ``mean`` averages the unpadded tokens, ``max`` takes the
    element-wise maximum, ``last_token`` the last unpadded token (decoder embedders),
    ``weighted_mean`` weights position *i* by *i* (later tokens count more, as in SGPT), and
    ``mean_sqrt_len`` divides the sum by the square root of the length.
    """

    CLS = "cls"
    MEAN = "mean"
    MAX = "max"
    LAST_TOKEN = "last_token"
    WEIGHTED_MEAN = "weighted_mean"
    MEAN_SQRT_LEN = "mean_sqrt_len"


class Role(_StrEnum):
    """Which side of retrieval a text is on; each role has its own prefix."""

    QUERY = "query"
    DOCUMENT = "document"


class Precision(_StrEnum):
    """The numeric form of an output vector.

    ``int8`` maps each component of a unit vector to ``round(127 * x)``; ``binary`` keeps the
    sign bit of each component, packed eight to a byte. Both are lossy and so are contracts of
    their own.
    """

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    INT8 = "int8"
    BINARY = "binary"


class Quantization(_StrEnum):
    """Lossy forms of the network's weights, each a contract of its own.

    A value names one recipe (how the exported graph is quantised and run) and its version: a
    changed recipe is a new value, so an index stamped under one is never served by another.
    Both run on the ``onnx`` backend, with activations quantised at run time.

    ``int8-dynamic-pc-v1`` (recommended): int8 weights (7-bit range) with one scale per output
    channel, and each text run on its own, so that its activation scales come from its own
    tokens and its vector does not depend on its batch (for all-MiniLM-L6-v2, median cosine
    0.994 to the float vectors). ``int8-dynamic``: the first recipe, every weight int8 with one
    scale per tensor and activations scaled over the whole batch (median cosine 0.94); kept so
    that indexes stamped with it still open.
    """

    INT8_DYNAMIC = "int8-dynamic"
    INT8_DYNAMIC_PC_V1 = "int8-dynamic-pc-v1"


class DiffKind(_StrEnum):
    """What a contract change means for an index written under the old contract."""

    IDENTICAL = "identical"
    #: Only the model's name (``model``, ``query_model``) differs, over the same weights digests:
    #: the same vectors by construction, so an index accepts it as its own contract.
    LABEL = "label"
    #: Only the query side changed: stored document vectors stay valid.
    QUERY_ONLY = "query_only"
    #: The document vectors themselves would change: the index must be re-embedded.
    REEMBED = "reembed"


# Names of the weights, not the weights: with equal digests a change of them changes no vector.
_LABELS = frozenset({"model", "query_model"})
#: The prefix of a model id that names a recipe (:attr:`EmbeddingContract.recipe_id`).
RECIPE_ID_PREFIX = "ctxemb:"
# Fields whose change leaves document vectors as they are.
_QUERY_SIDE = frozenset({"query_prefix", "query_model", "query_weights"})
# Fields added after contracts were first fingerprinted: left out of the JSON at these defaults,
# so that every older contract keeps its fingerprint.
_OMITTED_AT_DEFAULT: dict[str, Any] = {"layers": LAST_LAYER, "include_prompt": True}


@dataclass(frozen=True)
class FieldChange:
    """One differing field: its value on the index's side and on the caller's side."""

    field: str
    index: Any
    caller: Any

    def __str__(self) -> str:
        return f"{self.field}: index={self.index!r}, caller={self.caller!r}"


@dataclass(frozen=True)
class ContractDiff:
    """The differing fields between two contracts and what the difference means."""

    changes: tuple[FieldChange, ...]
    kind: DiffKind

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(c.field for c in self.changes)

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __str__(self) -> str:
        if not self.changes:
            return "identical"
        return f"{self.kind.value}: " + "; ".join(str(c) for c in self.changes)


@dataclass(frozen=True)
class EmbeddingContract:
    """The full recipe of an embedding, pinned and fingerprinted.

    Build one with :func:`ctxemb_core.contract_for` rather than by hand: it reads the pooling,
    prefixes, normalisation and limits from the model folder and digests the weights.

    Attributes:
        model: the model's identity (a hub-style name or a label), never a local path.
        weights: ``sha256:`` digest over the weight, config and tokenizer files.
        pooling: how token vectors become one vector (:class:`Pooling`).
        dimension: the width the model emits after pooling (and its own dense head).
        query_prefix: text prepended to every query (E5 ``"query: "``, BGE's instruction).
        document_prefix: text prepended to every document (E5 ``"passage: "``).
        normalize: L2-normalise to unit length (then cosine equals inner product).
        truncate_dim: Matryoshka prefix length kept before normalisation, or ``None``.
        max_tokens: tokenizer truncation length, special tokens included.
        precision: numeric form of the output (:class:`Precision`).
        quantization: a lossy form of the weights (:class:`Quantization`), or ``None``.
        query_model: a separate query encoder (DPR-style pairs), or ``None`` to share ``model``.
        query_weights: the digest of that query encoder, set exactly when ``query_model`` is.
        layers: which hidden layers make the token vectors (:func:`canonical_layers` gives the
            forms): ``"last"`` (the default), one layer (``"-2"``; ``"0"`` is the embedding
            layer's output), the mean of several (``"-4,-3,-2,-1"``, short ``"-4:"``) or a
            fixed weighted sum (``"0.5*-2+0.5*-1"``), as ELMo-style feature extraction does.
        include_prompt: pool the instruction prefix's tokens with the text's (the default);
            ``False`` pools the text's own tokens only, as sentence-transformers'
            ``Pooling(include_prompt=False)`` does for Instructor models.
        schema: version of the contract format.

    ``layers`` and ``include_prompt`` are left out of :meth:`to_dict` (and so of the
    fingerprint) at their defaults, so every contract made before they existed keeps its
    fingerprint, and an older ctxemb refuses a contract that sets them rather than misread it.

    Example:
        >>> from ctxemb_core import contract_for
        >>> c = contract_for("sentence-transformers/all-MiniLM-L6-v2")
        >>> c.pooling, c.normalize, c.output_dim
        (<Pooling.MEAN: 'mean'>, True, 384)
        >>> c.diff(c.with_(pooling="cls")).fields
        ('pooling',)
    """

    model: str
    weights: str
    pooling: Pooling
    dimension: int
    query_prefix: str = ""
    document_prefix: str = ""
    normalize: bool = True
    truncate_dim: int | None = None
    max_tokens: int = 512
    precision: Precision = Precision.FLOAT32
    quantization: Quantization | None = None
    query_model: str | None = None
    query_weights: str | None = None
    layers: str = LAST_LAYER
    include_prompt: bool = True
    schema: int = CONTRACT_SCHEMA

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: coercion happens once, here
        set_(self, "pooling", Pooling.parse(self.pooling, "pooling"))
        set_(self, "precision", Precision.parse(self.precision, "precision"))
        if self.quantization is not None:
            set_(self, "quantization", Quantization.parse(self.quantization, "quantization"))
        _check_str(self.model, "model", nonempty=True)
        _check_digest(self.weights, "weights")
        _check_int(self.dimension, "dimension")
        _check_int(self.max_tokens, "max_tokens")
        _check_str(self.query_prefix, "query_prefix")
        _check_str(self.document_prefix, "document_prefix")
        if not isinstance(self.normalize, bool):
            raise InvalidContractError(f"normalize must be True or False, got {self.normalize!r}")
        set_(self, "layers", canonical_layers(self.layers))
        if not isinstance(self.include_prompt, bool):
            raise InvalidContractError(
                f"include_prompt must be True or False, got {self.include_prompt!r}"
            )
        if self.truncate_dim is not None:
            _check_int(self.truncate_dim, "truncate_dim")
            if self.truncate_dim > self.dimension:
                raise InvalidContractError(
                    f"truncate_dim={self.truncate_dim} is larger than the model's dimension "
                    f"{self.dimension}; valid values are 1..{self.dimension} or None"
                )
        if (self.query_model is None) != (self.query_weights is None):
            raise InvalidContractError(
                "query_model and query_weights go together: set both for a separate query "
                "encoder (DPR-style), or neither to share the document encoder"
            )
        if self.query_model is not None:
            _check_str(self.query_model, "query_model", nonempty=True)
            _check_digest(self.query_weights, "query_weights")
        if self.precision is Precision.BINARY and self.output_dim % 8:
            raise InvalidContractError(
                f"binary precision packs 8 components per byte; output_dim={self.output_dim} "
                "is not a multiple of 8 (choose another truncate_dim)"
            )
        # `True == 1` and `1.0 == 1`: compare the type as well, or a bool passes as schema 1.
        if type(self.schema) is not int or self.schema != CONTRACT_SCHEMA:
            raise InvalidContractError(
                f"contract schema {self.schema!r} is not supported; this ctxemb reads schema "
                f"{CONTRACT_SCHEMA}"
            )

    # -- derived -----------------------------------------------------------------------------

    @property
    def output_dim(self) -> int:
        """The length of each output vector (``truncate_dim`` if set, else ``dimension``)."""
        return self.dimension if self.truncate_dim is None else self.truncate_dim

    def prefix(self, role: Role | str) -> str:
        """The instruction prefix of a role."""
        role = Role.parse(role, "role")
        return self.query_prefix if role is Role.QUERY else self.document_prefix

    @property
    def layer_terms(self) -> tuple[tuple[int, float], ...]:
        """``layers`` as ``(hidden-state index, weight)`` terms (see :func:`layer_terms`)."""
        return layer_terms(self.layers)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values: every field, but ``layers`` and ``include_prompt`` only
        where they differ from their defaults (which keeps older fingerprints as they were)."""
        out = self._values()
        for name, default in _OMITTED_AT_DEFAULT.items():
            if out[name] == default:
                del out[name]
        return out

    def _values(self) -> dict[str, Any]:
        """Every field's JSON-ready value, defaults included (what :meth:`diff` compares)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["pooling"] = self.pooling.value
        out["precision"] = self.precision.value
        if self.quantization is not None:
            out["quantization"] = self.quantization.value
        return out

    def to_json(self) -> str:
        """The canonical JSON: sorted keys, compact separators, UTF-8 kept as is."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 hex digest of :meth:`to_json`; equal fingerprints mean equal recipes."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    @cached_property
    def recipe(self) -> str:
        """sha256 hex digest of the contract without its labels (``model``, ``query_model``):
        equal recipes mean the same vectors under other names, what :meth:`diff` calls a
        ``label`` change. A server that serves this contract under any name answers a request
        for ``ctxemb:<recipe>`` (:data:`RECIPE_ID_PREFIX`)."""
        data = {k: v for k, v in self.to_dict().items() if k not in _LABELS}
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    @property
    def recipe_id(self) -> str:
        """The model id every server of this recipe answers to, whatever its served name."""
        return RECIPE_ID_PREFIX + self.recipe

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbeddingContract:
        """Rebuild a contract; missing or unknown fields are an error, never a default.

        The exceptions are ``layers`` and ``include_prompt``, which :meth:`to_dict` leaves out
        at their defaults (and contracts written before they existed never hold).
        """
        if not isinstance(data, dict):
            raise DataFormatError(f"a contract must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        missing = [n for n in names if n not in data and n not in _OMITTED_AT_DEFAULT]
        if unknown or missing:
            parts = []
            if missing:
                parts.append(f"missing fields {missing}")
            if unknown:
                parts.append(f"unknown fields {unknown}")
            raise DataFormatError(
                "not a ctxemb contract: " + " and ".join(parts) + f"; the fields are {names}"
            )
        try:
            return cls(**data)
        except TypeError as exc:  # e.g. a list where a string belongs
            raise DataFormatError(f"not a ctxemb contract: {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> EmbeddingContract:
        """Rebuild a contract from its JSON (as stored in an index stamp).

        Raises:
            DataFormatError: not JSON, not a contract's fields, larger than
                :data:`MAX_CONTRACT_JSON` or nested too deeply to be a contract.
            InvalidContractError: the fields are there but a value is not valid.
        """
        if isinstance(text, (str, bytes, bytearray)) and len(text) > MAX_CONTRACT_JSON:
            raise DataFormatError(
                f"contract JSON of {len(text):,} characters is refused: a contract is a few "
                f"hundred, and at most {MAX_CONTRACT_JSON:,} are read. Check where it came from."
            )
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except RecursionError:
            # json recurses once per level: "[[[[…" a few thousand deep exhausts the stack.
            raise DataFormatError(
                "contract JSON is nested too deeply to be a contract (a contract is one flat "
                "object); check where it came from"
            ) from None
        except (TypeError, ValueError) as exc:
            raise DataFormatError(f"contract JSON cannot be parsed: {exc}") from None
        return cls.from_dict(data)

    def with_(self, **changes: Any) -> EmbeddingContract:
        """A copy with some fields changed (and validated again).

        Example:
            >>> c2 = c.with_(truncate_dim=128)  # doctest: +SKIP
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise InvalidContractError(
                f"unknown contract fields {unknown}; the fields are {sorted(names)}"
            )
        return dataclasses.replace(self, **changes)

    # -- comparison --------------------------------------------------------------------------

    def diff(self, other: EmbeddingContract) -> ContractDiff:
        """The fields in which ``other`` (the caller) differs from ``self`` (the index).

        The kind: ``identical``; ``label`` when only ``model``/``query_model`` differ and the
        weights digests are equal (a copied folder under another name: the same vectors);
        ``query_only`` when only the query side changed (a name may differ too); else
        ``reembed``.
        """
        if not isinstance(other, EmbeddingContract):
            raise InvalidContractError(f"can only diff two contracts, got {type(other).__name__}")
        a, b = self._values(), other._values()
        changes = tuple(
            FieldChange(f.name, a[f.name], b[f.name])
            for f in dataclasses.fields(self)
            if a[f.name] != b[f.name]
        )
        query_side = _QUERY_SIDE
        if self.document_prefix == other.document_prefix == "":
            # Without a document prefix there are no prompt tokens to pool on that side.
            query_side = query_side | {"include_prompt"}
        if not changes:
            kind = DiffKind.IDENTICAL
        elif all(c.field in _LABELS for c in changes):
            # Equal digests are implied: a differing weights/query_weights would be a change.
            kind = DiffKind.LABEL
        elif all(c.field in query_side or c.field in _LABELS for c in changes):
            kind = DiffKind.QUERY_ONLY
        else:
            kind = DiffKind.REEMBED
        return ContractDiff(changes, kind)

    def describe(self) -> str:
        """A short human-readable summary, e.g. for logs and the CLI."""
        parts = [
            self.model,
            f"pooling={self.pooling.value}",
            f"normalize={self.normalize}",
            f"dim={self.output_dim}",
        ]
        if self.query_prefix or self.document_prefix:
            parts.append(f"prefixes={self.query_prefix!r}/{self.document_prefix!r}")
        if self.precision is not Precision.FLOAT32:
            parts.append(f"precision={self.precision.value}")
        if self.quantization is not None:
            parts.append(f"weights={self.quantization.value}")
        if self.layers != LAST_LAYER:
            parts.append(f"layers={self.layers}")
        if not self.include_prompt:
            parts.append("include_prompt=False")
        return " ".join(parts) + f" [{self.fingerprint[:12]}]"


class Fingerprinted(Protocol):
    """Anything a fingerprint names: an embedding, reranker, lexical or hybrid contract."""

    @property
    def fingerprint(self) -> str: ...


def same_contract(
    index: Fingerprinted | str, caller: Fingerprinted | str, *, exact: bool = False
) -> bool:
    """Whether ``caller`` is ``index``'s contract: THE rule for "same contract", in one place.

    Every check that holds one contract to another asks this, and nothing else compares
    fingerprints: an index's stamp against the caller (open, write, query), a document's or a
    query's carried fingerprint against the index's, a store's persisted setting, a server's
    contract against its client's, the dense side of a hybrid index. The rule:

    - equal fingerprints are the same contract;
    - two :class:`EmbeddingContract` whose only difference is a label (``model``,
      ``query_model``) over equal weights digests are the same contract too: equal
      :attr:`~EmbeddingContract.recipe`, what :meth:`~EmbeddingContract.diff` calls a
      :attr:`DiffKind.LABEL` change. They make the same vectors by construction (a copied
      folder under its own name, a hub name against a local label); the canary still proves it
      of the encoder at hand;
    - a bare fingerprint (a ``str``) is the same only as an equal fingerprint: the recipe it
      names is unknown. Resolve it to its contract first where this process knows it;
    - anything else differs: every recipe field (weights, pooling, prefixes, normalisation,
      truncation, precision, quantization, layers, ...) makes other vectors.

    ``exact=True`` refuses a label difference too: for two records of one contract that must
    agree byte for byte (a stamp and the store's persisted setting, a file's manifest, a stamp
    before and after a rewrite), not for a caller's contract held to an index's.

    The differing fields, for a message, are ``index.diff(caller)``; the errors name them.

    Example:
        >>> same_contract(c, c.with_(model="my-copy"))  # doctest: +SKIP
        True
        >>> same_contract(c, c.with_(pooling="cls"))  # doctest: +SKIP
        False
    """
    if _fingerprint_of(index) == _fingerprint_of(caller):
        return True
    return (
        not exact
        and isinstance(index, EmbeddingContract)
        and isinstance(caller, EmbeddingContract)
        and index.recipe == caller.recipe
    )


def _fingerprint_of(value: Any) -> str:
    found = value if isinstance(value, str) else getattr(value, "fingerprint", None)
    if not isinstance(found, str):
        raise InvalidInputError(
            f"expected a contract or its fingerprint, got {type(value).__name__}"
        )
    return found


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys; another reader may keep the first. A contract
    # that reads two ways is no contract.
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise DataFormatError(
                f"contract JSON names {key!r} twice; a contract names each field once. Check "
                "where it came from"
            )
        data[key] = value
    return data


def _check_str(value: Any, field: str, *, nonempty: bool = False) -> None:
    if not isinstance(value, str) or (nonempty and not value.strip()):
        what = "a non-empty string" if nonempty else "a string"
        raise InvalidContractError(f"{field} must be {what}, got {value!r}")
    # Surrogates are the one thing a str holds that UTF-8 cannot: the fingerprint (and every
    # tokenizer) would fail on them later, far from the value that caused it.
    if not value.isascii() and _SURROGATE.search(value):
        raise InvalidContractError(
            f"{field} is not valid Unicode: it holds a surrogate code point (U+D800-U+DFFF), "
            f"which UTF-8 cannot encode; got {value!r}"
        )


def _check_int(value: Any, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidContractError(f"{field} must be a positive integer, got {value!r}")
    if value > MAX_CONTRACT_INT:
        shown = repr(value) if value.bit_length() <= 128 else f"{str(value)[:20]}… (huge)"
        raise InvalidContractError(
            f"{field}={shown} is out of range; valid values are 1..{MAX_CONTRACT_INT}"
        )


def _check_digest(value: Any, field: str) -> None:
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise InvalidContractError(
            f"{field} must be a 'sha256:<64 hex digits>' digest, got {value!r}"
        )


# -- layers ----------------------------------------------------------------------------------

_LAYER_INDEX = r"[+-]?\d{1,4}"
_LAYER_WEIGHT = r"(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?"
_LAYER_TERM = rf"({_LAYER_WEIGHT})\*({_LAYER_INDEX})"
_LAYER_SUM = re.compile(rf"{_LAYER_TERM}(?:\+{_LAYER_TERM})*")
_LAYER_LIST = re.compile(rf"{_LAYER_INDEX}(?:,{_LAYER_INDEX})*")
_LAYER_TAIL = re.compile(r"-(\d{1,4}):")
#: The most layers one ``layers`` value may combine, and the longest text it may be.
_MAX_LAYER_TERMS = 256
_MAX_LAYERS_TEXT = 8192
_LAYER_FORMS = (
    "'last' (the last layer, the default); one hidden-state index ('-2': the layer before "
    "the last; '0': the embedding layer's output; -1 is the last); the mean of several "
    "('-4,-3,-2,-1', or '-4:' for the last four); or a fixed weighted sum with positive weights "
    "('0.5*-2+0.5*-1')"
)


def canonical_layers(value: Any, num_layers: int | None = None) -> str:
    """The canonical text of a ``layers`` value, the one the contract holds and fingerprints.

    Hidden-state indices follow transformers' ``output_hidden_states=True``: index 0 is the
    embedding layer's output, 1..L the outputs of the L layers, and negative indices count from
    the last (-1 is the last layer, today's token vectors). The forms, whitespace ignored:

    - ``"last"``: the last layer (``-1`` is written ``"last"``);
    - ``"-2"``: one layer;
    - ``"-4,-3,-2,-1"``: the mean of these layers; ``"-4:"`` is short for the last four;
    - ``"0.5*-2+0.5*-1"``: a fixed weighted sum (positive weights).

    Terms are sorted by index; a weighted sum whose weights are all ``1/n`` is written as the
    mean. Given ``num_layers`` (the model's L, known when a contract is read from a model
    folder), indices beyond the model are refused and indices from the start are written from
    the last (on a 6-layer model ``"6"`` is ``"last"`` and ``"0"`` is ``"-7"``), so one choice
    of layers has one fingerprint.

    Raises:
        InvalidContractError: a value of another form, a repeated layer, a weight that is not
            a positive finite number, or an index the model does not have.

    Example:
        >>> canonical_layers("-1, -2, -3, -4")
        '-4,-3,-2,-1'
        >>> canonical_layers("0", num_layers=6)
        '-7'
    """
    terms = _parse_layers(value)
    if num_layers is not None:
        count = num_layers + 1
        for index, _ in terms:
            if not -count <= index < count:
                raise InvalidContractError(
                    f"layers={value!r} names hidden state {index}, which the model does not "
                    f"have: its {num_layers} layers give hidden states 0..{num_layers} (0 is "
                    f"the embedding output), or -{count}..-1 counted from the last"
                )
        terms = [(i - count if i >= 0 else i, w) for i, w in terms]
    return _format_layers(value, terms)


def layer_terms(layers: str) -> tuple[tuple[int, float], ...]:
    """The ``(hidden-state index, weight)`` terms of a ``layers`` value, sorted by index.

    Example:
        >>> layer_terms("-2,-1")
        ((-2, 0.5), (-1, 0.5))
    """
    return tuple(_parse_layers(canonical_layers(layers)))


def _parse_layers(value: Any) -> list[tuple[int, float]]:
    """The terms of any accepted ``layers`` form, as written (not yet sorted or checked)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [(value, 1.0)]
    if not isinstance(value, str) or len(value) > _MAX_LAYERS_TEXT:
        raise InvalidContractError(f"layers={value!r} is not valid; valid forms are {_LAYER_FORMS}")
    text = "".join(value.split()).lower()
    tail = _LAYER_TAIL.fullmatch(text)
    terms: list[tuple[int, float]]
    if text == LAST_LAYER:
        terms = [(-1, 1.0)]
    elif tail is not None and 1 <= int(tail.group(1)) <= _MAX_LAYER_TERMS:
        n = int(tail.group(1))
        terms = [(i, 1.0 / n) for i in range(-n, 0)]
    elif _LAYER_LIST.fullmatch(text):
        indices = [int(i) for i in text.split(",")]
        terms = [(i, 1.0 / len(indices)) for i in indices]
    elif _LAYER_SUM.fullmatch(text):
        terms = [(int(i), float(w)) for w, i in re.findall(_LAYER_TERM, text)]
    else:
        raise InvalidContractError(f"layers={value!r} is not valid; valid forms are {_LAYER_FORMS}")
    if len(terms) > _MAX_LAYER_TERMS:
        raise InvalidContractError(
            f"layers={value!r} combines {len(terms)} layers; at most {_MAX_LAYER_TERMS} are allowed"
        )
    bad = [w for _, w in terms if not (math.isfinite(w) and w > 0)]
    if bad:
        raise InvalidContractError(
            f"layers={value!r} has the weight {bad[0]!r}; weights are positive finite numbers"
        )
    return terms


def _format_layers(value: Any, terms: list[tuple[int, float]]) -> str:
    """The canonical text of checked terms (sorted by index; equal ``1/n`` weights: a mean)."""
    terms = sorted(terms)
    indices = [i for i, _ in terms]
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise InvalidContractError(
            f"layers={value!r} names hidden state {repeated[0]} twice; name each layer once "
            "(with the sum of its weights)"
        )
    if all(w == 1.0 / len(terms) for _, w in terms):
        if indices == [-1]:
            return LAST_LAYER
        return ",".join(str(i) for i in indices)
    return "+".join(f"{w!r}*{i}" for i, w in terms)


def load_contract(value: Any) -> EmbeddingContract:
    """A contract from what a configuration holds: a contract, its ``to_dict()``, or the path
    of a contract JSON file (what ``EmbeddingContract.to_json()`` writes).

    Raises:
        DataFormatError: a file that cannot be read or is not a contract's JSON, or a value of
            another type.
        InvalidContractError: the fields are there but a value is not valid.
    """
    if isinstance(value, EmbeddingContract):
        return value
    if isinstance(value, Mapping):
        return EmbeddingContract.from_dict(dict(value))
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        try:
            with path.open("rb") as handle:
                text = handle.read(MAX_CONTRACT_JSON + 1)
        except OSError as exc:
            raise DataFormatError(
                f"cannot read the contract file {str(path)!r}: {exc.strerror or exc}"
            ) from None
        return EmbeddingContract.from_json(text)
    raise DataFormatError(
        "a contract is an EmbeddingContract, its to_dict(), or the path of a contract JSON "
        f"file; got {type(value).__name__}"
    )
