"""Finding the encoder of a contract: what a reader needs when its alias moves.

A reader opened by alias switches index and query encoder together. :class:`Encoders` holds
what a process may embed with, and gives the one that makes a contract (:func:`same_contract`,
then the canary, proves it when the index is opened):

- embedders already built;
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
from pathlib import Path
from typing import Any

from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    ContractMismatchError,
    CtxembError,
    InvalidInputError,
    ModelNotFoundError,
    NoEncoderError,
    RemoteEncoderError,
)

__all__ = ["Encoders"]

_URL = ("http://", "https://")


class Encoders:
    """The encoders a process may switch to, found by contract (see the module's docstring).

    Args:
        given: embedders, model or export folders, server URLs, in the order tried.
        find: also try the models this machine finds by the contract's weights digest.
        settings: run settings for the embedders built here (``batch_size``, ``api_key_env``,
            ``timeout``, ...).
    """

    def __init__(
        self, *given: Embedder | str | os.PathLike[str], find: bool = False, **settings: Any
    ) -> None:
        self._embedders: list[Embedder] = []
        self._folders: list[Path] = []
        self._urls: list[str] = []
        self._digests: dict[Path, str] = {}
        self._lock = threading.Lock()
        self.find = find
        self.settings = settings
        for item in given:
            self.add(item)

    def add(self, item: Embedder | str | os.PathLike[str]) -> None:
        """One more embedder, folder or URL (tried after those already given)."""
        if isinstance(item, Embedder):
            self._embedders.append(item)
        elif isinstance(item, str) and item.startswith(_URL):
            self._urls.append(item.rstrip("/"))
        elif isinstance(item, (str, os.PathLike)):
            folder = Path(os.fspath(item))
            if not folder.is_dir():
                raise InvalidInputError(f"an encoder folder must be a directory: {folder}")
            self._folders.append(folder)
        else:
            raise InvalidInputError(
                f"an encoder is an Embedder, a model or export folder or a server URL, got "
                f"{type(item).__name__}"
            )

    def __repr__(self) -> str:
        return (
            f"Encoders({len(self._embedders)} embedders, "
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
        for folder in self._folders:
            found = self._from_folder(folder, contract)
            if found is not None:
                return found
        for url in self._urls:
            try:
                return Embedder(contract, url=url, **self.settings)
            except (ContractMismatchError, RemoteEncoderError):
                continue  # that server serves another contract, or is not one
        if self.find:
            try:
                return Embedder(contract, **self._local())
            except ModelNotFoundError:
                return None
        return None

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
