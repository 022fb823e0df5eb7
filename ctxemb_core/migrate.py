"""The resumable copy loop of a migration, for any store: pages in, missing records out.

A migration re-embeds every record of a source index into a new index under another contract.
The store-specific parts are two callables an adapter supplies: how to read the source one page
at a time, and how to write a batch into the target (through its guard). Everything else — which
records are still missing, refusing records that cannot be re-embedded, progress — is here, so
every adapter migrates alike and a migration stopped half-way continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ctxemb_core.errors import InvalidInputError

__all__ = ["Page", "copy_missing"]


class Page(NamedTuple):
    """One page of source records: ids, texts (``None`` where none was stored), metadata."""

    ids: Sequence[str]
    documents: Sequence[str | None]
    metadatas: Sequence[Mapping[str, Any] | None] | None = None


def copy_missing(
    pages: Iterable[Page],
    write: Callable[[list[str], list[str], list[Any] | None], Any],
    done: Collection[str],
    *,
    total: int,
    progress: bool | None = None,
    desc: str = "migrating",
) -> int:
    """Write every source record whose id the target lacks; returns how many were written.

    Args:
        pages: the source, one :class:`Page` at a time (in a stable order, e.g. by offset).
        write: writes one batch ``(ids, documents, metadatas or None)`` into the target.
        done: ids the target holds already (skipped: this is what makes a re-run resume).
        total: how many records the source holds, for the progress bar.
        progress: show a progress bar (``None``: tqdm's choice; ``False``: never).

    Raises:
        InvalidInputError: a record to copy has no stored text, so it cannot be re-embedded
            (nothing of that page is written; the pages before it are).

    Example:
        >>> n = copy_missing(pages, target.add, target.ids(), total=len(source))  # doctest: +SKIP
    """
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise InvalidInputError(f"total must be an integer >= 0, got {total!r}")
    from tqdm.auto import tqdm

    copied = 0
    with tqdm(
        total=total, initial=len(done), unit="doc", desc=desc, disable=progress is False
    ) as bar:
        for page in pages:
            metas = page.metadatas if page.metadatas is not None else [None] * len(page.ids)
            rows = [
                (i, d, m)
                for i, d, m in zip(page.ids, page.documents, metas, strict=True)
                if i not in done
            ]
            if not rows:
                continue
            missing = [i for i, d, _ in rows if not isinstance(d, str)]
            if missing:
                raise InvalidInputError(
                    f"source records {missing[:5]} have no stored text: they cannot be "
                    "re-embedded under the new contract (re-add them with their text first)"
                )
            ids = [i for i, _, _ in rows]
            docs: list[str] = [d for _, d, _ in rows]  # type: ignore[misc]
            kept = [m for _, _, m in rows]
            write(ids, docs, kept if any(m is not None for m in kept) else None)
            copied += len(ids)
            bar.update(len(ids))
    return copied
