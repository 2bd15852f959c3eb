"""Method names say what ran: ``capkv`` is the paper's single channel, ``capkv-qa`` adds the
question-aware retrieval channel; ``<policy>@key=value`` is a row of its own; records carry
``method_settings``; summary verdicts name a winner only when its interval separates it."""

import math

import pytest
import torch

from icml26.methods.kvcache import KVPress
from icml26.methods.kvcache import scoring as S
from icml26.methods.kvcache import spec
from tests.methods.test_kv_scoring import tiny_llama


def _layer(t=96, seed=0):
    from icml26.methods.kvcache.press import capture_layers

    model = tiny_llama()
    ids = torch.randint(0, 128, (1, t), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad(), capture_layers(model) as cap:
        model(ids, use_cache=True)
    return cap[1]


def test_capkv_with_a_question_share_is_refused_and_capkv_qa_is_its_own_method():
    with pytest.raises(ValueError, match="capkv-qa"):
        KVPress(method="capkv", question_share=0.4)
    with pytest.raises(ValueError, match="0 is capkv"):
        KVPress(method="capkv-qa", question_share=0.0)
    assert KVPress(method="capkv").share == 0.0 and KVPress(method="capkv", question_share=0.0).share == 0.0
    assert KVPress(method="capkv-qa").share == 0.4 and KVPress(method="capkv-qa", question_share=0.25).share == 0.25
    with pytest.raises(ValueError, match="question_share"):
        KVPress(method="snapkv", question_share=0.4)


def test_capkv_keeps_the_paper_channel_and_capkv_qa_reserves_its_share_for_the_question_channel():
    x = _layer()
    n = 40
    kw = dict(sink_tokens=2, window_tokens=4, stat_window=4)
    got = KVPress(method="capkv", **kw).select(x, n)
    p = KVPress(method="capkv", **kw).params
    want = S.select_indices(S.score_capkv(x, p), n, sink_tokens=2, window_tokens=4)
    assert torch.equal(got, want)  # the paper's leverage score alone, no retrieval channel
    qa = KVPress(method="capkv-qa", question_share=0.25, **kw)
    got_qa = qa.select(x, n)
    question = S.score_capkv_question(x, qa.params)
    top = question.topk(int(math.floor(0.25 * n)), dim=-1).indices
    for h in range(got_qa.shape[1]):
        assert set(top[0, h].tolist()) <= set(got_qa[0, h].tolist())
    assert not torch.equal(got_qa, got)


def test_method_specs_with_settings_are_separate_rows_that_reach_the_press():
    base, kw = spec.press_kwargs("snapkv@kernel_size=13", {"kernel_size": 5, "question_share": 0.4})
    assert base == "snapkv" and kw["kernel_size"] == 13 and kw["question_share"] is None
    x = _layer()
    press = KVPress(method=base, **{k: v for k, v in kw.items() if k in ("kernel_size", "question_share")})
    p13 = KVPress(method="snapkv", kernel_size=13).params
    assert torch.equal(
        press.select(x, 40), S.select_indices(S.score_snapkv(x, p13), 40, sink_tokens=4, window_tokens=64)
    )
    with pytest.raises(ValueError, match="not a press option"):
        spec.check_method("snapkv@kernel=13", {"kernel_size"})
    with pytest.raises(ValueError, match="key=value"):
        spec.parse_method("snapkv@13")
    with pytest.raises(ValueError, match="capkv-qa"):
        spec.check_method("capkv@question_share=0.4", {"question_share"})


def test_config_refuses_a_question_share_without_capkv_qa():
    from icml26.methods.kvcache.config import DEFAULT_METHODS, Config

    assert {"capkv", "capkv-qa"} <= set(DEFAULT_METHODS)
    with pytest.raises(ValueError, match="add --method capkv-qa"):
        Config(methods=("capkv", "snapkv"), question_share=0.3)
    cfg = Config(methods=("capkv", "capkv-qa", "snapkv@kernel_size=13"), question_share=0.3)
    assert cfg.methods == ("capkv", "capkv-qa", "snapkv@kernel_size=13")
    with pytest.raises(ValueError, match="unknown 'capkv-x'"):
        Config(methods=("capkv-x",))


def test_method_settings_name_what_ran():
    from icml26.methods.kvcache.config import Config

    kw = Config().press_kwargs()
    qa = spec.method_settings("capkv-qa", kw)
    assert qa["policy"] == "capkv-qa" and qa["question_share"] == 0.4 and qa["pool_kernel"] == 13
    assert qa["retrieval_pool"] == "max" and qa["stat_window"] == 16
    cap = spec.method_settings("capkv", kw)
    assert cap["policy"] == "capkv" and "question_share" not in cap and "pool_kernel" not in cap
    assert spec.method_settings("snapkv", kw)["kernel_size"] == 5
    assert spec.method_settings("snapkv@kernel_size=13", kw) == {
        "policy": "snapkv",
        "sink_tokens": 4,
        "window_tokens": 64,
        "kernel_size": 13,
        "pool": "avg",
    }
    assert spec.method_settings("kvpress:FinchPress", kw)["press"] == "FinchPress"


def _row(method, acc, ci, kl=0.1, kl_ci=None):
    return {"method": method, "needle_accuracy": acc, "needle_accuracy_ci": ci, "kl": kl, "kl_ci": kl_ci}


def test_prefill_verdicts_name_no_winner_when_every_method_scores_zero():
    from icml26.methods.kvcache.evaluate import prefill_verdicts

    zero = [0.0, 0.79]  # Wilson interval of 0/1
    rows = [_row("full", 1.0, [0.21, 1.0], 0.0)] + [_row(m, 0.0, zero) for m in ("capkv", "streaming", "snapkv")]
    v = prefill_verdicts(rows, 0.5)
    assert v["best_needle_at_0.5"] is None and sorted(v["tied_with_best_needle_at_0.5"]) == [
        "capkv",
        "snapkv",
        "streaming",
    ]
    assert v["best_kl_at_0.5"] is None  # one haystack: no KL interval, nothing separates


def test_prefill_verdicts_name_a_winner_only_when_its_interval_separates_it():
    from icml26.methods.kvcache.evaluate import prefill_verdicts

    rows = [
        _row("capkv-qa", 1.0, [0.94, 1.0], 0.05, [0.03, 0.07]),
        _row("snapkv@kernel_size=13", 0.98, [0.91, 1.0], 0.06, [0.04, 0.08]),
        _row("capkv", 0.1, [0.04, 0.2], 0.2, [0.15, 0.25]),
    ]
    v = prefill_verdicts(rows, 0.75)
    assert v["best_needle_at_0.75"] is None
    assert v["tied_with_best_needle_at_0.75"] == ["capkv-qa", "snapkv@kernel_size=13"]
    assert v["best_kl_at_0.75"] is None and v["tied_with_best_kl_at_0.75"] == ["capkv-qa", "snapkv@kernel_size=13"]
    v = prefill_verdicts(rows[::2], 0.75)
    assert v["best_needle_at_0.75"] == "capkv-qa" and v["tied_with_best_needle_at_0.75"] == ["capkv-qa"]
    assert v["best_kl_at_0.75"] == "capkv-qa"


def test_haystack_interval_needs_five_haystacks():
    from icml26.methods.kvcache.samples import haystack_interval

    assert haystack_interval([0.1]) is None and haystack_interval([0.1, 0.2, 0.3, 0.4]) is None
    lo, hi = haystack_interval([0.1, 0.2, 0.3, 0.4, 0.5])
    assert 0.1 <= lo < 0.3 < hi <= 0.5
