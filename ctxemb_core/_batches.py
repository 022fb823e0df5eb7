"""Batch planning and progress shared by everything that runs a network over many inputs."""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

__all__ = [
    "PROGRESS_LOGGER",
    "loading",
    "loading_name",
    "plan_batches",
    "progress_bar",
    "reporting",
    "with_progress",
]

#: The logger of one-time work that takes long enough to look like a hang (the ONNX export).
#: Its INFO records go nowhere unless asked for; the ``ctxemb`` command prints them on stderr.
PROGRESS_LOGGER = "ctxemb_core.progress"

# The model a network is being loaded for, as its contract names it (``loading``).
_LOADING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ctxemb_loading_model", default=None
)


@contextlib.contextmanager
def loading(model: str) -> Iterator[None]:
    """Within the block, one-time work on a network (the ONNX export) names it ``model``: the
    model the user asked for, where the backend sees only a folder (the bundled MiniLM's is
    called ``model``)."""
    token = _LOADING.set(model)
    try:
        yield
    finally:
        _LOADING.reset(token)


def loading_name(default: str) -> str:
    """The model named by the enclosing :func:`loading`, else ``default``."""
    return _LOADING.get() or default


# Where the batches run inside ``reporting`` are counted, instead of on a bar of their own.
_SINK: contextvars.ContextVar[Callable[[int], None] | None] = contextvars.ContextVar(
    "ctxemb_progress_sink", default=None
)


def plan_batches(lengths: np.ndarray, batch_size: int, token_budget: int) -> list[np.ndarray]:
    """Index batches: by token length, longest first, each within the token budget.

    Sorting by real token counts and filling each batch up to ``token_budget`` padded tokens (at
    most ``batch_size`` inputs) keeps padding low on inputs of mixed lengths; callers write
    results back by index, so the output order is always the input order.
    """
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        longest = int(lengths[order[start]])  # sorted: the first is the longest
        size = max(1, min(batch_size, token_budget // max(longest, 1)))
        batches.append(order[start : start + size])
        start += size
    return batches


def with_progress(
    batches: list[np.ndarray], total: int, show: bool | None, *, unit: str, desc: str
) -> Iterable[np.ndarray]:
    """``batches``, counted on a tqdm bar when ``show`` (``None``: 1,000 inputs or more on a
    terminal), or on the callback of an enclosing :func:`reporting`."""
    sink = _SINK.get()
    if sink is not None:
        return _reported(sink, batches)
    if show is None:
        show = total >= 1000 and sys.stderr.isatty()
    if not show:
        return batches
    from tqdm.auto import tqdm

    return _counting(tqdm(total=total, unit=unit, desc=desc), batches)


def progress_bar(total: int, show: bool | None, *, unit: str, desc: str) -> Any:
    r"""A tqdm bar for ``total`` ``unit``\ s, drawn only when ``show`` says so (``None``: as for
    an Embedder's ``show_progress``, 1,000 or more on a terminal); otherwise it counts silently.
    """
    if show is None:
        show = total >= 1000 and sys.stderr.isatty()
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=unit, desc=desc, disable=not show)


def _counting(bar: Any, batches: list[np.ndarray]) -> Iterable[np.ndarray]:
    with bar:
        for idx in batches:
            yield idx
            bar.update(len(idx))


def _reported(sink: Callable[[int], None], batches: list[np.ndarray]) -> Iterable[np.ndarray]:
    for idx in batches:
        yield idx
        sink(len(idx))


@contextlib.contextmanager
def reporting(progress: Callable[[int], None] | None, total: int) -> Iterator[None]:
    """Count the inputs of every batch a network runs inside the block on ``progress``.

    A caller with a bar of its own over many calls (``ctxemb index``) sees it move per embedded
    batch rather than per call. On leaving, what was not counted (texts the embedding cache
    answered) is counted too, so the block always adds ``total``. ``None`` does nothing.
    """
    if progress is None:
        yield
        return
    done = 0

    def count(n: int) -> None:
        nonlocal done
        step = min(n, total - done)
        if step > 0:
            done += step
            progress(step)

    token = _SINK.set(count)
    try:
        yield
    finally:
        _SINK.reset(token)
    if done < total:
        progress(total - done)
