"""The safetensors format, read and written with numpy alone (no ``safetensors`` package, no
torch): headers checked against the file's size, only the named tensors read.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.errors import MalformedModelError, UnsupportedModelError

__all__ = ["DTYPES", "read_safetensors", "safetensors_header", "write_safetensors"]

# safetensors' dtype names -> numpy (little-endian, as the format stores them). BF16 has no
# numpy type and is refused by name.
DTYPES = {
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
_CODES = {np.dtype(v): k for k, v in DTYPES.items()}
# A safetensors header names tensors and their offsets: kilobytes. More is no real file.
_MAX_HEADER = 100 << 20


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
        if ok and dtype in DTYPES:
            assert isinstance(shape, list) and isinstance(offsets, list)
            ok = offsets[1] - offsets[0] == math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
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
            if entry["dtype"] not in DTYPES:
                raise MalformedModelError(
                    f"{path}: tensor {name!r} is {entry['dtype']}, which numpy cannot read; "
                    f"valid dtypes are {sorted(DTYPES)}"
                )
            a, b = entry["data_offsets"]
            fh.seek(start + a)
            data = fh.read(b - a)
            array = np.frombuffer(data, dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
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
