"""What ctxemb reads from an untrusted model folder: bounded JSON objects, regular files,
validated integers, and the weight files (safetensors only) a folder holds.

Every layout reader of :mod:`ctxemb_core.folders` reads through these, so a config linked to
``/dev/zero``, a directory where a file should be or a pickle-only folder is refused the same
way whatever the format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxemb_core.errors import MalformedModelError, ModelNotFoundError, PickledWeightsError

__all__ = ["MAX_CONFIG_JSON", "safetensors_files"]

#: Largest config JSON read from a model folder; configs are kilobytes (the tokenizer's own
#: ``tokenizer.json`` is read by the tokenizer, not here).
MAX_CONFIG_JSON = 16 << 20


def read_json(path: Path) -> Any:
    # At most one byte past the bound is read: a config linked to /dev/zero must not fill memory.
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_JSON + 1)
    except OSError as exc:
        raise MalformedModelError(f"cannot read {path}: {exc}") from None
    if len(raw) > MAX_CONFIG_JSON:
        raise MalformedModelError(
            f"{path} is larger than {MAX_CONFIG_JSON:,} bytes, which no model config is; the "
            "folder is refused"
        )
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:  # json recurses once per level of nesting
        raise MalformedModelError(f"{path} is nested too deeply to be a model config") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise MalformedModelError(f"cannot read {path}: {exc}") from None


def present(path: Path) -> bool:
    """Whether a folder has a file; one that is there but not a regular file is refused."""
    if not path.exists():
        return False
    if not path.is_file():  # a directory, a FIFO, a link to /dev/zero: nothing to read
        raise MalformedModelError(f"{path} is not a regular file; the folder is refused")
    return True


def read_object(path: Path) -> dict[str, Any]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise MalformedModelError(
            f"{path} must hold a JSON object, got a {type(data).__name__}; the folder is refused"
        )
    return data


def positive_int(data: dict[str, Any], key: str, where: Path) -> int | None:
    """``data[key]`` as a positive integer (``True`` and ``1.0`` are not), or ``None``."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MalformedModelError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def first_positive_int(config: dict[str, Any], where: Path, *keys: str) -> int | None:
    # The first key the config sets decides: a junk hidden_size must not fall through to "dim".
    for key in keys:
        if config.get(key) is not None:
            return positive_int(config, key, where)
    return None


def safetensors_files(folder: Path) -> list[Path]:
    """The safetensors weight files of a folder: the only weights ctxemb reads or digests.

    Raises:
        PickledWeightsError: the folder has only pickled weights (``pytorch_model*.bin``).
        ModelNotFoundError: the folder has no weights at all.
    """
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    if any(folder.glob("pytorch_model*.bin")):
        raise PickledWeightsError(folder)
    raise ModelNotFoundError(f"{folder} has no weights (model.safetensors)")
