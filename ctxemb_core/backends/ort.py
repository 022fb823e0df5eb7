"""What every onnxruntime session of ctxemb shares: its options, its thread count, and running
a graph one text at a time (a cached export, a copied export, the export's own self-check).

Imports onnxruntime only when asked to, and nothing of torch, transformers or onnx.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxemb_core.errors import InvalidInputError, MissingDependencyError

__all__ = [
    "available_cores",
    "check_threads",
    "import_onnxruntime",
    "run_per_text",
    "session_options",
]


def check_threads(threads: int | None) -> None:
    """Refuse an onnxruntime thread count that is not ``None`` or a positive integer."""
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0
    ):
        raise InvalidInputError(f"threads must be a positive integer, got {threads!r}")


def import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise MissingDependencyError(
            f"the onnx backend needs onnxruntime ({exc}); install it with pip install onnxruntime"
        ) from None
    return onnxruntime


def session_options(ort: Any, threads: int | None) -> Any:
    """The onnxruntime session options every ctxemb graph runs with (a cached or a copied one)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # One intra-op thread per core we may run on: onnxruntime's own default counts the machine's
    # physical cores, which oversubscribes a CPU-limited container or a pinned process.
    options.intra_op_num_threads = threads or available_cores()
    options.inter_op_num_threads = 1
    # Pool threads block between parallel sections instead of spinning: a spinning pool on a
    # core another process also wants loses its turns to that process and takes the
    # neighbour's. On 2 cores with one kept busy by another process, MiniLM went from 11.1 to
    # 13.6 docs/s (idle 27.0 vs 26.9, no cost); one thread would gain little more under load
    # (14.0) and lose 43 % when idle (benchmarks/under_load.py).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # its warnings about unused initializers are noise here
    return options


def available_cores() -> int:
    """The cores this process may run on, or fewer when ``OMP_NUM_THREADS`` says so (as Ray
    does for an actor given one CPU: two such actors on two cores would otherwise run four
    threads and slow each other down; torch follows the same variable)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    wanted = os.environ.get("OMP_NUM_THREADS", "").strip()
    if wanted.isdigit() and int(wanted) > 0:
        return min(cores, int(wanted))
    return cores


def run_per_text(
    session: Any, output: str, arrays: dict[str, np.ndarray], inputs: Sequence[str]
) -> np.ndarray:
    """``output`` for a padded batch, computed one text at a time over its real tokens only.

    The output's last three axes are (batch, tokens, width), as for the last hidden state or
    every hidden state stacked; padded positions of the result are zero (no pooling reads them).
    """
    mask = arrays["attention_mask"]
    result: np.ndarray | None = None
    for row in range(mask.shape[0]):
        (real,) = np.nonzero(mask[row])
        (out,) = session.run([output], {k: arrays[k][row : row + 1, real] for k in inputs})
        out = np.asarray(out, dtype=np.float32)
        if result is None:
            result = np.zeros((*out.shape[:-3], *mask.shape, out.shape[-1]), dtype=np.float32)
        result[..., row, real, :] = out[..., 0, :, :]
    assert result is not None  # a batch has at least one text
    return result
