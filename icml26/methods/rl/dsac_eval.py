"""Evaluation of the batched ``dsac-aid`` learners: deterministic returns and the Q-bias /
uncertainty diagnostics, with the bias B computed as GOPS's ``gops/trainer/evaluator_dsacaid.py``
(640e85a) does (``official_bias``).
"""

from __future__ import annotations

import math

import numpy as np

from icml26.methods.rl.dsac_config import Config, _env_seed


def official_bias(q: np.ndarray, r: np.ndarray, logp: np.ndarray, alpha: float, gamma: float, horizon: int) -> float:
    """One episode's Q bias as GOPS's evaluator_dsacaid.py (640e85a) computes it.

    q: (L,) the critic's value at every state of the episode (the bound mean Q - lam std Q, or
    the mean Q); r: (L,) scaled rewards; logp: (L,) log pi of the actions taken. The soft
    Monte-Carlo return is bootstrapped from q at the episode's last state, after a termination
    too, and the last reward is dropped: G_{L-2} = r_{L-2} + gamma (q_{L-1} - alpha logp_{L-1}),
    G_t = r_t + gamma (G_{t+1} - alpha logp_{t+1}). Returns mean_{t < N} (q_t - G_t) with
    N = min(horizon, L - 1); NaN for a one-step episode."""
    L = len(r)
    n = min(horizon, L - 1)
    if n < 1:
        return float("nan")
    g = np.zeros(L - 1)
    nxt = q[-1] - alpha * logp[-1]
    for t in range(L - 2, -1, -1):
        g[t] = r[t] + gamma * nxt
        nxt = g[t] - alpha * logp[t]
    return float(np.mean(q[:n] - g[:n]))


def evaluate(learner, cfg: Config, seed: int, device: str) -> dict[str, np.ndarray]:
    """Deterministic evaluation of the S batched policies: ``eval_episodes`` episodes each (no
    injected noise), all stepped together. Returns per-seed arrays (S,): eval_return, q_bias
    (ensemble-mean Q, env units), bias_bound (the bound mean Q - lam std Q, scaled units: beta's
    signal B), both by ``official_bias`` averaged over episodes, and sigma_aleatoric,
    sigma_epistemic (env units) over the first ``bias_horizon`` states."""
    import torch

    from icml26.methods.rl.envs import SeededEnv

    S, E, H = cfg.seeds, cfg.eval_episodes, cfg.bias_horizon
    scale = float(cfg.reward_scale)
    envs = [[SeededEnv(cfg.env, _env_seed(seed, k, e, 1)) for e in range(E)] for k in range(S)]
    try:
        obs = np.stack([np.stack([env.reset()[0] for env in row]) for row in envs])  # (S, E, o)
        active = np.ones((S, E), bool)
        ret = np.zeros((S, E))
        length = np.zeros((S, E), int)
        hist: dict[str, list] = {"obs": [], "act": [], "r": [], "logp": []}  # r, logp: every step; obs, act: < H
        last_obs, last_act = np.zeros_like(obs), None  # each episode's last state and action
        t = 0
        while active.any():
            with torch.no_grad():
                a, logp = learner.policy(torch.as_tensor(obs, device=device), deterministic=True)
            a_np, logp_np = a.cpu().numpy(), logp.cpu().numpy()
            if last_act is None:
                last_act = np.zeros_like(a_np)
            last_obs[active], last_act[active] = obs[active], a_np[active]
            if t < H:
                hist["obs"].append(obs.copy()), hist["act"].append(a_np)
            hist["logp"].append(np.where(active, logp_np, 0.0))
            r_t = np.zeros((S, E))
            for k in range(S):
                for e in range(E):
                    if active[k, e]:
                        o2, r, term, trunc, _ = envs[k][e].step(a_np[k, e])
                        ret[k, e] += r
                        r_t[k, e] = r * scale
                        obs[k, e] = o2
                        length[k, e] += 1
                        if term or trunc:
                            active[k, e] = False
            hist["r"].append(r_t)
            t += 1
    finally:
        for row in envs:
            for env in row:
                env.close()
    T = len(hist["obs"])
    O, A = np.stack(hist["obs"], 1), np.stack(hist["act"], 1)  # (S, T, E, ...), T = min(H, longest)
    R, LP = np.stack(hist["r"], 1), np.stack(hist["logp"], 1)  # (S, longest, E)
    sp = learner.spec

    def critic(o, a):  # (S, n, ...) -> Q (S, M, n), sigma^2 or None
        q, sig = learner.critic_forward(
            learner.critic, torch.as_tensor(o, device=device), torch.as_tensor(a, device=device)
        )
        q = q.cpu().numpy().astype(np.float64)
        return q, None if sig is None else sig.cpu().numpy().astype(np.float64) ** 2

    with torch.no_grad():
        q, sig2 = critic(O.reshape(S, T * E, -1), A.reshape(S, T * E, -1))
        q, sig2 = q.reshape(S, -1, T, E), None if sig2 is None else sig2.reshape(S, -1, T, E)
        ql, _ = critic(last_obs, last_act)  # (S, M, E)
    lam = sp.lam if sp.aid else 0.0

    def bound(x, axis):  # mean - lam std over the ensemble (the evaluator: sqrt(var), unbiased)
        return x.mean(axis) - lam * np.sqrt(x.var(axis, ddof=1))

    qmean, qvar, qb = q.mean(1), q.var(1, ddof=1), bound(q, 1)  # (S, T, E)
    lmean, lb = ql.mean(1), bound(ql, 1)  # (S, E)
    alpha = np.exp(learner.log_alpha.detach().cpu().numpy().astype(np.float64))  # (S,)
    out = {k: np.zeros(S) for k in ("eval_return", "q_bias", "sigma_aleatoric", "sigma_epistemic", "bias_bound")}
    for k in range(S):
        d_mean, d_bound, ale, epi = [], [], [], []
        for e in range(E):
            L = int(length[k, e])
            n = min(H, L)
            r, lp = R[k, :L, e], LP[k, :L, e]
            # the states beyond the first H enter only through the last state's bootstrap
            qm = np.concatenate([qmean[k, :n, e], np.zeros(L - n)]) if L > n else qmean[k, :L, e].copy()
            qbb = np.concatenate([qb[k, :n, e], np.zeros(L - n)]) if L > n else qb[k, :L, e].copy()
            qm[-1], qbb[-1] = lmean[k, e], lb[k, e]
            d_mean.append(official_bias(qm, r, lp, alpha[k], cfg.gamma, H))
            d_bound.append(official_bias(qbb, r, lp, alpha[k], cfg.gamma, H))
            epi.append(qvar[k, :n, e])
            if sig2 is not None:
                ale.append(sig2[k, :, :n, e].mean(0))
        out["eval_return"][k] = ret[k].mean()
        dm, db = np.asarray(d_mean), np.asarray(d_bound)
        out["q_bias"][k] = np.nanmean(dm) / scale if np.isfinite(dm).any() else float("nan")
        out["bias_bound"][k] = np.nanmean(db) if np.isfinite(db).any() else float("nan")
        out["sigma_epistemic"][k] = math.sqrt(np.concatenate(epi).mean()) / scale
        out["sigma_aleatoric"][k] = math.sqrt(np.concatenate(ale).mean()) / scale if ale else float("nan")
    return out
