"""Per-layer sentence representations from any local Hugging Face causal LM.

Forward hooks on the input embedding (layer 0) and on every decoder block (layers
1..L) capture the residual stream; the LM head is skipped by running the base model.
Pooling over a sentence's tokens (special tokens such as BOS excluded):
  mean   mean over the sentence's tokens;
  last   mean over the last ``last_tokens`` tokens (the official code uses the last
         3 tokens, averaged or flattened; ``last_tokens=1`` is the final token).
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def decoder_layers(model):
    """The ``nn.ModuleList`` of decoder blocks of an HF causal LM (Llama, Gemma, GPT-2,
    GPT-NeoX, ...): the ModuleList whose length is ``config.num_hidden_layers``."""
    import torch.nn as nn

    n = getattr(model.config, "num_hidden_layers", None) or getattr(model.config, "n_layer", None)
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n and len(mod) > 0:
            if best is None or len(name) < len(best[0]):
                best = (name, mod)
    if best is None:
        raise ValueError(f"could not find the decoder blocks of {type(model).__name__} (no ModuleList of {n} layers)")
    return best[1]


def extract(
    model,
    tokenizer,
    sentences: list[str],
    *,
    pooling: str = "last",
    last_tokens: int = 3,
    batch_size: int = 32,
    device: str = "cpu",
    on_batch: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Pooled hidden states, ``(L + 1, N, d)`` float64 (layer 0 = embeddings).

    Sentences are sorted by length and right-padded in batches; padding and special
    tokens never enter the pooling. ``on_batch(n_done)`` is called after each batch."""
    import torch

    if pooling not in ("mean", "last"):
        raise ValueError(f"pooling must be 'mean' or 'last', got {pooling!r}")
    if last_tokens < 1:
        raise ValueError(f"last_tokens must be >= 1, got {last_tokens}")
    blocks = decoder_layers(model)
    captured: list = []

    def hook(_mod, _inp, out):
        captured.append(out[0] if isinstance(out, (tuple, list)) else out)

    handles = [model.get_input_embeddings().register_forward_hook(hook)]
    handles += [b.register_forward_hook(hook) for b in blocks]
    base = getattr(model, "base_model", model)
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    lengths = [len(tokenizer(s)["input_ids"]) for s in sentences]
    order = np.argsort(lengths, kind="stable")
    out = None
    try:
        with torch.inference_mode():
            for start in range(0, len(sentences), batch_size):
                idx = order[start : start + batch_size]
                enc = tokenizer(
                    [sentences[i] for i in idx], return_tensors="pt", padding=True, return_special_tokens_mask=True
                )
                ids = enc["input_ids"].to(device)
                att = enc["attention_mask"].to(device)
                keep = att.bool() & ~enc["special_tokens_mask"].to(device).bool()  # (B, T)
                if not bool(keep.any(dim=1).all()):
                    raise ValueError("a sentence has no non-special tokens")
                if pooling == "last":
                    # the last `last_tokens` kept positions of each row
                    rank_from_end = keep.flip(1).long().cumsum(1).flip(1)  # (B, T)
                    keep = keep & (rank_from_end <= last_tokens)
                w = keep.to(torch.float32)
                w = w / w.sum(dim=1, keepdim=True)  # (B, T)
                captured.clear()
                base(input_ids=ids, attention_mask=att)
                if len(captured) != len(blocks) + 1:
                    raise RuntimeError(f"captured {len(captured)} hidden states, expected {len(blocks) + 1}")
                pooled = torch.stack([torch.einsum("bt,btd->bd", w, h.float()) for h in captured])  # (L+1, B, d)
                if out is None:
                    out = np.empty((pooled.shape[0], len(sentences), pooled.shape[2]), dtype=np.float64)
                out[:, idx, :] = pooled.double().cpu().numpy()
                if on_batch is not None:
                    on_batch(len(idx))
    finally:
        for h in handles:
            h.remove()
    return out
