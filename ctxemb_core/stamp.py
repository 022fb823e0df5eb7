"""The index stamp: what an index remembers about the contract that wrote it.

A stamp is flat metadata (strings and integers under ``ctxemb:`` keys) so that any store can hold
it: a Chroma collection's metadata, a JSON file beside a numpy matrix, a document's meta.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxemb_core.contract import EmbeddingContract, Role, same_contract
from ctxemb_core.errors import (
    ContractMismatchError,
    CtxembError,
    DamagedStampError,
    EncoderDriftError,
    InvalidInputError,
    MissingStampError,
    unstamped_remedies,
)
from ctxemb_core.validate import check_texts

if TYPE_CHECKING:
    from ctxemb_core.embedder import Embedder

__all__ = ["CANARY_TOLERANCE", "PROBES", "STAMP_SCHEMA", "IndexStamp", "StampCheck", "agreement"]

#: Version of the stamp's metadata layout.
STAMP_SCHEMA = 1

#: Fixed probe texts whose vectors (in both roles) travel with the index as its canary.
#: Varied on purpose: short and long, digits, punctuation, non-ASCII.
PROBES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "What is the boiling point of water at sea level?",
    "Mitochondria produce ATP through oxidative phosphorylation in eukaryotic cells, "
    "a process that depends on a proton gradient across the inner membrane.",
    "Café prices rose 3.5% in 2024 — según el informe, ¿por qué?",
)

#: The lowest cosine a re-embedded probe may have to its stored canary vector.
#: Measured with benchmarks/canary_tolerance.py on the bundled MiniLM (its JSON in results/):
#: a fresh process, other batch sizes and compositions, 1 or 2 threads: 1 - 1e-12 (honest noise);
#: weights cast to float16 0.9999994, the network run in bfloat16 0.99995 (lossy but faithful);
#: weights with relative Gaussian noise 1e-3: 0.99999, 3e-3: 0.9999, 1e-2: 0.9985 (caught);
#: another model of the same width: below 0. The tolerance lets faithful low-precision runs pass
#: and catches any change that moves the vectors by more than a few parts in ten thousand.
CANARY_TOLERANCE = 0.9995

_K = "ctxemb:"
# A stamp is a few kB (MiniLM: ~17 kB of canary); a field far beyond that is not ours.
_MAX_FIELD = 4 * 1024 * 1024


@dataclass(frozen=True)
class StampCheck:
    """The outcome of a successful :meth:`IndexStamp.verify`."""

    fingerprint: str
    min_cosine: float
    tolerance: float


@dataclass(frozen=True)
class IndexStamp:
    """The fingerprint, contract and canary vectors an index carries.

    Example:
        >>> stamp = IndexStamp.from_embedder(embedder)                 # doctest: +SKIP
        >>> collection_metadata.update(stamp.to_metadata())            # doctest: +SKIP
        >>> IndexStamp.from_metadata(collection_metadata).verify(other)  # doctest: +SKIP
        Traceback (most recent call last):
        ContractMismatchError: ... pooling: index='mean', caller='cls'
    """

    contract: EmbeddingContract
    probes: tuple[str, ...]
    #: ``(2 * len(probes), output_dim)`` float32: the document-role vectors, then the query-role.
    canary: np.ndarray
    schema: int = STAMP_SCHEMA
    #: Set while the index is a copy still being written (``ctxemb_core.index.migrate_index``):
    #: the index it copies. An index whose stamp carries it is refused on open until the copy
    #: ends, so that a copy stopped half-way is never served as the whole.
    copying: str | None = None

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint

    def copy_of(self, source: str) -> IndexStamp:
        """This stamp, for a copy of index ``source`` that is being written."""
        return replace(self, copying=source)

    def finished(self) -> IndexStamp:
        """This stamp, for the copy written whole."""
        return replace(self, copying=None)

    @classmethod
    def from_embedder(cls, embedder: Embedder, probes: tuple[str, ...] = PROBES) -> IndexStamp:
        """Stamp for an index about to be written by ``embedder``."""
        return cls(embedder.contract, tuple(probes), _canary(embedder, probes))

    # -- metadata ----------------------------------------------------------------------------

    def to_metadata(self) -> dict[str, str | int]:
        """Flat ``ctxemb:*`` keys with ``str``/``int`` values, for any store's metadata."""
        return {
            _K + "schema": self.schema,
            _K + "fingerprint": self.fingerprint,
            _K + "contract": self.contract.to_json(),
            _K + "probes": json.dumps(list(self.probes), ensure_ascii=False),
            _K + "canary": "f32le:"
            + base64.b64encode(self.canary.astype("<f4").tobytes()).decode("ascii"),
            **({} if self.copying is None else {_K + "copying": self.copying}),
        }

    @staticmethod
    def is_stamped(metadata: Mapping[str, Any] | None) -> bool:
        """Whether a metadata mapping carries a ctxemb stamp."""
        return isinstance(metadata, Mapping) and (_K + "fingerprint") in metadata

    @staticmethod
    def metadata_items(metadata: Mapping[str, Any] | None) -> tuple[tuple[str, str, Any], ...]:
        """The ``ctxemb:*`` entries of a metadata mapping as ``(key, type, value)``, sorted: what
        to compare to see a stamp change (``True`` and ``1`` differ here, as they do to
        :meth:`from_metadata`)."""
        if not isinstance(metadata, Mapping):
            return ()
        return tuple(
            sorted(
                (k, type(v).__name__, v)
                for k, v in metadata.items()
                if isinstance(k, str) and k.startswith(_K)
            )
        )

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> IndexStamp:
        """Read a stamp back; extra (non-ctxemb) keys are ignored.

        Every part is checked before it is trusted: a stamp that is damaged in any way (a field
        missing or of the wrong type, a fingerprint that does not match its contract, no probes,
        probes that are not distinct non-empty strings, canary bytes of the wrong size, canary
        values that are not finite or rows that are zero) is refused, never half-read.

        Raises:
            MissingStampError: the metadata has no stamp.
            DamagedStampError: a stamp is there but damaged (also a ``DataFormatError``).
        """
        if not cls.is_stamped(metadata):
            what = (
                "the index carries no ctxemb stamp, so nothing proves which contract wrote its "
                "vectors, and ctxemb will not read or write it unstamped. "
            )
            raise MissingStampError(what, remedies=unstamped_remedies())
        assert metadata is not None
        try:
            schema = metadata[_K + "schema"]
            stored_fp = metadata[_K + "fingerprint"]
            contract_json = metadata[_K + "contract"]
            probes_json = metadata[_K + "probes"]
            encoded = metadata[_K + "canary"]
        except KeyError as exc:
            raise DamagedStampError(f"the index's stamp lacks {exc.args[0]!r}") from None
        if isinstance(schema, bool) or not isinstance(schema, int):
            raise DamagedStampError(f"the index's stamp schema is not an integer: {schema!r}")
        if schema != STAMP_SCHEMA:
            raise DamagedStampError(
                f"stamp schema {schema} is not supported (this ctxemb reads {STAMP_SCHEMA})"
            )
        for key, value in (
            ("fingerprint", stored_fp),
            ("contract", contract_json),
            ("probes", probes_json),
            ("canary", encoded),
        ):
            if not isinstance(value, str):
                raise DamagedStampError(
                    f"the index's stamp field {_K + key!r} is not a string: {type(value).__name__}"
                )
            if len(value) > _MAX_FIELD:
                raise DamagedStampError(
                    f"the index's stamp field {_K + key!r} is {len(value):,} characters long; "
                    f"a stamp field is at most {_MAX_FIELD:,}"
                )
        try:
            contract = EmbeddingContract.from_json(contract_json)
        except (CtxembError, RecursionError) as exc:
            raise DamagedStampError(f"the index's stamp holds no valid contract: {exc}") from None
        if contract.fingerprint != stored_fp:
            raise DamagedStampError(
                "the index's stamp is damaged: its fingerprint does not match its contract JSON"
            )
        probes = _read_probes(probes_json)
        canary = _read_canary(encoded, 2 * len(probes), contract.output_dim)
        copying = metadata.get(_K + "copying")
        if copying is not None and (
            not isinstance(copying, str) or not copying or len(copying) > _MAX_FIELD
        ):
            raise DamagedStampError(
                f"the index's stamp field {_K + 'copying'!r} is not the name of the index it "
                f"copies: {str(copying)[:80]!r}"
            )
        return cls(contract, probes, canary, schema, copying)

    # -- checks ------------------------------------------------------------------------------

    def check_contract(self, contract: EmbeddingContract) -> None:
        """The cheap check for every call: the caller's contract must be the stamp's.

        Equal fingerprints pass; so does a difference only in the model's name over the same
        weights digests (:attr:`~ctxemb_core.contract.DiffKind.LABEL`: a copied folder under
        another name makes the same vectors; :meth:`verify`'s canary still checks them).

        Raises:
            ContractMismatchError: naming each differing field with both values.
        """
        if not isinstance(contract, EmbeddingContract):
            raise InvalidInputError(f"expected an EmbeddingContract, got {type(contract).__name__}")
        if not same_contract(self.contract, contract):
            raise ContractMismatchError(self.contract, contract, stamped=True)

    def verify(self, embedder: Embedder, tolerance: float = CANARY_TOLERANCE) -> StampCheck:
        """The full check on open: contract fingerprint, then the canary re-embedded.

        Raises:
            ContractMismatchError: the embedder's contract is another one (a label difference
                passes, as in :meth:`check_contract`).
            EncoderDriftError: same contract, but the probes re-embed to other vectors.
        """
        self.check_contract(embedder.contract)
        return self.compare(_canary(embedder, self.probes), tolerance)

    def compare(
        self, fresh: np.ndarray, tolerance: float = CANARY_TOLERANCE, *, server: str | None = None
    ) -> StampCheck:
        """Hold re-embedded probes (the documents' rows, then the queries', as :attr:`canary`)
        to the canary; what :meth:`verify` and a remote encoder's check share.

        Raises:
            EncoderDriftError: a row agrees less than ``tolerance`` (naming the probe, its
                role, and the ``server`` when the vectors came from one).
        """
        cos = agreement(self.canary, fresh)
        worst = int(np.argmin(cos))
        if not cos[worst] >= tolerance:  # also catches NaN from a broken encoder
            role = "document" if worst < len(self.probes) else "query"
            text = self.probes[worst % len(self.probes)]
            probe = f"{role}: {text if server is None else text[:80]}"
            raise EncoderDriftError(float(cos[worst]), tolerance, probe, server=server)
        return StampCheck(self.fingerprint, float(cos.min()), tolerance)


def _read_probes(text: str) -> tuple[str, ...]:
    try:
        probes = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DamagedStampError(f"the index's probe list cannot be parsed: {exc}") from None
    if (
        not isinstance(probes, list)
        or not probes
        or not all(isinstance(p, str) and p.strip() for p in probes)
        or len(set(probes)) != len(probes)
    ):
        raise DamagedStampError(
            "the index's probe list must be a non-empty list of distinct non-empty strings; "
            "a stamp without probes would prove nothing"
        )
    try:
        check_texts(probes, "the index's probes")
    except InvalidInputError as exc:  # ctxemb never stamps a probe no tokenizer can encode
        raise DamagedStampError(f"the stamp is damaged: {exc}") from None
    return tuple(probes)


def _read_canary(encoded: str, rows: int, dim: int) -> np.ndarray:
    if not encoded.startswith("f32le:"):
        raise DamagedStampError("the index's canary is not in a known encoding")
    try:
        raw = base64.b64decode(encoded[len("f32le:") :], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DamagedStampError(f"the index's canary is not valid base64: {exc}") from None
    expected = 4 * rows * dim
    if len(raw) != expected:
        raise DamagedStampError(
            f"the index's canary has {len(raw)} bytes, expected {expected} "
            f"({rows} probe vectors of {dim} float32 values)"
        )
    canary = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(rows, dim)
    if not np.isfinite(canary).all():
        raise DamagedStampError("the index's canary holds values that are not finite numbers")
    if not (np.linalg.norm(canary, axis=1) > 0).all():
        raise DamagedStampError("the index's canary holds a zero vector, which proves nothing")
    return canary


def _canary(embedder: Embedder, probes: tuple[str, ...]) -> np.ndarray:
    # The probes are ctxemb's own texts: a contract with a small max_tokens cuts them as it cuts
    # everything, and that is no news to the caller, whose truncation counts they would inflate.
    docs = embedder.embed_float(list(probes), Role.DOCUMENT, warn=False)
    # Most contracts embed both roles alike: the query rows would be the same computation on
    # the same batch, the same numbers, and half of what opening an index costs.
    if embedder.roles_alike:
        queries = docs
    else:
        queries = embedder.embed_float(list(probes), Role.QUERY, warn=False)
    return np.concatenate([docs, queries]).astype(np.float32)


def agreement(stored: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """Per row, how closely ``fresh`` reproduces ``stored``: direction and length alike.

    ``<s, f> / max(|s|, |f|)²`` is the cosine when the lengths agree and falls below it as they
    part (a vector scaled by 1.01 scores 0.99), so one tolerance checks what a contract promises
    of its vectors, not only their angle. Rows that are not finite score ``-inf``; a row whose
    vectors are both zero scores 0.
    """
    a = np.asarray(stored, dtype=np.float64)
    b = np.asarray(fresh, dtype=np.float64)
    if a.shape != b.shape:
        raise InvalidInputError(f"cannot compare vectors of shapes {a.shape} and {b.shape}")
    num = (a * b).sum(axis=1)
    den = np.maximum((a * a).sum(axis=1), (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        score = num / np.maximum(den, 1e-30)
    return np.where(np.isfinite(score), score, -np.inf)
