"""What both Haystack embedders share: one contract, a lazily built Embedder, serialisation."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from haystack import default_from_dict

from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.components import component_contract
from ctxemb_core.lazy import LazyEmbedder
from ctxemb_core.validate import check_flag


class _ContractEmbedding:
    """What both embedders share: the contract, the lazily built Embedder, serialisation."""

    def __init__(
        self,
        contract: EmbeddingContract | Mapping[str, Any] | str | Path | None,
        model: str | Path | None,
        options: dict[str, Any],
        role: Literal["query", "document"],
        path: str | Path | None,
        backend: str,
        device: str,
        batch_size: int,
        token_budget: int,
        progress_bar: bool,
        cache: bool,
        remote: Mapping[str, Any] | None = None,
    ) -> None:
        # model= and the contract options, as Haystack's own embedders take them; serialised as
        # the contract they resolved to, so a pipeline reloaded later embeds as this one did.
        resolved = component_contract(
            contract, model, options, component=type(self).__name__, role=role
        )
        self.lazy = LazyEmbedder(
            resolved,
            path=path,
            backend=backend,
            device=device,
            batch_size=batch_size,
            token_budget=token_budget,
            show_progress=progress_bar,
            # A flag, so that to_dict stays plain JSON: True is the default EmbeddingCache.
            cache=check_flag(cache, "cache"),
            **(remote or {}),
        )
        self.contract = self.lazy.contract
        self.progress_bar = progress_bar

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint

    @property
    def embedder(self) -> Embedder | None:
        """The core Embedder once warmed up, else ``None``."""
        return self.lazy.get() if self.lazy.loaded else None

    def warm_up(self) -> None:
        """Load the model (once; later calls do nothing)."""
        self.lazy.get()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Rebuild from :meth:`to_dict` (the model is found again as ``Embedder.from_config``
        finds it: the folder in ``path`` if it holds the contract's weights)."""
        return default_from_dict(cls, data)

    def _params(self) -> dict[str, Any]:
        c = self.lazy.config
        return {
            "contract": c["contract"],
            "path": c["path_hint"],
            **{k: c[k] for k in Embedder.run_settings.names},
            "progress_bar": self.progress_bar,
            "cache": self.lazy.cache is not None,
            # Only for an embedder that embeds through a server: the URL and the name of the
            # key's environment variable, never the key.
            **_remote_params(c.get("remote")),
        }


def _remote_params(remote: Mapping[str, Any] | None) -> dict[str, Any]:
    if remote is None:
        return {}
    params = {"url": remote["url"], "api": remote["api"], "api_key_env": remote["api_key_env"]}
    if remote.get("served_model") is not None:
        params["served_model"] = remote["served_model"]
    return params
