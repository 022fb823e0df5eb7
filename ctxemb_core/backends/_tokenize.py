"""Tokenization shared by the backends: the Rust ``tokenizers`` pipeline of a model folder,
or of a ctxemb export (``tokenizers`` alone: no transformers, no torch)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.backends.base import TextInput, TokenBatch
from ctxemb_core.errors import (
    DataFormatError,
    MalformedModelError,
    MissingDependencyError,
    ModelNotFoundError,
    UnsupportedModelError,
)
from ctxemb_core.folders.digests import check_tokenizer_files

#: Characters per kept token beyond which a text is cut before it is encoded
#: (:meth:`Tokenizer.bounded`): English runs at 4 to 5 characters a token, CJK at about one.
CHARS_PER_TOKEN = 8


class Tokenized(Sequence[str]):
    """Texts and their tokens, encoded once (truncated at ``max_tokens``, not padded).

    What :meth:`Tokenizer.tokenize` returns, for a caller that needs the token counts before
    the vectors (``ctxemb serve`` reports them as usage and plans batches by them): handed to
    the same tokenizer's :meth:`~Tokenizer.lengths` and ``__call__`` (through a backend's
    ``encode``), it is read, not encoded again. It is a sequence of its texts, so any other
    reader sees plain texts. ``key`` says what the texts were made for (an embedder's role
    and prefix), for the reader to check.
    """

    def __init__(
        self,
        texts: Sequence[str],
        pieces: Sequence[Any],
        lengths: np.ndarray,
        max_tokens: int,
        tokenizer: Tokenizer,
        key: Any = None,
    ) -> None:
        self.texts = list(texts)
        #: One unpadded encoding per text (a Rust ``Encoding``, or a static model's pieces).
        self.pieces = list(pieces)
        #: Tokens per text after truncation, special tokens included.
        self.lengths = lengths
        self.max_tokens = max_tokens
        self.tokenizer = tokenizer
        self.key = key

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: Any) -> Any:
        return self.texts[index]

    def of(self, tokenizer: Tokenizer, max_tokens: int) -> bool:
        """Whether these are ``tokenizer``'s tokens at ``max_tokens`` (else they are re-read)."""
        return tokenizer is self.tokenizer and max_tokens == self.max_tokens

    def take(self, rows: Sequence[int] | np.ndarray) -> Tokenized:
        """The texts at ``rows``, with their tokens."""
        return Tokenized(
            [self.texts[i] for i in rows],
            [self.pieces[i] for i in rows],
            self.lengths[np.asarray(rows, dtype=np.int64)],
            self.max_tokens,
            self.tokenizer,
            self.key,
        )

    @staticmethod
    def join(parts: Sequence[Tokenized]) -> Tokenized:
        """One sequence of several made by one tokenizer for one purpose."""
        first = parts[0]
        if any(not p.of(first.tokenizer, first.max_tokens) or p.key != first.key for p in parts):
            raise ValueError("only texts tokenized alike can be joined")
        return Tokenized(
            [t for p in parts for t in p.texts],
            [e for p in parts for e in p.pieces],
            np.concatenate([p.lengths for p in parts]),
            first.max_tokens,
            first.tokenizer,
            first.key,
        )


class Tokenizer:
    """A Rust ``tokenizers`` pipeline that truncates and pads the way its model expects.

    It is the same Rust pipeline transformers' fast tokenizers call, used directly so that the
    truncation of each text can be reported (``Encoding.overflowing``) at no extra cost. A
    ``(first, second)`` pair is encoded with the tokenizer's pair template (``[CLS] a [SEP] b
    [SEP]`` with segment ids for BERT) and truncated longest-first, token by token, exactly as
    ``tokenizer(firsts, seconds, truncation=True, max_length=...)`` does in transformers.

    Built from a model folder (:class:`FolderTokenizer`, through transformers) or from the
    tokenizer and the facts a ctxemb export saved (:meth:`from_saved`, ``tokenizers`` alone).
    """

    def __init__(
        self,
        backend: Any,
        *,
        model_input_names: Sequence[str],
        pad_id: int,
        pad_token: str,
        padding_left: bool,
        mask_token: str | None = None,
    ) -> None:
        self.tokenizer = backend
        self.model_input_names = list(model_input_names)
        self.pad_id = pad_id
        self.pad_token = pad_token
        self.padding_left = padding_left
        #: The mask token the tokenizer names (query expansion), where it names one.
        self.mask_token = mask_token
        # One configured copy of the pipeline per (max_tokens, padded): the Rust tokenizer's
        # truncation and padding are settings of the object, so setting them per call would
        # let two threads encode under each other's settings (a ragged, unpadded batch).
        self._configured: dict[tuple[int, bool], Any] = {}
        self._lock = threading.Lock()

    # -- what a ctxemb export keeps ----------------------------------------------------------

    def facts(self) -> dict[str, Any]:
        """What, beside :meth:`to_json`, reproduces this tokenizer exactly (JSON-ready)."""
        return {
            "model_input_names": list(self.model_input_names),
            "pad_id": int(self.pad_id),
            "pad_token": self.pad_token,
            "padding_side": "left" if self.padding_left else "right",
            "truncation": "longest_first",
            "mask_token": self.mask_token,
        }

    def to_json(self) -> str:
        """The pipeline as ``tokenizer.json`` (normaliser, pre-tokeniser, model, the
        post-processor that adds the special tokens), without truncation or padding: those
        are set per call from the contract's ``max_tokens`` and :meth:`facts`."""
        from tokenizers import Tokenizer as RustTokenizer

        # A copy: this tokenizer's own truncation and padding stay as they are.
        clone = RustTokenizer.from_str(self.tokenizer.to_str())
        clone.no_truncation()
        clone.no_padding()
        return str(clone.to_str(pretty=False))

    @classmethod
    def from_saved(cls, text: str, facts: Mapping[str, Any], where: str) -> Tokenizer:
        """The tokenizer :meth:`to_json` and :meth:`facts` saved, with ``tokenizers`` alone.

        Raises:
            MissingDependencyError: ``tokenizers`` is not installed.
            DataFormatError: the tokenizer or its facts cannot be read.
        """
        try:
            from tokenizers import Tokenizer as RustTokenizer
        except ImportError as exc:
            raise MissingDependencyError(
                f"serving {where} needs the tokenizers package ({exc}); pip install tokenizers"
            ) from None
        try:
            backend = RustTokenizer.from_str(text)
        except Exception as exc:  # the Rust parser raises a bare Exception
            raise DataFormatError(f"{where}: the tokenizer cannot be read ({exc})") from None
        names = facts.get("model_input_names")
        pad_id, pad_token = facts.get("pad_id"), facts.get("pad_token")
        side, mask = facts.get("padding_side"), facts.get("mask_token")
        if (
            not isinstance(names, list)
            or not all(isinstance(n, str) for n in names)
            or "input_ids" not in names
            or isinstance(pad_id, bool)
            or not isinstance(pad_id, int)
            or pad_id < 0
            or not isinstance(pad_token, str)
            or side not in ("left", "right")
            or facts.get("truncation") != "longest_first"
            or not (mask is None or isinstance(mask, str))
        ):
            raise DataFormatError(f"{where}: the tokenizer's facts are not valid ({dict(facts)})")
        return cls(
            backend,
            model_input_names=names,
            pad_id=pad_id,
            pad_token=pad_token,
            padding_left=side == "left",
            mask_token=mask,
        )

    # -- encoding ----------------------------------------------------------------------------

    def configured(self, max_tokens: int, *, padded: bool = True) -> Any:
        """The Rust pipeline truncating at ``max_tokens`` (and padding a batch to its longest
        text when ``padded``); built once per setting and never changed after, so threads
        sharing this tokenizer cannot change each other's settings."""

        def setup(found: Any) -> None:
            # Longest first: a pair loses tokens from its longer side, as transformers cuts it.
            found.enable_truncation(max_length=max_tokens, strategy="longest_first")
            if padded:
                found.enable_padding(
                    pad_id=self.pad_id,
                    pad_token=self.pad_token,
                    direction="left" if self.padding_left else "right",
                )
            else:
                found.no_padding()

        return self._pipeline((max_tokens, padded), setup)

    def whole(self) -> Any:
        """The Rust pipeline with no truncation and no padding (built once, as above)."""

        def setup(found: Any) -> None:
            found.no_truncation()
            found.no_padding()

        return self._pipeline((0, False), setup)

    def _pipeline(self, key: tuple[int, bool], setup: Callable[[Any], None]) -> Any:
        """The Rust pipeline of ``key``: a copy of the tokenizer that ``setup`` configures,
        built once under the lock and never changed after."""
        found = self._configured.get(key)
        if found is not None:
            return found
        from tokenizers import Tokenizer as RustTokenizer

        with self._lock:
            found = self._configured.get(key)
            if found is None:
                found = RustTokenizer.from_str(self.tokenizer.to_str())
                setup(found)
                self._configured[key] = found
        return found

    def bounded(self, texts: Sequence[TextInput], max_tokens: int) -> list[TextInput]:
        """``texts``, a huge one cut to a prefix that encodes exactly as the whole text does
        once truncated at ``max_tokens``.

        Encoding a text costs time and memory in proportion to the whole text (an 11 MB text:
        2.5 million tokens, each with its offsets, ~26 s and gigabytes), though only
        ``max_tokens`` of its tokens are kept. A text longer than :data:`CHARS_PER_TOKEN` x
        ``max_tokens`` characters is cut first: a prefix is tokenized, then one twice as long,
        until both yield more than ``max_tokens`` tokens and agree on the first ``max_tokens +
        1`` (ids and character offsets). A cut moves the tokens near it (the end of a word,
        whitespace, a combined character); tokens the longer prefix shares with one half its
        length are far from both cuts, so they are the whole text's, and the longer prefix is
        encoded: the tokens kept, their offsets and the truncation flag are the whole text's.
        A text whose prefixes never agree (one word of megabytes) is encoded whole, as before.

        In a ``(first, second)`` pair, longest-first truncation splits ``max_tokens`` by which
        side is longer: a long side is cut only when the other is short, and keeps more
        tokens than that side has, so it stays the longer; two huge sides are encoded whole.
        """
        out: list[TextInput] = []
        for text in texts:
            if isinstance(text, str):
                out.append(self._cut(text, max_tokens + 1))
                continue
            first, second = text
            a, b = self._cut(first, max_tokens + 1), self._cut(second, max_tokens + 1)
            if (a is first) == (b is second):
                out.append(text)  # nothing cut, or two huge sides: encoded whole
            elif a is not first:
                other = len(self.whole().encode(second, add_special_tokens=False).ids)
                out.append((self._cut(first, max(max_tokens, other) + 1), second))
            else:
                other = len(self.whole().encode(first, add_special_tokens=False).ids)
                out.append((first, self._cut(second, max(max_tokens, other) + 1)))
        return out

    def _cut(self, text: str, keep: int) -> str:
        """``text`` itself, or a prefix whose first ``keep`` tokens are the whole text's."""
        n = CHARS_PER_TOKEN * keep
        if len(text) <= 2 * n:
            return text
        whole = self.whole()
        shorter = whole.encode(text[:n], add_special_tokens=False)
        while 2 * n < len(text):
            longer = whole.encode(text[: 2 * n], add_special_tokens=False)
            if (
                len(shorter.ids) > keep
                and shorter.ids[:keep] == longer.ids[:keep]
                and shorter.offsets[:keep] == longer.offsets[:keep]
            ):
                return text[: 2 * n]
            shorter, n = longer, 2 * n
        return text

    def tokenize(self, texts: Sequence[str], max_tokens: int, key: Any = None) -> Tokenized:
        """Encode texts once, for :meth:`lengths` and a batch's ``__call__`` to read."""
        pieces = self.configured(max_tokens, padded=False).encode_batch(
            self.bounded(texts, max_tokens)
        )
        lengths = np.array([len(e.ids) for e in pieces], dtype=np.int64)
        return Tokenized(texts, pieces, lengths, max_tokens, self, key)

    def __call__(
        self, texts: Sequence[TextInput], max_tokens: int
    ) -> tuple[list, dict[str, np.ndarray]]:
        """Encode a batch; returns the encodings and the model's input arrays (int64)."""
        if isinstance(texts, Tokenized) and texts.of(self, max_tokens):
            return texts.pieces, self._padded(texts.pieces)
        encodings = self.configured(max_tokens).encode_batch(self.bounded(texts, max_tokens))
        arrays = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }
        if "token_type_ids" in self.model_input_names:
            arrays["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        return encodings, arrays

    def _padded(self, encodings: Sequence[Any]) -> dict[str, np.ndarray]:
        """The input arrays of unpadded encodings, padded as the pipeline pads a batch (to its
        longest, with the pad id, segment 0 and mask 0, on the tokenizer's side)."""
        width = max((len(e.ids) for e in encodings), default=0)
        names = ["input_ids", "attention_mask"]
        if "token_type_ids" in self.model_input_names:
            names.append("token_type_ids")
        arrays = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in names}
        arrays["input_ids"].fill(self.pad_id)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            at = slice(width - n, width) if self.padding_left else slice(0, n)
            arrays["input_ids"][row, at] = e.ids
            arrays["attention_mask"][row, at] = e.attention_mask
            if "token_type_ids" in arrays:
                arrays["token_type_ids"][row, at] = e.type_ids
        return arrays

    def lengths(self, texts: Sequence[TextInput], max_tokens: int) -> np.ndarray:
        """Token count of each text after truncation, special tokens included."""
        if isinstance(texts, Tokenized) and texts.of(self, max_tokens):
            return texts.lengths
        encodings = self.configured(max_tokens, padded=False).encode_batch(
            self.bounded(texts, max_tokens)
        )
        return np.array([len(e.ids) for e in encodings], dtype=np.int64)


class FolderTokenizer(Tokenizer):
    """The fast tokenizer of a model folder, loaded through transformers' ``AutoTokenizer``."""

    def __init__(self, folder: Path) -> None:
        from transformers import AutoTokenizer

        check_tokenizer_files(folder)  # before the Rust parser reads a huge file whole
        try:
            # trust_remote_code=False: a tokenizer class mapped to the folder's own Python
            # (auto_map) is refused outright, never run and never prompted for.
            hf = AutoTokenizer.from_pretrained(str(folder), use_fast=True, trust_remote_code=False)
        except OSError as exc:
            raise ModelNotFoundError(f"{folder} has no usable tokenizer: {exc}") from None
        except RecursionError:
            raise MalformedModelError(
                f"{folder}: a tokenizer file is nested too deeply to be a tokenizer"
            ) from None
        except Exception as exc:
            # Untrusted files, untyped errors: the Rust tokenizers raise a bare Exception for a
            # tokenizer.json they cannot read, transformers KeyError/TypeError/ValueError for
            # junk values and custom code it will not run.
            raise UnsupportedModelError(f"{folder} has no usable tokenizer: {exc}") from None
        if not getattr(hf, "is_fast", False):
            raise ModelNotFoundError(f"{folder}: only fast (Rust) tokenizers are supported")
        mask = getattr(hf, "mask_token", None)
        super().__init__(
            hf.backend_tokenizer,
            model_input_names=list(hf.model_input_names),
            pad_id=hf.pad_token_id if hf.pad_token_id is not None else 0,
            pad_token=hf.pad_token or "",
            padding_left=getattr(hf, "padding_side", "right") == "left",
            mask_token=mask if isinstance(mask, str) and mask else None,
        )


def token_batch(
    encodings: list, arrays: dict[str, np.ndarray], hidden: np.ndarray, with_tokens: bool
) -> TokenBatch:
    """The :class:`TokenBatch` of a forward pass, the same for every backend."""
    mask = arrays["attention_mask"]
    truncated = np.array([bool(e.overflowing) for e in encodings])
    if not with_tokens:
        return TokenBatch(hidden, mask, truncated)
    tokens, offsets, special = token_details(encodings, mask)
    return TokenBatch(hidden, mask, truncated, tokens, offsets, special)


def token_details(
    encodings: list, mask: np.ndarray
) -> tuple[list[list[str]], list[list[tuple[int, int]]], list[list[int]]]:
    """Token strings, character offsets and special-token flags without the padding."""
    tokens, offsets, special = [], [], []
    for enc, m in zip(encodings, mask, strict=True):
        keep = [i for i, v in enumerate(m) if v]
        if len(enc.ids) == len(keep):  # unpadded (from a Tokenized): every token is kept
            keep = list(range(len(keep)))
        # Each attribute of a Rust Encoding is a new Python list on every access: read once per
        # row, not once per token (256 copies of a 256-long list per row: ~9 ms a document).
        row_tokens, row_offsets, row_special = enc.tokens, enc.offsets, enc.special_tokens_mask
        tokens.append([row_tokens[i] for i in keep])
        offsets.append([tuple(row_offsets[i]) for i in keep])
        special.append([row_special[i] for i in keep])
    return tokens, offsets, special


# -- a folder's tokenizer, kept beside its ONNX export ---------------------------------------

_SAVED_JSON = "tokenizer.json"
_SAVED_RECORD = "tokenizer.record.json"
_SAVED_FORMAT = 1


def folder_tokenizer(folder: Path, saved: Path | None = None) -> Tokenizer:
    """The tokenizer of a model folder, read from ``saved`` when it was kept there before.

    transformers imports torch whenever torch is installed, so reading a folder's tokenizer
    through it costs a second or more and hundreds of megabytes. The ONNX backend keeps the
    tokenizer transformers built (:meth:`Tokenizer.to_json` and :meth:`Tokenizer.facts`) in
    ``saved``, a directory named by the weights digest (which covers the tokenizer's files),
    and a later process reads it with ``tokenizers`` alone. A kept tokenizer is used only when
    its file has the digest its record holds and it was made by the transformers installed now
    (or transformers is not installed at all); otherwise the folder is read again and kept anew.
    """
    version = _installed("transformers")
    if saved is not None:
        kept = _read_saved(saved, version)
        if kept is not None:
            return kept
    tokenizer = FolderTokenizer(folder)
    if saved is not None and version is not None:
        _keep(tokenizer, saved, version)
    return tokenizer


def kept_tokenizer(saved: Path) -> Tokenizer | None:
    """The tokenizer :func:`folder_tokenizer` kept in ``saved`` (whichever transformers made
    it), or ``None`` when none was kept there or it cannot be read as kept."""
    return _read_saved(saved, None)


def vocabulary(tokenizer: Tokenizer) -> dict[str, int]:
    """Every piece of ``tokenizer`` and its id, the added (special) tokens included."""
    return dict(tokenizer.tokenizer.get_vocab(with_added_tokens=True))


def _installed(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _read_saved(saved: Path, version: str | None) -> Tokenizer | None:
    import json

    from ctxemb_core._files import read_with_digest

    try:
        record = json.loads((saved / _SAVED_RECORD).read_text(encoding="utf-8"))
        if (
            not isinstance(record, dict)
            or record.get("format") != _SAVED_FORMAT
            or (version is not None and record.get("transformers") != version)
            or not isinstance(record.get("facts"), dict)
        ):
            return None
        data, digest = read_with_digest(saved / _SAVED_JSON)
    except (OSError, ValueError, RecursionError):
        return None
    if digest != record.get("digest"):
        return None  # made again from the folder, and kept anew
    try:
        return Tokenizer.from_saved(data.decode("utf-8"), record["facts"], str(saved))
    except (DataFormatError, MissingDependencyError, UnicodeDecodeError):
        return None


def _keep(tokenizer: Tokenizer, saved: Path, version: str) -> None:
    import hashlib
    import json

    from ctxemb_core._files import write_atomic

    try:
        text = tokenizer.to_json()
        copy = Tokenizer.from_saved(text, tokenizer.facts(), str(saved))
        probe = ["", "hello world", "Café ¿por qué? 東京 🙂", "x " * 600]
        for limit in (8, 512):
            _, want = tokenizer(probe, limit)
            _, got = copy(probe, limit)
            if any(k not in got or not np.array_equal(v, got[k]) for k, v in want.items()):
                return  # not reproduced by tokenizers alone: read through transformers
        saved.mkdir(parents=True, exist_ok=True)
        # The record last: a reader that finds it finds the tokenizer it names.
        if not write_atomic(saved / _SAVED_JSON, text):
            return
        record = {
            "format": _SAVED_FORMAT,
            "transformers": version,
            "digest": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "facts": tokenizer.facts(),
        }
        write_atomic(saved / _SAVED_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    except Exception:  # a read-only cache, a tokenizer that cannot be serialised: not kept
        return
