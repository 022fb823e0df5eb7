# The two commands of the README: `make demo` and `make test`. Each sets up .venv first.
.PHONY: setup demo test lint bench wheel

export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# Haystack sends usage telemetry unless told not to; these machines have no network for it.
export HAYSTACK_TELEMETRY_ENABLED := False

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/ctxemb demo

lint: setup
	.venv/bin/ruff check ctxemb_core integrations tests benchmarks examples
	.venv/bin/ruff format --check ctxemb_core integrations tests benchmarks examples
	.venv/bin/mypy

test: lint
	.venv/bin/python -m pytest

bench: setup
	.venv/bin/python benchmarks/embed_overhead.py

# The sdist, and the wheel built from it, into dist/ (tests/test_wheel.py installs them into new
# environments). Without isolation: setup installs setuptools>=77 and build (the test extra).
wheel: setup
	rm -rf dist
	.venv/bin/python -m build --no-isolation --outdir dist .
