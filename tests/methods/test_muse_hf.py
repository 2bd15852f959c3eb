"""attn_implementation="muse" on a tiny random LLaMA: SDPA logits when clusters are trivial,
close to them with real clusters, generate() through the decode fallback."""

import pytest
import torch

from icml26.methods.attention import hf
from icml26.methods.attention import muse as M


def _tiny(attn):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM._from_config(cfg, attn_implementation=attn).eval()


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
