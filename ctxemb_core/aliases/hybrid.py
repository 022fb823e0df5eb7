"""An alias over a hybrid index: the dense side and the lexical side followed together.

An alias's target records, beside the dense contract, the hybrid contract of a hybrid index
(:attr:`~ctxemb_core.aliases.record.AliasTarget.hybrid`: the lexical recipe and the fusion).
Everything an alias does to such an index goes through the store's own hybrid pairing
(:func:`ctxemb_core.hybrid.pair.open_paired`, which a store's catalog opens: a
:class:`HybridCatalog`), so that every store gets it at once:

- writes and deletes reach the lexical side (in the dense write's own transaction where the
  store shares one, PostgreSQL; after it, the ids recorded first, elsewhere) of every index
  the alias writes (:class:`HybridWrites`);
- a reader queries through the pair under the alias's recorded hybrid contract;
- an upgrade builds the shadow's lexical side under the new recipe and fills it from the
  shadow's stored texts; its gates compare the lexical side too; a retire drops it.

A catalog that is no :class:`HybridCatalog` (the in-memory one) has no hybrid index: an alias
created in it is a dense one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ctxemb_core.aliases.record import AliasTarget
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.driver import Filter
from ctxemb_core.remedy import Said

if TYPE_CHECKING:
    from ctxemb_core.contract import EmbeddingContract
    from ctxemb_core.embedder import Embedder
    from ctxemb_core.hybrid.contract import HybridContract
    from ctxemb_core.hybrid.pair import HybridIndex
    from ctxemb_core.hybrid.store import LexicalStore
    from ctxemb_core.index.guarded import GuardedIndex

__all__ = [
    "HybridCatalog",
    "HybridWrites",
    "check_dense_target",
    "drop_lexical",
    "hybrid_catalog",
    "lexical_contract",
    "open_target",
]


@runtime_checkable
class HybridCatalog(Protocol):
    """A :class:`~ctxemb_core.aliases.book.Catalog` whose store keeps hybrid indexes: what a
    store adapter's catalog adds for them (its store's own: where a side lives)."""

    def open_hybrid(
        self, name: str, contract: EmbeddingContract | Embedder, **options: Any
    ) -> HybridIndex:
        """Index ``name`` and its lexical side as the adapter's ``open_hybrid`` opens them
        (``options``: its keywords: ``lexical``, ``fusion``, ``create``, ``refresh``,
        ``sample``...)."""
        ...

    def lexical(self, name: str) -> LexicalStore | None:
        """Where index ``name``'s lexical side lives or would (whether or not it exists), read
        without opening the dense side; ``None`` where this store keeps none for it (a Chroma
        server's folder is its caller's to name)."""
        ...

    def lexical_mark(self, name: str) -> str | None:
        """The token of the lexical side that index ``name`` records having (its mark), read
        without opening it; ``None`` when it records none, or where :meth:`lexical` always
        finds the side (the store keeps it in its own tables)."""
        ...


def hybrid_catalog(catalog: Any, alias: str) -> HybridCatalog:
    """``catalog`` as a :class:`HybridCatalog`, or :class:`InvalidInputError`."""
    if not isinstance(catalog, HybridCatalog):
        raise InvalidInputError(
            f"alias {alias!r} names a hybrid index, but {catalog.describe()} keeps no hybrid "
            "indexes (its catalog cannot open a lexical side)"
        )
    return catalog


def lexical_contract(catalog: Any, index: str) -> HybridContract | None:
    """The hybrid contract (a recipe) of index ``index``'s lexical side as its stamp holds it,
    read without embedding anything; ``None`` when it has none (or the store keeps none)."""
    if not isinstance(catalog, HybridCatalog):
        return None
    store = catalog.lexical(index)
    mark = catalog.lexical_mark(index)
    try:
        if store is None or not store.exists():
            if mark is not None:
                # A dense index whose lexical side is kept where an alias cannot follow it: its
                # writes through the alias would leave that side stale, in silence.
                where = "in a folder its callers name" if store is None else f"not in {store.where}"
                raise Said("its lexical_path", "its --lexical-path").into(
                    InvalidInputError,
                    f"index {index!r} has a lexical side (token {mark}) kept {where} ({{do}}), "
                    "where an alias cannot reach it to keep it in "
                    "step with the index's writes. An alias over a hybrid index needs the side "
                    "where its store keeps it by default (an embedded Chroma store's "
                    "ctxemb-lexical folder, PostgreSQL's schema); rebuild it there, or alias "
                    "an index without one",
                )
            return None
        return store.stamp().contract.recipe()
    finally:
        if store is not None:
            _close(store)


def drop_lexical(catalog: Any, target: AliasTarget) -> None:
    """Drop ``target``'s lexical side (before its dense index is dropped)."""
    if target.hybrid is None or not isinstance(catalog, HybridCatalog):
        return
    store = catalog.lexical(target.index)
    if store is not None:
        try:
            store.drop()
        finally:
            _close(store)


def _close(store: LexicalStore) -> None:
    """Close a side's own connection, where it has one (a SQLite file's; PostgreSQL's is the
    caller's)."""
    close = getattr(store.db, "close", None)
    if callable(close):
        close()


def check_dense_target(catalog: Any, target: AliasTarget, alias: str) -> None:
    """Refuse to open ``target``, recorded as a dense index, when it has a lexical side now
    (built after the alias was created over it): the alias's writes would leave that side stale
    in silence."""
    if target.hybrid is not None or lexical_contract(catalog, target.index) is None:
        return
    again = Said(
        f"create_alias(catalog, NAME, {target.index!r})",
        f"ctxemb alias create NAME --collection {target.index}",
    )
    raise again.into(
        InvalidInputError,
        f"index {target.index!r} has a lexical side, but alias {alias!r} was created over it as a "
        "dense index and keeps only the dense side in step: its writes would leave the lexical "
        "side stale. Create an alias over it again ({do}), which records the side, and open "
        "that one",
    )


def open_target(
    catalog: Any,
    target: AliasTarget,
    embedder: Embedder,
    *,
    sample: int = 0,
    create: bool = False,
    refresh: bool = False,
    alias: str = "",
) -> HybridIndex:
    """The hybrid pair of a hybrid target, opened under the alias's recorded hybrid contract
    (a lexical side of another recipe or fusion is refused: ``HybridMismatchError``).

    Args:
        create: build the lexical side from the dense side's stored texts where there is none
            (a new shadow).
        refresh: mend a lexical side found out of step (a shadow a backfill is filling).
    """
    assert target.hybrid is not None
    return hybrid_catalog(catalog, alias or target.index).open_hybrid(
        target.index,
        embedder,
        lexical=target.hybrid.lexical,
        fusion=target.hybrid.fusion,
        create=create,
        refresh=refresh,
        sample=sample,
    )


class HybridWrites:
    """A hybrid pair written as a :class:`~ctxemb_core.index.guarded.GuardedIndex` is (the
    same calls, the same results): each write is the dense index's own, and the lexical side
    is brought to what it stored (:meth:`HybridIndex.keep_in_step`)."""

    def __init__(self, hybrid: HybridIndex) -> None:
        self.hybrid = hybrid
        self.index: GuardedIndex = hybrid.dense.index

    @property
    def name(self) -> str:
        return self.index.name

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.hybrid.keep_in_step(ids, lambda: self.index.add(ids, documents, metadatas))

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.hybrid.keep_in_step(ids, lambda: self.index.upsert(ids, documents, metadatas))

    def sync(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> Any:
        report: list[Any] = []
        self.hybrid.keep_in_step(
            ids,
            lambda: report.append(self.index.sync(ids, documents, metadatas, progress=progress)),
        )
        return report[0]

    def delete(self, ids: Sequence[str] | None = None, *, where: Filter | None = None) -> list[str]:
        if ids is not None and where is None:
            gone: list[list[str]] = []
            self.hybrid.keep_in_step(ids, lambda: gone.append(self.index.delete(ids)))
            return gone[0]
        deleted = self.index.delete(ids, where=where)  # the ids are known only now
        self.hybrid.deleted_through(deleted)
        return deleted

    def delete_missing(self, keep: Iterable[str], *, dry_run: bool = False) -> list[str]:
        gone = self.index.delete_missing(keep, dry_run=dry_run)
        if not dry_run:
            self.hybrid.deleted_through(gone)
        return gone
