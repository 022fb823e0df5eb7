"""LangChain ``Embeddings`` bound to one contract: each method embeds in its own role."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.components import ContractComponent, component_embedder
from ctxemb_core.validate import texts_from_iterable


class ContractEmbeddings(ContractComponent, Embeddings):
    """Embeddings for LangChain made exactly as one contract says.

    ``embed_documents`` uses the document role and ``embed_query`` the query role, so the
    prefixes, pooling, normalisation and truncation of both sides come from one object and
    cannot drift apart (as ``HuggingFaceEmbeddings``' separate ``encode_kwargs`` and
    ``query_encode_kwargs`` can). The model is loaded on first use.

    Args:
        contract: an :class:`~ctxemb_core.EmbeddingContract`, its ``to_dict()``, or the path of
            a contract JSON file; or instead:
        model_name: a model name or folder, as ``HuggingFaceEmbeddings`` takes it; its contract
            is derived with :func:`~ctxemb_core.contract_for`, with the contract options as
            keywords (``pooling=``, ``query_prefix=``, ``document_prefix=``, ``normalize=`` or
            ``normalize_embeddings=``, ``truncate_dim=``, ``max_tokens=``, …). Settings a
            contract cannot honour (``encode_kwargs``, ``query_encode_kwargs``,
            ``model_kwargs``, ``multi_process``) are refused with the keywords to use.
        path: the model folder; used when it holds the contract's weights, else the model is
            found from the contract (bundled, registered, local cache).
        backend: ``"auto"`` (the default: ONNX Runtime, else torch), ``"onnx"`` or ``"torch"``.
        device: where the network runs (``"cpu"``).
        batch_size: the most texts in one forward pass (64).
        token_budget: the most padded tokens in one forward pass (2048).
        show_progress: a progress bar on long batches (``None``: on a terminal, for 1,000+).
        cache: ``True`` for the default :class:`~ctxemb_core.cache.EmbeddingCache`
            (``$CTXEMB_CACHE_DIR``) or a cache of your own: texts embedded before under the
            contract (by any path) are read back, bit-identical; ``False`` embeds every text.
        url: embed through the server at this base URL (``/embeddings`` is appended, as the
            ``openai`` client does) instead of loading the model:
            ``ctxemb serve`` (checked by its fingerprint and canary), or with ``api="openai"``
            any OpenAI-compatible server (checked by the canary); see ``docs/serve.md``.
        api: ``"ctxemb"`` (the default) or ``"openai"``.
        api_key_env: the environment variable holding the server's API key; the config
            records its name, never the key.
        served_model: the model id the server answers to, where it is not the contract's.

    Example:
        >>> embeddings = ContractEmbeddings(model_name="sentence-transformers/all-MiniLM-L6-v2")
        >>> len(embeddings.embed_query("how is green tea made"))  # doctest: +SKIP
        384
    """

    def __init__(
        self,
        contract: EmbeddingContract | Mapping[str, Any] | str | Path | None = None,
        *,
        model_name: str | Path | None = None,
        show_progress: bool | None = False,
        cache: bool | EmbeddingCache = False,
        **keywords: Any,
    ) -> None:
        # model_name= and the contract options, as HuggingFaceEmbeddings takes them; the
        # Embedder's settings among them are told apart, checked and defaulted by core.
        self.lazy = component_embedder(
            contract,
            model_name,
            keywords,
            component="ContractEmbeddings",
            model_keyword="model_name",
            show_progress=show_progress,
            cache=cache,
        )
        self.contract = self.lazy.contract
        self.config = self.lazy.config

    @property
    def embedder(self) -> Embedder:
        """The core :class:`~ctxemb_core.Embedder` (built once, on first use)."""
        return self.lazy.get()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents under the contract (document role); no texts, no vectors (as every
        LangChain ``Embeddings``: a store adding nothing calls this with ``[]``)."""
        batch = texts_from_iterable(texts)
        return self.lazy.embed_documents(batch).tolist() if batch else []

    def embed_query(self, text: str) -> list[float]:
        """Embed one query under the contract (query role)."""
        return self.lazy.embed_query(text).tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """:meth:`embed_documents` on a worker thread: the event loop keeps running while the
        model computes (ONNX Runtime and torch release the GIL)."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """:meth:`embed_query` on a worker thread."""
        return await asyncio.to_thread(self.embed_query, text)


def contract_embeddings(embeddings: Any) -> ContractEmbeddings:
    """The embeddings a guarded store needs; any other ``Embeddings`` is refused by name."""
    if not isinstance(embeddings, ContractEmbeddings):
        raise TypeError(
            "a ctxemb store needs ContractEmbeddings (its contract is what the store is checked "
            f"against), got {type(embeddings).__name__}; wrap the model's contract: "
            "ContractEmbeddings(model_name=...) or ContractEmbeddings(contract)"
        )
    return embeddings
