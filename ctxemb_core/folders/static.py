"""A static model's folder in model2vec's format: a lookup table, its tokenizer, its config.

* ``model.safetensors`` (or ``embeddings.safetensors``): the table as the tensor
  ``embeddings`` (rows × dimension), optionally ``weights`` (one per token id, multiplied into
  its row) and ``mapping`` (token id → row, model2vec's vocabulary quantisation);
* ``tokenizer.json``: the ``tokenizers`` pipeline that cuts a text into token ids;
* ``config.json``: model2vec's ``normalize`` (default ``False``) and ``max_length`` (default
  512; ``null`` for none).

:func:`read_static_layout` reads and checks the folder (no table is loaded); the table itself
is served by :class:`ctxemb_core.backends.static.StaticEncoder`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core._files import file_digests
from ctxemb_core.errors import MalformedModelError, ModelNotFoundError
from ctxemb_core.folders.safetensors import safetensors_header

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "DEFAULT_NORMALIZE",
    "TABLE_FILES",
    "StaticLayout",
    "is_static_folder",
    "read_static_layout",
    "static_digest",
]

#: Where a static folder keeps its table, in the order they are looked for.
TABLE_FILES = ("model.safetensors", "embeddings.safetensors")
#: model2vec's defaults for a config that does not say.
DEFAULT_MAX_LENGTH = 512
DEFAULT_NORMALIZE = False

_MAX_CONFIG = 16 << 20
_FLOAT_TABLES = ("F64", "F32", "F16", "I8")


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
