"""Haystack embedders built from one contract: the contract decides every part of the recipe."""

from __future__ import annotations

import dataclasses
from typing import Any

from haystack import Document, component, default_to_dict

from ctxemb_core.documents import stamp_meta
from ctxemb_haystack._base import _ContractEmbedding, documents_of, in_thread, text_of


@component
class ContractDocumentEmbedder(_ContractEmbedding):
    """Embeds Haystack ``Document`` objects under one contract, for an indexing pipeline.

    The contract supplies what Haystack's own embedders take as loose arguments (the document
    prefix, pooling, normalisation, Matryoshka truncation, precision), so the query side cannot
    drift from it. Each returned document is a copy carrying its vector in ``embedding`` and the
    contract's fingerprint in ``meta["ctxemb_fingerprint"]``; the input documents are unchanged.

    Args:
        contract: an :class:`~ctxemb_core.EmbeddingContract`, its ``to_dict()``, or the path of
            a contract JSON file; or instead:
        model: a model name or folder, as Haystack's ``SentenceTransformersDocumentEmbedder``
            takes it; its contract is derived with :func:`~ctxemb_core.contract_for`, and the
            contract options are taken as keywords (``pooling=``, ``query_prefix=``,
            ``document_prefix=``, ``normalize=`` or ``normalize_embeddings=``,
            ``truncate_dim=``, ``max_tokens=``, ``precision=``, …). ``to_dict`` stores the
            resolved contract. A one-sided ``prefix=`` and ``suffix=`` are refused: a contract
            pins both roles' prefixes.
        path, backend, device, batch_size, token_budget: the Embedder's settings, checked
            when the component is built: the model folder (used when it holds the contract's
            weights, else the model is found from the contract); ``"auto"`` (ONNX Runtime,
            else torch), ``"onnx"`` or ``"torch"``; where the network runs (``"cpu"``); the
            most texts (64) and padded tokens (2048) in one forward pass.
        progress_bar: show a progress bar while embedding (``ContractTextEmbedder``: not by
            default).
        cache: read vectors already embedded under the contract from the default
            :class:`~ctxemb_core.cache.EmbeddingCache` (``$CTXEMB_CACHE_DIR``) and store new ones
            there; the vectors and the fingerprint are the same with or without it.
        meta_fields_to_embed: metadata fields whose values are embedded with the content.
        embedding_separator: joins those values and the content.
        url: embed through the server at this base URL (``/embeddings`` is appended, as the
            ``openai`` client does) instead of loading the model:
            ``ctxemb serve`` (checked by its fingerprint and canary), or with ``api="openai"``
            any OpenAI-compatible server (checked by the canary); see ``docs/serve.md``.
        api: ``"ctxemb"`` (the default) or ``"openai"``.
        api_key_env: the environment variable holding the server's API key; ``to_dict``
            stores its name, never the key.
        served_model: the model id the server answers to, where it is not the contract's.

    Example:
        >>> embedder = ContractDocumentEmbedder(model="all-MiniLM-L6-v2")
        >>> docs = embedder.run([Document(content="Green tea is steamed.")])["documents"]
        >>> len(docs[0].embedding), docs[0].meta["ctxemb_fingerprint"][:8]  # doctest: +SKIP
        (384, 'd9c7a9c1')
    """

    _role = "document"

    def __init__(
        self,
        *,
        meta_fields_to_embed: list[str] | None = None,
        embedding_separator: str = "\n",
        progress_bar: bool = True,
        **keywords: Any,
    ) -> None:
        # Not super(): @component rebuilds the class, and the zero-argument form names the old one.
        _ContractEmbedding.__init__(self, progress_bar=progress_bar, **keywords)
        self.meta_fields_to_embed = list(meta_fields_to_embed or [])
        self.embedding_separator = embedding_separator

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            **self._params(),
            meta_fields_to_embed=self.meta_fields_to_embed,
            embedding_separator=self.embedding_separator,
        )

    @component.output_types(documents=list[Document], fingerprint=str)
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """Embed documents; returns ``documents`` (stamped copies) and the ``fingerprint``.

        Raises:
            TypeError: ``documents`` is not a list of ``Document``.
            ContractMismatchError: a document already carries another contract's fingerprint
                (remove ``meta["ctxemb_fingerprint"]`` to re-embed it deliberately).
        """
        hint = "; to embed a query string, use ContractTextEmbedder"
        documents = documents_of(documents, "ContractDocumentEmbedder", hint)
        fields, separator = self.meta_fields_to_embed, self.embedding_separator
        texts = [text_of(d, fields, separator) for d in documents]
        # The digest of the text embedded (metadata fields included): what a re-index compares.
        pairs = zip(documents, texts, strict=True)
        metas = [stamp_meta(d.meta, self.contract, text=t) for d, t in pairs]
        if not documents:
            return {"documents": [], "fingerprint": self.fingerprint}
        vectors = self.lazy.embed_documents(texts)
        out = [
            dataclasses.replace(d, embedding=v.tolist(), meta=m)
            for d, v, m in zip(documents, vectors, metas, strict=True)
        ]
        return {"documents": out, "fingerprint": self.fingerprint}

    run_async = in_thread(run)


@component
class ContractTextEmbedder(_ContractEmbedding):
    """Embeds a query string under one contract (query role), for a query pipeline.

    Outputs the ``embedding`` and the ``fingerprint`` of the contract it was made under;
    connect both to :class:`~ctxemb_haystack.ContractRetriever`, which refuses a store written
    under another contract. Arguments as :class:`ContractDocumentEmbedder` (no metadata); with
    ``cache=True`` a query embedded before (by any path, under the contract) is read back;
    with ``url=`` the query is embedded by a server held to the contract.

    Example:
        >>> embedder = ContractTextEmbedder(model="all-MiniLM-L6-v2")
        >>> out = embedder.run("how is green tea made")  # doctest: +SKIP
        >>> len(out["embedding"]), out["fingerprint"] == embedder.contract.fingerprint
        (384, True)
    """

    _role = "query"

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, **self._params())

    @component.output_types(embedding=list[float], fingerprint=str)
    def run(self, text: str) -> dict[str, Any]:
        """Embed one query; returns ``embedding`` and ``fingerprint``.

        Raises:
            TypeError: ``text`` is not a string (use ContractDocumentEmbedder for documents).
        """
        if not isinstance(text, str):
            raise TypeError(
                "ContractTextEmbedder expects a string; to embed a list of Documents, use "
                "ContractDocumentEmbedder"
            )
        vector = self.lazy.embed_query(text)
        return {"embedding": vector.tolist(), "fingerprint": self.fingerprint}

    run_async = in_thread(run)
