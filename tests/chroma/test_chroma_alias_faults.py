"""An upgrade killed (SIGKILL) during its backfill, while a writer writes through the alias, and
during its cutover, on an embedded Chroma store: the alias is on exactly one complete target
afterwards, nothing written is lost, and running the step again finishes the job (issue 45)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxemb_core import Embedder
from ctxemb_core.aliases import AliasState, Encoders, backfill, create_alias, cutover
from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.aliases import digests
from ctxemb_core.testing.conformance import tiny_embedder

N = 400
CHILD = textwrap.dedent(
    """
    import sys, time
    from ctxemb_chroma import catalog as chroma_catalog, connect
    from ctxemb_core import Embedder
    from ctxemb_core.aliases import AliasedIndex, Encoders, backfill, begin_upgrade, cutover
    from ctxemb_core.index import GuardedIndex
    from ctxemb_core.testing.conformance import tiny_embedder

    path, step = sys.argv[1], sys.argv[2]
    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    catalog = chroma_catalog(connect(path))
    slow = GuardedIndex.upsert
    def upsert(self, *args, **kwargs):  # a slow store: the kill lands mid-way
        slow(self, *args, **kwargs)
        print("batch", flush=True)
        time.sleep(0.3)
    GuardedIndex.upsert = upsert
    if step == "backfill":
        begin_upgrade(catalog, "docs", new)
        backfill(catalog, "docs", Encoders(old, new), batch=20)
    elif step == "write":
        writer = AliasedIndex.open(catalog, "docs", Encoders(old, new))
        for k in range(1000):
            writer.upsert([f"w{k}"], [f"green tea document {k}"])
    elif step == "cutover":
        book = catalog.aliases
        real = book.swap
        def swap(record, expected):
            print("swapping", flush=True)
            time.sleep(5)
            return real(record, expected=expected)
        book.swap = swap
        GuardedIndex.upsert = slow
        cutover(catalog, "docs", Encoders(old, new))
    """
)


@pytest.fixture(scope="module")
def sides() -> tuple[Embedder, Embedder]:
    """The contract of the index, and the one it is upgraded to."""
    old = tiny_embedder()
    return old, Embedder(old.contract.with_(truncate_dim=8))


def kill_after(path: Path, step: str, lines: int) -> None:
    """Run ``step`` in a child and SIGKILL it once it printed ``lines`` lines."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), step], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    seen = 0
    deadline = time.monotonic() + 120
    while seen < lines and time.monotonic() < deadline:
        if child.stdout.readline():
            seen += 1
        elif child.poll() is not None:
            break
    if child.poll() is None:
        os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert seen == lines, f"the child stopped before it was killed ({seen} lines)"


def test_an_upgrade_killed_anywhere_is_finished_by_running_it_again(tmp_path, sides):
    old, new = sides
    from ctxemb_chroma import catalog as chroma_catalog
    from ctxemb_chroma import connect

    path = tmp_path / "chroma"
    catalog = chroma_catalog(connect(str(path)))
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(
        [f"d{k}" for k in range(N)], [f"document {k} about green tea" for k in range(N)]
    )
    create_alias(catalog, "docs", "docs-v1")

    kill_after(path, "backfill", 3)  # killed with the shadow part-filled
    catalog = chroma_catalog(connect(str(path)))
    record = catalog.aliases.read("docs")
    assert record.state is AliasState.UPGRADING and record.target.index == "docs-v1"
    shadow = record.shadow.index
    assert 0 < len(digests(catalog, shadow, new)) < N

    kill_after(path, "write", 5)  # a writer through the alias, killed mid-write
    catalog = chroma_catalog(connect(str(path)))
    written = {k for k in digests(catalog, "docs-v1", old) if k.startswith("w")}
    assert written

    report = backfill(catalog, "docs", Encoders(old, new))  # run again: finishes
    assert report.written > 0 and not report.carried  # re-embedded under the new contract
    assert digests(catalog, shadow, new) == digests(catalog, "docs-v1", old)

    kill_after(path, "cutover", 1)  # killed while switching: the alias is whole
    catalog = chroma_catalog(connect(str(path)))
    assert catalog.aliases.read("docs").target.index == "docs-v1"
    switched = cutover(catalog, "docs", Encoders(old, new))
    assert switched.target.index == shadow and switched.previous.index == "docs-v1"
    assert written <= set(digests(catalog, shadow, new))
