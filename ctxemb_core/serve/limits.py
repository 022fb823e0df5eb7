"""What one ``ctxemb serve`` process accepts and how it gathers requests into batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxemb_core.errors import InvalidInputError

__all__ = ["ServeLimits"]


@dataclass(frozen=True)
class ServeLimits:
    """The limits of a server; a request over one is refused with HTTP 413, nothing embedded.

    Attributes:
        max_inputs: the most texts in one request (OpenAI's own limit is 2,048).
        max_body_bytes: the largest request body read.
        max_wait_ms: how long the first request of a batch waits for others that are being
            received to join it (a bounded wait; with no other request on its way a batch
            starts at once, so a lone client pays no wait).
        batch_tokens: the most tokens gathered into one batch before it is embedded (the
            embedder then runs it in forward passes of its own ``token_budget``).
        max_queued: the most texts waiting; a request beyond it is refused with HTTP 503 and
            ``Retry-After`` instead of waiting without bound. At least ``max_inputs``: a request
            the server accepts must fit an idle queue, or its "retry shortly" would never succeed.
    """

    max_inputs: int = 2048
    max_body_bytes: int = 16 * 1024 * 1024
    max_wait_ms: float = 5.0
    batch_tokens: int = 16384
    max_queued: int = 65536

    def __post_init__(self) -> None:
        for name in ("max_inputs", "max_body_bytes", "batch_tokens", "max_queued"):
            _positive_int(getattr(self, name), name)
        if self.max_queued < self.max_inputs:
            raise InvalidInputError(
                f"max_queued={self.max_queued} is below max_inputs={self.max_inputs}: a request "
                f"of more than {self.max_queued} texts would be accepted and then refused as busy "
                "forever, even by an idle server. Raise max_queued to at least max_inputs, or "
                "lower max_inputs"
            )
        wait = self.max_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 10_000:
            raise InvalidInputError(
                f"max_wait_ms must be a number of milliseconds from 0 to 10000, got {wait!r}"
            )


def _positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be an integer of at least 1, got {value!r}")
