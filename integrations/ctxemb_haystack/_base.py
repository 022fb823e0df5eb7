"""What the Haystack components share: the embedders' base, ``from_dict``, ``run_async`` and
the shapes of their inputs.

The model a component holds, the arguments it takes for it and the keywords its ``to_dict``
writes for it are core's (:mod:`ctxemb_core.components`); what is left here is Haystack's:
``default_to_dict``/``default_from_dict``, a list of ``Document``, and ``run_async``.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import os
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Literal, TypeVar

from haystack import Document, default_from_dict

from ctxemb_core import Embedder
from ctxemb_core.components import ContractComponent, component_embedder, embedder_arguments
from ctxemb_core.validate import check_flag

_C = TypeVar("_C")


class Serialised:
    """A component that Haystack's ``default_from_dict`` rebuilds from its ``to_dict``."""

    @classmethod
    def from_dict(cls: type[_C], data: dict[str, Any]) -> _C:
        """Rebuild from :meth:`to_dict`, from a copy: the caller's dict is left as it was."""
        return default_from_dict(cls, copy.deepcopy(data))


def documents_of(value: Any, who: str, hint: str = "") -> list[Document]:
    """``value`` if it is a list of ``Document``, else a ``TypeError`` naming ``who``."""
    if not isinstance(value, list) or not all(isinstance(d, Document) for d in value):
        raise TypeError(f"{who} expects a list of Documents, got {type(value).__name__}{hint}")
    return value


def text_of(document: Document, meta_fields: list[str], separator: str) -> str:
    """What is embedded or scored of a document, as Haystack's embedders and rankers take it:
    the values of ``meta_fields`` it has, then its content (``""`` when it has none)."""
    fields = [str(document.meta[k]) for k in meta_fields if document.meta.get(k) is not None]
    return separator.join([*fields, document.content or ""])


def in_thread(
    run: Callable[..., dict[str, Any]],
) -> Callable[..., Coroutine[Any, Any, dict[str, Any]]]:
    """A component's ``run_async``: its ``run`` (same inputs and outputs, as Haystack checks)
    in a worker thread, so an async pipeline's event loop keeps running while it computes."""

    @functools.wraps(run)
    async def run_async(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        call = functools.partial(run, self, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, call)

    run_async.__name__ = run_async.__qualname__ = "run_async"
    run_async.__doc__ = ":meth:`run` in a worker thread."
    return run_async


class ModelComponent(ContractComponent, Serialised):
    """A component that holds one model, built on first use: ``lazy``, a
    :class:`~ctxemb_core.lazy.LazyEmbedder` or a :class:`~ctxemb_core.rerank.LazyReranker`.

    Built from ``contract=`` or ``model=`` (as Haystack's own components take a model) and
    keywords: the model's settings and the contract's options, told apart, checked and
    defaulted by core (:mod:`ctxemb_core.components`). Serialised as the contract they resolved
    to, so a pipeline reloaded later runs as this one did. Each kind says how its model is
    built (:meth:`_model`).
    """

    def __init__(
        self,
        *,
        contract: Any = None,
        model: str | os.PathLike[str] | None = None,
        progress_bar: bool = False,
        **keywords: Any,
    ) -> None:
        build, how = self._model(keywords)
        how |= {"component": type(self).__name__, "show_progress": progress_bar}
        self.lazy = build(contract, model, keywords, **how)
        self.contract = self.lazy.contract
        self.progress_bar = progress_bar

    def _model(self, keywords: dict[str, Any]) -> tuple[Callable[..., Any], dict[str, Any]]:
        """The core function that builds the model, and its keywords for this component."""
        raise NotImplementedError

    def warm_up(self) -> None:
        """Load the model (once; later calls do nothing)."""
        self.lazy.get()


class _ContractEmbedding(ModelComponent):
    """What both embedders share: the Embedder and its serialisation (``from_dict`` finds the
    model again as ``Embedder.from_config`` does: the folder in ``path`` if it holds the
    contract's weights, else from the contract).

    The Embedder's settings are ``path=``, ``backend=``, ``device=``, ``batch_size=``,
    ``token_budget=``, ``url=``, ``api=``, ``api_key_env=``, ``served_model=``
    (:func:`~ctxemb_core.components.component_embedder`).
    """

    _role: ClassVar[Literal["query", "document"]]

    def _model(self, keywords: dict[str, Any]) -> tuple[Callable[..., Any], dict[str, Any]]:
        # cache= is a flag, so that to_dict stays plain JSON: True is the default EmbeddingCache.
        cache = check_flag(keywords.pop("cache", False), "cache")
        return component_embedder, {"role": self._role, "cache": cache}

    @property
    def embedder(self) -> Embedder | None:
        """The core Embedder once warmed up, else ``None``."""
        return self.lazy.get() if self.lazy.loaded else None

    def _params(self) -> dict[str, Any]:
        cache = self.lazy.cache is not None
        return {**embedder_arguments(self.lazy), "progress_bar": self.progress_bar, "cache": cache}
