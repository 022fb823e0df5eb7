"""Static vs contextual: one word, two senses, two kinds of model.

The seed reference's first takeaway: a static embedding is a function of a word *type*; a
contextual embedding is a function of a token *occurrence*. This shows it with "bank" of a river
and "bank" that lends money, under two models that share a vocabulary:

1. a static model: the bundled all-MiniLM-L6-v2's own input (word-piece) embedding matrix, saved
   in model2vec's format by :func:`ctxemb_core.static.static_from_model` (``ctxemb static``);
2. the contextual all-MiniLM-L6-v2 itself, whose token vectors come out of its six layers.

For each, :meth:`Embedder.word_vector` gives the vector of the word's occurrence in each of six
sentences (three river banks, three money banks), and states how it was made (``pieces``: the
word's word-piece vectors combined by their mean; ``aggregate``: over how many occurrences). The
static model gives every bank the same vector, bit for bit: the table has one row for "bank".
The contextual model gives each occurrence its own vector, and the occurrences of one sense are
closer to each other than to any of the other sense.

Then the seed's failure mode "a word's vector looks like a sentence summary": the pooled text
vector of a sentence (what ``embed_documents`` returns) is not the vector of any word in it. It
is compared with the word's occurrence vector, and the text vector of the word alone is yet a
third object: check the unit (token or text) before reading a vector as a word's.

Run (from the repository root)::

    .venv/bin/python examples/static_vs_contextual.py
    .venv/bin/python examples/static_vs_contextual.py --static ./minilm-static   # kept
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub from an example

import numpy as np

from ctxemb_core import Embedder, contract_for
from ctxemb_core.static import is_static_folder, static_from_model

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
WORD = "bank"
RIVER = [
    "We sat on the bank of the river and watched the water.",
    "The boat drifted toward the muddy bank of the stream.",
    "Fishermen lined the grassy bank of the lake.",
]
MONEY = [
    "She went to the bank to borrow money for a house.",
    "The bank approved the loan and charged interest.",
    "He deposited his salary at the bank on Friday.",
]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def compare(embedder: Embedder) -> dict[str, Any]:
    """The word's occurrence vectors in six sentences, and the text vectors beside them."""
    occurrences = [embedder.word_vector(WORD, [text]) for text in RIVER + MONEY]
    vectors = [o.vector for o in occurrences]
    n = len(RIVER)
    same = [
        cosine(vectors[i], vectors[j]) for i in range(6) for j in range(i) if (i < n) == (j < n)
    ]
    across = [cosine(vectors[i], vectors[j]) for i in range(n) for j in range(n, 6)]
    sentence = embedder.embed_documents([RIVER[0]])[0]
    alone = embedder.embed_documents([WORD])[0]
    return {
        "river": occurrences[0],
        "money": occurrences[n],
        "type": embedder.word_vector(WORD, RIVER + MONEY),
        "identical": bool(np.array_equal(vectors[0], vectors[n])),
        "cosine": cosine(vectors[0], vectors[n]),
        "same_sense": (min(same), max(same)),
        "across_senses": (min(across), max(across)),
        "sentence_vs_word": cosine(sentence, vectors[0]),
        "alone_vs_word": cosine(alone, vectors[0]),
    }


def report(label: str, embedder: Embedder, result: dict[str, Any]) -> None:
    river, kind = result["river"], result["type"]
    print(f"{label}: {embedder.contract.describe()} (backend {embedder.backend})")
    print(
        f"  word_vector({WORD!r}, [one sentence]): pieces={river.pieces!r} (the mean of the "
        f"word's word-piece vectors), aggregate={river.aggregate!r}, "
        f"occurrences={river.occurrences}"
    )
    print(
        f"  river bank vs money bank: cosine {result['cosine']:.4f}, identical arrays: "
        f"{result['identical']}"
    )
    (a, b), (c, d) = result["same_sense"], result["across_senses"]
    print(f"  6 occurrences: same sense cosine {a:.3f}..{b:.3f}, across senses {c:.3f}..{d:.3f}")
    print(
        f"  word_vector({WORD!r}, all six): aggregate={kind.aggregate!r} over "
        f"occurrences={kind.occurrences} (a derived statistic, not a model output)"
    )
    print(f"  river sentence's text vector vs its 'bank': cosine {result['sentence_vs_word']:.4f}")
    print(
        f"  text vector of 'bank' alone vs the river 'bank': cosine {result['alone_vs_word']:.4f}"
    )


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--static", type=Path, help="where the static model is (or goes)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.static or Path(tmp) / "minilm-static"
        if not is_static_folder(folder):
            static_from_model(MODEL, folder)
        static = Embedder(contract_for(folder))
        contextual = Embedder(contract_for(MODEL))
        results = {"static": compare(static), "contextual": compare(contextual)}
        report("static", static, results["static"])
        report("contextual", contextual, results["contextual"])
    print(
        "A static model has one vector per word type: both banks are one row of its table. A "
        "contextual model has one per occurrence, computed from the sentence. A pooled text "
        "vector is neither: read a word's vector from word_vector/embed_tokens, not from "
        "embed_documents."
    )
    return results


if __name__ == "__main__":
    main()
