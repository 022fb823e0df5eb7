"""``ctxemb export``: write a folder that embeds with numpy, tokenizers and onnxruntime alone."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ctxemb_core.cli.common import contract_args, contract_file, file_size, overrides
from ctxemb_core.errors import InvalidInputError

_DESCRIPTION = """\
Export a model under its contract to a self-contained folder: the self-checked ONNX graph (the
int8 twin with --quantization int8-dynamic), the tokenizer as tokenizer.json with the facts that
reproduce transformers' token ids, the dense heads as .npy files, contract.json, and
ctxemb-export.json, the manifest holding the sha256 of every file. The folder is served by
Embedder.from_export(DIR) with numpy, tokenizers and onnxruntime only (no torch, transformers or
onnx), under the original contract's fingerprint: indexes stamped with the model open through
it. Every file is checked against the manifest before it is served. Making the export needs
torch, transformers and onnx (pip install 'ctxemb[torch]') unless the ONNX cache
($CTXEMB_CACHE_DIR/onnx) already holds the model's checked graph. The folder is written beside
DIR and moved into place whole."""

_EPILOG = """\
examples:
  ctxemb export sentence-transformers/all-MiniLM-L6-v2 ./minilm-export
  ctxemb export ./my-model ./my-export --pooling cls --max-tokens 128 --overwrite
  ctxemb export contract.json ./my-export          (a contract saved with contract.to_json())

then, where only numpy, tokenizers and onnxruntime are installed:
  python -c "from ctxemb_core import Embedder; print(Embedder.from_export('./minilm-export'))"
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="write a torch-free serving folder (ONNX graph, tokenizer, contract, manifest)",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model",
        metavar="MODEL_OR_CONTRACT",
        help="a model folder or offline name (its contract from contract_for and the contract "
        "options below), or a contract JSON file",
    )
    p.add_argument("directory", metavar="DIR", help="the export folder: new, empty, or an export")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an export already in DIR (default: refuse; a non-empty folder that is not "
        "an export is never replaced)",
    )
    contract_args(p)


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.contract import EmbeddingContract
    from ctxemb_core.export import export_model, is_export
    from ctxemb_core.resolve import contract_for

    given = overrides(args)
    source = Path(args.model).expanduser()
    if source.is_file() or is_export(source):
        if given:
            raise InvalidInputError(
                f"contract options ({', '.join(sorted(given))}) apply to a model, not to "
                f"the contract in {args.model}; edit the contract, or export the model instead"
            )
        target: EmbeddingContract | str = contract_file(source) if source.is_file() else args.model
    else:
        target = contract_for(args.model, **given)
    folder = export_model(target, args.directory, overwrite=bool(args.overwrite))
    _summary(folder)
    return 0


def _summary(folder: Path) -> None:
    from ctxemb_core.backends.exported import read_manifest

    manifest = read_manifest(folder)
    contract = manifest.contract
    files = manifest.files
    width = max(len(n) for n in files)
    total = 0
    print(f"exported {contract.describe()} to {folder}")
    for name in sorted(files):
        size = (folder / name).stat().st_size
        total += size
        print(f"  {name:<{width}}  {file_size(size):>9}  sha256:{files[name][:12]}…")
    print(f"  {'total':<{width}}  {file_size(total):>9}")
    print(f"fingerprint {contract.fingerprint}")
    print("serve it (numpy, tokenizers and onnxruntime only):")
    print(f"  python: from ctxemb_core import Embedder; Embedder.from_export({str(folder)!r})")
    print(f"  cli:    ctxemb inspect {folder}   (the folder is a model: --model {folder})")
