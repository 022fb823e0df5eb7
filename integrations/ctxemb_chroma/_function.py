"""The contract as a Chroma embedding function, registered so Chroma rebuilds it on reopen."""

from __future__ import annotations

from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function

from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.errors import ContractMismatchError
from ctxemb_core.guard import storable

NAME = "ctxemb"


@register_embedding_function
class ContractEmbeddingFunction(EmbeddingFunction[Documents]):
    """A Chroma ``EmbeddingFunction`` that embeds exactly as one contract says.

    Chroma persists ``get_config()`` (the whole contract) with the collection and calls
    ``build_from_config`` on reopen, so a raw ``client.get_collection(name)`` in a process that
    imported ``ctxemb_chroma`` embeds queries under the collection's own contract.
    ``validate_config_update`` raises on any change of it, but Chroma has already saved the
    change by then: :func:`~ctxemb_chroma.open_collection` compares the saved configuration
    with the stamp and refuses (or, with ``repair=True``, restores) it.

    Example:
        >>> ef = ContractEmbeddingFunction(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
        >>> client.create_collection("docs", embedding_function=ef)  # doctest: +SKIP
    """

    def __init__(self, contract: EmbeddingContract | Embedder, **embedder_options: Any) -> None:
        if isinstance(contract, Embedder):
            self.embedder = contract
        else:
            self.embedder = Embedder(contract, **embedder_options)
        self.contract = self.embedder.contract

    def __call__(self, input: Documents) -> Embeddings:
        vectors = self.embedder.embed_documents(list(input))
        return list(storable(vectors, self.contract.precision))

    def embed_query(self, input: Documents) -> Embeddings:
        vectors = self.embedder.embed_queries(list(input))
        return list(storable(vectors, self.contract.precision))

    @staticmethod
    def name() -> str:
        return NAME

    def default_space(self) -> Space:
        # On unit vectors cosine, inner product and L2 rank alike; without normalisation the
        # contract's vectors are meant for the inner product.
        return "cosine" if self.contract.normalize else "ip"

    def supported_spaces(self) -> list[Space]:
        return ["cosine", "ip", "l2"] if self.contract.normalize else ["ip", "l2"]

    def get_config(self) -> dict[str, Any]:
        # The embedder's own config (its path hints decide nothing: the digest does) and the
        # fingerprint, which validate_config checks against the contract.
        return {**self.embedder.config(), "fingerprint": self.contract.fingerprint}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> ContractEmbeddingFunction:
        settings = {k: v for k, v in config.items() if k != "fingerprint"}
        return ContractEmbeddingFunction(Embedder.from_config(settings))

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        contract = EmbeddingContract.from_dict(config["contract"])
        if config.get("fingerprint") not in (None, contract.fingerprint):
            raise ValueError("ctxemb embedding function config: fingerprint does not match")

    def validate_config_update(
        self, old_config: dict[str, Any], new_config: dict[str, Any]
    ) -> None:
        old = EmbeddingContract.from_dict(old_config["contract"])
        new = EmbeddingContract.from_dict(new_config.get("contract", old_config["contract"]))
        if new.fingerprint != old.fingerprint:
            raise ContractMismatchError(old, new)
