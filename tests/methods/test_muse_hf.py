"""attn_implementation="muse" on a tiny random LLaMA: SDPA logits when clusters are trivial,
close to them with real clusters, generate() through the decode fallback."""

import pytest
import torch

from icml26.methods.attention import hf
from icml26.methods.attention import muse as M
from tests.methods.muse_models import tiny_lm


def _tiny(attn):
    return tiny_lm("Llama", attn).eval()


@pytest.fixture(scope="module")
def models():
    hf.register()
    sd = _tiny("sdpa")
    mu = _tiny("muse")
    mu.load_state_dict(sd.state_dict())
    return sd, mu


def test_trivial_clusters_reproduce_sdpa_logits(models):
    sd, mu = models
    ids = torch.randint(0, 97, (1, 96), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = sd(ids).logits
        before = hf.counters()["calls"]
        # singleton key clusters: every tilted summary is one key, the far field is exact
        with hf.settings(
            M.MuseSettings(
                block_tokens=16, query_clusters=4, key_clusters=16, retrieved_clusters=0, variant="muse-noretrieval"
            )
        ):
            got = mu(ids).logits
        assert hf.counters()["calls"] == before + 2  # both layers ran MuSe, no fallback
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
        # retrieval covering every past cluster: exact too
        with hf.settings(M.MuseSettings(block_tokens=16, query_clusters=4, key_clusters=4, retrieved_clusters=64)):
            assert torch.allclose(mu(ids).logits, want, atol=1e-4, rtol=1e-4)
        # real clusters: an approximation, close on a random model
        with hf.settings(M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4, retrieved_clusters=2)):
            approx = mu(ids).logits
        assert not torch.allclose(approx, want, atol=1e-6)
        assert ((approx - want) ** 2).sum() / (want**2).sum() < 0.05


def test_generate_uses_the_sdpa_fallback_for_decode(models):
    sd, mu = models
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(2))
    with (
        torch.no_grad(),
        hf.settings(
            M.MuseSettings(
                block_tokens=8, query_clusters=2, key_clusters=8, retrieved_clusters=0, variant="muse-noretrieval"
            )
        ),
    ):
        f0 = hf.counters()["fallbacks"]
        a = mu.generate(ids, max_new_tokens=5, do_sample=False)
        assert hf.counters()["fallbacks"] > f0
    b = sd.generate(ids, max_new_tokens=5, do_sample=False)
    assert torch.equal(a, b)


def _tiny_mistral(attn, window):
    return tiny_lm("Mistral", attn, sliding_window=window).eval()


def _tiny_gemma2(attn):
    return tiny_lm(
        "Gemma2",
        attn,
        head_dim=16,
        sliding_window=512,
        attn_logit_softcapping=0.05,
        query_pre_attn_scalar=16,
    ).eval()


def test_sliding_window_model_is_named_before_the_run_and_runs_exact_windowed_attention(capsys):
    """Mistral with sliding_window 16 < 64 tokens: a warning and a record naming the setting and the
    fallback; the logits are the model's own (windowed) SDPA logits; no MuSe call is counted."""
    hf.register()
    sd, mu = _tiny_mistral("sdpa", 16), _tiny_mistral("muse", 16)
    rec = hf.check_model(mu.config, 64)
    assert "sliding_window=16 (2 layers)" in capsys.readouterr().err
    assert rec["attention_features"] == "sliding_window=16 (2 layers)" and rec["muse_layers"] == 0
    assert "sliding-window mask" in rec["fallback"]
    ids = torch.randint(0, 97, (2, 64), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), hf.settings(M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4)):
        c0 = hf.counters()
        got = mu(ids).logits
        c1 = hf.counters()
        want = sd(ids).logits
    assert c1["calls"] == c0["calls"] and c1["reasons"]["sliding_window"] - c0["reasons"].get("sliding_window", 0) == 2
    assert torch.allclose(got, want, atol=1e-5)
    # a window longer than the context is no window: MuSe runs and nothing is reported
    assert hf.check_model(_tiny_mistral("muse", 4096).config, 64) == {}


def test_softcapped_model_keeps_its_softcap():
    """Gemma 2 (attention logit softcapping): MuSe has no softcapped form, so those layers run exact
    softcapped attention (the model's eager logits), not SDPA that would drop the cap."""
    hf.register()
    ea, mu = _tiny_gemma2("eager"), _tiny_gemma2("muse")
    rec = hf.check_model(mu.config, 64, warn=False)
    assert rec["attention_features"] == "attn_logit_softcapping=0.05" and rec["exact_layers"] == 2
    ids = torch.randint(0, 97, (2, 64), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), hf.settings(M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4)):
        got = mu(ids).logits
        want = ea(ids).logits
        ea.config.attn_logit_softcapping = None  # what SDPA would compute
        for layer in ea.model.layers:
            layer.self_attn.attn_logit_softcapping = None
        dropped = ea(ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    assert (dropped - want).abs().max() > 1e-3  # the cap matters on this model
