"""Peak memory and time of embedding one huge text, against its size.

One text of each size (English words, ``--sizes`` in MB) is embedded alone with the bundled
all-MiniLM-L6-v2 (``max_tokens`` 256: only its first 254 tokens are kept). Two paths:

- ``cut``: ctxemb as it runs, which tokenizes a huge text only as far as the tokens it keeps
  (``ctxemb_core.backends._tokenize.Tokenizer.bounded``);
- ``whole``: the same Embedder with the cut turned off (the text tokenized whole, as before),
  for the sizes up to ``--whole-up-to`` MB (11 MB whole took 26 s and 2.2 GB).

Peak memory is the process's peak resident size (``VmHWM``) above its size before the call,
the peak reset before each call (``/proc/self/clear_refs``; Linux only). Each row also checks
that the two paths give the same vector.

Run (from the repository root)::

    .venv/bin/python benchmarks/huge_text.py
    .venv/bin/python benchmarks/huge_text.py --sizes 0.1 1.1 11 --whole-up-to 11

Writes ``benchmarks/results/huge_text.json``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
from _common import (
    MODEL,
    add_quick,
    command_line,
    machine_info,
    offline,
    quiet_truncation,
    shown,
    write_result,
    writes,
)

WORDS = "the quick brown fox jumps over a lazy dog near the river bank at dawn "


def _status(field: str) -> int:
    """A ``/proc/self/status`` size, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"/proc/self/status has no {field}: peak memory is read on Linux only")


def _measure(embed, text: str) -> tuple[float, float, np.ndarray]:
    """Seconds and peak MB above the starting size of one call, and its vector."""
    Path("/proc/self/clear_refs").write_text("5")  # the peak is reset to the present size
    before = _status("VmRSS")
    start = time.perf_counter()
    vector = embed([text])[0]
    seconds = time.perf_counter() - start
    return seconds, (_status("VmHWM") - before) / 2**20, vector


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes("huge_text")
    )
    parser.add_argument(
        "--sizes",
        type=float,
        nargs="+",
        default=[0.01, 0.1, 1.1, 11.0],
        help="text sizes in MB (default 0.01 0.1 1.1 11)",
    )
    parser.add_argument(
        "--whole-up-to",
        type=float,
        default=1.1,
        help="also embed the texts up to this size whole, as before the cut (default 1.1)",
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(parser, "texts of 0.01 and 0.1 MB")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.whole_up_to = [0.01, 0.1], 0.1
    offline()
    quiet_truncation()
    warnings.filterwarnings("ignore", category=UserWarning)

    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.backends import _tokenize

    embedder = Embedder(contract_for(MODEL))
    embedder.embed_documents(["warm-up"])  # the network loaded before anything is measured
    cut = _tokenize.CHARS_PER_TOKEN
    rows = []
    for mb in args.sizes:
        size = int(mb * 1e6)
        text = (WORDS * (size // len(WORDS) + 1))[:size]
        row: dict = {"mb": mb, "chars": size}
        seconds, peak, vector = _measure(embedder.embed_documents, text)
        row["cut"] = {"seconds": round(seconds, 3), "peak_mb": round(peak, 1)}
        if mb <= args.whole_up_to:
            _tokenize.CHARS_PER_TOKEN = 10**12  # no text is cut
            try:
                seconds, peak, whole = _measure(embedder.embed_documents, text)
            finally:
                _tokenize.CHARS_PER_TOKEN = cut
            row["whole"] = {"seconds": round(seconds, 3), "peak_mb": round(peak, 1)}
            row["same_vector"] = bool(np.array_equal(vector, whole))
        rows.append(row)
        whole_part = (
            f"   whole {row['whole']['seconds']:7.2f} s {row['whole']['peak_mb']:8.1f} MB"
            f"   same vector: {row['same_vector']}"
            if "whole" in row
            else ""
        )
        print(
            f"{mb:7.2f} MB   cut {row['cut']['seconds']:7.2f} s {row['cut']['peak_mb']:8.1f} MB"
            + whole_part,
            flush=True,
        )

    out = write_result(
        "huge_text",
        {
            "model": MODEL,
            "backend": embedder.backend,
            "max_tokens": embedder.contract.max_tokens,
            "text": f"{WORDS.strip()!r} repeated to each size",
            "peak": "VmHWM above VmRSS before the call, MB (2**20 bytes)",
            "rows": rows,
            "machine": machine_info(),
        },
        args.out,
        quick=args.quick,
    )
    print(f"wrote {shown(out)}")
    print(f"reproduce: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
