"""The source of an Embedder that embeds through a server at a URL (``Embedder(url=...)``).

The server holds the model; :class:`~ctxemb_core.remote.RemoteEncoder` holds it to the
contract (its fingerprint and the canary, re-checked as the Embedder's ``check_every`` and
``check_seconds`` say). There is no tokenizer or model folder here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxemb_core.contract import Role
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.remote import RemoteEncoder
from ctxemb_core.source import BatchPlan, Encoded

if TYPE_CHECKING:
    from ctxemb_core.backends._tokenize import Tokenized

__all__ = ["ServerSource"]

#: The timeout a config leaves out: the Embedder's default.
_DEFAULT_TIMEOUT = 60


class ServerSource:
    """The vectors of an embedding server, checked by ``remote`` (a :class:`RemoteEncoder`)."""

    backend = "remote"

    def __init__(self, remote: RemoteEncoder) -> None:
        self.remote = remote

    @property
    def cache_key(self) -> str:
        remote = self.remote
        return f"{remote.contract.fingerprint}:remote:{remote.api}:{remote.url}"

    @property
    def identity(self) -> str:
        return self.cache_key

    @property
    def roles_alike(self) -> bool:
        return False  # the server's two roles are its own: the canary checks them apart

    def describe(self) -> str:
        return f"url={self.remote.url!r}"

    def folders(self) -> tuple[Path | None, Path | None]:
        return None, None

    def options(self) -> dict[str, Any]:
        remote = self.remote
        options: dict[str, Any] = {
            "url": remote.url,
            "api": remote.api,
            "api_key_env": remote.api_key_env,
        }
        if remote.requested_model is not None:
            options["served_model"] = remote.requested_model
        return options

    def config(self) -> dict[str, Any] | None:
        remote = self.remote
        return {
            "url": remote.url,
            "api": remote.api,
            "api_key_env": remote.api_key_env,
            "check_every": remote.check_every,
            "check_seconds": remote.check_seconds,
            **(
                {"served_model": remote.requested_model}
                if remote.requested_model is not None
                else {}
            ),
            **({"timeout": remote.timeout} if remote.timeout != _DEFAULT_TIMEOUT else {}),
        }

    def tokenize(self, texts: list[str], role: Role) -> Tokenized:
        raise InvalidInputError(
            f"this embedder embeds through {self.remote.url}; its tokenizer is there"
        )

    def encode(self, texts: list[str] | Tokenized, role: Role, plan: BatchPlan) -> Encoded:
        # The server truncates; the canary proves where. Batches are the encoder's own.
        return Encoded(self.remote.embed(list(texts), role), 0)
