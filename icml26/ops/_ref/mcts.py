"""Pure-Python twin of the C++ tree-search kernel (``icml26/csrc/cpu/mcts_cpu.cpp``).

It is the test oracle of the kernel (same random numbers, same arithmetic in the same
order, so recommendations and root statistics match bit for bit) and the search used for
environments whose step runs in Python (gymnasium). The search tree is built on demand,
one node per (parent node, action, observed outcome), so it works for any model with

    n_actions(state) -> int
    step(state, action, j) -> (reward, outcome_key, next_state, done)

where ``j`` counts the earlier samples of that (state, action) in this run (a
counter-based sampler then gives every algorithm the same rewards: common random numbers).

Algorithms (ids shared with the kernel), see icml26/methods/exploration/mcts.py for the
equations and references:
  0 uct, 1 power-uct, 2 ments, 3 varde, 4 mdp-gape, 5 sequential-halving, 6 gumbel
"""

from __future__ import annotations

import math

from icml26.ops._ref.mcts_rng import (  # noqa: F401  (re-exported: the twin's public names)
    M64,
    ALGO_STREAM,
    OUTCOME_C,
    splitmix64,
    key,
    u01,
    u01_open,
    std_normal,
    std_student_t,
    ZIG_C,
    TAIL_C,
    ZIG_LAYERS,
    ZIG_R,
    ZIG_V,
    ZIG_X,
    ZIG_RT,
    std_normal_zig,
    gumbel,
)

ALGOS = ("uct", "power-uct", "ments", "varde", "mdp-gape", "sequential-halving", "gumbel")
UCT, POWER, MENTS, VARDE, GAPE, SH, GUMBEL = range(7)


# ---------------------------------------------------------------- synthetic tree model
class TreeModel:
    """Generative model of a :class:`~icml26.methods.exploration.trees.Tree` (state = node id)."""

    def __init__(self, tree, seed: int):
        self.t = tree
        self.seed = seed
        self.node_off = tree.node_off.tolist()
        self.mean = tree.mean.tolist()
        self.scale = tree.scale.tolist()
        self.out_off = tree.out_off.tolist()
        self.prob = tree.prob.tolist()
        self.child = tree.child.tolist()
        self.kind = tree.noise_kind
        self.df = float(tree.df)
        self.gamma = float(tree.gamma)

    def root(self):
        return 0

    def n_actions(self, s: int) -> int:
        return self.node_off[s + 1] - self.node_off[s]

    def reward(self, sa: int, j: int) -> float:
        if self.kind == 0:
            return self.mean[sa] + self.scale[sa] * std_normal_zig(self.seed, sa, j)
        if self.kind == 1:
            return self.mean[sa] + self.scale[sa] * std_student_t(self.seed, sa, j, self.df)
        return 1.0 if u01(key(self.seed, sa, j, 0)) < self.mean[sa] else 0.0

    def step(self, s: int, a: int, j: int):
        sa = self.node_off[s] + a
        r = self.reward(sa, j)
        u = u01(key(self.seed, sa, j, OUTCOME_C))
        o0, o1 = self.out_off[sa], self.out_off[sa + 1]
        k, acc = o1 - o0 - 1, 0.0
        for i in range(o0, o1):
            acc += self.prob[i]
            if u < acc:
                k = i - o0
                break
        c = self.child[o0 + k]
        return r, k, c, c < 0


# ---------------------------------------------------------------- search tree
class Node:
    __slots__ = (
        "state",
        "A",
        "n",
        "N",
        "rmean",
        "rm2",
        "g",
        "Q",
        "VQ",
        "U",
        "L",
        "keys",
        "kids",
        "cnt",
        "V",
        "VV",
        "UV",
        "LV",
        "T",
        "cut",
    )

    def __init__(self, state, A: int, v0: float):
        self.state, self.A, self.n = state, A, 0
        self.N = [0] * A
        self.rmean = [0.0] * A
        self.rm2 = [0.0] * A
        self.g = [0.0] * A
        self.Q = [0.0] * A
        self.VQ = [0.0] * A
        self.U = [0.0] * A
        self.L = [0.0] * A
        self.keys = [dict() for _ in range(A)]  # outcome key -> slot, slots in first-visit order
        self.kids = [[] for _ in range(A)]  # Node or None (end of episode / horizon)
        self.cnt = [[] for _ in range(A)]
        self.V = v0
        self.VV = 0.0
        self.UV = 0.0
        self.LV = 0.0
        self.T = 0.0
        self.cut = None  # (keep_cuts) {(action, slot): next state} of the slots cut by the horizon


class Params:
    """Hyper-parameters of every algorithm (plain attributes, mirrored by the kernel's ``prm`` vector).

    v_lo: a lower bound of the values (shift of the power mean, origin of Gumbel's sigma(q));
    span: the range of mean returns (scale of UCB bonuses and of the temperature);
    r_span: the spread of one step's reward (MDP-GapE's reward bonus);
    kappa: VarDE's temperature in standard errors of the node's action values (0: fixed tau);
    minmax: 0 = the fixed range above (``tau`` is then in value units); 1 = the range of every
    Q estimate backed up so far in this search (``Search._observe``); 2 = per node, the range of
    the node's current action estimates (``node_range``; MDP-GapE's value bonus, which bounds
    the successors' values, takes the search-wide range of 1). With 1 or 2, v_lo and span are
    ignored and ``tau`` is in units of the range."""

    FIELDS = (
        "c",
        "tau",
        "power",
        "epsilon",
        "var_floor",
        "prior_var",
        "delta",
        "c_visit",
        "c_scale",
        "v_lo",
        "span",
        "r_span",
        "m_considered",
        "horizon",
        "kappa",
        "minmax",
    )

    def __init__(self, **kw):
        kw.setdefault("minmax", 0.0)
        for f in self.FIELDS:
            setattr(self, f, float(kw.pop(f)))
        if kw:
            raise TypeError(f"unknown search parameters: {sorted(kw)}")
        if not self.span > 0:
            raise ValueError(f"span must be > 0, got {self.span}")

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        object.__setattr__(self, "_vec", None)  # vector() is rebuilt after any change

    def vector(self) -> tuple[float, ...]:
        """The fields in ``FIELDS`` order (the kernel's ``prm``); the same tuple object until a
        field changes (the kernel's ctypes route rewrites its copy only then)."""
        v = self._vec
        if v is None:
            v = tuple(getattr(self, f) for f in self.FIELDS)
            object.__setattr__(self, "_vec", v)
        return v


def _argmax(xs, valid=None) -> int:
    best, bi = -math.inf, -1
    for i, x in enumerate(xs):
        if (valid is None or valid[i]) and (bi < 0 or x > best):
            best, bi = x, i
    return bi


class Search:
    """One pure-exploration search at the root of ``model`` with algorithm ``algo`` (0..6)."""

    def __init__(self, model, algo: int, prm: Params, seed: int):
        self.m, self.algo, self.p, self.seed = model, algo, prm, seed
        self.gamma = float(model.gamma)
        self.horizon = int(prm.horizon)
        self.sim = 0
        self.moves = 0  # re-rootings so far (reroot); Gumbel's root noise is drawn per move
        self.keep_cuts = False  # remember the horizon's cut states, so that reroot can expand them
        # the value scale: fixed (prm's span, v_lo, tau) or the min-max of the Q estimates observed
        self.mode = int(prm.minmax)
        self.observing = self.mode == 1 or (self.mode == 2 and algo == GAPE)
        self.span, self.v_lo, self.tau = prm.span, prm.v_lo, prm.tau
        self.lo, self.hi = math.inf, -math.inf
        self.root = self._new(model.root())

    def node_range(self, vals, N) -> tuple[float, float]:
        """(lo, span) of ``vals[a]`` over the tried actions (N[a] > 0), span floored at
        1e-9 max(1, |hi|) (as ``_observe``; mctx's epsilon, relative here)."""
        lo, hi = math.inf, -math.inf
        for a in range(len(vals)):
            if N[a] > 0:
                v = vals[a]
                if v < lo:
                    lo = v
                if v > hi:
                    hi = v
        s = hi - lo
        f = 1e-9 * max(1.0, abs(hi))
        return lo, (s if s >= f else f)

    def _observe(self, q: float) -> None:
        """minmax: widen [lo, hi], the range of every Q estimate this search has backed up (as
        MuZero's MinMaxStats, Schrittwieser et al. 2020 App. B; mctx normalises per node, see
        icml26/methods/exploration/mcts.py), then span = max(hi - lo, 1e-9 max(1, |hi|)),
        v_lo = lo, tau = prm.tau * span."""
        ch = False
        if q < self.lo:
            self.lo = q
            ch = True
        if q > self.hi:
            self.hi = q
            ch = True
        if ch:
            s = self.hi - self.lo
            f = 1e-9 * max(1.0, abs(self.hi))
            self.span = s if s >= f else f
            self.v_lo = self.lo
            self.tau = self.p.tau * self.span

    def _new(self, state) -> Node:
        return Node(state, self.m.n_actions(state), 0.0)

    # ---- selection
    def _select(self, nd: Node, depth: int) -> int:
        A, p = nd.A, self.p
        for a in range(A):  # every action once first
            if nd.N[a] == 0:
                return a
        algo = self.algo
        if algo in (UCT, POWER, SH):
            vals = nd.g if algo != POWER else nd.Q
            sl, cs = (
                math.sqrt(math.log(nd.n)),
                p.c * (self.node_range(vals, nd.N)[1] if self.mode == 2 else self.span),
            )  # UCB1, as the kernel's tables
            best, bi = -math.inf, 0
            for a in range(A):
                s = vals[a] + cs * (sl * (1.0 / math.sqrt(nd.N[a])))
                if s > best:
                    best, bi = s, a
            return bi
        if algo == MENTS:
            m = max(nd.Q)
            tau = nd.T  # the temperature of the node's last backup (= tau unless minmax moved it since)
            e = [math.exp((q - m) / tau) for q in nd.Q]
            z = 0.0
            for x in e:
                z += x
            lam = min(1.0, p.epsilon * A / math.log(nd.n + 1.0))
            u = u01(key(self.seed, ALGO_STREAM, self.sim, depth))
            acc = 0.0
            for a in range(A):
                acc += (1.0 - lam) * e[a] / z + lam / A
                if u < acc:
                    return a
            return A - 1
        if algo == VARDE:
            for a in range(A):  # a second sample before the variance is known (BAI: initial_var = inf)
                if nd.N[a] < 2:
                    return a
            tau = nd.T
            m = max(nd.Q)
            e = [math.exp((q - m) / tau) for q in nd.Q]
            z = 0.0
            for x in e:
                z += x
            best, bi = -math.inf, 0
            for a in range(A):
                w = e[a] / z
                s = w * w * nd.VQ[a] / (nd.N[a] + 1.0)
                if s > best:
                    best, bi = s, a
            return bi
        if algo == GAPE:
            if depth == 0:
                return self._gape_root(nd)[1]
            return _argmax(nd.U)
        # GUMBEL below the root: argmax pi'(a) - N(a) / (1 + n), pi' = softmax(sigma(q))
        mx = max(nd.N)
        lo, span = self.node_range(nd.g, nd.N) if self.mode == 2 else (self.v_lo, self.span)
        K = (p.c_visit + mx) * p.c_scale / span
        sig = [K * (q - lo) for q in nd.g]
        m = max(sig)
        e = [math.exp(s - m) for s in sig]
        z = 0.0
        for x in e:
            z += x
        iz, inn = 1.0 / z, 1.0 / (1.0 + nd.n)
        best, bi = -math.inf, 0
        for a in range(A):
            s = e[a] * iz - nd.N[a] * inn
            if s > best:
                best, bi = s, a
        return bi

    def _gape_root(self, nd: Node) -> tuple[int, int]:
        """MDP-GapE at the root: (b_t = argmin_a B(a), the action to sample)."""
        A = nd.A
        bt, bB = 0, math.inf
        for a in range(A):
            mu = -math.inf
            for b in range(A):
                if b != a and nd.U[b] > mu:
                    mu = nd.U[b]
            B = mu - nd.L[a]
            if B < bB:
                bB, bt = B, a
        ct, cu = bt, -math.inf
        for a in range(A):
            if a != bt and nd.U[a] > cu:
                cu, ct = nd.U[a], a
        pick = ct if (nd.U[ct] - nd.L[ct]) > (nd.U[bt] - nd.L[bt]) else bt
        return bt, pick

    # ---- one simulation
    def simulate(self, root_action: int = -1) -> None:
        path = []
        nd, depth = self.root, 0
        while True:
            a = root_action if (depth == 0 and root_action >= 0) else self._select(nd, depth)
            r, k, st, done = self.m.step(nd.state, a, nd.N[a])
            nd.N[a] += 1
            nd.n += 1
            n = nd.N[a]
            d = r - nd.rmean[a]
            nd.rmean[a] += d / n
            nd.rm2[a] += d * (r - nd.rmean[a])
            slot = nd.keys[a].get(k)
            if slot is None:
                slot = len(nd.kids[a])
                nd.keys[a][k] = slot
                if done:
                    nd.kids[a].append(None)
                elif depth + 1 >= self.horizon:
                    nd.kids[a].append(None)
                    if self.keep_cuts:
                        if nd.cut is None:
                            nd.cut = {}
                        nd.cut[(a, len(nd.kids[a]) - 1)] = st
                else:
                    nd.kids[a].append(self._new(st))
                nd.cnt[a].append(0)
            nd.cnt[a][slot] += 1
            path.append((nd, a, r))
            child = nd.kids[a][slot]
            if child is None:
                break
            nd, depth = child, depth + 1
        self._backup(path)
        self.sim += 1

    def _backup(self, path) -> None:
        p, gamma, algo = self.p, self.gamma, self.algo
        G = 0.0
        for nd, a, r in reversed(path):
            G = r + gamma * G
            n = nd.N[a]
            if algo in (UCT, SH, GUMBEL):
                nd.g[a] += (G - nd.g[a]) / n
                if self.observing:
                    self._observe(nd.g[a])
                continue
            kids, cnt = nd.kids[a], nd.cnt[a]
            ev = 0.0
            for i in range(len(kids)):
                ev += (cnt[i] / n) * (kids[i].V if kids[i] is not None else 0.0)
            nd.Q[a] = nd.rmean[a] + gamma * ev
            if self.observing:
                self._observe(nd.Q[a])
            if algo == VARDE:
                sr = nd.rm2[a] / (n - 1) if n >= 2 else p.prior_var
                if sr < p.var_floor:
                    sr = p.var_floor
                m1 = m2 = vv = 0.0
                for i in range(len(kids)):
                    pb = cnt[i] / n
                    v = kids[i].V if kids[i] is not None else 0.0
                    m1 += pb * v
                    m2 += pb * v * v
                    if kids[i] is not None:
                        vv += pb * pb * kids[i].VV
                vt = m2 - m1 * m1
                if vt < 0.0:
                    vt = 0.0
                nd.VQ[a] = sr / n + gamma * gamma * vv + gamma * gamma * vt / n
            elif algo == GAPE:
                beta = math.log(1.0 / p.delta) + math.log(1.0 + n)
                w = math.sqrt(beta / (2.0 * n))
                eu = el = 0.0
                for i in range(len(kids)):
                    pb = cnt[i] / n
                    eu += pb * (kids[i].UV if kids[i] is not None else 0.0)
                    el += pb * (kids[i].LV if kids[i] is not None else 0.0)
                nd.U[a] = nd.rmean[a] + p.r_span * w + gamma * (eu + self.span * w)
                nd.L[a] = nd.rmean[a] - p.r_span * w + gamma * (el - self.span * w)
            self._node_value(nd)

    def _node_value(self, nd: Node) -> None:
        p, algo, A = self.p, self.algo, nd.A
        if algo == POWER:
            v_lo = self.node_range(nd.Q, nd.N)[0] if self.mode == 2 else self.v_lo
            acc = 0.0
            for a in range(A):
                if nd.N[a] > 0:
                    x = nd.Q[a] - v_lo
                    if x < 0.0:
                        x = 0.0
                    acc += (nd.N[a] / nd.n) * math.pow(x, p.power)
            nd.V = v_lo + math.pow(acc, 1.0 / p.power)
        elif algo in (MENTS, VARDE):
            tau = p.tau * self.node_range(nd.Q, nd.N)[1] if self.mode == 2 else self.tau
            if algo == VARDE and p.kappa > 0.0:  # tau(s) = kappa * standard error of Q(s, .)
                sv, k = 0.0, 0
                for a in range(A):
                    if nd.N[a] > 0:
                        sv += nd.VQ[a]
                        k += 1
                tau = p.kappa * math.sqrt(sv / k)
            nd.T = tau
            m = -math.inf
            for a in range(A):
                if nd.N[a] > 0 and nd.Q[a] > m:
                    m = nd.Q[a]
            z, k = 0.0, 0
            for a in range(A):
                if nd.N[a] > 0:
                    z += math.exp((nd.Q[a] - m) / tau)
                    k += 1
            if algo == MENTS:
                nd.V = m + tau * math.log(z)  # log-sum-exp (soft Bellman)
            else:
                nd.V = m + tau * math.log(z / k)  # mellowmax: between the mean and the max
            if algo == VARDE:
                vv = 0.0
                for a in range(A):
                    if nd.N[a] > 0:
                        w = math.exp((nd.Q[a] - m) / tau) / z
                        vv += w * w * nd.VQ[a]
                nd.VV = vv
        elif algo == GAPE:
            uv = lv = -math.inf
            for a in range(A):
                if nd.N[a] > 0:
                    if nd.U[a] > uv:
                        uv = nd.U[a]
                    if nd.L[a] > lv:
                        lv = nd.L[a]
            nd.UV, nd.LV = uv, lv
            m = -math.inf
            for a in range(A):
                if nd.N[a] > 0 and nd.Q[a] > m:
                    m = nd.Q[a]
            nd.V = m

    # ---- the whole search
    def run(self, budget: int) -> int:
        """Spend ``budget`` simulations; return the recommended root action."""
        if self.algo in (SH, GUMBEL):
            return self._halving(budget)
        for _ in range(budget):
            self.simulate()
        return self.recommend()

    def recommend(self) -> int:
        nd = self.root
        if self.algo == GAPE:
            if min(nd.N) == 0:
                return _argmax(nd.Q, [x > 0 for x in nd.N])
            return self._gape_root(nd)[0]
        vals = nd.g if self.algo in (UCT, SH, GUMBEL) else nd.Q
        return _argmax(vals, [x > 0 for x in nd.N])

    def _score(self, a: int) -> float:
        nd, p = self.root, self.p
        if nd.N[a] == 0:
            return -math.inf
        if self.algo == SH:
            return nd.g[a]
        lo, span = self.node_range(nd.g, nd.N) if self.mode == 2 else (self.v_lo, self.span)
        return self.gmb[a] + (p.c_visit + max(nd.N)) * p.c_scale * (nd.g[a] - lo) / span

    def _halving(self, budget: int) -> int:
        """Sequential halving over the root actions (Karnin et al. 2013; Gumbel MuZero's
        root, Danihelka et al. 2022, with Gumbel-top-m when ``algo`` is gumbel)."""
        A = self.root.A
        if self.algo == GUMBEL:
            self.gmb = [gumbel(self.seed, self.moves * A + a) for a in range(A)]
            m = min(A, max(1, int(self.p.m_considered)))
            order = sorted(range(A), key=lambda a: (-self.gmb[a], a))
            surv = sorted(order[:m])
        else:
            surv = list(range(A))
        phases = max(1, math.ceil(math.log2(len(surv)))) if len(surv) > 1 else 1
        left = budget
        while left > 0:
            k = len(surv)
            per = max(1, budget // (k * phases))
            for _ in range(per):
                for a in surv:
                    if left == 0:
                        break
                    self.simulate(a)
                    left -= 1
            if k > 1:
                surv = sorted(sorted(surv, key=lambda a: (-self._score(a), a))[: (k + 1) // 2])
        best, bi = -math.inf, surv[0]
        for a in surv:
            s = self._score(a)
            if s > best:
                best, bi = s, a
        return bi

    def reroot(self, a: int, outcome) -> bool:
        """Keep the subtree below root action ``a`` and observed outcome key ``outcome`` (the
        child's counts, estimates and the search-wide statistics stay as they are) as the new
        root, and expand the slots the horizon cut at its fringe, now one step nearer the root
        (fresh nodes, value 0 as the cut slot had: the parents' estimates do not change).
        False, with nothing changed, when that child was never expanded (or ends the episode)."""
        nd = self.root
        slot = nd.keys[a].get(outcome) if 0 <= a < nd.A else None
        child = nd.kids[a][slot] if slot is not None else None
        if child is None:
            return False
        self.root = child
        self.moves += 1
        stack = [(child, 0)]
        while stack:
            x, d = stack.pop()
            if x.cut is not None and d + 1 < self.horizon:
                for (b, k), st in x.cut.items():
                    x.kids[b][k] = self._new(st)
                x.cut = None
            for ks in x.kids:
                for k in ks:
                    if k is not None:
                        stack.append((k, d + 1))
        return True

    def root_stats(self) -> dict:
        nd = self.root
        vals = nd.g if self.algo in (UCT, SH, GUMBEL) else nd.Q
        return {"visits": list(nd.N), "q": list(vals)}


def search(model, algo: int, prm: Params, seed: int, budget: int) -> tuple[int, dict]:
    """Run one search; return (recommended root action, {"visits", "q"} at the root)."""
    s = Search(model, algo, prm, seed)
    a = s.run(budget)
    return a, s.root_stats()
