"""The weights digest: what pins a model's network (or a static model's table) in a contract.

``sha256:`` over the files that decide the vectors (weights, network config, tokenizer; for a
static model its table, ``tokenizer.json`` and ``config.json``), by file names relative to the
folder and their contents, so a moved or copied folder keeps it and any changed file changes it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from ctxemb_core._files import file_digests
from ctxemb_core.errors import MalformedModelError
from ctxemb_core.folders._read import present, safetensors_files
from ctxemb_core.folders.layouts import ModelLayout, read_layout
from ctxemb_core.folders.static import is_static_folder, static_digest

__all__ = [
    "MAX_TOKENIZER_FILE",
    "TOKENIZER_FILES",
    "check_tokenizer_files",
    "safetensors_files",
    "weights_digest",
]

# Files that decide the vectors: weights (what torch actually loads), network config, tokenizer.
#: The tokenizer's files, which decide the tokens (and are digested).
TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.txt",
        "vocab.json",
        "merges.txt",
        "spiece.model",
        "sentencepiece.bpe.model",
        "tokenizer.model",
    }
)


def _weight_files(folder: Path) -> Iterator[Path]:
    # Digest what is loaded, and only safetensors are: a pickle beside them is never read.
    yield from safetensors_files(folder)


#: Largest tokenizer file read (the largest real ones, multilingual vocabularies, are ~35 MB): the
#: Rust tokenizer parses a file whole, so a huge one would take the memory and minutes first.
MAX_TOKENIZER_FILE = 256 << 20


def check_tokenizer_files(folder: Path) -> None:
    """Refuse a tokenizer file that is not a regular file or larger than any real one.

    Raises:
        MalformedModelError: a file that decides the tokens is a directory, a device, or larger
            than :data:`MAX_TOKENIZER_FILE`.
    """
    for path in sorted(folder.iterdir()):
        if path.name in TOKENIZER_FILES and present(path):
            size = path.stat().st_size
            if size > MAX_TOKENIZER_FILE:
                raise MalformedModelError(
                    f"{path} is {size:,} bytes, larger than any real tokenizer file (at most "
                    f"{MAX_TOKENIZER_FILE:,} are read); the folder is refused"
                )


def _digest_files(layout: ModelLayout) -> list[Path]:
    t = layout.transformer
    files = list(_weight_files(t))
    files += [t / "config.json"]
    check_tokenizer_files(t)
    files += sorted(
        p for p in t.iterdir() if p.name in TOKENIZER_FILES or p.name.endswith(".index.json")
    )
    for d in layout.dense:
        files += [d.path / "config.json", *_weight_files(d.path)]
    for path in files:
        # Every file is hashed to its end: a vocabulary linked to /dev/zero has none.
        present(path)
    return files


def weights_digest(folder: str | os.PathLike[str] | ModelLayout) -> str:
    """``sha256:`` digest over a model's weight, config and tokenizer files (for a static
    model's folder: its table, ``tokenizer.json`` and ``config.json``).

    The digest covers file names relative to the folder and their contents, so a moved or copied
    folder keeps it and any changed weight or vocabulary changes it. Per-file digests are cached
    (in memory and under ``$CTXEMB_CACHE_DIR``) by the file's state: path, size, mtime, ctime,
    device, inode and its first and last 64 KiB (see :mod:`ctxemb_core._files`), so a repeat costs
    milliseconds, and a file replaced in place, even with its old mtime restored, is hashed again.
    """
    if not isinstance(folder, ModelLayout) and is_static_folder(Path(folder)):
        return static_digest(folder)  # the table, tokenizer.json and config.json
    layout = folder if isinstance(folder, ModelLayout) else read_layout(folder)
    files = _digest_files(layout)
    h = hashlib.sha256()
    for path, digest in zip(files, file_digests(files), strict=True):
        rel = path.relative_to(layout.root).as_posix()
        h.update(f"{rel}\0{digest}\n".encode())
    return "sha256:" + h.hexdigest()
