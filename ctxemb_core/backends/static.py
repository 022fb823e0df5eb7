"""Static encoders: a text vector from a lookup table, with no network (the Word2Vec / GloVe /
model2vec row of the families table).

A static model maps each token *type* to one vector: the same vector in every sentence. A text's
vector is the mean of its tokens' lookup vectors (each scaled by the folder's per-token weight,
where it has them), then normalised if the contract says so. This module serves such models in
model2vec's folder format (read by :mod:`ctxemb_core.folders.static`) and computes exactly what
``model2vec.StaticModel.encode`` computes, with numpy and ``tokenizers`` alone (no torch, no
transformers, no ``safetensors`` package):

* ``model.safetensors`` (or ``embeddings.safetensors``): the table as the tensor
  ``embeddings`` (rows × dimension), optionally ``weights`` (one per token id, multiplied into
  its row) and ``mapping`` (token id → row, model2vec's vocabulary quantisation);
* ``tokenizer.json``: the ``tokenizers`` pipeline that cuts a text into token ids;
* ``config.json``: model2vec's ``normalize`` (default ``False``) and ``max_length`` (default
  512; ``null`` for none).

Tokenisation, as model2vec's ``StaticModel.encode`` does it: the text is first cut to
``max_length * m`` characters, where *m* is the median length of the vocabulary's token
strings; it is then encoded **without** special tokens ([CLS]/[SEP] are never added), cut to
``max_length`` tokens, and every unknown token is dropped *after* that cut. A text left without
tokens has the zero vector.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core.backends._tokenize import Tokenized, Tokenizer
from ctxemb_core.backends.base import TokenBatch
from ctxemb_core.errors import (
    MalformedModelError,
    MissingDependencyError,
    UnsupportedModelError,
)
from ctxemb_core.folders.digests import check_tokenizer_files
from ctxemb_core.folders.safetensors import read_safetensors, safetensors_header, write_safetensors
from ctxemb_core.folders.static import DEFAULT_MAX_LENGTH as DEFAULT_MAX_LENGTH
from ctxemb_core.folders.static import DEFAULT_NORMALIZE as DEFAULT_NORMALIZE
from ctxemb_core.folders.static import (
    TABLE_FILES,
    StaticLayout,
    is_static_folder,
    read_static_layout,
    static_digest,
)

__all__ = [
    "TABLE_FILES",
    "StaticEncoder",
    "StaticLayout",
    "StaticTokenizer",
    "check_vocabulary",
    "is_static_folder",
    "read_safetensors",
    "read_static_layout",
    "safetensors_header",
    "static_digest",
    "write_safetensors",
]

# -- tokenisation, as model2vec's StaticModel.encode does it -----------------------------------


class Pieces(NamedTuple):
    """The tokens of one text that look up vectors (unknown ones dropped)."""

    ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    special: list[int]
    truncated: bool


class StaticTokenizer(Tokenizer):
    """A folder's ``tokenizer.json`` read the way ``model2vec.StaticModel`` reads it.

    No special tokens are added, unknown tokens are dropped after the cut to ``max_tokens``,
    and each text is first cut to ``max_tokens`` times the median token length in characters
    (model2vec's guard against tokenising megabytes that the cut would throw away).
    """

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer as RustTokenizer
        except ImportError as exc:  # pragma: no cover - a base dependency
            raise MissingDependencyError(f"static models need tokenizers ({exc})") from None
        check_tokenizer_files(path.parent)  # before the Rust parser reads a huge file whole
        try:
            backend = RustTokenizer.from_file(str(path))
        except Exception as exc:  # the Rust parser raises a bare Exception
            raise MalformedModelError(f"{path} cannot be read as a tokenizer: {exc}") from None
        backend.no_padding()
        backend.no_truncation()
        super().__init__(
            backend, model_input_names=["input_ids"], pad_id=0, pad_token="", padding_left=False
        )
        vocab = backend.get_vocab()
        #: Tokens in the vocabulary (added tokens included), as model2vec counts them.
        self.vocab_size = len(vocab)
        #: The median length of the vocabulary's token strings (model2vec's character cut).
        self.median_token_length = int(np.median([len(t) for t in vocab])) if vocab else 0
        #: The unknown token's id, dropped from every text (``None``: the model has none).
        self.unk_id = _unk_id(backend)

    def pieces(self, texts: Sequence[str], max_tokens: int) -> list[Pieces]:
        """The looked-up tokens of each text, with their strings and character offsets."""
        cut = max_tokens * self.median_token_length
        short = [t[:cut] for t in texts]
        encodings = self.configured(max_tokens, padded=False).encode_batch(
            short, add_special_tokens=False
        )
        out = []
        for text, s, enc in zip(texts, short, encodings, strict=True):
            # Each Encoding attribute builds a new list when read: read each once.
            ids, truncated = enc.ids, len(s) < len(text) or bool(enc.overflowing)
            if self.unk_id not in ids:
                out.append(Pieces(ids, enc.tokens, enc.offsets, enc.special_tokens_mask, truncated))
                continue
            keep = [i for i, t in enumerate(ids) if t != self.unk_id]
            tokens, offsets, special = enc.tokens, enc.offsets, enc.special_tokens_mask
            out.append(
                Pieces(
                    [ids[i] for i in keep],
                    [tokens[i] for i in keep],
                    [offsets[i] for i in keep],
                    [special[i] for i in keep],
                    truncated,
                )
            )
        return out

    def tokenize(self, texts: Sequence[str], max_tokens: int, key: Any = None) -> Tokenized:
        """The pieces of each text, made once for :meth:`lengths` and ``__call__`` to read."""
        pieces = self.pieces(texts, max_tokens)
        lengths = np.array([len(p.ids) for p in pieces], dtype=np.int64)
        return Tokenized(texts, pieces, lengths, max_tokens, self, key)

    def __call__(self, texts: Sequence[Any], max_tokens: int) -> tuple[list, dict[str, np.ndarray]]:
        """The pieces of each text and their ids as a right-padded array with its mask."""
        if isinstance(texts, Tokenized) and texts.of(self, max_tokens):
            pieces = texts.pieces
        else:
            pieces = self.pieces(texts, max_tokens)
        width = max([len(p.ids) for p in pieces] + [1])
        ids = np.zeros((len(pieces), width), dtype=np.int64)
        mask = np.zeros((len(pieces), width), dtype=np.int64)
        for row, p in enumerate(pieces):
            ids[row, : len(p.ids)] = p.ids
            mask[row, : len(p.ids)] = 1
        return pieces, {"input_ids": ids, "attention_mask": mask}

    def lengths(self, texts: Sequence[Any], max_tokens: int) -> np.ndarray:
        """Looked-up tokens per text (what the mean is over)."""
        if isinstance(texts, Tokenized) and texts.of(self, max_tokens):
            return texts.lengths
        return np.array([len(p.ids) for p in self.pieces(texts, max_tokens)], dtype=np.int64)


def _unk_id(backend: Any) -> int | None:
    # As model2vec finds it: WordPiece, BPE and WordLevel name an unk token; Unigram an id.
    model = backend.model
    if hasattr(model, "unk_token"):
        token = model.unk_token
        return None if token is None else backend.token_to_id(token)
    unk = json.loads(backend.to_str())["model"].get("unk_id")
    return unk if isinstance(unk, int) else None


def check_vocabulary(layout: StaticLayout) -> None:
    """Refuse a table whose rows do not fit the tokenizer (model2vec refuses it too)."""
    if layout.mapping:
        return  # rows are reached through the mapping; checked when the table is loaded
    vocab = StaticTokenizer(layout.tokenizer).vocab_size
    if vocab != layout.rows:
        raise MalformedModelError(
            f"{layout.table}: the table has {layout.rows} rows for {vocab} tokens in "
            "tokenizer.json (and no mapping); the folder's files do not fit together"
        )


# -- the encoder -------------------------------------------------------------------------------


class StaticEncoder:
    """A static folder's table and tokenizer as an :class:`~ctxemb_core.backends.Encoder`.

    Its "token vectors" are lookups: row ``mapping[id]`` of the table (row ``id`` without a
    mapping), times the token's weight where the folder has per-token weights, exactly as
    ``model2vec.StaticModel`` forms them before its mean. The same token has the same vector in
    every text. Everything after (the pooling, normalisation) is the embedder's, as for any
    backend.

    Example:
        >>> enc = StaticEncoder(Path("potion-base-8M"))  # doctest: +SKIP
        >>> enc.encode(["a river bank"], 512).hidden.shape  # doctest: +SKIP
        (1, 3, 256)
    """

    def __init__(self, folder: str | os.PathLike[str], *, device: str = "cpu") -> None:
        if device != "cpu":
            raise UnsupportedModelError(
                f"a static model is a numpy lookup on the CPU; device={device!r} is not "
                "supported (use device='cpu')"
            )
        self.layout = read_static_layout(folder)
        #: The digest of the files as they were read (the contract's ``weights``).
        self.weights = static_digest(self.layout)
        #: The folder's tokenizer, read as model2vec reads it.
        self.static_tokenizer = StaticTokenizer(self.layout.tokenizer)
        self.tokenizer: Tokenizer = self.static_tokenizer
        names = ["embeddings"]
        names += ["weights"] * self.layout.token_weights + ["mapping"] * self.layout.mapping
        tensors = read_safetensors(self.layout.table, names)
        table = tensors["embeddings"]
        #: ``(rows, dimension)`` float32 lookup table.
        self.table = table.astype(np.float32, copy=False)
        self.token_weights = tensors.get("weights")
        self.mapping = tensors.get("mapping")
        self.hidden_size = int(self.table.shape[1])
        #: The lookups' dtype: float32, or float64 when the per-token weights are (model2vec
        #: multiplies float32 rows by them and averages in the product's precision).
        self.dtype = np.dtype(np.float32)
        if self.token_weights is not None:
            self.dtype = np.result_type(np.float32, self.token_weights.dtype)
        vocab, where = self.static_tokenizer.vocab_size, self.layout.table
        if self.mapping is None and len(self.table) != vocab:
            raise MalformedModelError(
                f"{where}: the table has {len(self.table)} rows for {vocab} tokens in "
                "tokenizer.json (and no mapping); the folder's files do not fit together"
            )
        for name, extra in (("weights", self.token_weights), ("mapping", self.mapping)):
            if extra is not None and len(extra) != vocab:
                raise MalformedModelError(
                    f"{where}: {name!r} has {len(extra)} entries for {vocab} tokens"
                )
        if self.mapping is not None and (
            len(self.mapping) and (self.mapping.min() < 0 or self.mapping.max() >= len(table))
        ):
            raise MalformedModelError(f"{where}: 'mapping' points outside the table")

    def lookup(self, ids: Sequence[int]) -> np.ndarray:
        """The vectors of token ids: ``(len(ids), dimension)`` of :attr:`dtype`."""
        index = np.asarray(ids, dtype=np.int64)
        rows = self.table[index if self.mapping is None else self.mapping[index]]
        if self.token_weights is not None:
            rows = rows * self.token_weights[index][:, None]
        return rows.astype(self.dtype, copy=False)

    def encode(
        self, texts: Sequence[str], max_tokens: int, *, with_tokens: bool = False
    ) -> TokenBatch:
        """The lookup vectors of a batch, right-padded with zero vectors (mask 0); float32,
        or float64 for float64 per-token weights (the embedder casts after pooling)."""
        pieces, arrays = self.static_tokenizer(texts, max_tokens)
        mask = arrays["attention_mask"]
        hidden = np.zeros((*mask.shape, self.hidden_size), dtype=self.dtype)
        for row, p in enumerate(pieces):
            if p.ids:
                hidden[row, : len(p.ids)] = self.lookup(p.ids)
        truncated = np.array([p.truncated for p in pieces], dtype=bool)
        if not with_tokens:
            return TokenBatch(hidden, mask, truncated)
        return TokenBatch(
            hidden,
            mask,
            truncated,
            [p.tokens for p in pieces],
            [list(p.offsets) for p in pieces],
            [list(p.special) for p in pieces],
        )
