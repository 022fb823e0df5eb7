"""The models one ``ctxemb serve`` process serves: each contract under its own model id.

A server of several contracts (say both sides of an upgrade) holds one :class:`ServedModel`
per model id. Every request that embeds, and every route that describes a contract, names the
model; with one model served, a request that names none is that model's (the server's wire is
the same as before several could be served), with several it is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxemb_core.contract import EmbeddingContract, Role, same_contract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.remote import FINGERPRINT_HEADER
from ctxemb_core.stamp import IndexStamp

if TYPE_CHECKING:
    from ctxemb_core.embedder import Embedder
    from ctxemb_core.serve.batcher import Batcher

__all__ = ["ServedModel", "check_models"]


@dataclass
class ServedModel:
    """One contract served under one model id (its role ids are ``ID:query``, ``ID:document``).

    Attributes:
        name: the model id clients send.
        embedder: the contract's embedder.
        batcher: the model's own queue and batches.
        stamp: the contract's stamp (probes and canary vectors), published at ``/v1/contract``.
        symmetric: whether both roles give the same vectors (no prefix differs, one encoder).
    """

    name: str
    embedder: Embedder
    batcher: Batcher
    stamp: IndexStamp
    symmetric: bool
    #: The fingerprint header of every response about this model.
    header: tuple[bytes, bytes]
    #: The body of ``GET /v1/contract`` for this model.
    contract_body: bytes

    @classmethod
    def build(cls, name: str, embedder: Embedder, batcher: Batcher, instance: str) -> ServedModel:
        c = embedder.contract
        symmetric = c.query_prefix == c.document_prefix and c.query_model is None
        stamp = IndexStamp.from_embedder(embedder)
        body = {
            "model": name,
            "fingerprint": c.fingerprint,
            "instance": instance,
            "contract": c.to_dict(),
            "stamp": stamp.to_metadata(),
            "symmetric": symmetric,
        }
        return cls(
            name=name,
            embedder=embedder,
            batcher=batcher,
            stamp=stamp,
            symmetric=symmetric,
            header=(FINGERPRINT_HEADER.encode(), c.fingerprint.encode()),
            contract_body=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(),
        )

    @property
    def contract(self) -> EmbeddingContract:
        return self.embedder.contract

    @property
    def model_ids(self) -> tuple[str, str, str]:
        """The ids a request may name: the model, and the model for each role."""
        return (self.name, f"{self.name}:query", f"{self.name}:document")

    def ids(self) -> dict[str, Role | None]:
        """Every id this model answers to and the role it names: its own three, and the id of
        its recipe (``ctxemb:<recipe>``, what ctxemb's own client sends)."""
        named = dict(zip(self.model_ids, (None, Role.QUERY, Role.DOCUMENT), strict=True))
        return {**named, self.contract.recipe_id: None}


def check_name(name: Any) -> str:
    """``name`` if it can be a model id: a non-empty string without ``:``."""
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise InvalidInputError(
            f"name must be a non-empty model id without ':' (':query' and ':document' name "
            f"the roles), got {name!r}"
        )
    return name


def check_models(models: Mapping[str, Embedder], *, named: bool = True) -> None:
    """Refuse what one server cannot serve: no model, a remote embedder, a bad id (``named``:
    the ids were given, not the contracts' model names), or two ids of one contract (by
    :func:`same_contract`: a request by recipe could not tell them apart, and one is enough)."""
    if not models:
        raise InvalidInputError("a server serves at least one model; none was given")
    seen: list[tuple[str, EmbeddingContract]] = []
    for name, embedder in models.items():
        which = f"model {name!r}: " if len(models) > 1 else ""
        remote = getattr(embedder, "remote", None)
        if remote is not None:
            raise InvalidInputError(
                f"{which}serve an Embedder that holds its model here, not one that embeds "
                f"through {remote.url}"
            )
        if named:
            check_name(name)
        for other, contract in seen:
            if same_contract(contract, embedder.contract):
                raise InvalidInputError(
                    f"models {other!r} and {name!r} have the same contract "
                    f"({contract.describe()}): serve it once, under one id"
                )
        seen.append((name, embedder.contract))
