"""``ctxemb static``: write a static model (a lookup table, model2vec's format) from a contextual
model's input embeddings or from GloVe / word2vec text vectors."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ctxemb_core.backends.static import DEFAULT_MAX_LENGTH
from ctxemb_core.cli.common import file_size

_DESCRIPTION = """\
Write a static model: one vector per token type, the same in every sentence, a text's vector
being the mean of its tokens' vectors. From a model folder or name, the table is the model's own
input (word-piece) embedding matrix, embeddings.word_embeddings.weight (BERT-family networks),
kept with its tokenizer.json; from a text file, GloVe or word2vec vectors ('word v1 v2 ...', with
or without the 'count dim' header line) with a word tokenizer (runs of word characters or of
punctuation; unknown words skipped). The folder is model2vec's format (model.safetensors,
tokenizer.json, config.json), read by contract_for and Embedder (the static backend, numpy
only) and by model2vec.StaticModel alike. It is written beside DIR and moved into place whole."""

_EPILOG = """\
examples:
  ctxemb static sentence-transformers/all-MiniLM-L6-v2 ./minilm-static
  ctxemb static glove.6B.100d.txt ./glove-100d --max-tokens 256
  ctxemb static ./my-bert ./my-static --no-normalize --overwrite

then:
  ctxemb inspect ./minilm-static
  ctxemb eval --via memory --model ./minilm-static
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "static",
        help="write a static model (lookup table) from a model's input embeddings or GloVe text",
        description=_DESCRIPTION,
        epilog=_EPILOG,
    )
    p.add_argument(
        "source",
        metavar="MODEL_OR_VECTORS",
        help="a BERT-family model folder or offline name, or a GloVe/word2vec text file",
    )
    p.add_argument("directory", metavar="DIR", help="the static model's folder: new or empty")
    p.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="L2-normalise the mean vectors (the static model's config)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULT_MAX_LENGTH,
        metavar="N",
        help="the most tokens a text's mean is over (model2vec's max_length)",
    )
    p.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="text vectors only: lowercase texts before looking words up (default: when no "
        "word of the file has an uppercase letter)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a static model already in DIR (a non-empty folder that is not one is "
        "never replaced)",
    )


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.errors import InvalidInputError
    from ctxemb_core.resolve import contract_for
    from ctxemb_core.static import static_from_model, static_from_vectors

    source = Path(args.source).expanduser()
    options = {
        "normalize": bool(args.normalize),
        "max_tokens": args.max_tokens,
        "overwrite": bool(args.overwrite),
    }
    if source.is_file():
        folder = static_from_vectors(source, args.directory, lowercase=args.lowercase, **options)
    else:
        if args.lowercase is not None:
            raise InvalidInputError(
                "--lowercase applies to text vectors; a model's tokenizer.json decides its own "
                "lowercasing"
            )
        folder = static_from_model(args.source, args.directory, **options)
    contract = contract_for(folder)
    print(f"wrote the static model {contract.describe()} to {folder}")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        print(f"  {name:<17}  {file_size((folder / name).stat().st_size):>9}")
    print(f"weights {contract.weights}")
    print(f"fingerprint {contract.fingerprint}")
    print("use it (backend 'static': numpy and tokenizers only):")
    print(f"  python: Embedder(contract_for({str(folder)!r}))")
    print(f"  cli:    ctxemb index corpus.jsonl --collection docs --model {folder}")
    return 0
