"""Spatial-Grounded Fusion: frame strictness, the per-frame count check, the importance bias,
zero-init identity on tiny random LLaMA- and Qwen2-VL-style decoders, the hook placement
against a hand-computed decoder layer, and detach."""

from __future__ import annotations

import math

import pytest
import torch

from icml26.methods.spatial.sgf import SpatialGroundedFusion, attach_sgf, decoder_layers, frame_mask, sgf_layers


def _tokens(n_frames=3, per=4, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, n_frames * per, d, generator=g)
    geo = torch.randn(2, n_frames * per, d, generator=g)
    fid = torch.arange(n_frames).repeat_interleave(per)
    return x, geo, fid


def _live(m: SpatialGroundedFusion, seed=1) -> SpatialGroundedFusion:
    torch.manual_seed(seed)
    with torch.no_grad():
        m.gamma.fill_(0.7)
    return m


def test_sgf_layers_official_placement():
    assert len(sgf_layers(28)) == 21 and len(sgf_layers(36)) == 27 and sgf_layers(4) == [0, 1, 2]


def test_frame_strict_ignores_other_frames_geometry():
    x, geo, fid = _tokens()
    m = _live(SpatialGroundedFusion(16, 4))
    out = m(x, geo, fid)
    geo2 = geo.clone()
    geo2[:, fid == 1] += 5 * torch.randn_like(geo2[:, fid == 1])
    out2 = m(x, geo2, fid)
    assert torch.equal(out[:, fid != 1], out2[:, fid != 1])  # frames 0 and 2: bit-identical
    assert (out[:, fid == 1] - out2[:, fid == 1]).abs().max() > 1e-2  # frame 1 reads its own geometry
    g = _live(SpatialGroundedFusion(16, 4, frame_strict=False))
    a, b = g(x, geo, fid), g(x, geo2, fid)
    assert (a[:, fid == 0] - b[:, fid == 0]).abs().max() > 1e-3  # the global variant leaks across frames
    _, p = m.attention(x, geo, fid)
    assert torch.all(p[:, :, fid == 0][..., fid != 0] == 0)


def test_mismatched_counts_raise():
    x, geo, fid = _tokens()
    m = SpatialGroundedFusion(16, 4)
    with pytest.raises(ValueError, match="geometry tokens"):
        m(x, geo[:, :-1], fid)
    with pytest.raises(ValueError, match="do not match per frame"):
        frame_mask(fid[None], torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2]]))
    with pytest.raises(ValueError, match="frame_ids shape"):
        m(x, geo, fid[:-1])


def test_oracle_attention_and_gate_range():
    """Recompute one query's output by hand: softmax over same-frame keys of q.k/sqrt(dh) + b_j."""
    x, geo, fid = _tokens(d=8)
    m = _live(SpatialGroundedFusion(8, 2))
    out = m(x, geo, fid)
    xn, gn = m.norm_x(x), m.norm_g(geo)
    b = torch.log(torch.sigmoid(m.importance(xn)).squeeze(-1) + 0.1)
    assert b.min() >= math.log(0.1) - 1e-6 and b.max() <= math.log(1.1) + 1e-6
    i, batch = 5, 1
    keys = torch.nonzero(fid == fid[i]).ravel()
    heads = []
    for h in range(2):
        sl = slice(4 * h, 4 * h + 4)
        q = (xn[batch, i] @ m.q_proj.weight.T)[sl]
        k = (gn[batch, keys] @ m.k_proj.weight.T)[:, sl]
        v = (gn[batch, keys] @ m.v_proj.weight.T)[:, sl]
        w = torch.softmax(k @ q / 2.0 + b[batch, keys], 0)
        heads.append(w @ v)
    ref = math.tanh(0.7) * (torch.cat(heads) @ m.o_proj.weight.T)
    torch.testing.assert_close(out[batch, i], ref, atol=1e-5, rtol=1e-5)
    nog = SpatialGroundedFusion(8, 2, gate=False)
    assert nog.importance is None


def _llama(layers=4):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


def _context(T=20, frames=2, per=4, d=32, start=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(1, T, dtype=torch.bool)
    mask[0, start : start + frames * per] = True
    geo = torch.randn(1, frames * per, d, generator=g)
    return geo, torch.arange(frames).repeat_interleave(per), mask


def test_zero_init_logits_identical_llama_and_detach():
    m = _llama()
    ids = torch.randint(0, 128, (1, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        base = m(input_ids=ids).logits
    att = attach_sgf(m)
    assert att.layers == [0, 1, 2]
    att.set_geometry(*_context())
    with torch.no_grad():
        same = m(input_ids=ids).logits
        assert torch.equal(same, base)
        for mod in att.modules.values():
            mod.gamma.fill_(0.5)
        changed = m(input_ids=ids).logits
    assert (changed - base).abs().max() > 1e-4
    assert torch.equal(changed[:, :3], base[:, :3])  # positions before the image tokens are causal-untouched
    att.detach()
    assert all(not blk._forward_pre_hooks and not blk.self_attn._forward_hooks for blk in decoder_layers(m))
    with torch.no_grad():
        assert torch.equal(m(input_ids=ids).logits, base)


def test_hook_placement_matches_hand_computed_layer():
    """Layer output == X' + MLP(post_ln(X')) with X' = X + SGF(X), X = h + attn(ln(h))."""
    m = _llama(layers=2)
    att = attach_sgf(m, layers=[0])
    geo, fid, mask = _context(T=12, per=3, start=2)
    att.set_geometry(geo, fid, mask)
    for mod in att.modules.values():
        with torch.no_grad():
            mod.gamma.fill_(0.9)
    blk = decoder_layers(m)[0]
    captured = {}
    hook = blk.register_forward_hook(
        lambda mod, a, k, out: captured.update(inp=a[0] if a else k["hidden_states"], kw=k, out=out), with_kwargs=True
    )
    ids = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        m(input_ids=ids)
        hook.remove()
        att.detach()
        h, kw = captured["inp"], captured["kw"]
        a, _ = blk.self_attn(
            hidden_states=blk.input_layernorm(h),
            attention_mask=kw.get("attention_mask"),
            position_embeddings=kw["position_embeddings"],
            position_ids=kw.get("position_ids"),
        )
        x = h + a
        xi = x[mask].view(1, -1, 32)
        x = x.clone()
        x[mask] = (xi + att.modules["0"](xi, geo, fid)).view(-1, 32)
        ref = x + blk.mlp(blk.post_attention_layernorm(x))
    out = captured["out"][0] if isinstance(captured["out"], tuple) else captured["out"]
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_zero_init_logits_identical_qwen2_vl_with_images():
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(0)
    cfg = Qwen2VLConfig(
        text_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=128,
            rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]},
        ),
        vision_config=dict(
            depth=1,
            embed_dim=16,
            hidden_size=32,
            num_heads=2,
            patch_size=2,
            spatial_merge_size=2,
            in_channels=3,
            temporal_patch_size=1,
        ),
        vocab_size=128,
        image_token_id=100,
        video_token_id=101,
        vision_start_token_id=102,
        bos_token_id=1,
        eos_token_id=2,
    )
    m = Qwen2VLForConditionalGeneration(cfg).eval()
    # two frames of a 4x4-patch grid -> 4 image tokens each after the 2x2 merge
    grid = torch.tensor([[1, 4, 4], [1, 4, 4]])
    pix = torch.randn(32, 3 * 2 * 2, generator=torch.Generator().manual_seed(5))
    ids = torch.tensor([[5, 102] + [100] * 4 + [7, 102] + [100] * 4 + [9, 11, 13]])
    mask = ids == 100
    tt = mask.long()
    with torch.no_grad():
        base = m(input_ids=ids, pixel_values=pix, image_grid_thw=grid, mm_token_type_ids=tt).logits
    att = attach_sgf(m)
    assert att.layers == [0, 1, 2]
    geo = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(6))
    att.set_geometry(geo, torch.tensor([0] * 4 + [1] * 4), mask)
    with torch.no_grad():
        assert torch.equal(m(input_ids=ids, pixel_values=pix, image_grid_thw=grid, mm_token_type_ids=tt).logits, base)
        for mod in att.modules.values():
            mod.gamma.fill_(0.5)
        assert (
            m(input_ids=ids, pixel_values=pix, image_grid_thw=grid, mm_token_type_ids=tt).logits - base
        ).abs().max() > 1e-4
    with pytest.raises(ValueError, match="image tokens per sequence"):
        att.set_geometry(geo[:, :7], torch.tensor([0] * 4 + [1] * 3), mask)
    att.detach()
    with torch.no_grad():
        assert torch.equal(m(input_ids=ids, pixel_values=pix, image_grid_thw=grid, mm_token_type_ids=tt).logits, base)


def test_attach_bad_layers():
    with pytest.raises(ValueError, match="out of range"):
        attach_sgf(_llama(), layers=[4])


def test_per_sequence_frame_layouts():
    """(B, N) frame ids: each sequence is masked by its own layout, as if run alone."""
    x, geo, _ = _tokens(n_frames=2, per=6)
    fids = torch.tensor([[0] * 6 + [1] * 6, [0] * 4 + [1] * 4 + [2] * 4])
    m = _live(SpatialGroundedFusion(16, 4))
    out = m(x, geo, fids)
    for b in range(2):
        torch.testing.assert_close(out[b : b + 1], m(x[b : b + 1], geo[b : b + 1], fids[b]), atol=1e-6, rtol=1e-6)
