"""``icml26 quantize``: the summary names a winner only where it is honest. Perplexity intervals come
from the evaluation chunks (Student-t over per-chunk mean NLL, recomputed here from the formula);
seed-dependent methods (FPTQuant variants, QuaRot's random rotation) ran one seed, so they are
compared by these intervals; only all-deterministic settings are decided on exact point values.
Config level plus a two-chunk toy model, no checkpoint."""

import math
from types import SimpleNamespace

import pytest
import torch

from icml26.methods.quantization import evaluate as E
from icml26.methods.quantization import fptquant as m

T_975_DF3 = 3.182446305284263  # Student-t 0.975 quantile, 3 degrees of freedom (tables)
KW = {"fp_ppl": 6.8, "evalc": [], "saved": None, "t0": 0.0, "est": 1.0, "c0": 0.0, "est_cpu": 1.0}


def test_chunk_interval_is_the_student_t_interval_of_chunk_nll_exponentiated():
    nll = [2.0, 2.2, 2.4, 2.6]
    mean, sd = 2.3, math.sqrt((0.09 + 0.01 + 0.01 + 0.09) / 3)
    half = T_975_DF3 * sd / 2
    lo, hi = E.chunk_interval(nll)
    assert lo == pytest.approx(math.exp(mean - half), rel=1e-9) and hi == pytest.approx(math.exp(mean + half), rel=1e-9)
    assert E.chunk_interval([2.0]) is None  # one chunk: no interval, never zero width
    r = E.paired_ratio_interval([2.1, 2.3, 2.5, 2.7], nll)  # 0.1 lower NLL on every chunk
    assert r[0] == pytest.approx(math.exp(0.1)) and r[1] == pytest.approx(math.exp(0.1))


def test_perplexity_records_per_chunk_nll_consistent_with_the_total():
    torch.manual_seed(0)
    table = torch.randn(11, 11)

    def model(input_ids):
        return SimpleNamespace(logits=table[input_ids])

    chunks = [torch.randint(0, 11, (1, 9)) for _ in range(3)]
    nll: list[float] = []
    ppl, _, _ = E.perplexity(model, chunks, chunk_nll=nll)
    ref = [
        torch.nn.functional.cross_entropy(table[c[0, :-1]], c[0, 1:]).item() for c in chunks
    ]  # independent: mean NLL of each chunk's next tokens
    assert nll == pytest.approx(ref, rel=1e-6)
    assert ppl == pytest.approx(math.exp(sum(ref) / 3), rel=1e-6)


def _rec(method, nll):
    return {
        "method": method,
        "setting": "W4A16",
        "perplexity": math.exp(sum(nll) / len(nll)),
        "chunk_nll": nll,
        "perplexity_ci": E.chunk_interval(nll),
    }


def test_single_seed_fptquant_is_not_named_best_inside_the_text_interval():
    rtn = _rec("rtn", [2.6, 3.0, 2.4, 2.9])
    fpt = _rec("fptquant-merged", [2.5, 2.9, 2.3, 2.8])  # lower point value, intervals overlap
    s = m.summary(m.Config(), [rtn, fpt], [], ["W4A16"], **KW)
    assert s["best_W4A16"] is None and s["tied_with_best_W4A16"] == ["fptquant-merged", "rtn"]
    assert s["verdict_W4A16"].startswith("95% intervals") and "fptquant-merged" in s["verdict_W4A16"]
    # the paired ratio: 0.1 lower NLL on every chunk -> exp(-0.1), a zero-spread paired interval
    assert s["fptquant-merged_vs_best_baseline_W4A16"] == round(math.exp(-0.1), 4)
    assert s["fptquant-merged_vs_best_baseline_W4A16_ci"] == [round(math.exp(-0.1), 4)] * 2
    far = _rec("fptquant-merged", [1.2, 1.3, 1.25, 1.35])  # intervals separate: named
    s = m.summary(m.Config(), [rtn, far], [], ["W4A16"], **KW)
    assert s["best_W4A16"] == "fptquant-merged"


def test_deterministic_methods_on_the_same_text_are_decided_exactly():
    rtn = _rec("rtn", [2.6, 3.0, 2.4, 2.9])
    gptq = _rec("gptq", [2.5, 2.9, 2.3, 2.8])
    s = m.summary(m.Config(), [rtn, gptq], [], ["W4A16"], **KW)
    assert s["best_W4A16"] == "gptq" and s["verdict_W4A16"].startswith("exact")
    quarot = _rec("quarot", [2.5, 2.9, 2.3, 2.8])  # random Hadamard signs: seed-dependent
    s = m.summary(m.Config(), [rtn, quarot], [], ["W4A16"], **KW)
    assert s["best_W4A16"] is None
