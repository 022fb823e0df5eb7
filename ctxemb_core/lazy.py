"""An Embedder described now and built on first use: what a framework component holds.

Framework components (Haystack's ``@component``, LangChain's ``Embeddings``) are created when a
pipeline is built or loaded and serialised with ``to_dict``; their model should load only when
it is first needed. :class:`LazyEmbedder` keeps the contract (recorded for this process, so a
mismatch found later by fingerprint names its fields), the JSON configuration
(:meth:`~ctxemb_core.Embedder.config_for`) and, once built, the :class:`~ctxemb_core.Embedder`;
its two methods return vectors in the form a store keeps (:func:`~ctxemb_core.guard.storable`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._validate import check_positive_int, check_texts
from ctxemb_core.contract import EmbeddingContract, load_contract
from ctxemb_core.documents import remember
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import storable

__all__ = ["LazyEmbedder"]


class LazyEmbedder:
    """The contract and settings of an :class:`~ctxemb_core.Embedder` built on first use.

    Args:
        contract: an :class:`~ctxemb_core.EmbeddingContract`, its ``to_dict()``, or the path of
            a contract JSON file.
        path: the model folder; used when it holds the contract's weights, else the model is
            found from the contract (bundled, registered, local cache).
        backend, device, batch_size, token_budget, show_progress: as :class:`Embedder`'s.

    Example:
        >>> lazy = LazyEmbedder(contract_for("all-MiniLM-L6-v2"))
        >>> lazy.loaded
        False
        >>> lazy.embed_query("tea").shape  # doctest: +SKIP
        (384,)
    """

    def __init__(
        self,
        contract: EmbeddingContract | Mapping[str, Any] | str | os.PathLike[str],
        *,
        path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 64,
        token_budget: int = 2048,
        show_progress: bool | None = None,
    ) -> None:
        self.contract = load_contract(contract)
        remember(self.contract)
        # Checked now, not at the first embed deep inside a store write or a chain.
        if backend not in ("auto", "onnx", "torch"):
            raise InvalidInputError(f"backend must be 'auto', 'onnx' or 'torch', got {backend!r}")
        if not isinstance(device, str) or not device:
            raise InvalidInputError(f"device must be a device name such as 'cpu', got {device!r}")
        check_positive_int(batch_size, "batch_size")
        check_positive_int(token_budget, "token_budget")
        self.show_progress = show_progress
        #: What :meth:`Embedder.from_config` builds from (JSON-ready; see ``Embedder.config``).
        self.config = Embedder.config_for(
            self.contract,
            path=path,
            backend=backend,
            device=device,
            batch_size=batch_size,
            token_budget=token_budget,
        )
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # A copy (pickle, deepcopy, another process) carries the recipe, not the loaded network.
        return {
            "contract": self.contract,
            "config": self.config,
            "show_progress": self.show_progress,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.contract = state["contract"]
        self.config = state["config"]
        self.show_progress = state["show_progress"]
        remember(self.contract)
        self._embedder = None
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint

    @property
    def loaded(self) -> bool:
        """Whether the Embedder has been built."""
        return self._embedder is not None

    def get(self) -> Embedder:
        """The Embedder, built once (threads that ask at once wait for the one build)."""
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    self._embedder = Embedder.from_config(
                        self.config, show_progress=self.show_progress
                    )
        return self._embedder

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Documents embedded under the contract, as float32 rows a store keeps."""
        batch = check_texts(texts, "texts")
        return storable(self.get().embed_documents(batch), self.contract.precision)

    def embed_query(self, text: str) -> np.ndarray:
        """One query embedded under the contract, as the float32 vector a store searches with."""
        return storable(self.get().embed_query(text), self.contract.precision)
