#!/usr/bin/env bash
# Embeds the evaluation sets (SciFact's corpus and queries, STS-B's test sentences) with the
# bundled MiniLM into a cache folder of their own: DIR/cache, through `ctxemb eval --via memory`,
# so the figures come with them (DIR/scifact.out, DIR/sts.out). `make test` starts it in the
# background (scripts/setup.sh, CTXEMB_EVAL_SETS=DIR) as soon as torch, ctxemb[torch] and the model
# are installed: the corpus takes minutes of one core, and pip, installing the frameworks, keeps
# only the other one busy. The test run's evaluation-set tests read their vectors from a copy of
# DIR/cache (tests/conftest.py), waiting for DIR/.lock while this still holds it; DIR/done says
# the folder is whole. Without the shared data there is nothing to embed, and nothing is written.
#
# It runs from the checkout (PYTHONPATH), not through the editable install, which the second pip
# run rewrites meanwhile; on one thread, beside pip.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=$1
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac  # a relative DIR is the checkout's
PY=${VENV:-.venv}/bin/python
DATA=../shared/data
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
rm -rf "$DIR/cache" "$DIR/done" "$DIR"/*.out "$DIR"/*.log
[ -d "$DATA/scifact" ] && [ -d "$DATA/stsbenchmark" ] || exit 0
export CTXEMB_CACHE_DIR="$DIR/cache" PYTHONPATH="$PWD:$PWD/integrations" OMP_NUM_THREADS=1 \
  HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
unset PYTHONDONTWRITEBYTECODE
"$PY" -m ctxemb_core.cli eval --via memory --data "$DATA/scifact" --k 10 \
  >"$DIR/scifact.out" 2>"$DIR/scifact.log" &&
  "$PY" -m ctxemb_core.cli eval --via memory --task sts --data "$DATA/stsbenchmark" \
    >"$DIR/sts.out" 2>"$DIR/sts.log" &&
  touch "$DIR/done"
