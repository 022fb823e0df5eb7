"""Writes that are undone whole: a failed or interrupted write leaves the index as it was.

Part of the guard (:mod:`ctxemb_core.guard` names every function here too).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from ctxemb_core.errors import ExistingIdsError, IncompleteWriteError

__all__ = ["add_missing", "deferred_interrupts", "undoable_write"]


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) until the block ends, then raise it.

    An undo that is itself interrupted would leave the index half-restored; it runs whole and
    the interrupt arrives right after. Only the main thread receives signals, so elsewhere this
    does nothing (nor where SIGINT's handler was installed outside Python).
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is None  # a handler not from Python: not ours to swap
    ):
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def undoable_write(write: Callable[[], None], undo: Callable[[], None], ids: Sequence[str]) -> None:
    """Run ``write``; if anything stops it, Ctrl-C and ``SystemExit`` included, run ``undo``.

    ``undo`` must restore the index to its state before the call (the adapter snapshots the
    records of ``ids`` first). The original error is re-raised after a successful undo; if the
    undo fails too, :class:`~ctxemb_core.errors.IncompleteWriteError` reports both and names the
    ids whose records may have changed.
    """
    try:
        write()
    except BaseException as error:
        try:
            with deferred_interrupts():
                undo()
        except Exception as undo_error:
            raise IncompleteWriteError(error, undo_error, tuple(ids)) from error
        raise


def add_missing(
    present: Callable[[list[str]], Collection[str]],
    add: Callable[[list[str], list[str], list[Any] | None], Any],
    ids: list[str],
    documents: Sequence[str],
    metadatas: list[Any] | None,
    attempts: int = 5,
) -> int:
    """Add the records whose ids the index lacks; returns how many were added.

    ``present(ids)`` says which of ``ids`` the index holds; ``add`` is the guarded add, which
    refuses ids already stored. Another writer adding some of them in between is looked at again,
    so concurrent indexers of one corpus add nothing twice and fail on nothing already there.
    """
    have: Collection[str] = ()
    for _ in range(attempts):
        have = present(ids)
        keep = [k for k, i in enumerate(ids) if i not in have]
        if not keep:
            return 0
        try:
            add(
                [ids[k] for k in keep],
                [documents[k] for k in keep],
                [metadatas[k] for k in keep] if metadatas else None,
            )
            return len(keep)
        except ExistingIdsError:
            continue  # another writer added some of them meanwhile: look again
    raise ExistingIdsError(tuple(i for i in ids if i in have))
