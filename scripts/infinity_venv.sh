#!/usr/bin/env bash
# A virtual environment with Infinity (infinity-emb, an OpenAI-compatible embedding server), for
# the tests and benchmarks that hold a third-party server to a contract. Infinity pins
# sentence-transformers < 4 and numpy < 2, which conflict with ctxemb's, so it lives apart.
# torch is the CPU build installed first (as scripts/setup.sh does) and pinned while the rest
# resolves. Idempotent: a finished environment (DIR/.done) is left as it is; two callers at once
# wait for one build (flock).
#
#   bash scripts/infinity_venv.sh [DIR]     (default: build/infinity-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/infinity-venv}
PY=${PYTHON:-python3}
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9
if [ -f "$DIR/.done" ]; then
  exit 0
fi
rm -rf "$DIR"
"$PY" -m venv "$DIR"
echo "torch==2.13.0" > "$DIR/constraints.txt"
"$DIR/bin/python" -m pip install -q --no-compile --disable-pip-version-check torch==2.13.0
"$DIR/bin/python" -m pip install -q --no-compile --disable-pip-version-check \
  -c "$DIR/constraints.txt" "infinity-emb[server,torch]==0.0.78"
touch "$DIR/.done"
