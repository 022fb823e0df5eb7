"""Where an :class:`~ctxemb_core.Embedder`'s vectors come from: one protocol, two sources.

An Embedder holds one contract and one :class:`EncoderSource`, chosen once when it is built:

- :class:`~ctxemb_core.local_source.LocalSource`: the contract's network loaded here (ONNX
  Runtime, torch, or a static table), batches planned from real token counts;
- :class:`~ctxemb_core.server_source.ServerSource`: an embedding server at a URL, held to the
  contract by its fingerprint and canary (:class:`~ctxemb_core.remote.RemoteEncoder`).

Everything the Embedder does around the source (roles, checks of the texts, the cache, the
precision step, the truncation warning) is the same for both. A source returns what it computed
(:class:`Encoded`: the vectors and how many texts were cut), never through state a concurrent
call could overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from ctxemb_core.contract import Role

if TYPE_CHECKING:
    from ctxemb_core.backends._tokenize import Tokenized

__all__ = ["BatchPlan", "Encoded", "EncoderSource"]


class Encoded(NamedTuple):
    """What a source computed for a batch of texts.

    Attributes:
        vectors: the contract's vectors before the precision step, float32,
            ``(len(texts), output_dim)``, in input order.
        truncated: how many of the texts were cut to the contract's ``max_tokens`` (0 from a
            server: it truncates by itself, and the canary proves where).
    """

    vectors: np.ndarray
    truncated: int


@dataclass(frozen=True)
class BatchPlan:
    """The run settings a call batches by, read from the Embedder when the call starts."""

    batch_size: int
    token_budget: int
    show_progress: bool | None


class EncoderSource(Protocol):
    """What an Embedder asks of the source of its vectors.

    Attributes:
        backend: what computes the vectors: ``"onnx"``, ``"torch"``, ``"static"`` or
            ``"remote"`` (a server).
        cache_key: the embedding cache's key for this source's vectors (a hit is always
            bit-identical to what the source computes).
        identity: what makes these vectors, for anything remembered between calls (a verified
            open's record): the contract's fingerprint and the files (or the server) used.
        roles_alike: whether both roles embed a text by the same computation here.
    """

    backend: str

    @property
    def cache_key(self) -> str: ...

    @property
    def identity(self) -> str: ...

    @property
    def roles_alike(self) -> bool: ...

    def encode(self, texts: list[str] | Tokenized, role: Role, plan: BatchPlan) -> Encoded:
        """The contract's vectors of ``texts`` under ``role`` (the role's prefix is added here;
        a :class:`~ctxemb_core.backends._tokenize.Tokenized` from :meth:`tokenize` has it)."""
        ...

    def tokenize(self, texts: list[str], role: Role) -> Tokenized:
        """The texts as the encoder reads them, prefixed and tokenized once."""
        ...

    def describe(self) -> str:
        """The source in a few words, for the Embedder's repr (``backend='onnx'``)."""
        ...

    def folders(self) -> tuple[Path | None, Path | None]:
        """The local folders of the document and the separate query encoder (``None``: none
        here, or no separate query encoder)."""
        ...

    def options(self) -> dict[str, Any]:
        """What a framework component takes to embed through this very source (its folder and
        backend, or the server), beside the contract and the run settings."""
        ...

    def config(self) -> dict[str, Any] | None:
        """What :meth:`~ctxemb_core.Embedder.config` keeps of the source besides its folders
        (the server's address and checks), or ``None`` for a local network."""
        ...
