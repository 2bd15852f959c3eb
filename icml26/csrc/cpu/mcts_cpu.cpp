// Pure-exploration tree search on synthetic stochastic trees (icml26 mcts).
//
// The twin of icml26/ops/_ref/mcts.py (the test oracle): same counter-based random numbers,
// the same arithmetic in the same order (build with -ffp-contract=off), so recommendations
// and root statistics match the reference bit for bit. Algorithms, equations and references
// are documented in icml26/methods/exploration/mcts.py.
//
// The search tree is the true tree (CSR arrays, see trees.py): statistics live on its
// (node, action) pairs; the children of (s, a) are summed in the order of their first visit,
// exactly as the reference's on-demand tree does.
//
// op: mcts_tree_search(node_off, mean, scale, out_off, prob, child, noise_kind, df, gamma,
//                      algo, prm, seeds, budgets) -> (rec (S,B) int64, visits (S,B,A) int64, q (S,B,A) f64)
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "bandit_sampler.h"

namespace {

// Random numbers: the counter-based generator shared with the bandit kernels.
using icml26::bandit::ALGO_STREAM;
using icml26::bandit::key;
using icml26::bandit::std_normal;
using icml26::bandit::std_student_t;
using icml26::bandit::u01;
using icml26::bandit::u01_open;
constexpr uint64_t OUTCOME_C = 20;
constexpr double INF = std::numeric_limits<double>::infinity();
enum { UCT = 0, POWER, MENTS, VARDE, GAPE, SH, GUMBEL };

struct Tree {
  const int64_t *node_off, *out_off, *child;
  const double *mean, *scale, *prob;
  int64_t n_nodes, n_sa, n_out;
  int kind;
  double df, gamma;
};

struct Prm {  // same order as Params.FIELDS in the reference
  double c, tau, power, epsilon, var_floor, prior_var, delta, c_visit, c_scale, v_lo, span, r_span, m_considered, horizon;
};

struct Step {
  int64_t node, a;
  double r;
};

struct Search {
  const Tree& t;
  const Prm& p;
  int algo;
  uint64_t seed;
  int64_t sim = 0;
  // node statistics
  std::vector<int64_t> n;
  std::vector<double> V, VV, UV, LV;
  // (s, a) statistics
  std::vector<int64_t> N, nk;
  std::vector<double> rmean, rm2, g, Q, VQ, U, L;
  // outcomes: slot_of[o] = slot of outcome o in first-visit order (-1 unseen); order[off + slot] = o
  std::vector<int64_t> slot_of, order, cnt;
  std::vector<Step> path;
  std::vector<double> gmb, tmp;

  Search(const Tree& t_, const Prm& p_, int algo_, uint64_t seed_) : t(t_), p(p_), algo(algo_), seed(seed_) {
    n.assign(t.n_nodes, 0);
    V.assign(t.n_nodes, 0.0);
    VV.assign(t.n_nodes, 0.0);
    UV.assign(t.n_nodes, 0.0);
    LV.assign(t.n_nodes, 0.0);
    N.assign(t.n_sa, 0);
    nk.assign(t.n_sa, 0);
    rmean.assign(t.n_sa, 0.0);
    rm2.assign(t.n_sa, 0.0);
    g.assign(t.n_sa, 0.0);
    Q.assign(t.n_sa, 0.0);
    VQ.assign(t.n_sa, 0.0);
    U.assign(t.n_sa, 0.0);
    L.assign(t.n_sa, 0.0);
    slot_of.assign(t.n_out, -1);
    order.assign(t.n_out, 0);
    cnt.assign(t.n_out, 0);
  }

  double reward(int64_t sa, int64_t j) const {
    const uint64_t s = static_cast<uint64_t>(sa), i = static_cast<uint64_t>(j);
    if (t.kind == 0) return t.mean[sa] + t.scale[sa] * std_normal(seed, s, i);
    if (t.kind == 1) return t.mean[sa] + t.scale[sa] * std_student_t(seed, s, i, t.df);
    return u01(key(seed, s, i, 0)) < t.mean[sa] ? 1.0 : 0.0;
  }

  // MDP-GapE at the root: (b_t, action to sample)
  void gape_root(int64_t s, int64_t& bt_out, int64_t& pick_out) const {
    const int64_t lo = t.node_off[s], A = t.node_off[s + 1] - lo;
    int64_t bt = 0;
    double bB = INF;
    for (int64_t a = 0; a < A; ++a) {
      double mu = -INF;
      for (int64_t b = 0; b < A; ++b)
        if (b != a && U[lo + b] > mu) mu = U[lo + b];
      const double B = mu - L[lo + a];
      if (B < bB) { bB = B; bt = a; }
    }
    int64_t ct = bt;
    double cu = -INF;
    for (int64_t a = 0; a < A; ++a)
      if (a != bt && U[lo + a] > cu) { cu = U[lo + a]; ct = a; }
    bt_out = bt;
    pick_out = (U[lo + ct] - L[lo + ct]) > (U[lo + bt] - L[lo + bt]) ? ct : bt;
  }

  int64_t select(int64_t s, int64_t depth) {
    const int64_t lo = t.node_off[s], A = t.node_off[s + 1] - lo;
    for (int64_t a = 0; a < A; ++a)
      if (N[lo + a] == 0) return a;
    if (algo == UCT || algo == POWER || algo == SH) {
      const double lg = std::log(static_cast<double>(n[s]));
      const double* vals = (algo != POWER) ? &g[lo] : &Q[lo];
      double best = -INF;
      int64_t bi = 0;
      for (int64_t a = 0; a < A; ++a) {
        const double sc = vals[a] + p.c * p.span * std::sqrt(lg / static_cast<double>(N[lo + a]));
        if (sc > best) { best = sc; bi = a; }
      }
      return bi;
    }
    if (algo == MENTS || algo == VARDE) {
      if (algo == VARDE)
        for (int64_t a = 0; a < A; ++a)
          if (N[lo + a] < 2) return a;
      double m = -INF;
      for (int64_t a = 0; a < A; ++a) m = std::max(m, Q[lo + a]);
      tmp.resize(A);
      double z = 0.0;
      for (int64_t a = 0; a < A; ++a) tmp[a] = std::exp((Q[lo + a] - m) / p.tau);
      for (int64_t a = 0; a < A; ++a) z += tmp[a];
      if (algo == MENTS) {
        const double lam = std::min(1.0, p.epsilon * static_cast<double>(A) / std::log(static_cast<double>(n[s]) + 1.0));
        const double u = u01(key(seed, ALGO_STREAM, static_cast<uint64_t>(sim), static_cast<uint64_t>(depth)));
        double acc = 0.0;
        for (int64_t a = 0; a < A; ++a) {
          acc += (1.0 - lam) * tmp[a] / z + lam / static_cast<double>(A);
          if (u < acc) return a;
        }
        return A - 1;
      }
      double best = -INF;
      int64_t bi = 0;
      for (int64_t a = 0; a < A; ++a) {
        const double w = tmp[a] / z;
        const double sc = w * w * VQ[lo + a] / (static_cast<double>(N[lo + a]) + 1.0);
        if (sc > best) { best = sc; bi = a; }
      }
      return bi;
    }
    if (algo == GAPE) {
      if (depth == 0) {
        int64_t bt, pick;
        gape_root(s, bt, pick);
        return pick;
      }
      double best = -INF;
      int64_t bi = -1;
      for (int64_t a = 0; a < A; ++a)
        if (bi < 0 || U[lo + a] > best) { best = U[lo + a]; bi = a; }
      return bi;
    }
    // GUMBEL below the root
    int64_t mx = 0;
    for (int64_t a = 0; a < A; ++a) mx = std::max(mx, N[lo + a]);
    tmp.resize(A);
    double m = -INF;
    for (int64_t a = 0; a < A; ++a) {
      tmp[a] = (p.c_visit + static_cast<double>(mx)) * p.c_scale * (g[lo + a] - p.v_lo) / p.span;
      m = std::max(m, tmp[a]);
    }
    double z = 0.0;
    for (int64_t a = 0; a < A; ++a) tmp[a] = std::exp(tmp[a] - m);
    for (int64_t a = 0; a < A; ++a) z += tmp[a];
    double best = -INF;
    int64_t bi = 0;
    for (int64_t a = 0; a < A; ++a) {
      const double sc = tmp[a] / z - static_cast<double>(N[lo + a]) / (1.0 + static_cast<double>(n[s]));
      if (sc > best) { best = sc; bi = a; }
    }
    return bi;
  }

  void simulate(int64_t root_action) {
    path.clear();
    int64_t s = 0, depth = 0;
    while (true) {
      const int64_t a = (depth == 0 && root_action >= 0) ? root_action : select(s, depth);
      const int64_t sa = t.node_off[s] + a;
      const int64_t j = N[sa];
      const double r = reward(sa, j);
      const double u = u01(key(seed, static_cast<uint64_t>(sa), static_cast<uint64_t>(j), OUTCOME_C));
      const int64_t o0 = t.out_off[sa], o1 = t.out_off[sa + 1];
      int64_t k = o1 - o0 - 1;
      double acc = 0.0;
      for (int64_t i = o0; i < o1; ++i) {
        acc += t.prob[i];
        if (u < acc) { k = i - o0; break; }
      }
      N[sa] += 1;
      n[s] += 1;
      const double nn = static_cast<double>(N[sa]);
      const double d = r - rmean[sa];
      rmean[sa] += d / nn;
      rm2[sa] += d * (r - rmean[sa]);
      const int64_t o = o0 + k;
      if (slot_of[o] < 0) {
        slot_of[o] = nk[sa];
        order[o0 + nk[sa]] = o;
        nk[sa] += 1;
      }
      cnt[o0 + slot_of[o]] += 1;
      path.push_back({s, a, r});
      const int64_t c = t.child[o];
      if (c < 0 || static_cast<double>(depth + 1) >= p.horizon) break;
      s = c;
      depth += 1;
    }
    backup();
    sim += 1;
  }

  inline double child_val(int64_t o, const std::vector<double>& val) const {
    const int64_t c = t.child[o];
    return c >= 0 ? val[c] : 0.0;
  }

  void backup() {
    const double gamma = t.gamma;
    double G = 0.0;
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const int64_t s = it->node, sa = t.node_off[s] + it->a;
      G = it->r + gamma * G;
      const int64_t nn = N[sa];
      const double dn = static_cast<double>(nn);
      if (algo == UCT || algo == SH || algo == GUMBEL) {
        g[sa] += (G - g[sa]) / dn;
        continue;
      }
      const int64_t o0 = t.out_off[sa];
      double ev = 0.0;
      for (int64_t i = 0; i < nk[sa]; ++i) ev += (static_cast<double>(cnt[o0 + i]) / dn) * child_val(order[o0 + i], V);
      Q[sa] = rmean[sa] + gamma * ev;
      if (algo == VARDE) {
        double sr = nn >= 2 ? rm2[sa] / static_cast<double>(nn - 1) : p.prior_var;
        if (sr < p.var_floor) sr = p.var_floor;
        double m1 = 0.0, m2 = 0.0, vv = 0.0;
        for (int64_t i = 0; i < nk[sa]; ++i) {
          const double pb = static_cast<double>(cnt[o0 + i]) / dn;
          const int64_t o = order[o0 + i];
          const double v = child_val(o, V);
          m1 += pb * v;
          m2 += pb * v * v;
          if (t.child[o] >= 0) vv += pb * pb * VV[t.child[o]];
        }
        double vt = m2 - m1 * m1;
        if (vt < 0.0) vt = 0.0;
        VQ[sa] = sr / dn + gamma * gamma * vv + gamma * gamma * vt / dn;
      } else if (algo == GAPE) {
        const double beta = std::log(1.0 / p.delta) + std::log(1.0 + dn);
        const double w = std::sqrt(beta / (2.0 * dn));
        double eu = 0.0, el = 0.0;
        for (int64_t i = 0; i < nk[sa]; ++i) {
          const double pb = static_cast<double>(cnt[o0 + i]) / dn;
          eu += pb * child_val(order[o0 + i], UV);
          el += pb * child_val(order[o0 + i], LV);
        }
        U[sa] = rmean[sa] + p.r_span * w + gamma * (eu + p.span * w);
        L[sa] = rmean[sa] - p.r_span * w + gamma * (el - p.span * w);
      }
      node_value(s);
    }
  }

  void node_value(int64_t s) {
    const int64_t lo = t.node_off[s], A = t.node_off[s + 1] - lo;
    if (algo == POWER) {
      double acc = 0.0;
      for (int64_t a = 0; a < A; ++a)
        if (N[lo + a] > 0) {
          double x = Q[lo + a] - p.v_lo;
          if (x < 0.0) x = 0.0;
          acc += (static_cast<double>(N[lo + a]) / static_cast<double>(n[s])) * std::pow(x, p.power);
        }
      V[s] = p.v_lo + std::pow(acc, 1.0 / p.power);
    } else if (algo == MENTS || algo == VARDE) {
      double m = -INF;
      for (int64_t a = 0; a < A; ++a)
        if (N[lo + a] > 0 && Q[lo + a] > m) m = Q[lo + a];
      double z = 0.0;
      for (int64_t a = 0; a < A; ++a)
        if (N[lo + a] > 0) z += std::exp((Q[lo + a] - m) / p.tau);
      V[s] = m + p.tau * std::log(z);
      if (algo == VARDE) {
        double vv = 0.0;
        for (int64_t a = 0; a < A; ++a)
          if (N[lo + a] > 0) {
            const double w = std::exp((Q[lo + a] - m) / p.tau) / z;
            vv += w * w * VQ[lo + a];
          }
        VV[s] = vv;
      }
    } else if (algo == GAPE) {
      double uv = -INF, lv = -INF, m = -INF;
      for (int64_t a = 0; a < A; ++a)
        if (N[lo + a] > 0) {
          if (U[lo + a] > uv) uv = U[lo + a];
          if (L[lo + a] > lv) lv = L[lo + a];
        }
      UV[s] = uv;
      LV[s] = lv;
      for (int64_t a = 0; a < A; ++a)
        if (N[lo + a] > 0 && Q[lo + a] > m) m = Q[lo + a];
      V[s] = m;
    }
  }

  const double* root_vals() const { return (algo == UCT || algo == SH || algo == GUMBEL) ? g.data() : Q.data(); }

  int64_t recommend() const {
    const int64_t A = t.node_off[1];
    if (algo == GAPE) {
      bool all = true;
      for (int64_t a = 0; a < A; ++a) all = all && N[a] > 0;
      if (all) {
        int64_t bt, pick;
        gape_root(0, bt, pick);
        return bt;
      }
    }
    const double* v = root_vals();
    double best = -INF;
    int64_t bi = -1;
    for (int64_t a = 0; a < A; ++a)
      if (N[a] > 0 && (bi < 0 || v[a] > best)) { best = v[a]; bi = a; }
    return bi;
  }

  double score(int64_t a) const {
    if (N[a] == 0) return -INF;
    if (algo == SH) return g[a];
    int64_t mx = 0;
    for (int64_t b = 0; b < t.node_off[1]; ++b) mx = std::max(mx, N[b]);
    return gmb[a] + (p.c_visit + static_cast<double>(mx)) * p.c_scale * (g[a] - p.v_lo) / p.span;
  }

  int64_t halving(int64_t budget) {
    const int64_t A = t.node_off[1];
    std::vector<int64_t> surv;
    if (algo == GUMBEL) {
      gmb.resize(A);
      for (int64_t a = 0; a < A; ++a) gmb[a] = -std::log(-std::log(u01_open(key(seed, ALGO_STREAM + 1, static_cast<uint64_t>(a), 0))));
      const int64_t m = std::min<int64_t>(A, std::max<int64_t>(1, static_cast<int64_t>(p.m_considered)));
      std::vector<int64_t> ord(A);
      for (int64_t a = 0; a < A; ++a) ord[a] = a;
      std::stable_sort(ord.begin(), ord.end(), [&](int64_t x, int64_t y) { return gmb[x] > gmb[y]; });
      surv.assign(ord.begin(), ord.begin() + m);
      std::sort(surv.begin(), surv.end());
    } else {
      for (int64_t a = 0; a < A; ++a) surv.push_back(a);
    }
    const int64_t phases = surv.size() > 1 ? std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(surv.size()))))) : 1;
    int64_t left = budget;
    while (left > 0) {
      const int64_t k = static_cast<int64_t>(surv.size());
      const int64_t per = std::max<int64_t>(1, budget / (k * phases));
      for (int64_t r = 0; r < per; ++r)
        for (int64_t a : surv) {
          if (left == 0) break;
          simulate(a);
          left -= 1;
        }
      if (k > 1) {
        std::vector<std::pair<double, int64_t>> sc;
        for (int64_t a : surv) sc.push_back({score(a), a});
        std::stable_sort(sc.begin(), sc.end(), [](const auto& x, const auto& y) {
          return x.first > y.first || (x.first == y.first && x.second < y.second);
        });
        surv.clear();
        for (int64_t i = 0; i < (k + 1) / 2; ++i) surv.push_back(sc[i].second);
        std::sort(surv.begin(), surv.end());
      }
    }
    double best = -INF;
    int64_t bi = surv[0];
    for (int64_t a : surv) {
      const double sc = score(a);
      if (sc > best) { best = sc; bi = a; }
    }
    return bi;
  }

  int64_t run(int64_t budget) {
    if (algo == SH || algo == GUMBEL) return halving(budget);
    for (int64_t i = 0; i < budget; ++i) simulate(-1);
    return recommend();
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> mcts_tree_search(
    const at::Tensor& node_off, const at::Tensor& mean, const at::Tensor& scale, const at::Tensor& out_off,
    const at::Tensor& prob, const at::Tensor& child, int64_t noise_kind, double df, double gamma, int64_t algo,
    const at::Tensor& prm, const at::Tensor& seeds, const at::Tensor& budgets) {
  for (const auto* x : {&node_off, &out_off, &child, &seeds, &budgets})
    TORCH_CHECK(x->dtype() == at::kLong && x->is_contiguous() && x->dim() == 1, "mcts_tree_search: int64 1-D contiguous tensors expected");
  for (const auto* x : {&mean, &scale, &prob, &prm})
    TORCH_CHECK(x->dtype() == at::kDouble && x->is_contiguous() && x->dim() == 1, "mcts_tree_search: float64 1-D contiguous tensors expected");
  TORCH_CHECK(prm.numel() == 14, "mcts_tree_search: prm must have 14 entries");
  TORCH_CHECK(algo >= 0 && algo <= 6, "mcts_tree_search: algo must be in [0, 6]");
  Tree t{node_off.data_ptr<int64_t>(), out_off.data_ptr<int64_t>(), child.data_ptr<int64_t>(),
         mean.data_ptr<double>(), scale.data_ptr<double>(), prob.data_ptr<double>(),
         node_off.numel() - 1, mean.numel(), prob.numel(), static_cast<int>(noise_kind), df, gamma};
  TORCH_CHECK(t.n_nodes >= 1 && out_off.numel() == t.n_sa + 1 && child.numel() == t.n_out, "mcts_tree_search: inconsistent CSR arrays");
  const double* pv = prm.data_ptr<double>();
  Prm p{pv[0], pv[1], pv[2], pv[3], pv[4], pv[5], pv[6], pv[7], pv[8], pv[9], pv[10], pv[11], pv[12], pv[13]};
  const int64_t S = seeds.numel(), B = budgets.numel(), A = t.node_off[1] - t.node_off[0];
  auto rec = at::zeros({S, B}, at::kLong);
  auto vis = at::zeros({S, B, A}, at::kLong);
  auto q = at::zeros({S, B, A}, at::kDouble);
  const int64_t* sd = seeds.data_ptr<int64_t>();
  const int64_t* bd = budgets.data_ptr<int64_t>();
  int64_t* rp = rec.data_ptr<int64_t>();
  int64_t* vp = vis.data_ptr<int64_t>();
  double* qp = q.data_ptr<double>();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t w = 0; w < S * B; ++w) {
    const int64_t i = w / B, j = w % B;
    Search s(t, p, static_cast<int>(algo), static_cast<uint64_t>(sd[i]));
    rp[w] = s.run(bd[j]);
    const double* v = s.root_vals();
    for (int64_t a = 0; a < A; ++a) {
      vp[w * A + a] = s.N[a];
      qp[w * A + a] = v[a];
    }
  }
  return {rec, vis, q};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("mcts_tree_search(Tensor node_off, Tensor mean, Tensor scale, Tensor out_off, Tensor prob, Tensor child, int noise_kind, float df, float gamma, int algo, Tensor prm, Tensor seeds, Tensor budgets) -> (Tensor, Tensor, Tensor)");
  m.impl("mcts_tree_search", c10::DispatchKey::CPU, TORCH_FN(mcts_tree_search));
}
