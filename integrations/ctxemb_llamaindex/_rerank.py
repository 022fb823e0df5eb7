"""A LlamaIndex node postprocessor that reranks under a cross-encoder's reranker contract."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from ctxemb_core.components import ContractComponent, component_reranker, reranker_arguments
from ctxemb_core.errors import InvalidArgumentsError, InvalidInputError
from ctxemb_core.rerank import LazyReranker, RerankerContract, RerankKind
from ctxemb_core.validate import check_positive_int


class ContractRerank(ContractComponent, BaseNodePostprocessor):
    """LlamaIndex's ``SentenceTransformerRerank`` under a reranker contract: the pair's form,
    truncation and activation are the contract's, so a score means one thing wherever it is
    compared (a threshold, an evaluation), and ``to_dict`` carries the contract.

    Args:
        contract: a ``cross_encoder`` :class:`~ctxemb_core.rerank.RerankerContract`, its
            ``to_dict()``, or its JSON file's path; or instead:
        model_name: a cross-encoder's name or folder, as ``SentenceTransformerRerank`` takes
            it (read with :func:`~ctxemb_core.rerank.rerank_contract_for`).
        top_n: the most nodes returned, best first.
        path, backend, device, batch_size, token_budget: the reranker's settings.

    Example:
        >>> rerank = ContractRerank(model_name="./cross-encoder", top_n=3)  # doctest: +SKIP
        >>> index.as_query_engine(node_postprocessors=[rerank])  # doctest: +SKIP
    """

    top_n: int = 3
    ctxemb: dict[str, Any] = Field(default_factory=dict)
    _lazy: LazyReranker = PrivateAttr()

    def __init__(
        self,
        contract: RerankerContract | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        model_name: str | os.PathLike[str] | None = None,
        top_n: int = 3,
        ctxemb: Mapping[str, Any] | None = None,
        **keywords: Any,
    ) -> None:
        if ctxemb is not None:  # from_dict: the settings to_dict wrote
            if contract is not None or model_name is not None or keywords:
                raise InvalidArgumentsError(
                    "ContractRerank got ctxemb= (a to_dict's settings) and other settings"
                )
            keywords = dict(ctxemb)
            contract = keywords.pop("contract", None)
        lazy = component_reranker(
            contract,
            model_name,
            keywords,
            component="ContractRerank",
            kind=RerankKind.CROSS_ENCODER,
            model_keyword="model_name",
            show_progress=False,
        )
        fields: dict[str, Any] = {"top_n": check_positive_int(top_n, "top_n")}
        fields["ctxemb"] = reranker_arguments(lazy)
        super().__init__(**fields)
        self._lazy = lazy

    @classmethod
    def class_name(cls) -> str:
        return "ContractRerank"

    @property
    def contract(self) -> RerankerContract:
        return self._lazy.contract

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise InvalidInputError("ContractRerank needs the query (query_bundle or query_str)")
        if not nodes:
            return []
        texts = [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        ranking = self._lazy.get().rerank(query_bundle.query_str, texts, top_k=self.top_n)
        return [NodeWithScore(node=nodes[r.index].node, score=r.score) for r in ranking]
