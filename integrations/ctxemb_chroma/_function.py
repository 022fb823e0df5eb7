"""The contract as a Chroma embedding function, registered so Chroma rebuilds it on reopen."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, cast

from chromadb.api.models.CollectionCommon import CollectionCommon
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.types import Collection as CollectionModel
from chromadb.utils.embedding_functions import register_embedding_function

from ctxemb_chroma._store import configured_function
from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.contract import same_contract
from ctxemb_core.errors import ContractMismatchError
from ctxemb_core.guard import check_binding, storable
from ctxemb_core.index.driver import default_space
from ctxemb_core.lazy import Source, built, config_of, embedder_for, embedder_from_config

NAME = "ctxemb"

#: What the function is shown of a collection: the model Chroma fetched, or its collection.
Fetched = CollectionModel | CollectionCommon[Any]

# Where Chroma calls ``name()`` on a fetch (docs/chroma.md, "Chroma's own calls with ...").
_FETCH_CHECK = "validate_embedding_function_conflict_on_get"
# Frames between the function and the Chroma collection method that embeds through it.
_DEPTH = 8
_ADVICE = (
    "Create collections with ctxemb_chroma.open_collection(client, name, contract) or with "
    "client.create_collection(name, embedding_function=ef, metadata=ef.stamp_metadata()), "
    "which stamp them in the create call; stamp this one (an empty collection, or one whose "
    "vectors are this contract's) with open_collection(client, name, contract, adopt=True)."
)


class _Name:
    """``name``: the registry name on the class; on a function, also the check on fetch."""

    def __get__(
        self, ef: ContractEmbeddingFunction | None, owner: type | None = None
    ) -> Callable[[], str]:
        if ef is None:
            return _name

        def name() -> str:
            model = _fetched(sys._getframe(1))
            if model is not None:
                ef.check(model, embedding=False)
            return NAME

        return name


def _name() -> str:
    return NAME


def _fetched(caller: FrameType) -> CollectionModel | None:
    """The collection Chroma just fetched, when ``caller`` is Chroma's fetch-time comparison."""
    if caller.f_code.co_name != _FETCH_CHECK or caller.f_back is None:
        return None
    model = caller.f_back.f_locals.get("model")
    return model if isinstance(model, CollectionModel) else None


def _serving(frame: FrameType | None) -> CollectionCommon[Any] | None:
    """The Chroma collection whose method is embedding through the function, if any."""
    for _ in range(_DEPTH):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, CollectionCommon):
            return candidate
        frame = frame.f_back
    return None


@register_embedding_function
class ContractEmbeddingFunction(EmbeddingFunction[Documents]):
    """A Chroma ``EmbeddingFunction`` that embeds exactly as one contract says, persisted with
    the collection and rebuilt on reopen; it refuses another contract's stamp on fetch and
    before it embeds (``docs/chroma.md``, "Chroma's own calls with ``ContractEmbeddingFunction``").

    Example:
        >>> ef = ContractEmbeddingFunction(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
        >>> client.create_collection("docs", embedding_function=ef,
        ...                          metadata=ef.stamp_metadata())  # doctest: +SKIP
    """

    name = _Name()

    def __init__(self, contract: EmbeddingContract | Source, **embedder_options: Any) -> None:
        self._source = embedder_for(contract, **embedder_options)  # url=: built on first use
        self.contract = self._source.contract

    @property
    def embedder(self) -> Embedder:
        """The contract's Embedder (for ``url=``: built, and the server checked, on first use)."""
        return built(self._source)

    def __call__(self, input: Documents) -> Embeddings:
        self._check_serving()
        vectors = self.embedder.embed_documents(list(input))
        return list(storable(vectors, self.contract.precision))

    def embed_query(self, input: Documents) -> Embeddings:
        self._check_serving()
        vectors = self.embedder.embed_queries(list(input))
        return list(storable(vectors, self.contract.precision))

    def stamp_metadata(self) -> dict[str, str | int]:
        """The contract's stamp as collection metadata, for ``create_collection(metadata=...)``
        (stamped in the create call; merge other metadata into it as you like)."""
        return IndexStamp.from_embedder(self.embedder).to_metadata()

    def check(self, collection: Fetched, *, embedding: bool = True) -> None:
        """Refuse a collection of another contract (stamp, or persisted function), or, when
        about to embed for it, one without a stamp."""
        name, configured = configured_function(collection)
        check_binding(
            collection.metadata,
            self.contract,
            f"collection {collection.name!r}",
            configured=configured if name == NAME else None,
            require_stamp=embedding,
            advice=_ADVICE,
        )

    def _check_serving(self) -> None:
        collection = _serving(sys._getframe(2))
        if collection is not None:
            self.check(collection)

    def default_space(self) -> Space:
        return cast(Space, default_space(self.contract))  # what the contract's vectors are for

    def supported_spaces(self) -> list[Space]:
        return ["cosine", "ip", "l2"] if self.contract.normalize else ["ip", "l2"]

    def get_config(self) -> dict[str, Any]:
        # The embedder's config and the fingerprint validate_config checks.
        return {**config_of(self._source), "fingerprint": self.contract.fingerprint}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> ContractEmbeddingFunction:
        settings = {k: v for k, v in config.items() if k != "fingerprint"}
        return ContractEmbeddingFunction(embedder_from_config(settings))

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        contract = EmbeddingContract.from_dict(config["contract"])
        named = config.get("fingerprint")
        if named is not None and not (
            isinstance(named, str) and same_contract(contract, named, exact=True)
        ):
            raise ValueError("ctxemb embedding function config: fingerprint does not match")

    def validate_config_update(
        self, old_config: dict[str, Any], new_config: dict[str, Any]
    ) -> None:
        old = EmbeddingContract.from_dict(old_config["contract"])
        new = EmbeddingContract.from_dict(new_config.get("contract", old_config["contract"]))
        if not same_contract(old, new, exact=True):
            raise ContractMismatchError(old, new)
