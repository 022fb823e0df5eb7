"""A reranker described now and built on first use: what a framework component holds.

A Haystack ranker or a LangChain compressor is created when a pipeline is built or loaded and
serialised with ``to_dict`` (or pickled); its model should load only when first needed.
:class:`LazyReranker` keeps the contract, the JSON configuration
(:meth:`~ctxemb_core.rerank.Reranker.config_for`) and, once built, the reranker of the contract's
regime; a copy carries the recipe, never the loaded network.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxemb_core.rerank._base import Reranker
from ctxemb_core.rerank.build import reranker_from_config
from ctxemb_core.rerank.contract import RerankerContract, load_reranker_contract

__all__ = ["LazyReranker"]


class LazyReranker:
    """The contract and settings of a reranker built on first use.

    Args:
        contract: a :class:`~ctxemb_core.rerank.RerankerContract`, its ``to_dict()``, or the
            path of its JSON file.
        path, backend, device, batch_size, token_budget, show_progress: as the rerankers'
            (checked now, not at the first rerank deep inside a pipeline).

    Example:
        >>> lazy = LazyReranker(rerank_contract_for("./ce"))  # doctest: +SKIP
        >>> lazy.loaded, lazy.get().rerank("tea", ["green tea"]).ids  # doctest: +SKIP
    """

    def __init__(
        self,
        contract: RerankerContract | Mapping[str, Any] | str | os.PathLike[str],
        *,
        path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 32,
        token_budget: int = 4096,
        show_progress: bool | None = None,
    ) -> None:
        self.contract = load_reranker_contract(contract)
        self.show_progress = show_progress
        #: What :func:`~ctxemb_core.rerank.reranker_from_config` builds from (JSON-ready).
        self.config = Reranker.config_for(
            self.contract,
            path=path,
            backend=backend,
            device=device,
            batch_size=batch_size,
            token_budget=token_budget,
        )
        self._reranker: Reranker | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # A copy (pickle, deepcopy, another process) carries the recipe, not the network.
        return {
            "contract": self.contract,
            "config": self.config,
            "show_progress": self.show_progress,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.contract = state["contract"]
        self.config = state["config"]
        self.show_progress = state["show_progress"]
        self._reranker = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LazyReranker({self.contract.describe()}, loaded={self.loaded})"

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint

    @property
    def loaded(self) -> bool:
        """Whether the reranker has been built."""
        return self._reranker is not None

    @property
    def built(self) -> Reranker | None:
        """The reranker if it has been built, else ``None`` (nothing is loaded)."""
        return self._reranker

    def get(self) -> Reranker:
        """The reranker, built once (threads that ask at once wait for the one build)."""
        if self._reranker is None:
            with self._lock:
                if self._reranker is None:
                    self._reranker = reranker_from_config(
                        self.config, show_progress=self.show_progress
                    )
        return self._reranker
