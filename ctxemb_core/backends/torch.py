"""The PyTorch backend: transformers' ``AutoModel`` (token vectors) and
``AutoModelForSequenceClassification`` (logits) run on the CPU (or a given device)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.backends._tokenize import FolderTokenizer, TextInput, Tokenizer, token_batch
from ctxemb_core.backends.base import LogitBatch, TokenBatch
from ctxemb_core.errors import (
    MalformedModelError,
    MissingDependencyError,
    ModelNotFoundError,
    UnsupportedModelError,
)
from ctxemb_core.folders.digests import safetensors_files
from ctxemb_core.pooling import mix_layers


class TorchEncoder:
    """A transformers encoder (or decoder) returning its last hidden layer.

    Example:
        >>> enc = TorchEncoder(Path("my-bert"))  # doctest: +SKIP
        >>> enc.encode(["hello"], max_tokens=128).hidden.shape  # doctest: +SKIP
        (1, 3, 384)
    """

    def __init__(self, folder: Path, *, device: str = "cpu") -> None:
        self._torch, auto = _import_torch("AutoModel")
        safetensors_files(folder)  # a pickle-only folder is refused by name, before transformers
        self.tokenizer: Tokenizer = FolderTokenizer(folder)
        # The pooler, which the last hidden state never passes through, may be missing
        # (sentence-transformers saves none for many models).
        model = _load_checked(auto, folder, optional=("pooler.",))
        self.model = model.to(device).eval()
        self.device = device
        self.hidden_size = int(self.model.config.hidden_size)
        self._inputs = set(self.tokenizer.model_input_names)

    def encode(
        self, texts: Sequence[str], max_tokens: int, *, with_tokens: bool = False
    ) -> TokenBatch:
        torch = self._torch
        encodings, arrays = self.tokenizer(texts, max_tokens)
        feeds = {
            k: torch.from_numpy(v).to(self.device) for k, v in arrays.items() if k in self._inputs
        }
        with torch.inference_mode():
            out = self.model(**feeds)
        hidden = out.last_hidden_state.float().cpu().numpy()
        return token_batch(encodings, arrays, hidden, with_tokens)

    def encode_layers(
        self,
        texts: Sequence[str],
        max_tokens: int,
        terms: Sequence[tuple[int, float]],
        *,
        with_tokens: bool = False,
    ) -> TokenBatch:
        """As :meth:`encode`, with token vectors mixed from the hidden layers ``terms`` names
        (``(index, weight)`` pairs of :func:`ctxemb_core.contract.layer_terms`)."""
        encodings, arrays, states = self._states(texts, max_tokens)
        return token_batch(encodings, arrays, mix_layers(states, terms), with_tokens)

    def hidden_states(self, texts: Sequence[str], max_tokens: int) -> np.ndarray:
        """Every hidden state, stacked: ``(layers + 1, batch, tokens, width)`` float32 (index 0
        is the embedding layer's output, as transformers' ``output_hidden_states=True`` gives)."""
        return np.stack(self._states(texts, max_tokens)[2])

    def _states(self, texts: Sequence[str], max_tokens: int) -> tuple[list, Any, list[Any]]:
        torch = self._torch
        encodings, arrays = self.tokenizer(texts, max_tokens)
        feeds = {
            k: torch.from_numpy(v).to(self.device) for k, v in arrays.items() if k in self._inputs
        }
        with torch.inference_mode():
            out = self.model(**feeds, output_hidden_states=True)
        if not out.hidden_states:
            raise UnsupportedModelError(
                f"the network of {self.model.config.model_type!r} gives no hidden states, so "
                "layers= cannot choose among them; use layers='last'"
            )
        return encodings, arrays, [h.float().cpu().numpy() for h in out.hidden_states]


class TorchClassifier:
    """A transformers sequence-classification network (a cross-encoder) returning its logits.

    Loaded with ``AutoModelForSequenceClassification`` from safetensors only, without code from
    the folder; every tensor of the network, its classification head included, must come from
    the folder's weights.

    Example:
        >>> clf = TorchClassifier(Path("my-cross-encoder"))  # doctest: +SKIP
        >>> clf.classify([("tea", "green tea")], max_tokens=128).logits.shape  # doctest: +SKIP
        (1, 1)
    """

    def __init__(self, folder: Path, *, device: str = "cpu") -> None:
        self._torch, auto = _import_torch("AutoModelForSequenceClassification")
        safetensors_files(folder)  # a pickle-only folder is refused by name, before transformers
        self.tokenizer: Tokenizer = FolderTokenizer(folder)
        model = _load_checked(auto, folder, optional=())
        self.model = model.to(device).eval()
        self.device = device
        self.num_labels = int(self.model.config.num_labels)
        self._inputs = set(self.tokenizer.model_input_names)

    def classify(self, inputs: Sequence[TextInput], max_tokens: int) -> LogitBatch:
        torch = self._torch
        encodings, arrays = self.tokenizer(inputs, max_tokens)
        feeds = {
            k: torch.from_numpy(v).to(self.device) for k, v in arrays.items() if k in self._inputs
        }
        with torch.inference_mode():
            logits = self.model(**feeds).logits.float().cpu().numpy()
        truncated = np.array([bool(e.overflowing) for e in encodings])
        return LogitBatch(logits, truncated)


def _import_torch(auto_class: str) -> tuple[Any, Any]:
    """torch and the named transformers auto class, or the error that says what to install."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise MissingDependencyError(
            f"the torch backend needs torch and transformers ({exc}), which the base install "
            "leaves out: pip install 'ctxemb[torch]' (after pip install torch==2.13.0, the "
            "CPU build)"
        ) from None
    return torch, getattr(transformers, auto_class)


def _load_checked(auto: Any, folder: Path, *, optional: tuple[str, ...]) -> Any:
    """The network of ``folder`` loaded by ``auto``, every tensor from the folder's weights.

    Args:
        optional: prefixes of tensors the folder may lack (the network never uses them).
    """
    from transformers.utils import logging as hf_logging

    # transformers draws a progress bar per load; ours are for long work only.
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        # No code from the folder ever runs (an auto_map class is refused, never prompted
        # for), and no pickle is ever loaded: safetensors only.
        model, info = auto.from_pretrained(
            str(folder), trust_remote_code=False, use_safetensors=True, output_loading_info=True
        )
    except OSError as exc:
        raise ModelNotFoundError(f"cannot load the network in {folder}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UnsupportedModelError(
            f"cannot load the network in {folder} without running code from the folder or "
            f"guessing its architecture: {exc}"
        ) from None
    except Exception as exc:  # untrusted files: safetensors' own error, a config that
        # does not fit its weights (RuntimeError), a head count of 0 (ZeroDivisionError)...
        raise MalformedModelError(
            f"cannot load the network in {folder}: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
    _check_loaded(folder, info, optional=optional)
    return model


def _check_loaded(
    folder: Path, info: dict[str, Any], *, optional: tuple[str, ...] = ("pooler.",)
) -> None:
    """Refuse a network transformers completed with random weights, or loaded only in part.

    transformers fills a tensor the file lacks (or has in another shape) with fresh random
    values and ignores tensors the config has no place for (a config naming fewer layers than
    the file holds): either way the outputs are not the ones the weights' author made, and no
    two loads agree. Only tensors under an ``optional`` prefix, which the output never passes
    through, may be missing.
    """
    missing = sorted(
        k for k in info.get("missing_keys", ()) if not any(k.startswith(p) for p in optional)
    )
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", ()))
    unexpected = sorted(info.get("unexpected_keys", ()))
    found = [
        f"{what} {names[:3]}{' …' if len(names) > 3 else ''}"
        for what, names in (
            ("missing", missing),
            ("of another shape", mismatched),
            ("not used by its config", unexpected),
        )
        if names
    ]
    if found:
        raise MalformedModelError(
            f"the weights in {folder} do not fit its config.json (tensors "
            f"{'; '.join(found)}); transformers would fill the gaps with random values, so "
            "the folder is refused. Check that the config and the weights belong together"
        )
