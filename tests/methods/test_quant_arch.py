"""Which architectures FPTQuant's transforms take: one tiny random model per family they claim
(LLaMA with GQA, Mistral, Qwen2 with q/k/v biases) keeps its logits (within 1e-4 of the largest)
after every variant's transforms are trained away from the identity and merged; the families
they refuse (q/k norms: Qwen3, Gemma-3; fused qkv: Phi-3) are named with the reason."""

import copy

import pytest
import torch

from icml26.methods.quantization import qmodel as QM
from icml26.methods.quantization import transforms as T
from icml26.methods.quantization.config import FPT_METHODS, Config
from icml26.methods.quantization.prepare import prepare

COMMON = {
    "vocab_size": 96,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


def _random(model_cls, cfg, seed=0):
    torch.manual_seed(seed)
    m = model_cls(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.copy_(0.5 + torch.rand_like(p))
            elif n.endswith("bias"):
                p.copy_(torch.randn_like(p))  # non-zero q/k/v biases: they must transform with their rows
            else:
                p.mul_(3.0)
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def tiny(family: str):
    import transformers as tf

    if family == "llama":
        return _random(tf.LlamaForCausalLM, tf.LlamaConfig(head_dim=32, tie_word_embeddings=True, **COMMON))
    if family == "mistral":
        return _random(tf.MistralForCausalLM, tf.MistralConfig(head_dim=32, tie_word_embeddings=False, **COMMON))
    if family == "qwen2":
        return _random(tf.Qwen2ForCausalLM, tf.Qwen2Config(tie_word_embeddings=True, **COMMON))
    if family == "qwen3":
        return _random(tf.Qwen3ForCausalLM, tf.Qwen3Config(head_dim=32, **COMMON))
    if family == "gemma3":
        return _random(tf.Gemma3ForCausalLM, tf.Gemma3TextConfig(head_dim=32, **COMMON))
    if family == "phi3":
        c = {k: v for k, v in COMMON.items()}
        return _random(tf.Phi3ForCausalLM, tf.Phi3Config(pad_token_id=0, **c))
    raise ValueError(family)


def _logits(m, ids):
    with torch.no_grad():
        return m(input_ids=ids).logits


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_merged_transforms_preserve_logits(family):
    fp = tiny(family)
    ids = torch.randint(0, 96, (2, 20), generator=torch.Generator().manual_seed(3))
    ref = _logits(fp, ids)
    # lr 0.05 for 5 steps moves every transform well away from the identity
    cfg = Config(local_steps=5, local_lr=0.05)
    for method in FPT_METHODS:
        m, ex = prepare(method, fp, cfg, [], seed=1)
        p = ex["params"][0]
        assert p.theta.abs().max() > 0.05 and p.log_u.abs().max() > 0.05  # not the identity
        QM.quantize_model(
            m,
            QM.QSpec(wbits=16, abits=16, kvbits=16, head_bits=16),
            online_down_hadamard=ex["online_down_hadamard"],
            dyn_scale=ex["dyn_scale"],
        )
        err = (_logits(m, ids) - ref).abs().max() / ref.abs().max()
        assert err < 1e-4, (family, method, float(err))
        if family == "qwen2":  # the biases moved with their weights
            assert not torch.allclose(m.model.layers[0].self_attn.k_proj.bias, fp.model.layers[0].self_attn.k_proj.bias)


def test_bias_transform_is_needed():
    """Without transforming the q/k/v biases the logits change (the check above can fail)."""
    fp = tiny("qwen2")
    ids = torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(4))
    m, _ex = prepare("fptquant-merged", fp, Config(local_steps=5, local_lr=0.05), [], seed=1)
    for a, b in zip(T.layers(m), T.layers(fp)):
        a.self_attn.k_proj.bias.copy_(b.self_attn.k_proj.bias)
        a.self_attn.v_proj.bias.copy_(b.self_attn.v_proj.bias)
    ref = _logits(fp, ids)
    assert (_logits(m, ids) - ref).abs().max() / ref.abs().max() > 1e-3


@pytest.mark.parametrize(
    "family,needle", [("qwen3", "q/k RMSNorms"), ("gemma3", "q/k RMSNorms"), ("phi3", "fused qkv_proj")]
)
def test_refused_families_are_named(family, needle):
    m = tiny(family)
    why = T.unsupported(m)
    assert why is not None and needle in why
    with pytest.raises(ValueError, match=needle):
        prepare("fptquant", copy.deepcopy(m), Config(local_steps=1), [], seed=0)
