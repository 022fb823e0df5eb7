"""What every backend shares: the batches a backend returns and the protocols it meets.

Kept apart from :mod:`ctxemb_core.backends` (which loads a backend by name) so that the backends
and their tokenizers import these types without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from ctxemb_core.backends._tokenize import Tokenizer

__all__ = ["Classifier", "Encoder", "LogitBatch", "TextInput", "TokenBatch"]

#: One input of the tokenizer: a text, or a (first, second) pair for its pair encoding.
TextInput = str | tuple[str, str]


@dataclass(frozen=True)
class TokenBatch:
    """Token vectors of a padded batch.

    Attributes:
        hidden: ``(batch, tokens, width)`` float32 contextual vectors (the encoder's last layer).
        mask: ``(batch, tokens)`` 1 where a real token stands, 0 on padding.
        truncated: per text, whether the tokenizer cut it to ``max_tokens``.
        tokens: per text, the token strings (padding excluded), or ``None`` if not requested.
        offsets: per text, ``(start, end)`` character offsets of each token in the text.
        special: per text, 1 where the token is a special token ([CLS], [SEP], EOS, …).
    """

    hidden: np.ndarray
    mask: np.ndarray
    truncated: np.ndarray
    tokens: list[list[str]] | None = None
    offsets: list[list[tuple[int, int]]] | None = None
    special: list[list[int]] | None = None


@runtime_checkable
class Encoder(Protocol):
    """A loaded network and its tokenizer."""

    #: Width of the token vectors.
    hidden_size: int
    #: The folder's tokenizer (shared by every backend, so all of them see the same tokens).
    tokenizer: Tokenizer

    def encode(
        self, texts: Sequence[str], max_tokens: int, *, with_tokens: bool = False
    ) -> TokenBatch:
        """Tokenize (truncating to ``max_tokens``) and run the network over one batch."""
        ...


@dataclass(frozen=True)
class LogitBatch:
    """The logits of a batch of texts or pairs.

    Attributes:
        logits: ``(batch, num_labels)`` float32, the network's classification head.
        truncated: per input, whether the tokenizer cut it to ``max_tokens``.
    """

    logits: np.ndarray
    truncated: np.ndarray


@runtime_checkable
class Classifier(Protocol):
    """A loaded sequence-classification network and its tokenizer."""

    #: Outputs per input (the labels of the classification head).
    num_labels: int
    #: The folder's tokenizer (shared by every backend, so all of them see the same tokens).
    tokenizer: Tokenizer

    def classify(self, inputs: Sequence[TextInput], max_tokens: int) -> LogitBatch:
        """Tokenize texts or (first, second) pairs (truncating to ``max_tokens``) and run the
        network over one batch."""
        ...
