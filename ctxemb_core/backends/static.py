"""Static encoders: a text vector from a lookup table, with no network (the Word2Vec / GloVe /
model2vec row of the families table).

A static model maps each token *type* to one vector: the same vector in every sentence. A text's
vector is the mean of its tokens' lookup vectors (each scaled by the folder's per-token weight,
where it has them), then normalised if the contract says so. This module reads such models in
model2vec's folder format and computes exactly what ``model2vec.StaticModel.encode`` computes,
with numpy and ``tokenizers`` alone (no torch, no transformers, no ``safetensors`` package):

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
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core.backends import TokenBatch
from ctxemb_core.backends._tokenize import Tokenizer
from ctxemb_core.errors import (
    MalformedModelError,
    MissingDependencyError,
    ModelNotFoundError,
    UnsupportedModelError,
)

__all__ = [
    "TABLE_FILES",
    "StaticEncoder",
    "StaticLayout",
    "StaticTokenizer",
    "is_static_folder",
    "read_safetensors",
    "read_static_layout",
    "safetensors_header",
    "static_digest",
    "write_safetensors",
]

#: Where a static folder keeps its table, in the order they are looked for.
TABLE_FILES = ("model.safetensors", "embeddings.safetensors")
#: model2vec's defaults for a config that does not say.
DEFAULT_MAX_LENGTH = 512
DEFAULT_NORMALIZE = False

# safetensors' dtype names -> numpy (little-endian, as the format stores them). BF16 has no
# numpy type and is refused by name.
_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}
# A safetensors header names tensors and their offsets: kilobytes. More is no real file.
_MAX_HEADER = 100 << 20
_MAX_CONFIG = 16 << 20
_FLOAT_TABLES = ("F64", "F32", "F16", "I8")


# -- the safetensors format, read and written with numpy --------------------------------------


def safetensors_header(path: str | os.PathLike[str]) -> tuple[dict[str, dict[str, Any]], int]:
    """The tensors a safetensors file holds (name → dtype, shape, offsets) and where their data
    starts; only the header is read, and it is checked against the file's size.

    Raises:
        MalformedModelError: the file is not a valid safetensors file.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            size = os.fstat(fh.fileno()).st_size
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 2 <= n <= min(_MAX_HEADER, size - 8):
                raise MalformedModelError(f"{path} is not a safetensors file (header length)")
            raw = fh.read(n)
    except OSError as exc:
        raise MalformedModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        raise MalformedModelError(f"{path} is not a safetensors file (header JSON)") from None
    if not isinstance(header, dict):
        raise MalformedModelError(f"{path} is not a safetensors file (header is not an object)")
    start = 8 + n
    tensors: dict[str, dict[str, Any]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise MalformedModelError(f"{path}: tensor {name!r} has an invalid header entry")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        ok = (
            isinstance(dtype, str)
            and isinstance(shape, list)
            and all(type(d) is int and d >= 0 for d in shape)
            and isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= size - start
        )
        if ok and dtype in _DTYPES:
            assert isinstance(shape, list) and isinstance(offsets, list)
            ok = offsets[1] - offsets[0] == math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
        if not ok or not isinstance(shape, list) or not isinstance(offsets, list):
            raise MalformedModelError(f"{path}: tensor {name!r} has an invalid header entry")
        tensors[name] = {"dtype": dtype, "shape": tuple(shape), "data_offsets": tuple(offsets)}
    return tensors, start


def read_safetensors(
    path: str | os.PathLike[str], names: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file as numpy arrays; only the named ones are read.

    Raises:
        MalformedModelError: not a safetensors file, a named tensor it does not hold, or one of
            a dtype numpy has no type for (bfloat16).
    """
    path = Path(path)
    header, start = safetensors_header(path)
    wanted = list(header) if names is None else list(names)
    out: dict[str, np.ndarray] = {}
    with path.open("rb") as fh:
        for name in wanted:
            entry = header.get(name)
            if entry is None:
                raise MalformedModelError(
                    f"{path} holds no tensor {name!r}; it holds {sorted(header)[:10]}"
                )
            if entry["dtype"] not in _DTYPES:
                raise MalformedModelError(
                    f"{path}: tensor {name!r} is {entry['dtype']}, which numpy cannot read; "
                    f"valid dtypes are {sorted(_DTYPES)}"
                )
            a, b = entry["data_offsets"]
            fh.seek(start + a)
            data = fh.read(b - a)
            array = np.frombuffer(data, dtype=_DTYPES[entry["dtype"]]).reshape(entry["shape"])
            out[name] = array.astype(array.dtype.newbyteorder("="), copy=False)
    return out


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write numpy arrays as a safetensors file (what ``safetensors.numpy.save_file`` writes)."""
    header: dict[str, Any] = {}
    arrays: list[np.ndarray] = []
    offset = 0
    for name, value in tensors.items():
        array = np.ascontiguousarray(value)
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        code = _CODES.get(array.dtype.newbyteorder("="))
        if code is None:
            raise UnsupportedModelError(f"tensor {name!r}: dtype {array.dtype} has no safetensors")
        header[name] = {
            "dtype": code,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
        arrays.append(array)
    if metadata:
        header["__metadata__"] = dict(metadata)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with Path(path).open("wb") as fh:
        fh.write(len(text).to_bytes(8, "little"))
        fh.write(text)
        for array in arrays:
            fh.write(array.tobytes())


# -- the folder --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StaticLayout:
    """What a static (model2vec-format) folder says about itself, read once (no table loaded).

    Attributes:
        root: the folder.
        table: the safetensors file holding the ``embeddings`` tensor.
        tokenizer: ``tokenizer.json``.
        config: ``config.json``.
        rows: rows of the table.
        dimension: width of each row (the vectors' dimension).
        normalize: model2vec's ``normalize`` (``False`` where the config does not say).
        max_length: model2vec's ``max_length`` (512 where the config does not say; ``None``:
            no limit).
        token_weights: whether the file holds per-token ``weights``.
        mapping: whether the file holds a token → row ``mapping``.
    """

    root: Path
    table: Path
    tokenizer: Path
    config: Path
    rows: int
    dimension: int
    normalize: bool
    max_length: int | None
    token_weights: bool
    mapping: bool

    @property
    def files(self) -> tuple[Path, ...]:
        """The files that decide the vectors (what :func:`static_digest` covers)."""
        return (self.config, self.table, self.tokenizer)


def _table_file(folder: Path) -> Path | None:
    return next((folder / n for n in TABLE_FILES if (folder / n).is_file()), None)


def is_static_folder(folder: str | os.PathLike[str]) -> bool:
    """Whether a folder holds a static model: ``config.json``, ``tokenizer.json`` and a table
    file whose tensor is named ``embeddings`` (model2vec's name), or a config that says
    ``"model_type": "model2vec"`` (then :func:`read_static_layout` says what is wrong)."""
    root = Path(folder)
    try:
        if not (root / "config.json").is_file() or not (root / "tokenizer.json").is_file():
            return False
        table = _table_file(root)
        if table is not None:
            try:
                if "embeddings" in safetensors_header(table)[0]:
                    return True
            except MalformedModelError:
                pass
        config = _read_config(root / "config.json")
        return config.get("model_type") == "model2vec"
    except (OSError, MalformedModelError):
        return False


def read_static_layout(folder: str | os.PathLike[str]) -> StaticLayout:
    """Read and check a static folder's config and table header (no table is loaded).

    Raises:
        ModelNotFoundError: a file of the format is missing.
        MalformedModelError: a file is not what the format says (a table that is not 2-d,
            weights or a mapping of the wrong length, a config value of the wrong type).
    """
    root = Path(folder).resolve()
    config_file, tokenizer_file = root / "config.json", root / "tokenizer.json"
    table = _table_file(root)
    for needed, path in (("config.json", config_file), ("tokenizer.json", tokenizer_file)):
        if not path.is_file():
            raise ModelNotFoundError(f"{root} has no {needed}: not a static model folder")
    if table is None:
        raise ModelNotFoundError(
            f"{root} has no {' or '.join(TABLE_FILES)}: not a static model folder"
        )
    config = _read_config(config_file)
    normalize = config.get("normalize", DEFAULT_NORMALIZE)
    if not isinstance(normalize, bool):
        raise MalformedModelError(f"{config_file}: normalize must be true or false")
    max_length = config.get("max_length", DEFAULT_MAX_LENGTH)
    if max_length is not None and (
        isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1
    ):
        raise MalformedModelError(
            f"{config_file}: max_length must be a positive integer or null, got {max_length!r}"
        )
    header, _ = safetensors_header(table)
    entry = header.get("embeddings")
    if entry is None:
        raise MalformedModelError(
            f"{table} holds no 'embeddings' tensor (model2vec's table); it holds {sorted(header)}"
        )
    if len(entry["shape"]) != 2 or entry["dtype"] not in _FLOAT_TABLES or 0 in entry["shape"]:
        raise MalformedModelError(
            f"{table}: 'embeddings' must be a non-empty 2-d table of {', '.join(_FLOAT_TABLES)}, "
            f"got {entry['dtype']} {list(entry['shape'])}"
        )
    for name, kinds in (("weights", ("F64", "F32", "F16")), ("mapping", ("I64", "I32"))):
        extra = header.get(name)
        if extra is not None and (len(extra["shape"]) != 1 or extra["dtype"] not in kinds):
            raise MalformedModelError(
                f"{table}: {name!r} must be 1-d of {', '.join(kinds)}, got {extra['dtype']} "
                f"{list(extra['shape'])}"
            )
    rows, dimension = entry["shape"]
    return StaticLayout(
        root=root,
        table=table,
        tokenizer=tokenizer_file,
        config=config_file,
        rows=int(rows),
        dimension=int(dimension),
        normalize=normalize,
        max_length=max_length,
        token_weights="weights" in header,
        mapping="mapping" in header,
    )


def static_digest(folder: str | os.PathLike[str] | StaticLayout) -> str:
    """``sha256:`` digest over a static folder's table, tokenizer and config files.

    Computed as :func:`ctxemb_core.resolve.weights_digest` computes a network's (file names
    relative to the folder and their contents), so a moved or copied folder keeps it.
    """
    import hashlib

    from ctxemb_core._files import file_digests

    layout = folder if isinstance(folder, StaticLayout) else read_static_layout(folder)
    files = sorted(layout.files)
    h = hashlib.sha256()
    for path, digest in zip(files, file_digests(files), strict=True):
        h.update(f"{path.relative_to(layout.root).as_posix()}\0{digest}\n".encode())
    return "sha256:" + h.hexdigest()


def _read_config(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            raw = fh.read(_MAX_CONFIG + 1)
    except OSError as exc:
        raise MalformedModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > _MAX_CONFIG:
        raise MalformedModelError(f"{path} is larger than any model config; refused")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        raise MalformedModelError(f"cannot read {path} as JSON") from None
    if not isinstance(data, dict):
        raise MalformedModelError(f"{path} must hold a JSON object")
    return data


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
        from ctxemb_core.resolve import check_tokenizer_files

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

    def _limit(self, max_tokens: int) -> None:
        if self._max_tokens != max_tokens:
            self.tokenizer.enable_truncation(max_length=max_tokens)
            self._max_tokens = max_tokens

    def pieces(self, texts: Sequence[str], max_tokens: int) -> list[Pieces]:
        """The looked-up tokens of each text, with their strings and character offsets."""
        cut = max_tokens * self.median_token_length
        short = [t[:cut] for t in texts]
        self._limit(max_tokens)
        out = []
        for text, s, enc in zip(
            texts, short, self.tokenizer.encode_batch(short, add_special_tokens=False), strict=True
        ):
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

    def __call__(self, texts: Sequence[Any], max_tokens: int) -> tuple[list, dict[str, np.ndarray]]:
        """The pieces of each text and their ids as a right-padded array with its mask."""
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
        return np.array([len(p.ids) for p in self.pieces(texts, max_tokens)], dtype=np.int64)


def _unk_id(backend: Any) -> int | None:
    # As model2vec finds it: WordPiece, BPE and WordLevel name an unk token; Unigram an id.
    model = backend.model
    if hasattr(model, "unk_token"):
        token = model.unk_token
        return None if token is None else backend.token_to_id(token)
    unk = json.loads(backend.to_str())["model"].get("unk_id")
    return unk if isinstance(unk, int) else None


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
