"""Static models (the Word2Vec / GloVe / model2vec row): their contract, and two ways to make one.

A static model gives every token *type* one vector, the same in every sentence; a text's vector
is the mean of its tokens' vectors. ctxemb serves such models from model2vec's folder format
(see :mod:`ctxemb_core.backends.static`, which reproduces ``model2vec.StaticModel.encode``) under
the same contract, stamp and guard as a contextual network: ``contract_for(folder)`` pins the
table, tokenizer and config by digest, the pooling over the lookups (``mean``), the
normalisation and the token limit.

Two writers make such folders offline:

* :func:`static_from_model` keeps a contextual model's own input (word-piece) embedding matrix,
  the table its first layer looks tokens up in, with its tokenizer: the bundled MiniLM becomes a
  real static model without any download (``ctxemb static MODEL DIR`` on the command line);
* :func:`static_from_vectors` reads GloVe or word2vec text vectors (``word v1 v2 …``, with or
  without word2vec's ``count dim`` header line) and gives them a word tokenizer.

Example:
    >>> from ctxemb_core import Embedder, contract_for
    >>> from ctxemb_core.static import static_from_model
    >>> folder = static_from_model("sentence-transformers/all-MiniLM-L6-v2", "minilm-static")
    >>> Embedder(contract_for(folder)).backend  # doctest: +SKIP
    'static'
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._files import replace_folder, sha256_file
from ctxemb_core.backends.static import StaticTokenizer, check_vocabulary
from ctxemb_core.errors import (
    DataFormatError,
    InvalidInputError,
    MalformedModelError,
    UnsupportedModelError,
)
from ctxemb_core.folders.digests import safetensors_files, weights_digest
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.locate import locate_model
from ctxemb_core.folders.safetensors import read_safetensors, safetensors_header, write_safetensors
from ctxemb_core.folders.static import DEFAULT_MAX_LENGTH, is_static_folder, read_static_layout
from ctxemb_core.resolve import static_contract

__all__ = [
    "WORD_PATTERN",
    "is_static_folder",
    "static_contract",
    "static_from_model",
    "static_from_vectors",
]

#: The input embedding matrix of BERT-family networks (BERT, RoBERTa, XLM-R, DistilBERT,
#: MiniLM, MPNet), found with or without the network's prefix (``bert.``, ``roberta.``).
_WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
#: How :func:`static_from_vectors`' tokenizer cuts text: runs of word characters, or runs of
#: other non-space characters (``tokenizers``' ``Whitespace`` pre-tokenizer).
WORD_PATTERN = r"\w+|[^\w\s]+"
_MODEL_TYPE = "model2vec"


# -- a contextual model's own input embeddings -----------------------------------------------


def static_from_model(
    model: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    normalize: bool = True,
    max_tokens: int = DEFAULT_MAX_LENGTH,
    overwrite: bool = False,
) -> Path:
    """Save a BERT-family model's input (word-piece) embedding matrix as a static model.

    The matrix ``embeddings.word_embeddings.weight`` is the table the network's first layer
    looks each token id up in, before any position, layer norm or attention: one vector per
    word piece, the same in every sentence. Kept unchanged with the model's own
    ``tokenizer.json``, it is a static model in model2vec's format that
    ``model2vec.StaticModel.from_pretrained`` and ``contract_for`` both read. The folder is
    written beside ``directory`` and moved into place whole.

    Args:
        model: a model folder or a name that resolves offline (the bundled
            ``sentence-transformers/all-MiniLM-L6-v2``).
        directory: where the static model goes: a new or empty folder, or a static model to
            replace (with ``overwrite``).
        normalize: the static model's ``normalize`` (L2-normalise the mean vectors).
        max_tokens: its ``max_length``: the most tokens a text's mean is over.
        overwrite: replace a static model already in ``directory``.

    Returns:
        The folder written.

    Raises:
        UnsupportedModelError: the model has no BERT-style input embedding matrix or no
            ``tokenizer.json``.
        InvalidInputError: ``directory`` is a file, a non-empty folder that is not a static
            model, or a static model and ``overwrite`` is false.

    Example:
        >>> static_from_model("sentence-transformers/all-MiniLM-L6-v2", "minilm-static")
        ... # doctest: +SKIP
        PosixPath('minilm-static')
    """
    _check_options(normalize, max_tokens)
    target = _target(directory, overwrite)
    text = os.fspath(model)
    folder = locate_model(text)
    if is_static_folder(folder):
        raise InvalidInputError(f"{folder} is a static model already; copy the folder instead")
    layout = read_layout(folder)
    source_weights = weights_digest(layout)
    tokenizer_file = layout.transformer / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise UnsupportedModelError(
            f"{layout.transformer} has no tokenizer.json (a fast tokenizer's file), which a "
            "static model keeps to cut texts into the same word pieces"
        )
    file, key = _find_word_embeddings(safetensors_files(layout.transformer))
    table = read_safetensors(file, [key])[key]
    tokenizer = StaticTokenizer(tokenizer_file)
    if len(table) < tokenizer.vocab_size:
        raise UnsupportedModelError(
            f"{file}: {key} has {len(table)} rows for {tokenizer.vocab_size} tokens; the "
            "tokenizer names ids the table does not have"
        )
    # Rows past the tokenizer's vocabulary (padding to a multiple of 8) are never looked up.
    table = np.ascontiguousarray(table[: tokenizer.vocab_size], dtype=np.float32)
    name = text if not Path(text).expanduser().is_dir() else layout.root.name
    provenance = {
        "method": "a contextual model's input word-piece embedding matrix, unchanged",
        "source_model": name,
        "source_weights": source_weights,
        "tensor": key,
    }
    config = _config(table, normalize, max_tokens, tokenizer=name, source=provenance)
    return _publish_new(target, table, tokenizer.tokenizer.to_str(), config)


def _find_word_embeddings(files: list[Path]) -> tuple[Path, str]:
    for file in files:
        names = safetensors_header(file)[0]
        found = sorted(
            n for n in names if n == _WORD_EMBEDDINGS or n.endswith("." + _WORD_EMBEDDINGS)
        )
        if found:
            return file, found[0]
    raise UnsupportedModelError(
        f"{files[0].parent} has no {_WORD_EMBEDDINGS!r} tensor (a BERT-family network's input "
        "embedding matrix); static_from_model reads BERT, RoBERTa, XLM-R, DistilBERT, MiniLM "
        "and MPNet networks"
    )


# -- GloVe / word2vec text vectors -------------------------------------------------------------


def static_from_vectors(
    path: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    lowercase: bool | None = None,
    normalize: bool = True,
    max_tokens: int = DEFAULT_MAX_LENGTH,
    overwrite: bool = False,
) -> Path:
    """Save GloVe or word2vec text vectors as a static model with a word tokenizer.

    The file holds one word per line followed by its values, separated by spaces
    (``word v1 v2 … vd``); a first line of two integers (``count dim``, word2vec's header) is
    read as the header and checked. The tokenizer written beside the table
    (``tokenizer.json``, a ``tokenizers`` WordLevel model) cuts a text into runs of word
    characters or runs of other non-space characters (:data:`WORD_PATTERN`), lowercasing
    first when ``lowercase`` says so; a piece that is not in the vocabulary is skipped (model2vec
    drops the unknown token). How the text was cut is thus part of ``tokenizer.json``, and the
    source file's sha256 is recorded in ``config.json``: the contract's weights digest covers both.

    Args:
        path: the text vectors (UTF-8).
        directory: where the static model goes (as for :func:`static_from_model`).
        lowercase: lowercase texts before looking words up. ``None``: exactly when no word of
            the vocabulary has an uppercase letter (GloVe's uncased files), since their words
            could never match otherwise.
        normalize: the static model's ``normalize``.
        max_tokens: its ``max_length``, in words.
        overwrite: replace a static model already in ``directory``.

    Raises:
        DataFormatError: the file is not text vectors (a line with a different number of
            values, a value that is not a number, a header its lines contradict, binary data).
    """
    _check_options(normalize, max_tokens)
    source = Path(path).expanduser()
    if not source.is_file():
        raise InvalidInputError(f"{source} is not a file of text vectors")
    target = _target(directory, overwrite)
    words, rows, header = _read_vectors(source)
    vocab: dict[str, int] = {}
    keep: list[int] = []
    for i, word in enumerate(words):
        if word not in vocab:  # a repeated word keeps its first vector
            vocab[word] = len(vocab)
            keep.append(i)
    table = rows[keep]
    if lowercase is None:
        lowercase = all(w == w.lower() for w in vocab)
    unk = next(u for u in ("[UNK]", "<unk>", "[ctxemb-unk]") if u not in vocab)
    vocab[unk] = len(vocab)
    table = np.vstack([table, np.zeros((1, table.shape[1]), dtype=np.float32)])
    tokenizer_json = _word_tokenizer(vocab, unk, lowercase)
    from tokenizers import Tokenizer as RustTokenizer

    splitter = RustTokenizer.from_str(tokenizer_json).pre_tokenizer
    unreachable = sum(
        1
        for w in vocab
        if w != unk
        and ((lowercase and w != w.lower()) or [p for p, _ in splitter.pre_tokenize_str(w)] != [w])
    )
    provenance = {
        "method": "word vectors from a GloVe/word2vec text file",
        "source_file": source.name,
        "source_sha256": _sha256(source),
        "format": "word2vec (count dim header)" if header else "GloVe (no header)",
        "lowercase": lowercase,
        "pre_tokenizer": f"Whitespace: {WORD_PATTERN}",
        "unknown_words": f"skipped (the unk token {unk!r} is dropped, as model2vec does)",
        "words": len(vocab) - 1,
        "repeated_words_skipped": len(words) - len(keep),
        "words_no_text_can_reach": unreachable,
    }
    config = _config(table, normalize, max_tokens, tokenizer="word-level", source=provenance)
    return _publish_new(target, table, tokenizer_json, config)


def _read_vectors(source: Path) -> tuple[list[str], np.ndarray, bool]:
    words: list[str] = []
    values: list[np.ndarray] = []
    dim: int | None = None
    declared: int | None = None
    try:
        with source.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                parts = line.rstrip().split(" ")
                if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                    declared, dim = int(parts[0]), int(parts[1])
                    continue
                if parts == [""]:
                    continue  # a blank line
                if dim is None:
                    dim = len(parts) - 1
                if len(parts) <= dim or dim < 1:
                    raise DataFormatError(
                        f"{source}, line {number}: {len(parts) - 1} values where {dim} were "
                        "expected (a line is 'word v1 v2 … vd')"
                    )
                try:
                    vector = np.array(parts[-dim:], dtype=np.float32)
                except ValueError:
                    raise DataFormatError(
                        f"{source}, line {number}: a value is not a number"
                    ) from None
                words.append(" ".join(parts[:-dim]))
                values.append(vector)
    except UnicodeDecodeError:
        raise DataFormatError(
            f"{source} is not UTF-8 text; binary word2vec files are not read (save them as "
            "text: gensim's KeyedVectors.save_word2vec_format(path, binary=False))"
        ) from None
    if not words:
        raise DataFormatError(f"{source} holds no word vectors")
    if declared is not None and declared != len(words):
        raise DataFormatError(
            f"{source}: the header says {declared} words, the file holds {len(words)}"
        )
    return words, np.stack(values), declared is not None


def _word_tokenizer(vocab: dict[str, int], unk: str, lowercase: bool) -> str:
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models, normalizers, pre_tokenizers

    tokenizer = RustTokenizer(models.WordLevel(vocab, unk_token=unk))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return str(tokenizer.to_str())


# -- writing the folder ------------------------------------------------------------------------


def _check_options(normalize: Any, max_tokens: Any) -> None:
    if not isinstance(normalize, bool):
        raise InvalidInputError(f"normalize must be True or False, got {normalize!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInputError(f"max_tokens must be a positive integer, got {max_tokens!r}")


def _config(
    table: np.ndarray, normalize: bool, max_tokens: int, *, tokenizer: str, source: dict[str, Any]
) -> dict[str, Any]:
    # model2vec's own keys (StaticModelConfig), then what ctxemb made it from.
    return {
        "model_type": _MODEL_TYPE,
        "architectures": ["StaticModel"],
        "tokenizer_name": tokenizer,
        "hidden_dim": int(table.shape[1]),
        "normalize": normalize,
        "max_length": max_tokens,
        "embedding_dtype": "float32",
        "ctxemb": source,
    }


def _target(directory: str | os.PathLike[str], overwrite: bool) -> Path:
    target = Path(directory).expanduser().absolute()
    if target.exists() and not target.is_dir():
        raise InvalidInputError(f"{target} is a file; a static model is written to a folder")
    if target.is_dir() and any(target.iterdir()):
        if not is_static_folder(target):
            raise InvalidInputError(
                f"{target} is not empty and holds no static model: it is never replaced (even "
                "with overwrite); choose a new or empty folder"
            )
        if not overwrite:
            raise InvalidInputError(
                f"{target} holds a static model already; pass overwrite=True to replace it",
                cli=f"{target} holds a static model already; pass --overwrite to replace it",
            )
    return target


def _publish_new(
    target: Path, table: np.ndarray, tokenizer_json: str, config: dict[str, Any]
) -> Path:
    """Write the folder beside ``target``, read it back, and move it into place whole."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.ctxemb-static-", dir=target.parent))
    try:
        write_safetensors(work / "model.safetensors", {"embeddings": table})
        (work / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
        (work / "config.json").write_text(json.dumps(config, indent=4) + "\n", encoding="utf-8")
        # Read back as it will be served: the same table, bit for bit, and a fitting tokenizer.
        layout = read_static_layout(work)
        check_vocabulary(layout)
        if not np.array_equal(read_safetensors(layout.table, ["embeddings"])["embeddings"], table):
            raise MalformedModelError(f"{work}: the table read back is not the one written")
        _target(target, overwrite=True)  # again: the folder may have filled meanwhile
        replace_folder(work, target, "static model")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target


def _sha256(path: Path) -> str:
    return "sha256:" + sha256_file(path)
