"""LlamaIndex ``BaseEmbedding`` bound to one contract: queries and texts each in their own role."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.callbacks.base import CallbackManager

from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.components import ContractComponent, component_embedder, embedder_arguments
from ctxemb_core.errors import InvalidArgumentsError, InvalidInputError
from ctxemb_core.lazy import LazyEmbedder
from ctxemb_llamaindex import _origins

#: LlamaIndex's own cap on ``embed_batch_size``; ctxemb plans its forward passes from token
#: counts, so LlamaIndex hands it the largest batches it will (its default, 10, costs ~5 %).
_LARGEST_BATCH = 2048


class ContractEmbedding(ContractComponent, BaseEmbedding):
    """A LlamaIndex embedding model made exactly as one contract says.

    Queries (``get_query_embedding``, retrievers, query engines) are embedded in the contract's
    query role and texts (``get_text_embedding[_batch]``, indexes, ingestion pipelines) in its
    document role, sync and async, so both sides share prefixes, pooling, normalisation and
    truncation. Works as ``Settings.embed_model``. ``to_dict``/``from_dict`` round-trip exactly
    (the contract and the embedder's settings under ``ctxemb``), and an ``IngestionCache``
    keyed on them misses when the contract changes. The model is loaded on first use.

    Args:
        contract: an :class:`~ctxemb_core.EmbeddingContract`, its ``to_dict()``, or the path of
            a contract JSON file; or instead:
        model_name: a model name or folder, as LlamaIndex's ``HuggingFaceEmbedding`` takes it;
            its contract is derived with :func:`~ctxemb_core.contract_for`, with the contract
            options as keywords (``pooling=``, ``query_prefix=``, ``document_prefix=``,
            ``normalize=``, ``truncate_dim=``, ``max_tokens=``, …). A name not found is
            refused with the nearest known names.
        path, backend, device, batch_size, token_budget: the embedder's settings (as
            :class:`~ctxemb_core.Embedder`'s).
        url, api, api_key_env, served_model: embed through a server held to the contract
            (``ctxemb serve``, or ``api="openai"``); see ``docs/serve.md``.
        cache: ``True`` for ctxemb's contract-keyed embedding cache (not LlamaIndex's
            ``embeddings_cache``, which is keyed by text alone and is refused).
        show_progress: a progress bar on long batches.
        embed_batch_size, num_workers, callback_manager: LlamaIndex's own.

    Example:
        >>> from llama_index.core import Settings
        >>> Settings.embed_model = ContractEmbedding(model_name="all-MiniLM-L6-v2")
        >>> len(Settings.embed_model.get_query_embedding("green tea"))  # doctest: +SKIP
        384
    """

    model_name: str = Field(default="unknown", description="The contract's model.")
    embed_batch_size: int = Field(default=_LARGEST_BATCH, gt=0, le=_LARGEST_BATCH)
    ctxemb: dict[str, Any] = Field(
        default_factory=dict,
        description="The contract and the embedder's settings: what builds this model again.",
    )
    _lazy: LazyEmbedder = PrivateAttr()

    def __init__(
        self,
        contract: EmbeddingContract | Mapping[str, Any] | str | Path | None = None,
        *,
        model_name: str | Path | None = None,
        ctxemb: Mapping[str, Any] | None = None,
        show_progress: bool | None = False,
        cache: bool | EmbeddingCache = False,
        embed_batch_size: int = _LARGEST_BATCH,
        num_workers: int | None = None,
        callback_manager: CallbackManager | None = None,
        embeddings_cache: Any = None,
        **keywords: Any,
    ) -> None:
        if embeddings_cache is not None:
            raise InvalidInputError(
                "ContractEmbedding takes no embeddings_cache: LlamaIndex's cache is keyed by "
                "the text alone, so a vector of another model would come back; pass cache=True "
                "(ctxemb's cache, keyed by the contract)"
            )
        if ctxemb is not None:  # from_dict: the settings to_dict wrote
            contract, model_name, keywords = _rebuilt(ctxemb, contract, model_name, keywords)
        lazy = component_embedder(
            contract,
            model_name,
            keywords,
            component="ContractEmbedding",
            model_keyword="model_name",
            show_progress=show_progress,
            cache=cache,
        )
        fields: dict[str, Any] = {
            "model_name": lazy.contract.model,
            "embed_batch_size": embed_batch_size,
            "num_workers": num_workers,
            "ctxemb": embedder_arguments(lazy),
        }
        if callback_manager is not None:
            fields["callback_manager"] = callback_manager
        super().__init__(**fields)
        self._lazy = lazy

    @classmethod
    def class_name(cls) -> str:
        return "ContractEmbedding"

    @property
    def contract(self) -> EmbeddingContract:
        return self._lazy.contract

    @property
    def embedder(self) -> Embedder:
        """The core :class:`~ctxemb_core.Embedder` (built once, on first use)."""
        return self._lazy.get()

    def _queries(self, texts: list[str]) -> list[list[float]]:
        vectors = [self._lazy.embed_query(t) for t in texts]
        _origins.note(vectors, self.fingerprint, "query")
        return [v.tolist() for v in vectors]

    def _texts(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._lazy.embed_documents(texts)
        _origins.note(vectors, self.fingerprint, "document")
        return vectors.tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._queries([query])[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._texts([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._texts(list(texts))

    # On a worker thread: the event loop runs on while the model computes (it frees the GIL).
    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    def get_agg_embedding_from_queries(
        self, queries: list[str], agg_fn: Callable[..., list[float]] | None = None
    ) -> list[float]:
        """LlamaIndex's mean of the queries' vectors, noted as this contract's query vector."""
        vector = super().get_agg_embedding_from_queries(queries, agg_fn)
        _origins.note([vector], self.fingerprint, "query")
        return vector

    async def aget_agg_embedding_from_queries(
        self, queries: list[str], agg_fn: Callable[..., list[float]] | None = None
    ) -> list[float]:
        vector = await super().aget_agg_embedding_from_queries(queries, agg_fn)
        _origins.note([vector], self.fingerprint, "query")
        return vector


def _rebuilt(
    ctxemb: Mapping[str, Any], contract: Any, model_name: Any, keywords: dict[str, Any]
) -> tuple[Any, None, dict[str, Any]]:
    """The arguments ``ctxemb`` (what ``to_dict`` wrote) stands for; given alone, or with the
    ``model_name`` it wrote (the contract's model)."""
    if not isinstance(ctxemb, Mapping) or "contract" not in ctxemb:
        raise InvalidArgumentsError(
            "ContractEmbedding's ctxemb= is what to_dict wrote (a mapping with 'contract'); "
            f"got {ctxemb!r}"
        )
    if contract is not None or keywords:
        raise InvalidArgumentsError(
            "ContractEmbedding got ctxemb= (a to_dict's settings) and other settings; pass one"
        )
    given = dict(ctxemb)
    written = given["contract"]
    model = written.get("model") if isinstance(written, Mapping) else None
    if model_name is not None and str(model_name) != str(model):
        raise InvalidArgumentsError(
            f"ContractEmbedding got model_name={model_name!r} and ctxemb= of a contract of "
            f"{model!r}; the contract decides the model: leave model_name out"
        )
    return given.pop("contract"), None, given
