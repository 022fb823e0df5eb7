"""The index stamp: what an index remembers about the contract that wrote it.

A stamp is flat metadata (strings and integers under ``ctxemb:`` keys) so that any store can hold
it: a Chroma collection's metadata, a JSON file beside a numpy matrix, a document's meta.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxemb_core.contract import EmbeddingContract, Role
from ctxemb_core.errors import (
    ContractMismatchError,
    DataFormatError,
    EncoderDriftError,
    InvalidInputError,
    MissingStampError,
)

if TYPE_CHECKING:
    from ctxemb_core.embedder import Embedder

__all__ = ["CANARY_TOLERANCE", "PROBES", "STAMP_SCHEMA", "IndexStamp", "StampCheck"]

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

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint

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
        }

    @staticmethod
    def is_stamped(metadata: Mapping[str, Any] | None) -> bool:
        """Whether a metadata mapping carries a ctxemb stamp."""
        return bool(metadata) and (_K + "fingerprint") in metadata  # type: ignore[operator]

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> IndexStamp:
        """Read a stamp back; extra (non-ctxemb) keys are ignored.

        Raises:
            MissingStampError: the metadata has no stamp.
            DataFormatError: a stamp is there but damaged (a field missing, a fingerprint that
                does not match its contract, canary bytes of the wrong size).
        """
        if not cls.is_stamped(metadata):
            raise MissingStampError(
                "the index carries no ctxemb stamp, so nothing proves which contract wrote its "
                "vectors; open it through ctxemb with adoption to verify and stamp it"
            )
        assert metadata is not None
        try:
            schema = int(metadata[_K + "schema"])
            stored_fp = str(metadata[_K + "fingerprint"])
            contract = EmbeddingContract.from_json(metadata[_K + "contract"])
            probes = tuple(json.loads(metadata[_K + "probes"]))
            encoded = str(metadata[_K + "canary"])
        except KeyError as exc:
            raise DataFormatError(f"the index's stamp lacks {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise DataFormatError(f"the index's stamp cannot be read: {exc}") from None
        if schema != STAMP_SCHEMA:
            raise DataFormatError(
                f"stamp schema {schema} is not supported (this ctxemb reads {STAMP_SCHEMA})"
            )
        if contract.fingerprint != stored_fp:
            raise DataFormatError(
                "the index's stamp is damaged: its fingerprint does not match its contract JSON"
            )
        if not encoded.startswith("f32le:"):
            raise DataFormatError("the index's canary is not in a known encoding")
        try:
            raw = base64.b64decode(encoded[len("f32le:") :], validate=True)
        except binascii.Error as exc:
            raise DataFormatError(f"the index's canary is not valid base64: {exc}") from None
        expected = 2 * len(probes) * contract.output_dim
        if len(raw) != 4 * expected:
            raise DataFormatError(
                f"the index's canary has {len(raw)} bytes, expected {4 * expected}"
            )
        canary = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        return cls(contract, probes, canary.reshape(2 * len(probes), contract.output_dim), schema)

    # -- checks ------------------------------------------------------------------------------

    def check_contract(self, contract: EmbeddingContract) -> None:
        """The cheap check for every call: the fingerprints must be equal.

        Raises:
            ContractMismatchError: naming each differing field with both values.
        """
        if not isinstance(contract, EmbeddingContract):
            raise InvalidInputError(f"expected an EmbeddingContract, got {type(contract).__name__}")
        if contract.fingerprint != self.fingerprint:
            raise ContractMismatchError(self.contract, contract)

    def verify(self, embedder: Embedder, tolerance: float = CANARY_TOLERANCE) -> StampCheck:
        """The full check on open: contract fingerprint, then the canary re-embedded.

        Raises:
            ContractMismatchError: the embedder's contract is another one.
            EncoderDriftError: same contract, but the probes re-embed to other vectors.
        """
        self.check_contract(embedder.contract)
        fresh = _canary(embedder, self.probes)
        cos = _rowwise_cosine(self.canary, fresh)
        worst = int(np.argmin(cos))
        if cos[worst] < tolerance:
            role = "document" if worst < len(self.probes) else "query"
            probe = f"{role}: {self.probes[worst % len(self.probes)]}"
            raise EncoderDriftError(float(cos[worst]), tolerance, probe)
        return StampCheck(self.fingerprint, float(cos.min()), tolerance)


def _canary(embedder: Embedder, probes: tuple[str, ...]) -> np.ndarray:
    docs = embedder.embed_float(list(probes), Role.DOCUMENT)
    queries = embedder.embed_float(list(probes), Role.QUERY)
    return np.concatenate([docs, queries]).astype(np.float32)


def _rowwise_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return num / np.maximum(den, 1e-12)
