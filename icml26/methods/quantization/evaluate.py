"""Calibration / evaluation text and the quality metrics.

Split rule (disjoint by construction): the documents of a built-in corpus are taken in
their deterministic order; document i is an *evaluation* document when ``i % 10 == 9``
and a *calibration* document otherwise. Calibration sequences are cut from the
concatenated calibration documents, evaluation chunks from the concatenated evaluation
documents (documents joined with a blank line). With ``--calib-text`` / ``--eval-text``
the user's files are used instead (the whole file, cut the same way).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from icml26.core.lm_cache import forward, new_cache

EVAL_EVERY = 10


def split_corpus(docs: list[str]) -> tuple[list[str], list[str]]:
    """(calibration docs, evaluation docs): doc i is evaluation iff i % 10 == 9."""
    calib = [d for i, d in enumerate(docs) if i % EVAL_EVERY != EVAL_EVERY - 1]
    ev = [d for i, d in enumerate(docs) if i % EVAL_EVERY == EVAL_EVERY - 1]
    return calib, ev


def token_stream(tok, docs: list[str], n_tokens: int) -> Tensor:
    """Tokenize documents in order until ``n_tokens`` tokens are collected. Returns (n,) long."""
    ids: list[int] = []
    for d in docs:
        ids.extend(tok(d + "\n\n", add_special_tokens=False)["input_ids"])
        if len(ids) >= n_tokens:
            break
    if len(ids) < n_tokens:
        raise ValueError(f"the text has only {len(ids)} tokens, {n_tokens} requested")
    return torch.tensor(ids[:n_tokens], dtype=torch.long)


def chunks(stream: Tensor, seq_len: int) -> list[Tensor]:
    """(n,) -> list of (1, seq_len) chunks (remainder dropped)."""
    n = stream.numel() // seq_len
    return [stream[i * seq_len : (i + 1) * seq_len][None] for i in range(n)]


@torch.no_grad()
def perplexity(
    model, batches: list[Tensor], *, fp_top1: list[Tensor] | None = None, chunk_nll: list[float] | None = None
) -> tuple[float, float | None, list[Tensor]]:
    """exp(mean next-token NLL) over all chunks (each chunk scored on its own, from position 1).

    Returns (perplexity, top-1 agreement with ``fp_top1`` or None, this model's top-1 lists);
    each chunk's mean NLL is appended to ``chunk_nll`` when given (for ``chunk_interval``)."""
    nll, n, agree = 0.0, 0, 0
    tops = []
    for i, ids in enumerate(batches):
        logits = model(input_ids=ids).logits[:, :-1].float()
        tgt = ids[:, 1:]
        c = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="sum").item()
        nll += c
        n += tgt.numel()
        if chunk_nll is not None:
            chunk_nll.append(c / tgt.numel())
        top = logits.argmax(-1)
        tops.append(top)
        if fp_top1 is not None:
            agree += (top == fp_top1[i]).sum().item()
    return math.exp(nll / n), (agree / n if fp_top1 is not None else None), tops


CI_METHOD = (
    "Student-t 95% interval over the {n} evaluation chunks of {t} tokens (mean NLL per chunk, "
    "exponentiated): the spread of the text, not of seeds"
)


def chunk_interval(chunk_nll: list[float]) -> list[float] | None:
    """95% interval of the perplexity from the evaluation chunks: Student-t interval of the mean
    per-chunk NLL (chunks have equal length, so its mean is log perplexity), exponentiated.
    None with fewer than two chunks (never a zero-width interval)."""
    from icml26.core.verdict import seed_interval

    ci = seed_interval(chunk_nll)
    return None if ci is None else [math.exp(ci[0]), math.exp(ci[1])]


def paired_ratio_interval(a: list[float], b: list[float]) -> list[float] | None:
    """95% interval of perplexity(a) / perplexity(b) from the two methods' NLLs on the same
    chunks: Student-t interval of the per-chunk NLL differences, exponentiated (paired, so the
    text's difficulty, common to both, cancels). None with fewer than two chunks."""
    if len(a) != len(b):
        return None
    return chunk_interval([x - y for x, y in zip(a, b)])


@torch.no_grad()
def greedy(model, prompts: list[Tensor], new_tokens: int) -> list[Tensor]:
    """Greedy continuations (no sampling) of each prompt (1, T) -> (new_tokens,)."""

    outs = []
    for p in prompts:
        cache = new_cache(model)
        ids = p
        gen = []
        for _ in range(new_tokens):
            o = forward(model, ids, cache)
            nxt = o.logits[:, -1].argmax(-1, keepdim=True)
            gen.append(nxt)
            ids = nxt
        outs.append(torch.cat(gen, 1)[0])
    return outs


def greedy_agreement(a: list[Tensor], b: list[Tensor]) -> float:
    """Mean fraction of generated tokens that equal the reference's, position by position."""
    return sum((x == y).float().mean().item() for x, y in zip(a, b)) / max(len(a), 1)
