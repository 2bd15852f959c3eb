"""GPTQ (icml26/methods/quantization/gptq.py): oracles on random matrices (beats RTN on
correlated inputs, equals RTN when H is diagonal, stays on RTN's grid), sequential GPTQ on a
tiny random LLaMA, and `--method gptq` through the CLI."""

import pytest
import torch

from icml26.methods.quantization import gptq as G
from icml26.methods.quantization import quantizers as Q
from tests.test_quantize_cli import _records, _tiny_args, runner, tiny_folder  # noqa: F401  (fixture)


def _correlated(n=2048, k=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(k, k, generator=g) / k**0.5
    X = torch.randn(n, k, generator=g) @ A + 0.3 * torch.randn(n, 1, generator=g)  # strongly correlated features
    W = torch.randn(48, k, generator=g)
    return X, W


def _hessian(X):
    acc = G.HessianAccumulator(X.shape[1])
    for part in X.split(500):
        acc.add(part)
    return acc.H


def test_hessian_accumulator_is_2xxt_over_n():
    X, _ = _correlated(n=1100, k=16)
    H = _hessian(X)
    Xd = X.double()
    assert torch.allclose(H, 2 * Xd.T @ Xd / X.shape[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "sym,group,act_order", [(True, 0, False), (False, 0, False), (True, 32, False), (True, 0, True), (False, 32, True)]
)
def test_gptq_output_error_below_rtn(sym, group, act_order):
    X, W = _correlated()
    H = _hessian(X)
    Wq, codes, s, z = G.gptq_quantize(W, H, 4, sym=sym, group_size=group, act_order=act_order, block_size=32)
    Wr = Q.fake_quant_weight(W, 4, sym=sym, group_size=group)
    e_g = torch.linalg.norm(X @ W.T - X @ Wq.T)
    e_r = torch.linalg.norm(X @ W.T - X @ Wr.T)
    assert e_g < 0.8 * e_r, (e_g, e_r)
    # (3) on the grid: the same (scale, zero) as RTN, Wq is exactly the dequantized codes
    s_r, z_r = Q.weight_qparams(W, 4, sym=sym, group_size=group)
    assert torch.equal(s, s_r) and torch.equal(z, z_r)
    assert codes.dtype == torch.uint8 and int(codes.max()) <= 15
    assert torch.equal(Wq, Q.dequantize_weight(codes, s, z))


@pytest.mark.parametrize("sym,group,act_order", [(True, 0, False), (False, 16, False), (True, 16, True)])
def test_diagonal_hessian_equals_rtn(sym, group, act_order):
    """With H diagonal the upper Cholesky factor of H^-1 is diagonal: no error is propagated
    to later columns and GPTQ rounds exactly like RTN (also with act-order)."""
    g = torch.Generator().manual_seed(3)
    W = torch.randn(24, 64, generator=g)
    for H in (torch.eye(64), torch.diag(torch.rand(64, generator=g) + 0.1)):
        Wq, _, _, _ = G.gptq_quantize(W, H, 3, sym=sym, group_size=group, act_order=act_order, block_size=16)
        assert torch.equal(Wq, Q.fake_quant_weight(W, 3, sym=sym, group_size=group))


def test_dead_columns_are_zero():
    X, W = _correlated(k=32)
    X[:, 5] = 0
    Wq, _, _, _ = G.gptq_quantize(W, _hessian(X), 4)
    assert torch.all(Wq[:, 5] == 0)


def test_sequential_gptq_tiny_llama_beats_rtn():
    from transformers import LlamaConfig, LlamaForCausalLM

    from icml26.methods.quantization import qmodel as QM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=64,
    )
    fp = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(1)
    calib = [torch.randint(0, 64, (1, 32), generator=g) for _ in range(8)]
    test = torch.cat(calib)
    spec = QM.QSpec(wbits=3, abits=16, kvbits=16, head_bits=16, w_clip_search=False)
    import copy

    with torch.no_grad():
        ref = fp(input_ids=test).logits
        rtn = copy.deepcopy(fp)
        QM.quantize_model(rtn, spec)
        gq = copy.deepcopy(fp)
        QM.quantize_model(gq, spec)
        ws = G.quantize_model_gptq(gq, calib, bits=3, sym=True)
        assert len(ws) == 2 * len(QM.LINEARS)
        for _, m in QM.quant_linears(gq):  # the installed weights are used by the forward and lie on the grid
            assert m._weight() is m.fixed_weight[1]
            s, z = Q.weight_qparams(m.weight, 3, sym=True)
            assert torch.equal(Q.fake_quant(m._weight(), s, z, 3), m._weight())
        e_r = (rtn(input_ids=test).logits - ref).pow(2).mean()
        e_g = (gq(input_ids=test).logits - ref).pow(2).mean()
    assert e_g < e_r, (e_g, e_r)


def test_cli_method_gptq(tiny_folder):  # noqa: F811
    r = runner.invoke(
        app_(),
        _tiny_args(tiny_folder, "--method", "fp,rtn,gptq", "--setting", "W4A16", "--setting", "W4A8", "-q", fpt=False),
    )
    assert r.exit_code == 0, r.output
    res = {(x["method"], x["setting"]): x for x in _records(r.stdout) if x["kind"] == "result"}
    assert set(res) == {("fp", "FP32"), ("rtn", "W4A16"), ("rtn", "W4A8"), ("gptq", "W4A16"), ("gptq", "W4A8")}
    for s in ("W4A16", "W4A8"):
        x = res[("gptq", s)]
        assert x["wbits"] == 4 and x["perplexity"] > 1.0 and x["size_bytes"] == res[("rtn", s)]["size_bytes"]
        assert x["perplexity"] != res[("rtn", s)]["perplexity"]  # different weights than RTN
    help_ = runner.invoke(app_(), ["quantize", "--help"])
    assert "gptq" in help_.output


def app_():
    from icml26.cli import app

    return app
