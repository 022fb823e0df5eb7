"""Failures a raw client arms for a store's next write (the conformance suite's ``failing_writes``).

:class:`~ctxemb_core.testing.conformance.RawAccess` promises that within ``failing_writes(after)``
the store's next write fails once ``after`` of its records reached the store, inside the write
(so a transaction rolls back, and a store without one is left half-written for the guard to
undo). A driver passes the records it sends through :func:`sent`, under a key naming its index
(the store and the index, never a password), or through :func:`sent_in_parts` where it sends
them in calls of a few (a store without transactions: the parts before the failure are
written); a raw client arms a failure under the same key with :func:`armed`. An armed failure
fires once.

Example:
    >>> with armed(("memory", "docs"), after=2):                       # doctest: +SKIP
    ...     index.add(ids, texts)  # the third record fails: nothing is written
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable, Iterable, Iterator
from typing import Any, TypeVar

from ctxemb_core.errors import StoreUnavailableError

__all__ = ["armed", "sent", "sent_in_parts"]

_T = TypeVar("_T")
#: Armed failures by key: ``[records still let through, the error]``.
_ARMED: dict[Hashable, list[Any]] = {}
_LOCK = threading.Lock()


@contextlib.contextmanager
def armed(
    key: Hashable, after: int, error: BaseException | None = None, *, store: str = "the store"
) -> Iterator[None]:
    """Within the block, the next write to the index ``key`` names fails when its record after
    the first ``after`` is sent (``error``, default a ``StoreUnavailableError`` naming
    ``store``); disarmed when it fired or the block ends."""
    error = error or StoreUnavailableError(f"{store}: the write failed (armed by a test)")
    with _LOCK:
        _ARMED[key] = [after, error]
    try:
        yield
    finally:
        with _LOCK:
            _ARMED.pop(key, None)


def sent(key: Hashable, records: Iterable[_T]) -> Iterator[_T]:
    """``records`` as a write sends them to the store; a failure armed for ``key`` fires
    before the record it is armed for."""
    for record in records:
        with _LOCK:
            slot = _ARMED.get(key)
            if slot is not None:
                if slot[0] <= 0:
                    del _ARMED[key]
                    raise slot[1]
                slot[0] -= 1
        yield record


def sent_in_parts(key: Hashable, records: Iterable[_T], step: int) -> Iterator[list[_T]]:
    """``records`` in parts of at most ``step``, one store call each, as :func:`sent` sends
    them: when a failure armed for ``key`` fires, the records before it are given as a last
    part (they reach the store, as a failing call's first records do), then it is raised."""
    part: list[_T] = []
    each = sent(key, records)
    while True:
        try:
            part.append(next(each))
        except StopIteration:
            break
        except BaseException:
            if part:
                yield part
            raise
        if len(part) >= step:
            yield part
            part = []
    if part:
        yield part
