"""The source of an Embedder whose network is loaded here: batches planned from token counts.

Texts are prefixed for their role, sorted by real token counts into batches of at most
``batch_size`` texts and ``token_budget`` padded tokens, encoded, pooled, passed through the
dense heads, truncated (Matryoshka) and normalised as the contract says; results are written
back by index, so the output order is always the input order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._batches import plan_batches
from ctxemb_core.backends._tokenize import Tokenized, Tokenizer
from ctxemb_core.backends.base import Encoder
from ctxemb_core.contract import EmbeddingContract, Role
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.networks import Network, encode
from ctxemb_core.pooling import l2_normalize, pool
from ctxemb_core.source import BatchPlan, Encoded
from ctxemb_core.tokens import embedding_progress

__all__ = ["LocalSource", "token_batches"]


class LocalSource:
    """The contract's document network (and separate query network, if it has one), here.

    Args:
        contract: the recipe.
        backend: the backend the networks were loaded with (``"onnx"``, ``"torch"``,
            ``"static"``).
        doc: the document encoder's network.
        query: the query encoder's network (``doc`` itself when the contract has one encoder).
    """

    def __init__(
        self, contract: EmbeddingContract, backend: str, doc: Network, query: Network
    ) -> None:
        self.contract = contract
        self.backend = backend
        self.doc = doc
        self.query = query

    def network(self, role: Role) -> Network:
        """The network that reads texts of ``role``."""
        return self.query if role is Role.QUERY else self.doc

    @property
    def cache_key(self) -> str:
        # The backend is not in the fingerprint; each backend's vectors are kept apart in the
        # cache so that a hit is always bit-identical to what this source computes.
        return f"{self.contract.fingerprint}:{self.backend}{self.doc.label}"

    @property
    def identity(self) -> str:
        files = [
            # An export's whole digest (the cache's label keeps a prefix of it).
            str(getattr(network.encoder, "network_digest", "") or network.label)
            for network in (self.doc, self.query)
        ]
        return "|".join([self.contract.fingerprint, self.backend, *files])

    @property
    def roles_alike(self) -> bool:
        c = self.contract
        return self.query is self.doc and c.query_prefix == c.document_prefix

    def describe(self) -> str:
        return f"backend={self.backend!r}"

    def folders(self) -> tuple[Path | None, Path | None]:
        return self.doc.folder, self.query.folder if self.query is not self.doc else None

    def options(self) -> dict[str, Any]:
        return {"path": self.doc.folder, "backend": self.backend}

    def config(self) -> dict[str, Any] | None:
        return None

    def tokenize(self, texts: list[str], role: Role) -> Tokenized:
        prefix = self.contract.prefix(role)
        prefixed = [prefix + t for t in texts] if prefix else texts
        tokenizer = self.network(role).encoder.tokenizer
        return tokenizer.tokenize(prefixed, self.contract.max_tokens, key=(role, prefix))

    def encode(self, texts: list[str] | Tokenized, role: Role, plan: BatchPlan) -> Encoded:
        c = self.contract
        network = self.network(role)
        encoder, dense = network.encoder, network.dense
        prefix = c.prefix(role)
        prefixed: list[str] | Tokenized
        if isinstance(texts, Tokenized):  # tokenized once, by tokenize(): the prefix is in
            if not texts.of(encoder.tokenizer, c.max_tokens):
                raise InvalidInputError("these texts were tokenized by another embedder")
            prefixed = texts
        else:
            prefixed = [prefix + t for t in texts] if prefix else list(texts)
        # include_prompt=False: the prefix's tokens are read by the network but not pooled.
        skip = 0 if c.include_prompt or not prefix else _prompt_tokens(encoder.tokenizer, prefix, c)
        out = np.empty((len(prefixed), c.output_dim), dtype=np.float32)
        truncated = 0
        batches = token_batches(encoder, prefixed, c.max_tokens, plan)
        for idx in embedding_progress(batches, len(prefixed), plan.show_progress):
            rows: Sequence[str] = (
                prefixed.take(idx)
                if isinstance(prefixed, Tokenized)
                else [prefixed[i] for i in idx]
            )
            batch = encode(encoder, rows, c.max_tokens, c.layers)
            truncated += int(batch.truncated.sum())
            vectors = pool(batch.hidden, batch.mask, c.pooling, skip=skip)
            for head in dense:
                vectors = head(vectors)
            if c.truncate_dim is not None:
                vectors = vectors[:, : c.truncate_dim]
            if c.normalize:
                vectors = l2_normalize(vectors)
            out[idx] = vectors
        return Encoded(out, truncated)


def token_batches(
    encoder: Encoder, texts: Sequence[str], max_tokens: int, settings: BatchPlan
) -> list[np.ndarray]:
    """Index batches: by token length, longest first, each within the token budget.

    Sorting by real token counts and filling each batch up to ``token_budget`` padded tokens
    (at most ``batch_size`` texts) keeps padding low on corpora of mixed lengths.
    """
    if len(texts) == 1:
        return [np.zeros(1, dtype=np.int64)]
    lengths = encoder.tokenizer.lengths(texts, max_tokens)
    return plan_batches(lengths, settings.batch_size, settings.token_budget)


def _prompt_tokens(tokenizer: Tokenizer, prefix: str, contract: EmbeddingContract) -> int:
    """How many leading tokens of each ``prefix + text`` are the prefix's, for pooling without
    them, counted as sentence-transformers counts a prompt's: the prefix tokenized alone (its
    leading special tokens included, cut to ``max_tokens``), less a trailing special token."""
    encodings, _ = tokenizer([prefix], contract.max_tokens)
    ids = encodings[0].ids
    special = {i for i, t in tokenizer.tokenizer.get_added_tokens_decoder().items() if t.special}
    return len(ids) - 1 if ids and ids[-1] in special else len(ids)
