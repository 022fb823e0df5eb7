"""An Embedder described now and built on first use: what a framework component holds.

Framework components (Haystack's ``@component``, LangChain's ``Embeddings``) are created when a
pipeline is built or loaded and serialised with ``to_dict``; their model should load only when
it is first needed. :class:`LazyEmbedder` keeps the contract (recorded for this process, so a
mismatch found later by fingerprint names its fields), the JSON configuration
(:meth:`~ctxemb_core.Embedder.config_for`) and, once built, the :class:`~ctxemb_core.Embedder`;
its two methods return vectors in the form a store keeps (:func:`~ctxemb_core.guard.storable`).
With a ``cache`` the Embedder reads vectors already embedded under the contract (by this
component or any other path: an :class:`~ctxemb_core.cache.EmbeddingCache` is shared by file).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.contract import EmbeddingContract, load_contract
from ctxemb_core.documents import remember
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.records import storable
from ctxemb_core.validate import check_texts

__all__ = [
    "LazyEmbedder",
    "built",
    "config_of",
    "embedder_for",
    "embedder_from_config",
    "lazy_exports",
    "lazy_package",
]


class LazyEmbedder:
    """The contract and settings of an :class:`~ctxemb_core.Embedder` built on first use.

    Args:
        contract: an :class:`~ctxemb_core.EmbeddingContract`, its ``to_dict()``, or the path of
            a contract JSON file.
        path: the model folder; used when it holds the contract's weights, else the model is
            found from the contract (bundled, registered, local cache).
        backend, device, batch_size, token_budget, show_progress: as :class:`Embedder`'s.
        url: embed through the server at ``http://host:port`` (``ctxemb serve``, or with
            ``api="openai"`` any OpenAI-compatible server; ``/embeddings`` is appended to the
            URL, as the ``openai`` client does), held to the contract by its
            fingerprint and canary (:mod:`ctxemb_core.remote`); no model is loaded here.
        api: the server's protocol, ``"ctxemb"`` or ``"openai"``.
        api_key_env: the environment variable that holds the server's API key; the config
            records the variable's name, never the key.
        served_model: the model id the server answers to, where it is not the contract's.
        cache: ``True`` for the default :class:`~ctxemb_core.cache.EmbeddingCache`
            (``$CTXEMB_CACHE_DIR``), or a cache; ``False`` (the default) embeds every text.
            Not part of :attr:`config` nor of the fingerprint: a hit is bit-identical.

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
        cache: bool | EmbeddingCache = False,
        url: str | None = None,
        api: str = "ctxemb",
        api_key_env: str | None = None,
        served_model: str | None = None,
    ) -> None:
        self.contract = load_contract(contract)
        remember(self.contract)
        settings: dict[str, Any] = {
            "backend": backend,
            "device": device,
            "batch_size": batch_size,
            "token_budget": token_budget,
        }
        # Checked now, not at the first embed deep inside a store write or a chain.
        Embedder.run_settings.check(settings)
        self.show_progress = show_progress
        self._embedder: Embedder | None = None
        self.cache = cache  # checked, and True made the default cache, by the setter
        #: What :meth:`Embedder.from_config` builds from (JSON-ready; see ``Embedder.config``).
        self.config = Embedder.config_for(self.contract, path=path, **settings)
        if url is not None:
            self.config["remote"] = remote_config(url, api, api_key_env, path, served_model)
            self.config["path_hint"] = None  # the server holds the model
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # A copy (pickle, deepcopy, another process) carries the recipe, not the loaded network.
        return {
            "contract": self.contract,
            "config": self.config,
            "show_progress": self.show_progress,
            "cache": self.cache,  # pickled as its path: the copy opens the same file
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.contract = state["contract"]
        self.config = state["config"]
        self.show_progress = state["show_progress"]
        self._embedder = None
        self.cache = state.get("cache")
        remember(self.contract)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LazyEmbedder:
        """One from an Embedder's config (:attr:`config`, ``Embedder.config()``), to build on
        first use: its contract read and a server's settings checked now, nothing loaded and no
        server asked (as a store rebuilding a saved embedding configuration wants)."""
        remote = config.get("remote")
        if isinstance(remote, Mapping):
            remote_config(
                remote.get("url"),
                remote.get("api", "ctxemb"),
                remote.get("api_key_env"),
                served_model=remote.get("served_model"),
            )
        lazy = cls.__new__(cls)
        contract = EmbeddingContract.from_dict(config["contract"])
        lazy.__setstate__({"contract": contract, "config": dict(config), "show_progress": None})
        return lazy

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint

    @property
    def cache(self) -> EmbeddingCache | None:
        """The embedding cache (``None``: none); a local resource, so not part of :attr:`config`.

        May be replaced at any time (``True``, ``False``, ``None`` or a cache), also once the
        Embedder is built: an evaluation hands a component the cache its other paths share.
        """
        return self._cache

    @cache.setter
    def cache(self, cache: bool | EmbeddingCache | None) -> None:
        self._cache = _cache(cache)
        if self._embedder is not None:
            self._embedder.cache = self._cache

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
                        self.config, show_progress=self.show_progress, cache=self.cache
                    )
        return self._embedder

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Documents embedded under the contract, as float32 rows a store keeps."""
        batch = check_texts(texts, "texts")
        return storable(self.get().embed_documents(batch), self.contract.precision)

    def embed_query(self, text: str) -> np.ndarray:
        """One query embedded under the contract, as the float32 vector a store searches with."""
        return storable(self.get().embed_query(text), self.contract.precision)


#: What a store keeps to embed with: an Embedder, or one built on first use.
Source = Embedder | LazyEmbedder
#: The options a :class:`LazyEmbedder` takes besides its contract.
_LAZY = frozenset(inspect.signature(LazyEmbedder).parameters) - {"contract"}


def embedder_for(given: EmbeddingContract | Source, **options: Any) -> Source:
    """What a store's embedding function holds for ``given``: an embedder as it is; for a server
    (``url=``, with only options a :class:`LazyEmbedder` takes) one built on first use, its
    options checked now and the server asked nothing; else an :class:`Embedder` now."""
    if isinstance(given, (Embedder, LazyEmbedder)):
        return given
    if options.get("url") is not None and set(options) <= _LAZY:
        return LazyEmbedder(given, **options)
    return Embedder(given, **options)


def built(source: Source) -> Embedder:
    """The :class:`Embedder` of ``source`` (a lazy one built, and its server checked, now)."""
    return source.get() if isinstance(source, LazyEmbedder) else source


def config_of(source: Source) -> dict[str, Any]:
    """``source``'s configuration (``Embedder.config()``), without building a lazy one."""
    return dict(source.config) if isinstance(source, LazyEmbedder) else source.config()


def embedder_from_config(config: Mapping[str, Any]) -> Source:
    """The embedder a saved configuration describes, as :func:`embedder_for` holds it: a
    server's built on first use (a store rebuilds it on every reopen), a local one now."""
    if isinstance(config.get("remote"), Mapping):
        return LazyEmbedder.from_config(config)
    return Embedder.from_config(config)


def remote_config(
    url: Any,
    api: Any,
    api_key_env: Any,
    path: str | os.PathLike[str] | None = None,
    served_model: Any = None,
) -> dict[str, Any]:
    """The ``remote`` part of an Embedder config, checked before any server is asked."""
    from ctxemb_core.remote import APIS, check_url

    if path is not None:
        raise InvalidInputError("url= and path= exclude each other: the server holds the model")
    check_url(url)
    if api not in APIS:
        raise InvalidInputError(f"api must be 'ctxemb' or 'openai', got {api!r}")
    if api_key_env is not None and (not isinstance(api_key_env, str) or not api_key_env):
        raise InvalidInputError(
            f"api_key_env must name an environment variable, got {api_key_env!r}"
        )
    if served_model is not None and (not isinstance(served_model, str) or not served_model.strip()):
        raise InvalidInputError(
            f"served_model must be the model id the server answers to, got {served_model!r}"
        )
    remote = {"url": url.rstrip("/"), "api": api, "api_key_env": api_key_env}
    return remote if served_model is None else {**remote, "served_model": served_model}


def _cache(cache: Any) -> EmbeddingCache | None:
    if cache is None or isinstance(cache, EmbeddingCache):
        return cache
    if isinstance(cache, bool):
        return EmbeddingCache() if cache else None
    raise InvalidInputError(
        f"cache must be True, False or an EmbeddingCache, got {type(cache).__name__}"
    )


def lazy_exports(
    package: str, homes: Mapping[str, str], names: Sequence[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` (PEP 562) that import each public name from
    its module (``homes``: name -> module under ``package``) on first use, so that importing
    an adapter does not import its framework until a name that needs it is asked for.

    Example:
        >>> __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)  # doctest: +SKIP
    """
    module = sys.modules[package]

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(module, name, value)  # asked once: later lookups find it on the module
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(module), *names})

    return __getattr__, __dir__


def lazy_package(package: str, home: str) -> Callable[[str], Any]:
    """A store adapter package's ``__getattr__`` (PEP 562): every public name lives in module
    ``home`` under ``package``, imported on first use of any of them.

    The ``ctxemb`` command builds each store command's parser from every store's options module
    (``ctxemb_chroma.cli``, ...), which imports its package: a package that imported its client
    library there made every command pay for every store's (chromadb ~1 CPU-s, qdrant-client
    ~1.5) before it opened one. The package checks that the library is installed
    (:meth:`~ctxemb_core.errors.MissingDependencyError.require`) and imports it with ``home``.

    Example:
        >>> __getattr__ = lazy_package(__name__, "_api")  # doctest: +SKIP
    """
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        # ``from package import submodule`` asks for the attribute first: a submodule not yet
        # imported is left to the import system, which then imports it alone.
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        api = importlib.import_module(f"{package}.{home}")
        if name in vars(module):  # a submodule that importing ``home`` imported
            return vars(module)[name]
        value = getattr(api, name)  # ``home``'s own names, then its __getattr__'s
        setattr(module, name, value)  # asked once: later lookups find it on the package
        return value

    return __getattr__
