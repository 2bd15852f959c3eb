"""Training of FPTQuant's mergeable transforms.

Local (data-free, as the reference code): minimise over the transform parameters
  L_local = sum_layers sum_{W in q,k,v,o,up,down} (mean |W_merged|^p)^(1/p),  p = 4,
an L_p norm that penalises weight outliers; AdamW, lr 1e-2 (reference: 200 iterations).

End-to-end (student-teacher): the quantized model with the transforms is the student and
is trained to match the FP teacher's next-token distribution on the calibration text,
  L_e2e = KL(p_FP || p_quant) averaged over tokens,
with straight-through gradients through the weight and activation quantizers. Only the
transform parameters move; merged weights are recomputed from them at every step
(``torch.func.functional_call``). Loss form and step counts of the paper are not known
(see docs/quantize.md); these are this implementation's choices.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from icml26.methods.quantization import transforms as T
from icml26.methods.quantization.qmodel import set_train_quant


def lp_loss(ws: dict[str, Tensor], p: float = 4.0) -> Tensor:
    return sum((w.abs().pow(p).mean()) ** (1.0 / p) for w in ws.values())


def train_local(
    bases: list[dict],
    params: list[T.FPTParams],
    dm: dict,
    *,
    steps: int,
    lr: float,
    p: float = 4.0,
    weight_decay: float = 0.01,
    down_hadamard: bool = True,
) -> list[float]:
    """Returns the loss curve (first and last values are reported). AdamW with torch's default
    weight decay 0.01, as AIMET's LocalTransformOptimizer (200 iterations, lr 1e-2, p = 4)."""
    ps = [t for m in params for t in m.parameters()]
    if steps <= 0 or not ps:
        return []
    opt = torch.optim.AdamW(ps, lr=lr, weight_decay=weight_decay)
    curve = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = sum(lp_loss(T.merged_weights(b, m, dm, down_hadamard=down_hadamard), p) for b, m in zip(bases, params))
        loss.backward()
        opt.step()
        curve.append(loss.item())
    return curve


def train_e2e(
    student,
    teacher,
    bases: list[dict],
    params: list[T.FPTParams],
    dm: dict,
    batches: list[Tensor],
    *,
    steps: int,
    lr: float,
    down_hadamard: bool = True,
) -> list[float]:
    """Student-teacher KL training of the transform parameters. ``student`` is the wrapped
    (QuantLinear) model whose weights will be substituted by the merged weights."""
    ps = [t for m in params for t in m.parameters()]
    if steps <= 0 or not ps or not batches:
        return []
    for t in student.parameters():
        t.requires_grad_(False)
    opt = torch.optim.Adam(ps, lr=lr)
    set_train_quant(student, True)
    curve = []
    try:
        for step in range(steps):
            ids = batches[step % len(batches)]
            with torch.no_grad():
                tlogp = F.log_softmax(teacher(input_ids=ids).logits.float(), -1)
            weights = T.param_dict(student, bases, params, dm, down_hadamard=down_hadamard)
            out = torch.func.functional_call(student, weights, args=(), kwargs={"input_ids": ids}, strict=False)
            slogp = F.log_softmax(out.logits.float(), -1)
            loss = F.kl_div(
                slogp.reshape(-1, slogp.shape[-1]),
                tlogp.reshape(-1, tlogp.shape[-1]),
                log_target=True,
                reduction="batchmean",
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            curve.append(loss.item())
    finally:
        set_train_quant(student, False)
    return curve
