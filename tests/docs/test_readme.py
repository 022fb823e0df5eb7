"""Every runnable snippet of the documentation runs on its own and prints what the page shows.

The documentation is ``README.md`` (the front page) and every page under ``docs/`` (the MkDocs
site, ``mkdocs.yml``). Their fenced blocks are of three kinds:

- ```` ```python ```` — a whole program: it is run alone, in a fresh temporary directory, by this
  environment's Python. When the next block is ```` ```text ````, that block is its output.
- ```` ```console ```` — a shell session: each ``$ command`` line is run by ``bash`` in one
  fresh temporary directory per block (so later commands see what earlier ones wrote), and the
  lines after it, up to the next ``$``, are its output (stdout and stderr together).
- ```` ```bash ```` — installation and set-up commands (``pip install``, ``make``). They are not
  run here: ``tests/packaging/test_wheel.py`` makes the installs they describe and ``.ci/run``
  runs ``make test`` itself.

Output is compared line by line, with allowances that keep the comparison honest across CPUs:
progress-bar lines (drawn for a terminal) are dropped, a line ``...`` stands for any number of
lines (the page says where it shortens), ``…`` inside a line stands for any text, and numbers
may differ by 0.002 (the last printed digit of a cosine can flip between CPUs). Everything else
must match.

Every page under ``docs/`` is in the site's navigation and linked from the front page, so no
page (and none of its snippets) can drop out of sight.

``python tests/docs/test_readme.py --update`` rewrites the output blocks from real runs (lines a
page shortened with ``...`` are kept as they are); a human reads the diff before committing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
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
class Block:
    kind: str
    line: int  # 1-based line of the opening fence
    text: str
    output: Block | None = None
    source: str = "README.md"  # the page, relative to the repository

    @property
    def name(self) -> str:
        return f"{self.source}:{self.line}:{self.kind}"


def parse(text: str, source: str = "README.md") -> list[Block]:
    """The fenced blocks of ``text``, each python block paired with the text block after it."""
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
    for n, block in enumerate(raw):
        if block.kind == "text" and n and raw[n - 1].kind == "python":
            continue
        following = raw[n + 1] if n + 1 < len(raw) else None
        paired = (
            following if block.kind == "python" and following and following.kind == "text" else None
        )
        blocks.append(Block(block.kind, block.line, block.text, paired, source))
    return blocks


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    env["COLUMNS"] = "100"
    # The snippets run against the code beside them: this checkout's packages (what `make`'s
    # editable install points at anyway), never another copy a PYTHONPATH or install names.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "integrations")])
    return env


def run_python(block: Block, cwd: Path) -> str:
    script = cwd / "snippet.py"
    script.write_text(block.text)
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", str(script)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
    )
    if done.returncode != 0:
        raise AssertionError(f"{block.name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
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


def run_command(block: Block, command: str, cwd: Path) -> tuple[int, str]:
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=_env(),
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


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_python_snippet(block: Block, tmp_path: Path) -> None:
    out = run_python(block, tmp_path)
    assert block.output is not None
    expected = block.output.text.splitlines()
    actual = out.splitlines()
    assert matches(expected, actual), _explain(block.name, expected, actual)


@pytest.mark.parametrize("block", CONSOLE, ids=[b.name for b in CONSOLE])
def test_console_session(block: Block, tmp_path: Path) -> None:
    for command, expected in console_steps(block):
        code, out = run_command(block, command, tmp_path)
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


# -- updating the README's output blocks from real runs ------------------------------------------


def _merge(expected: list[str], actual: list[str]) -> list[str]:
    """What the README should show: its own lines while they still fit, else the real ones."""
    return expected if matches(expected, actual) else actual


def update() -> None:
    for doc in DOCUMENTS:
        _update(doc)


def _update(doc: Path) -> None:
    lines = doc.read_text(encoding="utf-8").splitlines()
    replacements: list[tuple[int, int, list[str]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for block in (b for b in BLOCKS if b.source == _source(doc)):
            cwd = Path(tmp) / f"b{block.line}"
            cwd.mkdir()
            if block.kind == "python" and block.output is not None:
                actual = run_python(block, cwd).splitlines()
                new = _merge(block.output.text.splitlines(), actual)
                start = block.output.line  # fence line, 1-based -> body starts at index start
                end = start + len(block.output.text.splitlines())
                replacements.append((start, end, new))
            elif block.kind == "console":
                body: list[str] = []
                for command, expected in console_steps(block):
                    _, out = run_command(block, command, cwd)
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
# What is re-run is what a folder keeps between runs, so the runs share one process (one import
# of the model, ~5 CPU-s, instead of six), each snippet executed in fresh globals.

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


@pytest.mark.heavy  # the model loaded, PostgreSQL started: ~10 s
def test_snippets_run_again_in_the_same_folder(tmp_path: Path) -> None:
    runs = []
    for source, markers in RERUN.items():
        folder = tmp_path / source.replace("/", "-")
        folder.mkdir()
        for marker in markers * 2:
            (block,) = [b for b in PYTHON if b.source == source and marker in b.text]
            runs.append((str(folder), block))
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", _DRIVER],
        input=json.dumps([(folder, block.text) for folder, block in runs]),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    outputs = json.loads(done.stdout.splitlines()[-1])
    for n, ((_, block), out) in enumerate(zip(runs, outputs, strict=True)):
        assert block.output is not None
        expected = block.output.text.splitlines()
        name = f"{block.name} (run {n + 1} in its folder's sequence)"
        assert matches(expected, out.splitlines()), _explain(name, expected, out.splitlines())


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        update()
    else:
        sys.exit(pytest.main([__file__, "-q"]))
