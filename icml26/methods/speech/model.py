"""The speech LM of ``icml26 mamoe``: a dense LLaMA with unit tokens and speech markers added,
upcycled per variant (``mamoe.upcycle_llama``), the MoST sample formats (ASR, TTS, text LM; loss on
the response only), the loss (optionally a per-modality softmax), and the trainable parameters
(arXiv 2601.10272; code NUS-HPC-AI-Lab/MoST; the frozen set is RECON, docs/mamoe.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from icml26.core.data.lm import collate_prompt_response, load_causal_lm, model_path
from icml26.methods.speech import mamoe as M
from icml26.methods.speech.config import Config
from icml26.methods.speech.mamoe import modality_context, modality_marks
from icml26.methods.speech.units import dedup

ASR_PROMPT = "Transcribe the following speech into text."


TTS_PROMPT = "Convert the following text into speech."


# ----------------------------------------------------------------------------- model
@dataclass
class SpeechLM:
    model: object
    tok: object
    base: int  # first unit id
    num_units: int
    bos_speech: int
    eos_speech: int
    eos: int
    moe_layers: list = field(default_factory=list)

    @property
    def speech_range(self) -> tuple[int, int]:
        return (self.base, self.base + self.num_units + 2)

    def marks(self, ids):
        return modality_marks(ids, self.speech_range)


def validate_model(cfg: Config) -> None:
    model_path("smollm2-135m" if cfg.model == "tiny-random" else cfg.model)


def build_model(
    cfg: Config, variant: str | None, num_units: int, *, seed: int, upcycle_init: str | None = None
) -> SpeechLM:
    """The dense LM with the unit vocabulary, upcycled as ``variant`` (None: left dense, as loaded)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if cfg.model == "tiny-random":
        tok = AutoTokenizer.from_pretrained(str(model_path("smollm2-135m")), local_files_only=True)
        h = cfg.tiny_hidden
        lc = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=h,
            intermediate_size=2 * h,
            num_hidden_layers=cfg.tiny_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
        model = LlamaForCausalLM(lc).eval()
    else:
        model, tok = load_causal_lm(cfg.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    base = len(tok)
    tok.add_tokens(
        [f"<|unit_{i}|>" for i in range(num_units)] + ["<|begin_of_speech|>", "<|end_of_speech|>"], special_tokens=True
    )
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        mean, std = emb.mean(0), emb.std(0)
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        new = model.get_input_embeddings().weight
        g = torch.Generator().manual_seed(seed + 1)
        new[base:] = mean + 0.5 * std * torch.randn(len(tok) - base, new.shape[1], generator=g)
    layers = []
    if variant is not None:
        layers = M.upcycle_llama(
            model,
            variant=variant,
            layers=M.moe_layers(len(model.model.layers), cfg.moe_every),
            num_text_experts=cfg.num_text_experts,
            num_speech_experts=cfg.num_speech_experts,
            top_k=cfg.top_k,
            upcycle_init=upcycle_init or cfg.upcycle_init,
            noise_std=cfg.noise_std,
            aux_alpha=cfg.aux_alpha,
            seed=seed,
        )
    model.eval()
    eos = tok.eos_token_id
    return SpeechLM(model, tok, base, num_units, base + num_units, base + num_units + 1, eos, layers)


# ----------------------------------------------------------------------------- samples
def _enc(tok, s: str) -> list[int]:
    return tok(s, add_special_tokens=False)["input_ids"]


def asr_sample(lm: SpeechLM, units, text: str | None) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids). ASR input units are de-duplicated."""
    prompt = (
        _enc(lm.tok, ASR_PROMPT)
        + [lm.bos_speech]
        + [lm.base + u for u in dedup(units)]
        + [lm.eos_speech]
        + _enc(lm.tok, " Output:")
    )
    resp = (_enc(lm.tok, " " + text) + [lm.eos]) if text is not None else []
    return prompt, resp


def tts_sample(lm: SpeechLM, text: str, units) -> tuple[list[int], list[int]]:
    prompt = _enc(lm.tok, TTS_PROMPT + " " + text + " Output:") + [lm.bos_speech]
    resp = ([lm.base + u for u in units] + [lm.eos_speech]) if units is not None else []
    return prompt, resp


def text_sample(lm: SpeechLM, text: str) -> tuple[list[int], list[int]]:
    return [lm.tok.bos_token_id if lm.tok.bos_token_id is not None else lm.eos], _enc(lm.tok, text) + [lm.eos]


def collate(samples, pad_id: int):
    """[(prompt, response)] -> input_ids (B, L), labels (B, L; -100 on prompt and padding), attention_mask."""
    return collate_prompt_response(samples, pad_id)


def lm_loss(lm: SpeechLM, ids, lab, att, vocab: int | None = None, modality_softmax: bool = False):
    """Mean next-token cross-entropy on the labelled positions; the LM head runs on those positions only.
    ``vocab``: the softmax over the first ``vocab`` ids only (the text vocabulary, for text perplexity).
    ``modality_softmax``: each position's softmax runs over its target's modality only: a speech target (a unit or
    a speech marker, ids in ``lm.speech_range``) over the speech ids, a text target over the text ids (below
    ``lm.base``); the same restriction greedy decoding applies (``greedy``), and it spares the full-vocabulary head
    on the run-length unit targets of TTS (RECON, a cost measure). Returns (loss, token count)."""
    with modality_context(lm.model, lm.marks(ids)):
        hid = lm.model.model(input_ids=ids, attention_mask=att).last_hidden_state  # (B, L, d)
    tgt = lab[:, 1:]
    sel = tgt != -100
    n = int(sel.sum())
    h, t = hid[:, :-1][sel], tgt[sel]  # (n, d), (n,)
    if modality_softmax:
        lo, hi = lm.speech_range
        sp = (t >= lo) & (t < hi)
        w = lm.model.lm_head.weight  # (V, d)
        b = getattr(lm.model.lm_head, "bias", None)
        loss = h.new_zeros(())
        for m, a, z in ((sp, lo, hi), (~sp, 0, lm.base)):
            if m.any():
                lg = h[m] @ w[a:z].T + (b[a:z] if b is not None else 0)
                loss = loss + F.cross_entropy(lg.float(), t[m] - a, reduction="sum")
        return loss / max(n, 1), n
    logits = lm.model.lm_head(h)  # (n, V)
    if vocab is not None:
        logits = logits[:, :vocab]
    loss = F.cross_entropy(logits.float(), t, reduction="sum")
    return loss / max(n, 1), n


# ----------------------------------------------------------------------------- training
def trainable(lm: SpeechLM, train_all: bool = False):
    """Freeze all but the MoE / widened-MLP layers and the new embedding rows (``train_all``: nothing frozen).
    Returns the trainable params."""
    m = lm.model
    if train_all:
        for p in m.parameters():
            p.requires_grad_(True)
        return [p for p in m.parameters()]
    for p in m.parameters():
        p.requires_grad_(False)
    params = []
    for li in lm.moe_layers:
        for p in m.model.layers[li].mlp.parameters():
            p.requires_grad_(True)
            params.append(p)
    emb = m.get_input_embeddings().weight
    emb.requires_grad_(True)
    keep = torch.zeros(emb.shape[0], 1)
    keep[lm.base :] = 1.0
    emb.register_hook(lambda g: g * keep.to(g.dtype))
    params.append(emb)
    return params
