#!/usr/bin/env bash
# Embeds the evaluation sets (SciFact's corpus and queries, STS-B's test sentences) with the
# bundled MiniLM into a cache folder of their own: DIR/cache, through `ctxemb eval --via memory`,
# so the figures come with them (DIR/scifact.out, DIR/sts.out). `make test` starts it in the
# background (scripts/setup.sh, CTXEMB_EVAL_SETS=DIR) as soon as torch, ctxemb[torch] and the model
# are installed. The test run's evaluation-set tests read their vectors from a copy of DIR/cache
# (tests/conftest.py), waiting for DIR/.lock while this still holds it; DIR/done says the folder
# is whole. Without the shared data there is nothing to embed, and nothing is written.
#
# The SciFact corpus is most of the work (~400 CPU-s on a 2-core EPYC) and, on one thread, the
# longest single piece of the test run: the suite's evaluation-set tests wait for it. So it is
# embedded by SHARDS processes at once (default 2, one a core), each a share of the documents
# (sorted by length, then text, and dealt out in turn: the shares cost alike, and every process
# deals the same shares, whatever its hash seed), into the one cache (SQLite, made for several
# writers); the `ctxemb eval` run that follows finds every document there and only embeds the
# queries. A document's vector does not depend on its batch, so the
# figures are the ones a single process gets.
#
# Steps: the ONNX export (DIR/export says it is there: the test session copies it rather than
# building its own), STS-B, the corpus shards, then SciFact's figures.
#
# It runs from the checkout (PYTHONPATH), not through the editable install, which the second
# install of setup.sh rewrites meanwhile; each process on one thread.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=$1
SHARDS=${CTXEMB_EVAL_SHARDS:-2}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac  # a relative DIR is the checkout's
PY=${VENV:-.venv}/bin/python
DATA=../shared/data
MODEL=sentence-transformers/all-MiniLM-L6-v2
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
rm -rf "$DIR/cache" "$DIR/done" "$DIR/export" "$DIR"/*.out "$DIR"/*.log
[ -d "$DATA/scifact" ] && [ -d "$DATA/stsbenchmark" ] || exit 0
export CTXEMB_CACHE_DIR="$DIR/cache" PYTHONPATH="$PWD:$PWD/integrations" OMP_NUM_THREADS=1 \
  HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
unset PYTHONDONTWRITEBYTECODE

# The export, and the two other graphs of the model the test run seeds its workers' caches with
# (tests/conftest.py's _seed_exports: the every-layer graph and the int8 twin), in one process.
export_model() {
  "$PY" -c 'import sys; from ctxemb_core import Embedder, contract_for
for options in ({}, {"layers": "-4:"}, {"quantization": "int8-dynamic-pc-v1"}):
    Embedder(contract_for(sys.argv[1], **options)).embed_documents(["warm"])' "$MODEL"
}

# One share of the corpus: the documents as `ctxemb eval` embeds them (beir.document_text), with
# the Embedder and cache it makes (cli.common.embedder: the contract's defaults, the default cache).
embed_share() {
  "$PY" -c 'import sys
from ctxemb_core import Embedder, contract_for
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.eval.beir import document_text, load_beir
model, data, share, shares = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
texts = {document_text(d) for d in load_beir(data).corpus.values()}
texts = sorted(texts, key=lambda t: (len(t), t))
Embedder(contract_for(model), cache=EmbeddingCache()).embed_documents(texts[share::shares])
' "$MODEL" "$DATA/scifact" "$1" "$SHARDS"
}

export_model >"$DIR/export.log" 2>&1 && touch "$DIR/export" &&
  "$PY" -m ctxemb_core.cli eval --via memory --task sts --data "$DATA/stsbenchmark" \
    >"$DIR/sts.out" 2>"$DIR/sts.log" || exit 1
pids=()
for ((share = 0; share < SHARDS; share++)); do
  embed_share "$share" >"$DIR/share-$share.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || exit 1; done
"$PY" -m ctxemb_core.cli eval --via memory --data "$DATA/scifact" --k 10 \
  >"$DIR/scifact.out" 2>"$DIR/scifact.log" &&
  touch "$DIR/done"
