"""The causal LM a federated client fine-tunes: the base model (loaded once per worker process),
peft LoRA adapters on it, training with the loss on the response only, perplexity, greedy
generation and the OOD prompt score.

Models: ``llama`` / ``smollm2-135m`` (SmolLM2-135M, docs/fed-lora.md) or any local HF folder /
.gguf (``icml26.core.data.lm``); ``tiny-llama``: a 2-layer LLaMA with random weights (seeded)
and a byte tokenizer, for tests (nothing to install). Adapters are plain tensors
``{module: (A (r, d_in), B (d_out, r))}``, loaded into / read from a peft adapter of that rank
(one peft adapter per distinct rank on the one base model, so clients never copy the model).
Prompt format: the Alpaca "alpaca_short" template of the official code (docs/fed-lora.md).
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from icml26.core.data.lm import collate_prompt_response, load_causal_lm, model_path
from icml26.core.lm_cache import cache_argument
from icml26.methods.federated.lora_math import prompt_score

TEMPLATE = "### Instruction:\n{instruction}\n\n### Response:\n"
TARGETS = {
    "qv": ("q_proj", "v_proj"),
    "attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "attention+mlp": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
}
TINY = "tiny-llama"


class ByteTokenizer:
    """UTF-8 bytes as tokens (ids 4..259); pad 0, bos 1, eos 2."""

    pad_token_id, bos_token_id, eos_token_id, vocab_size = 0, 1, 2, 260

    def encode(self, text: str) -> list[int]:
        return [b + 4 for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i - 4 for i in ids if 4 <= i < 260).decode("utf-8", errors="replace")


class HFTokenizer:
    """The same interface around a transformers tokenizer (no special tokens added)."""

    def __init__(self, tok):
        self.tok = tok
        self.eos_token_id = tok.eos_token_id
        self.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False).input_ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)


def tiny_llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=260,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def model_config(model: str):
    """The HF config of ``model`` (no weights loaded): for the rank checks before a run."""
    if model == TINY:
        return tiny_llama_config()
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(model_path(model)), local_files_only=True)


def module_dims(model: str, targets: str) -> dict[str, tuple[int, int]]:
    """{projection name: (d_in, d_out)} of the targeted projections of a LLaMA-style config."""
    c = model_config(model)
    d = c.hidden_size
    hd = getattr(c, "head_dim", None) or d // c.num_attention_heads
    q, kv, ff = (
        c.num_attention_heads * hd,
        getattr(c, "num_key_value_heads", c.num_attention_heads) * hd,
        c.intermediate_size,
    )
    dims = {
        "q_proj": (d, q),
        "k_proj": (d, kv),
        "v_proj": (d, kv),
        "o_proj": (q, d),
        "gate_proj": (d, ff),
        "up_proj": (d, ff),
        "down_proj": (ff, d),
    }
    return {t: dims[t] for t in TARGETS[targets]}


@dataclass
class Worker:
    """One base model per process, with a peft adapter per rank."""

    model: object  # peft PeftModel
    tok: object
    base_weights: dict  # module name -> the base layer's original weight (FLoRA merges into a copy)
    alpha: float
    dropout: float
    targets: tuple[str, ...]
    device: str

    def adapter_name(self, rank: int) -> str:
        from peft import LoraConfig

        name = f"r{rank}"
        if name not in self.model.peft_config:
            self.model.add_adapter(
                name,
                LoraConfig(
                    r=rank,
                    lora_alpha=self.alpha,
                    lora_dropout=self.dropout,
                    target_modules=list(self.targets),
                    bias="none",
                    task_type="CAUSAL_LM",
                ),
            )
        return name

    def lora_modules(self, rank: int) -> dict:
        """{module name: peft LoRA layer} for the adapter of ``rank`` (name without the peft prefix)."""
        name = self.adapter_name(rank)
        out = {}
        for n, m in self.model.named_modules():
            if hasattr(m, "lora_A") and name in m.lora_A:
                out[_short_name(n)] = m
        return out


def _short_name(n: str) -> str:
    for p in ("base_model.model.", "base_model."):
        if n.startswith(p):
            return n[len(p) :]
    return n


_WORKERS: dict = {}


def get_worker(model: str, *, alpha: float, dropout: float, targets: str, device: str = "cpu") -> Worker:
    """The process's worker for ``model`` (loaded on first use, then reused by every client)."""
    key = (model, alpha, dropout, targets, device)
    if key in _WORKERS:
        return _WORKERS[key]
    from peft import LoraConfig, get_peft_model

    if model == TINY:
        from transformers import LlamaForCausalLM

        g = torch.random.get_rng_state()
        torch.manual_seed(1234)  # a fixed random base model: the same in every process
        base = LlamaForCausalLM(tiny_llama_config())
        torch.random.set_rng_state(g)
        tok = ByteTokenizer()
    else:
        base, hf_tok = load_causal_lm(model, device=device)
        tok = HFTokenizer(hf_tok)
    base.to(device)
    for p in base.parameters():
        p.requires_grad_(False)

    with (
        warnings.catch_warnings()
    ):  # peft reads transformers' deprecated is_gradient_checkpointing: not the user's to fix
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
        pm = get_peft_model(
            base,
            LoraConfig(
                r=1,
                lora_alpha=alpha,
                lora_dropout=dropout,
                target_modules=list(TARGETS[targets]),
                bias="none",
                task_type="CAUSAL_LM",
            ),
            adapter_name="r1",
        )
    base_w = {}
    for n, m in pm.named_modules():
        if hasattr(m, "lora_A") and "r1" in m.lora_A:
            base_w[_short_name(n)] = m.base_layer.weight.detach().clone()
    w = Worker(pm, tok, base_w, alpha, dropout, TARGETS[targets], device)
    _WORKERS.clear()  # one model per process
    _WORKERS[key] = w
    return w


@contextmanager
def active(
    worker: Worker,
    adapter: dict,
    rank: int,
    *,
    merged: dict | None = None,
    train_A: bool = True,
    part_scales: tuple[int, float, float] | None = None,
):
    """Load ``adapter`` into the peft adapter of ``rank`` and make it the active one.

    merged: {module: dW (d_out, d_in)} added to the base weights meanwhile (FLoRA);
    train_A: False freezes A (FFA-LoRA); part_scales: (r_s, w_s, w_p) scale A's shared and
    personal rows at inference (Het-CPFLoRA). Yields {module: peft layer}; the base weights are
    restored on exit."""
    name = worker.adapter_name(rank)
    mods = worker.lora_modules(rank)
    worker.model.set_adapter(name)
    with torch.no_grad():
        for mn, m in mods.items():
            A, B = adapter[mn]
            a = A.to(m.lora_A[name].weight)
            if part_scales is not None:
                rs, ws, wp = part_scales
                a = a.clone()
                a[:rs] *= ws
                a[rs:] *= wp
            m.lora_A[name].weight.copy_(a)
            m.lora_B[name].weight.copy_(B.to(m.lora_B[name].weight))
            m.lora_A[name].weight.requires_grad_(train_A)
            m.lora_B[name].weight.requires_grad_(True)
            if merged is not None and mn in merged:
                m.base_layer.weight.copy_(worker.base_weights[mn] + merged[mn].to(worker.base_weights[mn]))
    try:
        yield mods
    finally:
        with torch.no_grad():
            if merged is not None:
                for mn, m in mods.items():
                    if mn in merged:
                        m.base_layer.weight.copy_(worker.base_weights[mn])


def read_adapter(mods: dict, rank: int) -> dict:
    name = f"r{rank}"
    return {
        mn: (m.lora_A[name].weight.detach().clone().float().cpu(), m.lora_B[name].weight.detach().clone().float().cpu())
        for mn, m in mods.items()
    }


def init_adapter(worker: Worker, rank: int, generator) -> dict:
    """A fresh LoRA of ``rank``: A kaiming-uniform (a = sqrt(5), peft's default), B = 0."""
    out = {}
    for mn, m in worker.lora_modules(rank).items():
        d_out, d_in = m.base_layer.weight.shape
        bound = 1.0 / math.sqrt(d_in)  # kaiming_uniform_(a=sqrt(5)) on (rank, d_in): U(-1/sqrt(d_in), 1/sqrt(d_in))
        A = (torch.rand(rank, d_in, generator=generator) * 2 - 1) * bound
        out[mn] = (A, torch.zeros(d_out, rank))
    return out


def scaling(worker: Worker, rank: int) -> float:
    return worker.alpha / rank


def encode(tok, instruction: str, output: str | None, max_seq_tokens: int) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids + eos): the prompt keeps its last tokens, the response is cut to fit."""
    p = tok.encode(TEMPLATE.format(instruction=instruction))[-(max_seq_tokens // 2) :]
    if output is None:
        return p, []
    r = (tok.encode(output) + [tok.eos_token_id])[: max(1, max_seq_tokens - len(p))]
    return p, r


def _batch(worker: Worker, pairs: list[tuple[list[int], list[int]]]):
    ids, labels, att = collate_prompt_response(pairs, worker.tok.pad_token_id)
    dev = worker.device
    return ids.to(dev), labels.to(dev), att.to(dev)


def _token_nll(model, ids, labels, att):
    """Per-sequence (sum NLL over labelled tokens, count)."""
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    tgt = labels[:, 1:]
    nll = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100, reduction="none"
    ).view(tgt.shape)
    mask = tgt != -100
    return (nll * mask).sum(1), mask.sum(1)


def train(
    worker: Worker,
    adapter: dict,
    rank: int,
    examples,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    max_seq_tokens: int,
    generator,
    merged: dict | None = None,
    train_A: bool = True,
) -> tuple[dict, float]:
    """Local training (AdamW, constant lr, no warmup, loss on the response tokens): returns the
    trained adapter and the mean training loss (nats per response token, over all steps)."""
    data = [encode(worker.tok, e.instruction, e.output, max_seq_tokens) for e in examples]
    worker.model.train()
    losses = []
    with active(worker, adapter, rank, merged=merged, train_A=train_A) as mods:
        params = [
            p
            for m in mods.values()
            for p in (m.lora_A[f"r{rank}"].weight, m.lora_B[f"r{rank}"].weight)
            if p.requires_grad
        ]
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        for _ in range(epochs):
            order = torch.randperm(len(data), generator=generator).tolist()
            for k in range(0, len(order), batch_size):
                ids, labels, att = _batch(worker, [data[i] for i in order[k : k + batch_size]])
                s, c = _token_nll(worker.model, ids, labels, att)
                loss = s.sum() / c.sum().clamp(min=1)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
        out = read_adapter(mods, rank)
    worker.model.eval()
    return out, (sum(losses) / len(losses) if losses else float("nan"))


def response_nll(
    worker: Worker,
    adapter: dict,
    rank: int,
    examples,
    *,
    max_seq_tokens: int,
    batch_size: int = 8,
    merged: dict | None = None,
    part_scales_fn: Callable | None = None,
) -> list[tuple[float, int]]:
    """Per example (sum NLL of the response tokens, count). ``part_scales_fn(example) -> (r_s, w_s, w_p)``
    rescales the adapter per example (then batch size 1)."""
    data = [encode(worker.tok, e.instruction, e.output, max_seq_tokens) for e in examples]
    out: list[tuple[float, int]] = []
    worker.model.eval()
    with torch.no_grad():
        if part_scales_fn is None:
            with active(worker, adapter, rank, merged=merged):
                for k in range(0, len(data), batch_size):
                    s, c = _token_nll(worker.model, *_batch(worker, data[k : k + batch_size]))
                    out.extend((float(a), int(b)) for a, b in zip(s, c))
        else:
            for e, d in zip(examples, data):
                with active(worker, adapter, rank, merged=merged, part_scales=part_scales_fn(e)):
                    s, c = _token_nll(worker.model, *_batch(worker, [d]))
                out.append((float(s[0]), int(c[0])))
    return out


def prompt_scores(
    worker: Worker,
    adapter: dict,
    rank: int,
    instructions: Sequence[str],
    *,
    max_seq_tokens: int,
    merged: dict | None = None,
    batch_size: int = 8,
) -> list[float]:
    """The OOD score ``exp(mean NLL of the prompt tokens) / n_tokens`` of each instruction's
    prompt under ``adapter`` (the official code scores the instruction alone)."""
    out = []
    pairs = []
    for ins in instructions:
        p = encode(worker.tok, ins, None, max_seq_tokens)[0]
        pairs.append(([p[0]], p[1:]))  # every prompt token after the first is scored
    with torch.no_grad(), active(worker, adapter, rank, merged=merged):
        for k in range(0, len(pairs), batch_size):
            s, c = _token_nll(worker.model, *_batch(worker, pairs[k : k + batch_size]))
            out.extend(prompt_score(float(a) / max(1, int(b)), int(b)) for a, b in zip(s, c))
    return out


def generate(
    worker: Worker,
    adapter: dict,
    rank: int,
    instruction: str,
    *,
    max_new_tokens: int,
    max_seq_tokens: int,
    merged: dict | None = None,
    part_scales: tuple | None = None,
) -> str:
    """Greedy decoding of the response (stops at eos)."""
    p = encode(worker.tok, instruction, None, max_seq_tokens)[0]
    ids = torch.tensor([p], device=worker.device)
    out: list[int] = []
    with torch.no_grad(), active(worker, adapter, rank, merged=merged, part_scales=part_scales):
        from transformers import DynamicCache

        cache = DynamicCache(config=worker.model.config)

        arg = cache_argument(worker.model.get_base_model())
        cur = ids
        for _ in range(max_new_tokens):
            logits = worker.model(input_ids=cur, use_cache=True, **{arg: cache}).logits[0, -1]
            t = int(logits.argmax())
            if t == worker.tok.eos_token_id:
                break
            out.append(t)
            cur = torch.tensor([[t]], device=worker.device)
    return worker.tok.decode(out)


def rouge1_f(prediction: str, reference: str) -> float:
    """ROUGE-1 F-measure x 100 (rouge-score's default tokenizer: lowercase, runs of [a-z0-9];
    no stemming): clipped unigram overlap."""
    p = Counter(re.findall(r"[a-z0-9]+", prediction.lower()))
    r = Counter(re.findall(r"[a-z0-9]+", reference.lower()))
    hit = sum((p & r).values())
    if not p or not r or hit == 0:
        return 0.0
    prec, rec = hit / sum(p.values()), hit / sum(r.values())
    return 100.0 * 2 * prec * rec / (prec + rec)
