"""The lean batch-1 decode runtime (icml26/methods/quantization/lean.py) against the Hugging Face
forward with the same weights: logits of every greedy step and the greedy tokens, on a tiny
random LLaMA with GQA and RoPE (FP32, fake-quant and packed INT4/INT8 models)."""

import copy

import pytest
import torch

from icml26.methods.quantization import hadamard as had
from icml26.methods.quantization import lean
from icml26.methods.quantization import pack
from icml26.methods.quantization import qmodel as QM
from icml26.methods.quantization import transforms as T

N_NEW = 12


def tiny_llama(seed=0):
    """Tiny random LLaMA with GQA (6 query / 2 KV heads), RoPE and a tied head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=96,
        hidden_size=192,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=True,
        max_position_embeddings=64,
        rope_theta=100.0,
    )
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.copy_(0.5 + torch.rand_like(p))
    for p in m.parameters():
        p.requires_grad_(False)
    return m


@pytest.fixture(scope="module")
def base():
    return tiny_llama(seed=3)


@pytest.fixture(scope="module")
def prompt():
    g = torch.Generator().manual_seed(11)
    return torch.randint(0, 96, (10,), generator=g)


def hf_greedy(m, prompt, n):
    """Greedy decoding with the HF model and its own cache: (tokens, logits of every step)."""
    from icml26.core.lm_cache import forward, new_cache

    with torch.no_grad():
        cache = new_cache(m)
        out = forward(m, prompt[None], cache)
        lg = [out.logits[0, -1]]
        nxt, toks = lg[-1].argmax(), []
        for _ in range(n):
            toks.append(int(nxt))
            o = forward(m, nxt.reshape(1, 1), cache)
            lg.append(o.logits[0, -1])
            nxt = lg[-1].argmax()
    return toks, lg


def compare(m, prompt, *, fast=None):
    ln = lean.LeanLM(m, 64)
    if fast is not None:
        assert ln.fast is fast
    r = ln.generate(prompt, N_NEW)
    toks, lg = hf_greedy(m, prompt, N_NEW)
    diff = max((a - b).abs().max().item() for a, b in zip(r["logits"], lg))
    scale = max(b.abs().max().item() for b in lg)
    return r["tokens"], toks, diff / scale, ln


def _packed(base, tmp_path, spec, *, rotate=False, dyn=False, name="m"):
    m = copy.deepcopy(base)
    extras = {"online_down_hadamard": rotate, "dyn_scale": dyn}
    if rotate:
        T.untie_embeddings(m)
        T.fuse_norms(m)
        T.rotate_residual(m, had.random_hadamard(192, 0))
        T.down_hadamard(m)
    QM.quantize_model(m, spec, online_down_hadamard=rotate, dyn_scale=dyn)
    if spec.abits < 16 and spec.act_granularity == "per-tensor":
        g = torch.Generator().manual_seed(2)
        QM.calibrate_static(m, [torch.randint(0, 96, (2, 16), generator=g)], spec)
    path = pack.save_quantized(m, None, tmp_path / name, spec, method="rtn", extras=extras)
    return pack.load_quantized(path)[0]


def _set_int_act(m, v):
    for mod in m.modules():
        if isinstance(mod, (pack.PackedLinear, pack.PackedHead)):
            mod.int_act = v


def test_fp32_model_same_logits_and_tokens(base, prompt):
    ours, theirs, err, ln = compare(base, prompt, fast=True)
    assert ours == theirs
    assert err < 1e-5
    assert ln.fused() == {"qkv": True, "gate_up": True}
    n_params = sum(p.numel() for p in base.parameters())
    assert ln.weight_bytes() == n_params * 4  # tied head: every weight read once, fp32


def test_prefill_in_chunks_equals_one_prefill(base, prompt):
    ln = lean.LeanLM(base, 64)
    whole = ln.forward(prompt)
    ln.reset()
    a = ln.forward(prompt[:4])
    b = ln.forward(prompt[4:])  # second chunk attends to the cached first one (explicit mask)
    assert torch.allclose(torch.cat([a, b]), whole, atol=1e-5)
    ln.reset()
    steps = torch.stack([ln.forward(t.reshape(1))[0] for t in prompt])  # token by token (fused ops)
    assert torch.allclose(steps, whole, atol=1e-4)
    with pytest.raises(ValueError):
        ln.forward(torch.zeros(64, dtype=torch.long))


def test_packed_int4_tied_exact_and_integer_activations(base, prompt, tmp_path):
    m = _packed(base, tmp_path, QM.QSpec(wbits=4, abits=16, group_size=64))
    assert isinstance(m.lm_head, pack.PackedHead)
    _set_int_act(m, 0)  # fp32 activations in the GEMV: the two paths compute the same numbers
    ours, theirs, err, ln = compare(m, prompt, fast=True)
    assert ours == theirs and err < 1e-4
    assert ln.layers[0].qkv[0].qweight.shape == (192 + 64 + 64, 96)  # q|k|v fused, packed two per byte
    _set_int_act(m, pack.DECODE_INT_ACT)  # default: 15-bit integer activations in both paths
    ours, theirs, err, _ = compare(m, prompt, fast=True)
    assert ours == theirs and err < 1e-2


def test_packed_int8_rotated_with_online_hadamard(base, prompt, tmp_path):
    m = _packed(base, tmp_path, QM.QSpec(wbits=8, abits=16, w_sym=False), rotate=True)
    _set_int_act(m, 0)
    ours, theirs, err, ln = compare(m, prompt, fast=True)
    assert ours == theirs and err < 1e-4
    assert ln.layers[0].down.hadamard and not ln._emb[0] == "fp"


@pytest.mark.parametrize(
    "spec,dyn",
    [(QM.QSpec(wbits=4, abits=8, kvbits=4), False), (QM.QSpec(wbits=4, abits=4, act_granularity="per-tensor"), True)],
)
def test_simulated_activation_and_kv_quantization(base, prompt, tmp_path, spec, dyn):
    """A4/A8 activations (simulated quantize-dequantize, dynamic or static), KV4 and S_n run
    the plain-torch path of the runtime and still match the HF model step by step."""
    m = _packed(base, tmp_path, spec, rotate=dyn, dyn=dyn, name=spec.name)
    _set_int_act(m, 0)
    ours, theirs, err, ln = compare(m, prompt, fast=False)
    assert ours == theirs and err < 1e-4
    fq = copy.deepcopy(base)
    QM.quantize_model(fq, spec)  # fake-quant model (weights dequantized, FP32 runtime)
    ours, theirs, err, _ = compare(fq, prompt)
    assert ours == theirs and err < 1e-4


def test_refuses_unsupported_models(base):
    m = copy.deepcopy(base)
    m.config.hidden_act = "gelu"
    with pytest.raises(ValueError):
        lean.LeanLM(m)
