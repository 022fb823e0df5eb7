"""The onnxruntime sessions ctxemb opens: one intra-op thread per usable core, no spinning.

benchmarks/under_load.py measured why: on 2 cores with another process keeping one busy, the
spinning pool lost 59 % of its idle rate where the blocking one lost 50 % (sentence-transformers
50 %), at no cost when the machine was idle.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from ctxemb_core.backends.onnx import OnnxEncoder, available_cores, session_options

ort = pytest.importorskip("onnxruntime")
SPIN = "session.intra_op.allow_spinning"


def test_options_block_instead_of_spinning_and_count_usable_cores(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    options = session_options(ort, None)
    assert options.get_session_config_entry(SPIN) == "0"
    assert options.intra_op_num_threads == len(os.sched_getaffinity(0))
    assert options.inter_op_num_threads == 1
    assert session_options(ort, 3).intra_op_num_threads == 3


def test_omp_num_threads_caps_the_threads_as_ray_sets_it_for_a_one_cpu_actor(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert available_cores() == 1
    assert session_options(ort, None).intra_op_num_threads == 1
    assert session_options(ort, 3).intra_op_num_threads == 3  # an explicit count wins
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores + 5))
    assert available_cores() == cores  # never more than the cores there are
    for junk in ("", "0", "-2", "four"):
        monkeypatch.setenv("OMP_NUM_THREADS", junk)
        assert available_cores() == cores


def test_a_loaded_encoder_runs_with_them(tiny_bert, monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    one = OnnxEncoder(tiny_bert, threads=1)
    default = OnnxEncoder(tiny_bert)
    for encoder, threads in ((one, 1), (default, len(os.sched_getaffinity(0)))):
        live = encoder.session.get_session_options()
        assert live.get_session_config_entry(SPIN) == "0"
        assert live.intra_op_num_threads == threads
    texts = ["a cat sat on the mat", "tea", "x " * 40]
    a = one.encode(texts, max_tokens=32).hidden
    b = default.encode(texts, max_tokens=32).hidden
    np.testing.assert_allclose(a, b, atol=1e-5)  # the thread count does not change the vectors
