"""Function-preserving transforms of a LLaMA-architecture model (FPTQuant, arXiv 2506.04985,
and the QuaRot-style rotations it builds on). Each one leaves the floating-point
function unchanged; the tests check logits before/after on a random GQA + RoPE model.

Shapes: D = hidden, d = head_dim, H = query heads, H_kv = KV heads, g = H / H_kv,
I = intermediate. Linear weights are (out, in); "rows" act on outputs, "columns" on inputs.

Merged once (no parameters):
  fuse_norms        RMSNorm gains folded into the following linears (norm weight -> 1).
  untie_embeddings  lm_head gets its own copy of the tied embedding (needed before rotating).
  rotate_residual   residual stream x -> x Q (Q orthogonal: randomized Hadamard, QuaRot);
                    embed E <- E Q; q/k/v/gate/up W <- W Q; o/down W <- Q^T W; lm_head W <- W Q.
  value_hadamard    per-KV-head Hadamard on values (QuaRot), a special case of T_v below.

Trainable and mergeable (``FPTParams``, one per decoder layer; merged by ``merged_weights``):
  T_k / T_q   pre-RoPE scaled 2x2 rotations per KV head and RoPE pair (i, i + d/2):
              k' = s R(theta) k,  q' = s^-1 R(theta) q  (same theta, inverse scale; q heads
              of a GQA group share their KV head's transform). q'.k' = q.k, and 2x2 scaled
              rotations commute with RoPE's rotation, so attention logits are unchanged.
  T_v         one invertible d x d matrix M_h per KV head: v' = v M_h, W_v,h <- M_h^T W_v,h,
              o_proj columns of each query head j in group h: W_o,j <- W_o,j M_h^-T.
  T_u         per-channel MLP scaler u: W_up <- diag(u) W_up, W_down <- W_down diag(u)^-1
              (exact for SwiGLU, where the up branch enters through an elementwise product).
  down Hadamard  online x @ H_I before down_proj, W_down <- W_down H_I (fixed).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from icml26.methods.quantization import hadamard as had
from icml26.methods.quantization.qmodel import layers


def dims(model) -> dict:
    c = model.config
    d = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return {
        "D": c.hidden_size,
        "d": d,
        "H": c.num_attention_heads,
        "Hkv": c.num_key_value_heads,
        "g": c.num_attention_heads // c.num_key_value_heads,
        "I": c.intermediate_size,
    }


# model_type -> why the transforms cannot take it (checked before anything is prepared)
REFUSED = {
    "gemma3": "q/k RMSNorms between the projections and RoPE (the Q/K transform does not commute with them)",
    "gemma3_text": "q/k RMSNorms between the projections and RoPE (the Q/K transform does not commute with them)",
    "qwen3": "q/k RMSNorms between the projections and RoPE (the Q/K transform does not commute with them)",
    "phi3": "fused qkv_proj / gate_up_proj (the transforms act on separate q, k, v, gate and up projections)",
}
SUPPORTED = ("llama", "mistral", "qwen2")  # pre-RMSNorm, SwiGLU, separate q/k/v (qwen2: q/k/v biases)


def unsupported(model) -> str | None:
    """Why the function-preserving transforms cannot take ``model`` (None when they can): the
    LLaMA block (pre-RMSNorm, no q/k norms, SwiGLU, separate projections; biases on q/k/v only)."""
    mt = getattr(model.config, "model_type", "?")
    if mt in REFUSED:
        return f"model_type {mt}: {REFUSED[mt]}"
    if mt not in SUPPORTED:
        return f"model_type {mt}: the transforms support {', '.join(SUPPORTED)} blocks"
    layer = layers(model)[0]
    if hasattr(layer.self_attn, "q_norm"):
        return f"model_type {mt}: {REFUSED['qwen3']}"
    for name in ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        if _mod(layer, name).bias is not None:
            return f"model_type {mt}: a bias on {name} (only q/k/v biases are transformed)"
    return None


def check_llama(model) -> None:
    """ValueError naming the reason when the transforms cannot take ``model``."""
    why = unsupported(model)
    if why:
        raise ValueError(why)


@torch.no_grad()
def untie_embeddings(model) -> None:
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if head.weight.data_ptr() == emb.weight.data_ptr():
        head.weight = nn.Parameter(emb.weight.detach().clone())
    model.config.tie_word_embeddings = False
    if hasattr(model, "_tied_weights_keys"):
        model._tied_weights_keys = {} if isinstance(model._tied_weights_keys, dict) else []


@torch.no_grad()
def fuse_norms(model) -> None:
    """Fold RMSNorm gains into the next linears: W <- W diag(gamma); gamma <- 1.
    Untie first (the final norm folds into lm_head)."""
    for layer in layers(model):
        for norm, lins in (
            (layer.input_layernorm, (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)),
            (layer.post_attention_layernorm, (layer.mlp.gate_proj, layer.mlp.up_proj)),
        ):
            g = norm.weight.detach().clone()
            for lin in lins:
                lin.weight.mul_(g[None, :])
            norm.weight.fill_(1.0)
    head = model.get_output_embeddings()
    if head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr():
        raise ValueError("untie the embeddings before fusing the final norm into lm_head")
    g = model.model.norm.weight.detach().clone()
    head.weight.mul_(g[None, :])
    model.model.norm.weight.fill_(1.0)


@torch.no_grad()
def rotate_residual(model, q: Tensor) -> None:
    """Residual rotation x -> x Q (Q: (D, D) orthogonal). Requires fused norms (gains = 1)."""
    q = q.to(torch.float64)
    emb = model.get_input_embeddings()
    emb.weight.copy_((emb.weight.double() @ q).float())
    for layer in layers(model):
        for lin in (
            layer.self_attn.q_proj,
            layer.self_attn.k_proj,
            layer.self_attn.v_proj,
            layer.mlp.gate_proj,
            layer.mlp.up_proj,
        ):
            lin.weight.copy_((lin.weight.double() @ q).float())
        for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
            lin.weight.copy_((q.T @ lin.weight.double()).float())
    head = model.get_output_embeddings()
    head.weight.copy_((head.weight.double() @ q).float())


@torch.no_grad()
def value_hadamard(model) -> None:
    """QuaRot's head-wise Hadamard on values: T_v with M_h = H_d for every KV head."""
    dm = dims(model)
    hd = had.hadamard(dm["d"], torch.float64)
    for layer in layers(model):
        w = {"v": layer.self_attn.v_proj.weight.double(), "o": layer.self_attn.o_proj.weight.double()}
        m = hd.expand(dm["Hkv"], -1, -1)
        v, o = _merge_v(w["v"], w["o"], m, dm)
        layer.self_attn.v_proj.weight.copy_(v.float())
        layer.self_attn.o_proj.weight.copy_(o.float())
        bv = layer.self_attn.v_proj.bias
        if bv is not None:
            bv.copy_(_merge_bias(bv.double(), m.transpose(-1, -2), dm["d"]).float())


@torch.no_grad()
def down_hadamard(model) -> None:
    """Merge W_down <- W_down H_I; the matching online x @ H_I is QuantLinear.online_hadamard."""
    for layer in layers(model):
        w = layer.mlp.down_proj.weight
        w.copy_(had.apply(w.double()).float())


# ----------------------------------------------------------------------------- trainable FPTs
def _pair_rotation(theta: Tensor, scale: Tensor) -> Tensor:
    """(Hkv, d/2) angles and scales -> (Hkv, d, d) block matrices s R(theta) on pairs (i, i+d/2)."""
    c, s = torch.cos(theta) * scale, torch.sin(theta) * scale
    top = torch.cat([torch.diag_embed(c), -torch.diag_embed(s)], -1)
    bot = torch.cat([torch.diag_embed(s), torch.diag_embed(c)], -1)
    return torch.cat([top, bot], -2)


def _merge_qk(wq: Tensor, wk: Tensor, theta: Tensor, log_s: Tensor, dm: dict) -> tuple[Tensor, Tensor]:
    """W_k,h <- (s R) W_k,h ; W_q,j <- (s^-1 R) W_q,j for the g query heads j of group h."""
    d, hkv, g = dm["d"], dm["Hkv"], dm["g"]
    tk = _pair_rotation(theta, torch.exp(log_s))  # (Hkv, d, d)
    tq = _pair_rotation(theta, torch.exp(-log_s))
    wk2 = torch.matmul(tk, wk.reshape(hkv, d, -1)).reshape(wk.shape)
    wq2 = torch.matmul(tq[:, None], wq.reshape(hkv, g, d, -1)).reshape(wq.shape)  # (Hkv, g, d, D)
    return wq2, wk2


def _merge_v(wv: Tensor, wo: Tensor, m: Tensor, dm: dict) -> tuple[Tensor, Tensor]:
    """v' = v M_h: W_v,h <- M_h^T W_v,h ; W_o[:, head j] <- W_o[:, head j] M_h^-T."""
    d, hkv, g = dm["d"], dm["Hkv"], dm["g"]
    wv2 = torch.matmul(m.transpose(-1, -2), wv.reshape(hkv, d, -1)).reshape(wv.shape)
    minv_t = torch.linalg.inv(m).transpose(-1, -2)  # (Hkv, d, d)
    wo_h = wo.reshape(wo.shape[0], hkv, g, d)  # (D, Hkv, g, d)
    wo2 = torch.einsum("ohjd,hde->ohje", wo_h, minv_t).reshape(wo.shape)
    return wv2, wo2


def _merge_bias(b: Tensor, t: Tensor, d: int) -> Tensor:
    """Per-head bias b (heads*d,) -> t_h b_h with t (heads, d, d)."""
    return torch.matmul(t, b.reshape(-1, d, 1)).reshape(b.shape)


class FPTParams(nn.Module):
    """Trainable FPTQuant transforms of one decoder layer (all start at the identity)."""

    def __init__(self, dm: dict, *, qk: bool, v: bool, mlp: bool, v_init: Tensor | None = None):
        super().__init__()
        d, hkv = dm["d"], dm["Hkv"]
        self.qk, self.v, self.mlp = qk, v, mlp
        self.theta = nn.Parameter(torch.zeros(hkv, d // 2)) if qk else None
        self.log_s = nn.Parameter(torch.zeros(hkv, d // 2)) if qk else None
        init = torch.eye(d).expand(hkv, d, d).clone() if v_init is None else v_init.float().expand(hkv, d, d).clone()
        self.vmat = nn.Parameter(init) if v else None
        self.log_u = nn.Parameter(torch.zeros(dm["I"])) if mlp else None


def merged_weights(base: dict[str, Tensor], p: FPTParams, dm: dict, *, down_hadamard: bool) -> dict[str, Tensor]:
    """Merged weights of one layer from its base weights (keys q, k, v, o, up, down; down is
    before the down Hadamard) and its transform parameters. Differentiable in ``p``."""
    out = dict(base)
    if p.qk:
        out["q"], out["k"] = _merge_qk(base["q"], base["k"], p.theta, p.log_s, dm)
        if "bq" in base:  # biases are output rows: they transform with their weights' rows
            tk = _pair_rotation(p.theta, torch.exp(p.log_s))
            tq = _pair_rotation(p.theta, torch.exp(-p.log_s)).repeat_interleave(dm["g"], 0)
            out["bq"], out["bk"] = _merge_bias(base["bq"], tq, dm["d"]), _merge_bias(base["bk"], tk, dm["d"])
    if p.v:
        out["v"], out["o"] = _merge_v(base["v"], base["o"], p.vmat, dm)
        if "bv" in base:
            out["bv"] = _merge_bias(base["bv"], p.vmat.transpose(-1, -2), dm["d"])
    if p.mlp:
        u = torch.exp(p.log_u)
        out["up"] = base["up"] * u[:, None]
        out["down"] = base["down"] / u[None, :]
    if down_hadamard:
        out["down"] = had.apply(out["down"])
    return out


KEYS = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}
BIASES = {"bq": "self_attn.q_proj", "bk": "self_attn.k_proj", "bv": "self_attn.v_proj"}  # q/k/v biases (Qwen2)


def _name(k: str) -> str:
    return f"{BIASES[k]}.bias" if k in BIASES else f"{KEYS[k]}.weight"


def base_weights(model) -> list[dict[str, Tensor]]:
    out = []
    for layer in layers(model):
        b = {k: _mod(layer, n).weight.detach().clone() for k, n in KEYS.items()}
        b.update(
            {k: _mod(layer, n).bias.detach().clone() for k, n in BIASES.items() if _mod(layer, n).bias is not None}
        )
        out.append(b)
    return out


def _mod(layer, dotted: str):
    mod = layer
    for p in dotted.split("."):
        mod = getattr(mod, p)
    return mod


def _w(layer, key: str) -> Tensor:
    mod = _mod(layer, (BIASES | KEYS)[key])
    return mod.bias if key in BIASES else mod.weight


def param_dict(
    model, bases: list[dict], params: list[FPTParams], dm: dict, *, down_hadamard: bool
) -> dict[str, Tensor]:
    """{full parameter name: merged weight} for ``torch.func.functional_call``."""
    out = {}
    for i, (b, p) in enumerate(zip(bases, params)):
        for k, t in merged_weights(b, p, dm, down_hadamard=down_hadamard).items():
            out[f"model.layers.{i}.{_name(k)}"] = t
    return out


@torch.no_grad()
def merge_into(model, bases: list[dict], params: list[FPTParams], dm: dict, *, down_hadamard: bool) -> None:
    for i, (layer, b, p) in enumerate(zip(layers(model), bases, params)):
        b64 = {k: v.double() for k, v in b.items()}  # merge in float64: exact to float32 rounding
        for k, t in merged_weights(b64, copy.deepcopy(p).double(), dm, down_hadamard=down_hadamard).items():
            _w(layer, k).copy_(t)
