"""Finding the encoder of a contract: what a reader needs when its alias moves.

A reader opened by alias switches index and query encoder together. :class:`Encoders` holds
what a process may embed with, and gives the one that makes a contract (:func:`same_contract`,
then the canary, proves it when the index is opened):

- embedders already built, or built on first use (a :class:`~ctxemb_core.lazy.LazyEmbedder`,
  a framework component holding one as ``.lazy``, an :meth:`Embedder.config`), loaded only
  when its contract is asked for;
- model folders, used for a contract whose weights digest is the folder's;
- exports (:func:`ctxemb_core.export.export_model`), by the contract in their manifest;
- URLs of servers (``ctxemb serve``) that serve the contract: held to it by fingerprint and
  canary, as any remote embedder is;
- with ``find=True``, the models this machine knows by digest (bundled, registered).

Nothing else is tried: a contract none of them makes is a :class:`NoEncoderError` naming it.

Example:
    >>> encoders = Encoders(fp32_embedder, "http://embed-int8:8080")  # doctest: +SKIP
    >>> encoders.get(int8_contract)                                  # doctest: +SKIP
    Embedder(all-MiniLM-L6-v2 ... precision=int8 [...], remote http://embed-int8:8080)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    ContractMismatchError,
    CtxembError,
    DataFormatError,
    InvalidInputError,
    ModelNotFoundError,
    NoEncoderError,
    RemoteEncoderError,
)
from ctxemb_core.lazy import LazyEmbedder

__all__ = ["Encoders"]

_URL = ("http://", "https://")


class Encoders:
    """The encoders a process may switch to, found by contract (see the module's docstring).

    Args:
        given: embedders (built, lazy, or as :meth:`Embedder.config` writes them), model or
            export folders, server URLs, in the order tried.
        find: also try the models this machine finds by the contract's weights digest.
        settings: run settings for the embedders built here (``batch_size``, ``api_key_env``,
            ``timeout``, ...).
    """

    def __init__(
        self, *given: Embedder | str | os.PathLike[str], find: bool = False, **settings: Any
    ) -> None:
        self._embedders: list[Embedder] = []
        self._lazy: list[tuple[EmbeddingContract, Any]] = []  # built when their contract is asked
        self._given: list[Any] = []  # what config() writes, in the order given
        self._folders: list[Path] = []
        self._urls: list[str] = []
        self._digests: dict[Path, str] = {}
        self._lock = threading.Lock()
        self.find = find
        self.settings = settings
        for item in given:
            self.add(item)

    def add(self, item: Any) -> None:
        """One more encoder (tried after those already given): an :class:`Embedder`, a
        :class:`~ctxemb_core.lazy.LazyEmbedder` or an object holding one as ``.lazy`` (a
        framework's embedding component), an :meth:`Embedder.config`, a model or export
        folder, or a server URL."""
        lazy = getattr(item, "lazy", None)
        if not isinstance(item, (Embedder, LazyEmbedder)) and isinstance(lazy, LazyEmbedder):
            item = lazy  # a framework component: its embedder, built when needed
        if isinstance(item, Embedder):
            self._embedders.append(item)
        elif isinstance(item, LazyEmbedder):
            self._lazy.append((item.contract, item))
        elif isinstance(item, Mapping):
            try:
                contract = EmbeddingContract.from_dict(dict(item["contract"]))
            except (KeyError, TypeError, ValueError) as exc:
                raise DataFormatError(
                    f"an encoder given as a mapping is an Embedder.config(): {exc}"
                ) from None
            self._lazy.append((contract, dict(item)))
        elif isinstance(item, str) and item.startswith(_URL):
            item = item.rstrip("/")
            self._urls.append(item)
        elif isinstance(item, (str, os.PathLike)):
            folder = Path(os.fspath(item))
            if not folder.is_dir():
                raise InvalidInputError(f"an encoder folder must be a directory: {folder}")
            self._folders.append(folder)
        else:
            raise InvalidInputError(
                "an encoder is an Embedder (built, lazy or its config()), a model or export "
                f"folder or a server URL, got {type(item).__name__}"
            )
        self._given.append(item)

    def config(self) -> list[Any]:
        """The encoders given, JSON-ready, in order (``Encoders(*config, find=...)`` finds the
        same): an embedder as its :meth:`Embedder.config` (the contract and where its model
        was found, never a loaded network), a folder or URL as its string."""
        out: list[Any] = []
        for item in self._given:
            if isinstance(item, (Embedder, LazyEmbedder)):
                out.append(item.config() if isinstance(item, Embedder) else dict(item.config))
            elif isinstance(item, Mapping):
                out.append(dict(item))
            else:
                out.append(os.fspath(item))
        return out

    def __repr__(self) -> str:
        return (
            f"Encoders({len(self._embedders)} embedders, {len(self._lazy)} not built, "
            f"folders={[str(f) for f in self._folders]}, "
            f"urls={self._urls}, find={self.find})"
        )

    def get(self, contract: EmbeddingContract, *, alias: str | None = None) -> Embedder:
        """The embedder of ``contract``: one given, else one built from a folder, a server or
        (``find``) this machine's models, kept for the next call.

        Raises:
            NoEncoderError: nothing given makes ``contract``.
        """
        if not isinstance(contract, EmbeddingContract):
            raise InvalidInputError(f"expected an EmbeddingContract, got {type(contract).__name__}")
        with self._lock:
            for embedder in self._embedders:
                if same_contract(contract, embedder.contract):
                    return embedder
            built = self._build(contract)
            if built is None:
                raise NoEncoderError(contract, alias)
            self._embedders.append(built)
            return built

    def _build(self, contract: EmbeddingContract) -> Embedder | None:
        for i, (made, lazy) in enumerate(self._lazy):
            if same_contract(contract, made):
                del self._lazy[i]
                if isinstance(lazy, LazyEmbedder):
                    return lazy.get()
                return Embedder.from_config(lazy, **self._run_settings())
        for folder in self._folders:
            found = self._from_folder(folder, contract)
            if found is not None:
                return found
        for url in self._urls:
            try:
                return Embedder(contract, url=url, **self.settings)
            except (ContractMismatchError, ModelNotFoundError, RemoteEncoderError):
                continue  # that server serves another contract, not under the id asked, or none
        if self.find:
            try:
                return Embedder(contract, **self._local())
            except ModelNotFoundError:
                return None
        return None

    def _run_settings(self) -> dict[str, Any]:
        # What Embedder.from_config takes beside a config: the local run settings given here.
        return {k: v for k, v in self._local().items() if k in ("cache", "show_progress")}

    def _local(self) -> dict[str, Any]:
        remote_only = {"api", "api_key_env", "served_model", "check_every", "check_seconds"}
        return {k: v for k, v in self.settings.items() if k not in remote_only | {"timeout"}}

    def _from_folder(self, folder: Path, contract: EmbeddingContract) -> Embedder | None:
        from ctxemb_core.folders.manifest import MANIFEST

        if (folder / MANIFEST).is_file():
            try:
                exported = Embedder.from_export(folder, **self._local())
            except CtxembError:
                return None
            return exported if same_contract(contract, exported.contract) else None
        if self._digest(folder) != contract.weights:
            return None
        return Embedder(contract, path=folder, **self._local())

    def _digest(self, folder: Path) -> str | None:
        from ctxemb_core.folders.digests import weights_digest

        if folder not in self._digests:
            try:
                self._digests[folder] = weights_digest(folder)
            except CtxembError:
                self._digests[folder] = ""
        return self._digests[folder] or None
