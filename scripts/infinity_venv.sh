#!/usr/bin/env bash
# A virtual environment with Infinity (infinity-emb, an OpenAI-compatible embedding server), for
# the tests and benchmarks that hold a third-party server to a contract. Infinity pins
# sentence-transformers < 4 and numpy < 2, which conflict with ctxemb's, so it lives apart.
# torch is the CPU build (as scripts/setup.sh installs it), pinned while the rest resolves.
# Idempotent: a finished environment (DIR/.done) is left as it is; two callers at once wait for
# one build (flock).
#
# uv installs it (the test extra puts it in .venv; $UV names another): pip took 34 CPU-s here,
# uv 2 from its cache and 6 from an empty one, for the same versions of the same 63 packages.
# uv does not read pip's configuration, so it is told where pip looks for files on disk (its
# find-links, from `pip config list`: its configuration files and PIP_FIND_LINKS): the CPU build
# of torch lies there on these machines, and without it uv would take the CUDA build.
#
#   bash scripts/infinity_venv.sh [DIR]     (default: build/infinity-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/infinity-venv}
PY=${PYTHON:-python3}
UV=${UV:-$({ command -v .venv/bin/uv uv || true; } | head -n 1)}
if [ -z "$UV" ]; then
  echo "scripts/infinity_venv.sh needs uv: pip install uv (make test's setup puts it in .venv)" >&2
  exit 1
fi
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9
if [ -f "$DIR/.done" ]; then
  exit 0
fi
rm -rf "$DIR"
"$PY" -m venv --without-pip "$DIR"
config=$("$PY" -m pip config list)
links=()
while IFS= read -r line; do
  case $line in
    *.find-links=*)
      value=${line#*=}
      for d in ${value//\'/}; do links+=(--find-links "$d"); done
      ;;
  esac
done <<<"$config"
echo "torch==2.13.0" > "$DIR/constraints.txt"
"$UV" pip install --quiet --python "$DIR/bin/python" "${links[@]}" \
  -c "$DIR/constraints.txt" "infinity-emb[server,torch]==0.0.78"
# torch 2.13.0's CPU build, not the CUDA one (its nvidia-* libraries are gigabytes): a machine
# without the CPU wheel in pip's find-links is told so rather than left with a slow environment.
"$UV" pip freeze --python "$DIR/bin/python" | awk '
  /^torch==/ { torch = $0 } /^nvidia-/ { cuda = cuda " " $0 }
  END {
    if (torch !~ /^torch==2\.13\.0/ || cuda != "") {
      print "scripts/infinity_venv.sh: not the CPU build of torch 2.13.0 (is its wheel in" \
        " pip'"'"'s find-links?): " torch cuda > "/dev/stderr"
      exit 1
    }
  }'
touch "$DIR/.done"
