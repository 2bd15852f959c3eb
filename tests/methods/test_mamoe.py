"""MAMoE layer, patch and upcycling (icml26.methods.speech.mamoe): the exact checks of the issue."""

import pytest
import torch

from icml26.methods.speech import mamoe as M


def _tiny_llama(seed=0, layers=2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=120,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("top_k", [1, 2, 3, 4, 6])
def test_mask_text_token_reaches_only_text_and_shared(top_k):
    g = torch.Generator().manual_seed(top_k)
    n, e = 200, 6
    scores = torch.softmax(torch.randn(n, e, generator=g), -1)
    marks = torch.randint(0, 3, (n,), generator=g)
    groups = ((0, 1, 2), (3, 4, 5))
    allowed = M.group_mask(marks, e, groups, "shared")
    w, idx = M.masked_topk(scores, allowed, top_k)
    for t in range(n):
        for j in range(idx.shape[1]):
            ex, wt = idx[t, j].item(), w[t, j].item()
            if marks[t] == M.TEXT and wt > 0:
                assert ex in groups[0]
            if marks[t] == M.SPEECH and wt > 0:
                assert ex in groups[1]
            if marks[t] == M.OTHER:
                assert wt == 0.0
            if wt > 0:  # raw softmax score over ALL experts, not renormalized
                assert wt == pytest.approx(scores[t, ex].item(), abs=0)
    # the chosen allowed experts are the top of the allowed scores
    txt = marks == M.TEXT
    best = scores[txt][:, :3].topk(min(top_k, 3), -1).values
    assert torch.allclose(w[txt][:, : best.shape[1]], best)
    assert (w[txt][:, 3:] == 0).all()


def test_aux_loss_hand_computation():
    # B=1, T=2, E=4, k=1; masked scores and choices written out
    s = torch.tensor([[[0.5, 0.2, 0.0, 0.0], [0.0, 0.0, 0.6, 0.3]]])
    idx = torch.tensor([[[0], [2]]])
    # f = count * E / (T k) = [1, 0, 1, 0] * 4 / 2 = [2, 0, 2, 0]; P = mean_t s = [0.25, 0.1, 0.3, 0.15]
    # sum f P = 0.5 + 0.6 = 1.1; alpha 1e-3 -> 1.1e-3
    assert M.seq_aux_loss(s, idx, 4, 1e-3).item() == pytest.approx(1.1e-3, rel=1e-6)
    # two sequences: the mean over sequences
    s2 = torch.cat([s, torch.tensor([[[0.1, 0.7, 0.0, 0.0], [0.1, 0.8, 0.0, 0.0]]])])
    idx2 = torch.cat([idx, torch.tensor([[[1], [1]]])])
    # second: f = [0, 4, 0, 0], P = [0.1, 0.75, 0, 0] -> 3.0
    assert M.seq_aux_loss(s2, idx2, 4, 1.0).item() == pytest.approx((1.1 + 3.0) / 2, rel=1e-6)


def _block(shared=True, groups=((0, 1), (2, 3)), init="official", top_k=1, noise=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    mlp = M.SwiGLU(16, 24)
    torch.nn.init.normal_(mlp.gate_proj.weight, generator=g)
    experts = [M.SwiGLU.copy_of(mlp, noise, g) for _ in range(4)]
    sh = M.SwiGLU.copy_of(mlp) if shared else None
    b = M.MAMoEBlock(
        experts, sh, 16, top_k=top_k, groups=groups, init=init, other_tokens="shared" if shared else "all", generator=g
    )
    torch.nn.init.normal_(b.router, 0, 1.0, generator=g)  # a router far from uniform
    return b, mlp


@pytest.mark.parametrize("top_k", [1, 2])
def test_upcycled_block_official_is_weights_plus_one_times_mlp(top_k):
    b, mlp = _block(top_k=top_k)
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(1))
    marks = torch.randint(0, 2, (2, 7), generator=torch.Generator().manual_seed(2))
    b.marks = marks
    with torch.no_grad():
        y = b(x)
        w, _, _, _ = b.route(x.reshape(-1, 16), marks.reshape(-1))
        want = (w.sum(-1, keepdim=True) + 1) * mlp(x.reshape(-1, 16))
    assert torch.allclose(y.reshape(-1, 16), want, atol=1e-5)
    assert (w.sum(-1) < 1).all()  # not renormalized: the gap is real


def test_other_tokens_get_the_shared_expert_exactly():
    b, mlp = _block()
    x = torch.randn(1, 5, 16)
    b.marks = torch.tensor([[0, 2, 1, 2, 0]])
    with torch.no_grad():
        y = b(x)
    assert torch.isfinite(y).all()
    assert torch.allclose(y[0, [1, 3]], b.shared(x[0, [1, 3]]), atol=1e-6)
    with pytest.raises(ValueError):
        M.MAMoEBlock([M.SwiGLU(4, 8)] * 2, None, 4, groups=((0,), (1,)), other_tokens="shared")


@pytest.mark.parametrize("variant", ["mamoe", "moe", "mamoe-noshared", "dense"])
def test_upcycle_equal_is_exactly_the_dense_model(variant):
    dense = _tiny_llama()
    ids = torch.randint(0, 120, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = dense(ids).logits
    up = _tiny_llama()
    M.upcycle_llama(up, variant=variant, layers=[0, 1], upcycle_init="equal", noise_std=0.0)
    for b in M.mamoe_blocks(up):
        torch.nn.init.normal_(b.router, 0, 1.0)
    marks = M.modality_marks(ids, (100, 118), other_ids=(119,))
    with torch.no_grad(), M.modality_context(up, marks):
        got = up(ids).logits
    assert torch.allclose(got, ref, atol=1e-5), (got - ref).abs().max()


def test_upcycle_official_changes_the_model_by_the_gap():
    dense = _tiny_llama(layers=1)
    up = _tiny_llama(layers=1)
    M.upcycle_llama(up, variant="mamoe", layers=[0], upcycle_init="official", noise_std=0.0)
    ids = torch.randint(0, 100, (1, 6))
    with torch.no_grad():
        a, b = dense(ids).logits, up(ids).logits
    assert (a - b).abs().max() > 1e-3
    # noise: experts differ from the MLP by about noise_std
    up2 = _tiny_llama(layers=1)
    M.upcycle_llama(up2, variant="mamoe", layers=[0], noise_std=1e-3, seed=3)
    bl = M.mamoe_blocks(up2)[0]
    d = (bl.experts[0].gate_proj.weight - dense.model.layers[0].mlp.gate_proj.weight).std().item()
    assert d == pytest.approx(1e-3, rel=0.1)


def test_param_counts_equal_active_across_moe_variants():
    act = {}
    for v in ("mamoe", "moe", "mamoe-noshared", "dense"):
        m = _tiny_llama()
        M.upcycle_llama(m, variant=v, layers=[0, 1])
        act[v] = M.param_counts(m)
    assert act["mamoe"] == act["moe"]
    assert act["mamoe"][0] == act["mamoe-noshared"][0]
    assert act["dense"][0] == act["mamoe"][0] - 2 * 4 * 32  # the dense model has no router (E x d per layer)
    assert act["mamoe"][1] > act["mamoe"][0]


def _host(kind, seed=0, **kw):
    torch.manual_seed(seed)
    if kind == "mixtral":
        from transformers import MixtralConfig
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock as B

        cfg = MixtralConfig(hidden_size=16, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2, **kw)
    elif kind == "qwen2_moe":
        from transformers import Qwen2MoeConfig
        from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock as B

        cfg = Qwen2MoeConfig(
            hidden_size=16,
            moe_intermediate_size=24,
            shared_expert_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            **kw,
        )
    else:
        from transformers import OlmoeConfig
        from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock as B

        cfg = OlmoeConfig(hidden_size=16, intermediate_size=24, num_experts=4, num_experts_per_tok=2, **kw)
    b = B(cfg).eval()
    with torch.no_grad():
        for p in b.parameters():
            p.normal_(0, 0.5)
    return b


HOSTS = [
    ("mixtral", {}),
    ("qwen2_moe", {"norm_topk_prob": False}),
    ("qwen2_moe", {"norm_topk_prob": True}),
    ("olmoe", {"norm_topk_prob": False}),
    ("olmoe", {"norm_topk_prob": True}),
]


@pytest.mark.parametrize("kind,kw", HOSTS)
def test_patched_host_equals_original_when_one_group_covers_all(kind, kw):
    import copy

    b = _host(kind, **kw)
    orig = copy.deepcopy(b)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        ref = orig(x)
    M.patch_moe_block(b, groups=((0, 1, 2, 3), (2, 3)))
    with torch.no_grad(), M.modality_context(b, torch.zeros(2, 5, dtype=torch.long)):
        got = b(x)
    assert torch.allclose(got, ref, atol=1e-6)


@pytest.mark.parametrize("kind,kw", HOSTS)
def test_patched_host_routes_text_to_text_experts(kind, kw):
    b = _host(kind, **kw)
    M.patch_moe_block(b, groups=((0, 1), (2, 3)))
    x = torch.randn(12, 16)
    marks = torch.tensor([0] * 6 + [1] * 6)
    with M.modality_context(b, marks):
        _, w, idx = b.gate(x)
    assert set(idx[:6].flatten().tolist()) <= {0, 1} and set(idx[6:].flatten().tolist()) <= {2, 3}
    renorm = kind == "mixtral" or kw.get("norm_topk_prob")
    if renorm:
        assert torch.allclose(w.sum(-1), torch.ones(12), atol=1e-6)
    else:
        assert (w.sum(-1) < 1).all()
    with pytest.raises(TypeError):
        M.patch_moe_block(torch.nn.Linear(2, 2), groups=((0,), (1,)))


def test_modality_marks_from_ids():
    ids = torch.tensor([[5, 100, 117, 118, 119, 3]])
    assert M.modality_marks(ids, (100, 118), other_ids=(119,)).tolist() == [[0, 1, 1, 0, 2, 0]]


def test_text_perplexity_is_over_the_text_vocabulary():
    """The unit rows added for speech take no mass in text perplexity: it equals exp(NLL) of the
    logits sliced to the original vocabulary (recomputed here), and is below the full-vocabulary one."""
    import math

    from icml26.methods.speech import train as T

    lm = T.build_model(T.Config(model="tiny-random"), None, 32, seed=0)
    texts = ["the quick brown fox", "a word of the dictionary"]
    ids, lab, att = T.collate([T.text_sample(lm, t) for t in texts], lm.tok.pad_token_id)
    with torch.no_grad():
        logits = lm.model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    tgt, sel = lab[:, 1:], lab[:, 1:] != -100
    nll = lambda z: float(torch.nn.functional.cross_entropy(z[sel], tgt[sel]))  # noqa: E731
    assert T.text_perplexity(lm, texts) == pytest.approx(math.exp(nll(logits[..., : lm.base])), rel=1e-4)
    assert math.exp(nll(logits)) > T.text_perplexity(lm, texts)
    assert lm.model.get_input_embeddings().weight.shape[0] == lm.base + 32 + 2


def test_modality_softmax_loss_is_over_each_targets_modality():
    """With ``modality_softmax`` a unit target's softmax runs over the speech ids only and a text target's over
    the text ids only (recomputed here from the full logits); the full-vocabulary loss is larger."""
    from icml26.methods.speech import train as T

    lm = T.build_model(T.Config(model="tiny-random"), "mamoe", 16, seed=0)
    samples = [
        T.tts_sample(lm, "a brief experience", [3, 3, 7, 1]),
        T.asr_sample(lm, [2, 2, 9, 4], "a range of vision"),
    ]
    ids, lab, att = T.collate(samples, lm.tok.pad_token_id)
    from icml26.methods.speech.mamoe import modality_context

    with torch.no_grad():
        with modality_context(lm.model, lm.marks(ids)):
            logits = lm.model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
        got, n = T.lm_loss(lm, ids, lab, att, modality_softmax=True)
        full, _ = T.lm_loss(lm, ids, lab, att)
    tgt = lab[:, 1:]
    lo, hi = lm.speech_range
    tot, cnt = 0.0, 0
    for b in range(tgt.shape[0]):
        for t in range(tgt.shape[1]):
            y = int(tgt[b, t])
            if y == -100:
                continue
            a, z = (lo, hi) if lo <= y < hi else (0, lm.base)
            tot -= float(torch.log_softmax(logits[b, t, a:z], -1)[y - a])
            cnt += 1
    assert n == cnt == 4 + 1 + len(T._enc(lm.tok, " a range of vision")) + 1  # units + end of speech, words + eos
    assert float(got) == pytest.approx(tot / cnt, rel=1e-5)
    assert float(full) > float(got)
