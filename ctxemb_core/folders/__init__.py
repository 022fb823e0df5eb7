"""Every on-disk format ctxemb reads, at the bottom of the model code.

One module per concern, each importing only :mod:`ctxemb_core.contract`,
:mod:`ctxemb_core.errors`, :mod:`ctxemb_core._files`, the standard library, numpy and its
siblings here (never a backend, the resolver or the embedder; ``tests/core/
test_import_layers.py`` pins it):

* :mod:`~ctxemb_core.folders.locate`: finding a model's folder (a path, a registered name or
  weights digest, a bundled package, the local Hugging Face cache);
* :mod:`~ctxemb_core.folders.layouts` and :mod:`~ctxemb_core.folders.st_modules`: a network's
  folder (sentence-transformers, plain transformers, cross-encoder) read into a
  :class:`~ctxemb_core.folders.layouts.ModelLayout`;
* :mod:`~ctxemb_core.folders.static`: a static model's folder (model2vec's format);
* :mod:`~ctxemb_core.folders.manifest`: a ctxemb export's manifest and contract;
* :mod:`~ctxemb_core.folders.digests`: the weights digest a contract pins;
* :mod:`~ctxemb_core.folders.safetensors`: the safetensors format in numpy.

Modules of ``ctxemb_core`` import the submodule that defines a name; the names are gathered here
for callers outside.
"""

from __future__ import annotations

from ctxemb_core.folders.digests import (
    MAX_TOKENIZER_FILE,
    check_tokenizer_files,
    safetensors_files,
    weights_digest,
)
from ctxemb_core.folders.layouts import (
    TASKS,
    DenseSpec,
    ModelLayout,
    classification_architecture,
    read_layout,
)
from ctxemb_core.folders.locate import known_model, locate_model, register_model
from ctxemb_core.folders.manifest import MANIFEST, ExportManifest, is_export, read_manifest
from ctxemb_core.folders.safetensors import read_safetensors, safetensors_header, write_safetensors
from ctxemb_core.folders.static import (
    StaticLayout,
    is_static_folder,
    read_static_layout,
    static_digest,
)

__all__ = [
    "MANIFEST",
    "MAX_TOKENIZER_FILE",
    "TASKS",
    "DenseSpec",
    "ExportManifest",
    "ModelLayout",
    "StaticLayout",
    "check_tokenizer_files",
    "classification_architecture",
    "is_export",
    "is_static_folder",
    "known_model",
    "locate_model",
    "read_layout",
    "read_manifest",
    "read_safetensors",
    "read_static_layout",
    "register_model",
    "safetensors_files",
    "safetensors_header",
    "static_digest",
    "weights_digest",
    "write_safetensors",
]
