// State-indexed tree search over a transition table (gymnasium's env.unwrapped.P compiled to
// flat arrays, see icml26/ops/mcts_table.py): the C++ twin of the Python search
// (icml26/ops/_ref/mcts.py::Search) driving gym_models.TableModel.
//
// The search tree is built on demand exactly as the Python search builds it: one node per
// (parent node, action, observed next state), created at the first visit of that outcome, each
// node holding its env state and a uid (the model's step counter when the node was created).
// The j-th sample of (node, action) draws its outcome from key(seed, uid * A + a, j, OUTCOME_C),
// the same counter-based stream as TableModel.step, and picks the first table entry whose
// running probability sum exceeds the draw. Selection rules, backups, value normalisation
// (Params.minmax) and the horizon cut follow the reference line by line, with the same
// arithmetic in the same order (built with -ffp-contract=off; glibc's exp/log/pow/sqrt as
// Python's math module), so recommendations and root statistics match it bit for bit.
// Re-rooting (reroot) keeps the chosen child's subtree and expands the horizon's cut slots,
// as Search.reroot does. Reward noise (MDP files, icml26/methods/exploration/mdp_env.py): with
// noise[s A + a] > 0 the reward of an entry of (s, a) is rew + noise[s A + a] z, z the same
// ziggurat N(0, 1) draw (key(seed, uid * A + a, j, ZIG_C ..)) as TableModel.step (mcts_search.h).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "bandit_sampler.h"
#include "mcts_search.h"

namespace icml26 {
namespace mcts_table {

using icml26::bandit::ALGO_STREAM;
using icml26::bandit::key;
using icml26::bandit::u01;
using icml26::bandit::u01_open;
constexpr uint64_t OUTCOME_C = 20;
constexpr double INF = std::numeric_limits<double>::infinity();
enum { UCT = 0, POWER, MENTS, VARDE, GAPE, SH, GUMBEL };

// The table: S states, A actions; the entries of (s, a) are off[s A + a] .. off[s A + a + 1] - 1
// in the table's order, each (prob, next, rew, done); nout[s A + a] = distinct next states;
// noise (S A) the std of the Gaussian reward noise of (s, a), or nullptr (deterministic rewards).
struct Table {
  int64_t S, A;
  const int64_t *off, *next, *done, *nout;
  const double *prob, *rew;
  double gamma;
  const double* noise;
};

struct Prm {  // same order as Params.FIELDS in the reference
  double c, tau, power, epsilon, var_floor, prior_var, delta, c_visit, c_scale, v_lo, span, r_span, m_considered, horizon, kappa, minmax;
};
constexpr int N_PRM = 16;

// Per node (env state, uid, visit count, backed-up values), per (node, action) and per outcome
// slot, each in one array of structs: a new node is three appends.
struct NodeH {
  uint64_t uid;
  int64_t st, n;
  double V, VV, UV, LV, T;
};
struct Act {
  int64_t N, ns, soff;  // visits; slots used, first slot
  double rmean, rm2, g, Q, VQ, U, L;
};
struct Slot {
  int64_t key, kid, cnt;
};
struct Store {
  std::vector<NodeH> nodes;
  std::vector<Act> acts;   // node * A + a
  std::vector<Slot> slots;
  std::vector<int64_t> scut;   // keep_cuts: the cut slot's env state ...
  std::vector<uint64_t> scuid; // ... and its uid
  std::vector<double> slg, isq;  // count tables (Search::grow_tables), kept by clear()
  size_t bytes() const {
    return nodes.capacity() * sizeof(NodeH) + acts.capacity() * sizeof(Act) + slots.capacity() * sizeof(Slot) +
           scut.capacity() * sizeof(int64_t) + scuid.capacity() * sizeof(uint64_t);
  }
  // clear(), and give the memory back when it is larger than `keep` bytes
  void trim(size_t keep) {
    if (bytes() > keep) {
      std::vector<NodeH>().swap(nodes);
      std::vector<Act>().swap(acts);
      std::vector<Slot>().swap(slots);
      std::vector<int64_t>().swap(scut);
      std::vector<uint64_t>().swap(scuid);
    }
    clear();
  }
  void clear() {
    nodes.clear();
    acts.clear();
    slots.clear();
    scut.clear();
    scuid.clear();
  }
};

constexpr int64_t KID_NONE = -1;  // end of episode, or cut by the horizon (keep_cuts off)
constexpr int64_t KID_CUT = -2;   // cut by the horizon, its state kept for reroot

struct Search {
  const Table& t;
  Prm p;
  int algo;
  uint64_t seed;
  int64_t A, hz;
  int mode;
  bool observing, keep_cuts;
  double span, v_lo, tau, lo_t = INF, hi_t = -INF;
  int64_t sim = 0, moves = 0;
  uint64_t uid = 0;  // TableModel.uid: steps taken so far
  int64_t root = 0;
  Store& st;  // nodes, (node, action) statistics and slots (kept between searches by the caller)
  struct PStep {
    int64_t nd, a;
    double r;
  };
  std::vector<PStep> path;
  std::vector<double> gmb, e, sig;
  std::vector<int64_t> stack_n, stack_d;
  // compact()'s target, swapped with st: the storage of the previous tree is kept (capacity and
  // faulted pages) for the next compaction and the next moves' growth, instead of fresh arrays
  // per re-rooting (which cost more than the moves' searches on rainy Taxi)
  Store spare;
  std::vector<int64_t> cmap, corder;

  Search(const Table& t_, const Prm& p_, int algo_, uint64_t seed_, int64_t s0, bool keep, Store& store)
      : t(t_), p(p_), algo(algo_), seed(seed_), A(t_.A), hz(static_cast<int64_t>(p_.horizon)), mode(static_cast<int>(p_.minmax)),
        observing(mode == 1 || (mode == 2 && algo_ == GAPE)), keep_cuts(keep), span(p_.span), v_lo(p_.v_lo), tau(p_.tau), st(store) {
    st.clear();
    e.resize(A);
    sig.resize(A);
    root = new_node(0, s0);
  }

  int64_t new_node(uint64_t u, int64_t s) {
    const int64_t id = static_cast<int64_t>(st.nodes.size());
    st.nodes.push_back(NodeH{u, s, 0, 0.0, 0.0, 0.0, 0.0, 0.0});
    int64_t cap = static_cast<int64_t>(st.slots.size());
    const int64_t b0 = static_cast<int64_t>(st.acts.size());
    st.acts.resize(b0 + A, Act{0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
    for (int64_t a = 0; a < A; ++a) {
      st.acts[b0 + a].soff = cap;
      cap += t.nout[s * A + a];
    }
    st.slots.resize(cap, Slot{0, KID_NONE, 0});
    if (keep_cuts) {
      st.scut.resize(cap, 0);
      st.scuid.resize(cap, 0);
    }
    return id;
  }

  // (lo, span) of vals[a] over the tried actions (Nn[a] > 0), span floored at 1e-9 max(1, |hi|)
  // (lo, span) of x[a].*f over the tried actions (N > 0), span floored at 1e-9 max(1, |hi|)
  static inline void node_range(const Act* x, double Act::*f, int64_t A, double& lo_out, double& span_out) {
    double lo = INF, hi = -INF;
    for (int64_t a = 0; a < A; ++a)
      if (x[a].N > 0) {
        const double v = x[a].*f;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    const double s = hi - lo, fl = 1e-9 * std::max(1.0, std::fabs(hi));
    lo_out = lo;
    span_out = s >= fl ? s : fl;
  }

  inline void observe(double q) {
    bool ch = false;
    if (q < lo_t) { lo_t = q; ch = true; }
    if (q > hi_t) { hi_t = q; ch = true; }
    if (ch) {
      const double s = hi_t - lo_t, f = 1e-9 * std::max(1.0, std::fabs(hi_t));
      span = s >= f ? s : f;
      v_lo = lo_t;
      tau = p.tau * span;
    }
  }

  // sqrt(log k) and 1 / sqrt(k) for counts k < n (the reference's math.sqrt / math.log values)
  void grow_tables(int64_t n) {
    std::vector<double>& slg = st.slg;
    std::vector<double>& isq = st.isq;
    for (int64_t k = static_cast<int64_t>(slg.size()); k < n; ++k) {
      const double x = static_cast<double>(k);
      slg.push_back(k >= 1 ? std::sqrt(std::log(x)) : 0.0);
      isq.push_back(k >= 1 ? 1.0 / std::sqrt(x) : 0.0);
    }
  }

  void gape_root(int64_t nd, int64_t& bt_out, int64_t& pick_out) const {
    const Act* x = &st.acts[nd * A];
    int64_t bt = 0;
    double bB = INF;
    for (int64_t a = 0; a < A; ++a) {
      double mu = -INF;
      for (int64_t b = 0; b < A; ++b)
        if (b != a && x[b].U > mu) mu = x[b].U;
      const double B = mu - x[a].L;
      if (B < bB) { bB = B; bt = a; }
    }
    int64_t ct = bt;
    double cu = -INF;
    for (int64_t a = 0; a < A; ++a)
      if (a != bt && x[a].U > cu) { cu = x[a].U; ct = a; }
    bt_out = bt;
    pick_out = (x[ct].U - x[ct].L) > (x[bt].U - x[bt].L) ? ct : bt;
  }

  int64_t select(int64_t nd, int64_t depth) {
    const Act* x = &st.acts[nd * A];
    for (int64_t a = 0; a < A; ++a)
      if (x[a].N == 0) return a;
    const int64_t n = st.nodes[nd].n;
    if (algo == UCT || algo == POWER || algo == SH) {
      double Act::*f = algo != POWER ? &Act::g : &Act::Q;
      double cs;
      if (mode == 2) {
        double lo, sp;
        node_range(x, f, A, lo, sp);
        cs = p.c * sp;
      } else {
        cs = p.c * span;
      }
      const double sl = st.slg[n];
      const double* isq = st.isq.data();
      double best = -INF;
      int64_t bi = 0;
      for (int64_t a = 0; a < A; ++a) {
        const double s = x[a].*f + cs * (sl * isq[x[a].N]);
        if (s > best) { best = s; bi = a; }
      }
      return bi;
    }
    if (algo == MENTS || algo == VARDE) {
      if (algo == VARDE)
        for (int64_t a = 0; a < A; ++a)
          if (x[a].N < 2) return a;
      const double tn = st.nodes[nd].T;
      double m = x[0].Q;  // max(nd.Q): every action has been tried
      for (int64_t a = 1; a < A; ++a)
        if (x[a].Q > m) m = x[a].Q;
      double z = 0.0;
      for (int64_t a = 0; a < A; ++a) {
        e[a] = std::exp((x[a].Q - m) / tn);
        z += e[a];
      }
      if (algo == MENTS) {
        const double lam = std::min(1.0, p.epsilon * static_cast<double>(A) / std::log(static_cast<double>(n) + 1.0));
        const double u = u01(key(seed, ALGO_STREAM, static_cast<uint64_t>(sim), static_cast<uint64_t>(depth)));
        double acc = 0.0;
        for (int64_t a = 0; a < A; ++a) {
          acc += (1.0 - lam) * e[a] / z + lam / static_cast<double>(A);
          if (u < acc) return a;
        }
        return A - 1;
      }
      double best = -INF;
      int64_t bi = 0;
      for (int64_t a = 0; a < A; ++a) {
        const double w = e[a] / z;
        const double s = w * w * x[a].VQ / (static_cast<double>(x[a].N) + 1.0);
        if (s > best) { best = s; bi = a; }
      }
      return bi;
    }
    if (algo == GAPE) {
      if (depth == 0) {
        int64_t bt, pick;
        gape_root(nd, bt, pick);
        return pick;
      }
      double best = -INF;
      int64_t bi = -1;
      for (int64_t a = 0; a < A; ++a)
        if (bi < 0 || x[a].U > best) { best = x[a].U; bi = a; }
      return bi;
    }
    // GUMBEL below the root: argmax pi'(a) - N(a) / (1 + n), pi' = softmax(sigma(q))
    int64_t mx = x[0].N;
    for (int64_t a = 1; a < A; ++a) mx = std::max(mx, x[a].N);
    double lo, sp;
    if (mode == 2) {
      node_range(x, &Act::g, A, lo, sp);
    } else {
      lo = v_lo;
      sp = span;
    }
    const double K = (p.c_visit + static_cast<double>(mx)) * p.c_scale / sp;
    double m = -INF;
    for (int64_t a = 0; a < A; ++a) {
      sig[a] = K * (x[a].g - lo);
      if (a == 0 || sig[a] > m) m = sig[a];
    }
    double z = 0.0;
    for (int64_t a = 0; a < A; ++a) {
      e[a] = std::exp(sig[a] - m);
      z += e[a];
    }
    const double iz = 1.0 / z, inn = 1.0 / (1.0 + static_cast<double>(n));
    double best = -INF;
    int64_t bi = 0;
    for (int64_t a = 0; a < A; ++a) {
      const double s = e[a] * iz - static_cast<double>(x[a].N) * inn;
      if (s > best) { best = s; bi = a; }
    }
    return bi;
  }

  // TableModel.step: (reward, next state, done) of the j-th sample of (node, a)
  inline void step(int64_t nd, int64_t a, int64_t j, double& r, int64_t& s2, bool& dn) {
    const NodeH& h = st.nodes[nd];
    const uint64_t stream = h.uid * static_cast<uint64_t>(A) + static_cast<uint64_t>(a);
    const double u = u01(key(seed, stream, static_cast<uint64_t>(j), OUTCOME_C));
    const int64_t sa = h.st * A + a, o0 = t.off[sa], o1 = t.off[sa + 1];
    int64_t pick = o1 - 1;
    double acc = 0.0;
    for (int64_t i = o0; i < o1; ++i) {
      acc += t.prob[i];
      if (u < acc) { pick = i; break; }
    }
    r = t.rew[pick];
    if (t.noise != nullptr && t.noise[sa] != 0.0) {  // TableModel.step: r + sd * std_normal_zig(seed, stream, j)
      const auto& zt = icml26::mcts::zig();
      const uint64_t h = key(seed, stream, static_cast<uint64_t>(j), icml26::mcts::ZIG_C);
      const int l = static_cast<int>(h & (icml26::mcts::ZIG_LAYERS - 1));
      const double v = 2.0 * u01(h) - 1.0;
      const double z = std::fabs(v) < zt.Rt[l] ? v * zt.X[l] : icml26::mcts::zig_slow(zt, icml26::bandit::splitmix64(seed), stream, static_cast<uint64_t>(j), h);
      r = r + t.noise[sa] * z;
    }
    s2 = t.next[pick];
    dn = t.done[pick] != 0;
    uid += 1;
  }

  void simulate(int64_t root_action) {
    path.clear();
    int64_t nd = root, depth = 0;
    while (true) {
      const int64_t a = (depth == 0 && root_action >= 0) ? root_action : select(nd, depth);
      const int64_t sa = nd * A + a;
      double r;
      int64_t s2;
      bool dn;
      step(nd, a, st.acts[sa].N, r, s2, dn);
      Act& x = st.acts[sa];
      x.N += 1;
      st.nodes[nd].n += 1;
      const int64_t n = x.N;
      const double d = r - x.rmean;
      x.rmean += d / static_cast<double>(n);
      x.rm2 += d * (r - x.rmean);
      const int64_t o = x.soff;
      int64_t slot = -1;
      for (int64_t i = 0; i < x.ns; ++i)
        if (st.slots[o + i].key == s2) { slot = i; break; }
      if (slot < 0) {
        slot = x.ns;
        x.ns += 1;
        int64_t kid = KID_NONE;
        if (dn) {
        } else if (depth + 1 >= hz) {
          if (keep_cuts) {
            kid = KID_CUT;
            st.scut[o + slot] = s2;
            st.scuid[o + slot] = uid;
          }
        } else {
          kid = new_node(uid, s2);  // (reallocates the arrays: x is not used below)
        }
        st.slots[o + slot] = Slot{s2, kid, 0};
      }
      Slot& sl = st.slots[o + slot];
      sl.cnt += 1;
      path.push_back({nd, a, r});
      if (sl.kid < 0) break;
      nd = sl.kid;
      depth += 1;
    }
    backup();
    sim += 1;
  }

  void backup() {
    const double gamma = t.gamma;
    double G = 0.0;
    const NodeH* nodes = st.nodes.data();
    const Slot* slots = st.slots.data();
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const int64_t nd = it->nd;
      Act& x = st.acts[nd * A + it->a];
      G = it->r + gamma * G;
      const int64_t n = x.N;
      const double dn = static_cast<double>(n);
      if (algo == UCT || algo == SH || algo == GUMBEL) {
        x.g += (G - x.g) / dn;
        if (observing) observe(x.g);
        continue;
      }
      const Slot* sl = slots + x.soff;
      const int64_t k = x.ns;
      double ev = 0.0;
      for (int64_t i = 0; i < k; ++i) ev += (static_cast<double>(sl[i].cnt) / dn) * (sl[i].kid >= 0 ? nodes[sl[i].kid].V : 0.0);
      x.Q = x.rmean + gamma * ev;
      if (observing) observe(x.Q);
      if (algo == VARDE) {
        double sr = n >= 2 ? x.rm2 / static_cast<double>(n - 1) : p.prior_var;
        if (sr < p.var_floor) sr = p.var_floor;
        double m1 = 0.0, m2 = 0.0, vv = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          const double pb = static_cast<double>(sl[i].cnt) / dn;
          const int64_t kid = sl[i].kid;
          const double v = kid >= 0 ? nodes[kid].V : 0.0;
          m1 += pb * v;
          m2 += pb * v * v;
          if (kid >= 0) vv += pb * pb * nodes[kid].VV;
        }
        double vt = m2 - m1 * m1;
        if (vt < 0.0) vt = 0.0;
        x.VQ = sr / dn + gamma * gamma * vv + gamma * gamma * vt / dn;
      } else if (algo == GAPE) {
        const double beta = std::log(1.0 / p.delta) + std::log(1.0 + dn);
        const double w = std::sqrt(beta / (2.0 * dn));
        double eu = 0.0, el = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          const double pb = static_cast<double>(sl[i].cnt) / dn;
          eu += pb * (sl[i].kid >= 0 ? nodes[sl[i].kid].UV : 0.0);
          el += pb * (sl[i].kid >= 0 ? nodes[sl[i].kid].LV : 0.0);
        }
        x.U = x.rmean + p.r_span * w + gamma * (eu + span * w);
        x.L = x.rmean - p.r_span * w + gamma * (el - span * w);
      }
      node_value(nd);
    }
  }

  void node_value(int64_t nd) {
    const Act* x = &st.acts[nd * A];
    NodeH& h = st.nodes[nd];
    if (algo == POWER) {
      double vl = v_lo;
      if (mode == 2) {
        double sp;
        node_range(x, &Act::Q, A, vl, sp);
      }
      double acc = 0.0;
      for (int64_t a = 0; a < A; ++a)
        if (x[a].N > 0) {
          double y = x[a].Q - vl;
          if (y < 0.0) y = 0.0;
          acc += (static_cast<double>(x[a].N) / static_cast<double>(h.n)) * std::pow(y, p.power);
        }
      h.V = vl + std::pow(acc, 1.0 / p.power);
    } else if (algo == MENTS || algo == VARDE) {
      double tn;
      if (mode == 2) {
        double lo, sp;
        node_range(x, &Act::Q, A, lo, sp);
        tn = p.tau * sp;
      } else {
        tn = tau;
      }
      if (algo == VARDE && p.kappa > 0.0) {
        double sv = 0.0;
        int64_t k = 0;
        for (int64_t a = 0; a < A; ++a)
          if (x[a].N > 0) {
            sv += x[a].VQ;
            k += 1;
          }
        tn = p.kappa * std::sqrt(sv / static_cast<double>(k));
      }
      h.T = tn;
      double m = -INF;
      for (int64_t a = 0; a < A; ++a)
        if (x[a].N > 0 && x[a].Q > m) m = x[a].Q;
      double z = 0.0;
      int64_t k = 0;
      for (int64_t a = 0; a < A; ++a)
        if (x[a].N > 0) {
          e[a] = std::exp((x[a].Q - m) / tn);
          z += e[a];
          k += 1;
        }
      if (algo == MENTS) {
        h.V = m + tn * std::log(z);
      } else {
        h.V = m + tn * std::log(z / static_cast<double>(k));
        double vv = 0.0;
        for (int64_t a = 0; a < A; ++a)
          if (x[a].N > 0) {
            const double w = e[a] / z;  // (the same exp as the reference recomputes)
            vv += w * w * x[a].VQ;
          }
        h.VV = vv;
      }
    } else if (algo == GAPE) {
      double uv = -INF, lv = -INF, m = -INF;
      for (int64_t a = 0; a < A; ++a)
        if (x[a].N > 0) {
          if (x[a].U > uv) uv = x[a].U;
          if (x[a].L > lv) lv = x[a].L;
        }
      h.UV = uv;
      h.LV = lv;
      for (int64_t a = 0; a < A; ++a)
        if (x[a].N > 0 && x[a].Q > m) m = x[a].Q;
      h.V = m;
    }
  }

  bool mean_return() const { return algo == UCT || algo == SH || algo == GUMBEL; }

  // the root's visit counts and statistics (g: mean returns, else Q)
  void root_stats(int64_t* vis, double* q) const {
    const Act* x = &st.acts[root * A];
    for (int64_t a = 0; a < A; ++a) {
      vis[a] = x[a].N;
      q[a] = mean_return() ? x[a].g : x[a].Q;
    }
  }

  int64_t recommend() const {
    const Act* x = &st.acts[root * A];
    if (algo == GAPE) {
      bool all = true;
      for (int64_t a = 0; a < A; ++a) all = all && x[a].N > 0;
      if (all) {
        int64_t bt, pick;
        gape_root(root, bt, pick);
        return bt;
      }
    }
    double Act::*f = mean_return() ? &Act::g : &Act::Q;
    double best = -INF;
    int64_t bi = -1;
    for (int64_t a = 0; a < A; ++a)
      if (x[a].N > 0 && (bi < 0 || x[a].*f > best)) { best = x[a].*f; bi = a; }
    return bi;
  }

  double score(int64_t a) const {
    const Act* x = &st.acts[root * A];
    if (x[a].N == 0) return -INF;
    if (algo == SH) return x[a].g;
    int64_t mx = x[0].N;
    for (int64_t b = 1; b < A; ++b) mx = std::max(mx, x[b].N);
    double lo = v_lo, sp = span;
    if (mode == 2) node_range(x, &Act::g, A, lo, sp);
    return gmb[a] + (p.c_visit + static_cast<double>(mx)) * p.c_scale * (x[a].g - lo) / sp;
  }

  int64_t halving(int64_t budget) {
    std::vector<int64_t> surv;
    if (algo == GUMBEL) {
      gmb.resize(A);
      for (int64_t a = 0; a < A; ++a)
        gmb[a] = -std::log(-std::log(u01_open(key(seed, ALGO_STREAM + 1, static_cast<uint64_t>(moves * A + a), 0))));
      const int64_t m = std::min<int64_t>(A, std::max<int64_t>(1, static_cast<int64_t>(p.m_considered)));
      std::vector<int64_t> ord(A);
      for (int64_t a = 0; a < A; ++a) ord[a] = a;
      std::stable_sort(ord.begin(), ord.end(), [&](int64_t x, int64_t y) { return -gmb[x] < -gmb[y]; });
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
        for (int64_t a : surv) sc.push_back({-score(a), a});
        std::stable_sort(sc.begin(), sc.end(), [](const auto& x, const auto& y) { return x.first < y.first || (x.first == y.first && x.second < y.second); });
        surv.clear();
        for (int64_t i = 0; i < (k + 1) / 2; ++i) surv.push_back(sc[i].second);
        std::sort(surv.begin(), surv.end());
      }
    }
    double best = -INF;
    int64_t bi = surv[0];
    for (int64_t a : surv) {
      const double s = score(a);
      if (s > best) { best = s; bi = a; }
    }
    return bi;
  }

  int64_t run(int64_t budget) {
    grow_tables(sim + budget + 2);  // visit counts stay <= the simulations run so far
    if (algo == SH || algo == GUMBEL) return halving(budget);
    for (int64_t i = 0; i < budget; ++i) simulate(-1);
    return recommend();
  }

  // Search.reroot: the child of root action a and next state `outcome` becomes the root; the
  // horizon's cut slots in its subtree (now one step nearer the root) become fresh nodes.
  // false (nothing changed) when that child was never expanded or ends the episode.
  bool reroot(int64_t a, int64_t outcome) {
    if (a < 0 || a >= A) return false;
    const Act& x = st.acts[root * A + a];
    int64_t child = -1;
    for (int64_t i = 0; i < x.ns; ++i)
      if (st.slots[x.soff + i].key == outcome) { child = st.slots[x.soff + i].kid; break; }
    if (child < 0) return false;
    root = child;
    moves += 1;
    stack_n.assign(1, child);
    stack_d.assign(1, 0);
    int64_t live = 0;
    while (!stack_n.empty()) {
      live += 1;
      const int64_t y = stack_n.back(), d = stack_d.back();
      stack_n.pop_back();
      stack_d.pop_back();
      for (int64_t b = 0; b < A; ++b) {
        const int64_t so = st.acts[y * A + b].soff, k = st.acts[y * A + b].ns;
        for (int64_t i = 0; i < k; ++i) {
          const int64_t q = so + i;
          const int64_t kid = st.slots[q].kid;
          if (kid == KID_CUT && d + 1 < hz) {
            const int64_t c = new_node(st.scuid[q], st.scut[q]);  // a fresh node, no kids: nothing to descend
            st.slots[q].kid = c;
            live += 1;
          } else if (kid >= 0) {
            stack_n.push_back(kid);
            stack_d.push_back(d + 1);
          }
        }
      }
    }
    if (2 * live < static_cast<int64_t>(st.nodes.size())) compact();
    return true;
  }

  // Drop the nodes outside the root's subtree (the Python search's garbage collector frees
  // them): the live nodes are copied, in breadth-first order from the root, into fresh arrays
  // and the children's indices renumbered. Nothing the search computes depends on a node's
  // index, so the results do not change; memory stays proportional to the kept subtree.
  void compact() {
    const int64_t n_old = static_cast<int64_t>(st.nodes.size());
    std::vector<int64_t>& map = cmap;
    std::vector<int64_t>& order = corder;
    map.assign(n_old, -1);
    order.clear();
    order.push_back(root);
    map[root] = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const int64_t o = order[i];
      for (int64_t a = 0; a < A; ++a) {
        const Act& x = st.acts[o * A + a];
        for (int64_t k = 0; k < x.ns; ++k) {
          const int64_t kid = st.slots[x.soff + k].kid;
          if (kid >= 0 && map[kid] < 0) {
            map[kid] = static_cast<int64_t>(order.size());
            order.push_back(kid);
          }
        }
      }
    }
    Store& nw = spare;
    nw.clear();
    nw.nodes.reserve(order.size());
    nw.acts.reserve(order.size() * A);
    for (const int64_t o : order) {
      const NodeH& h = st.nodes[o];
      nw.nodes.push_back(h);
      for (int64_t a = 0; a < A; ++a) {
        Act x = st.acts[o * A + a];
        const int64_t cap = t.nout[h.st * A + a], so = x.soff;
        x.soff = static_cast<int64_t>(nw.slots.size());
        for (int64_t k = 0; k < cap; ++k) {
          Slot sl = st.slots[so + k];
          if (sl.kid >= 0) sl.kid = map[sl.kid];
          nw.slots.push_back(sl);
          if (keep_cuts) {
            nw.scut.push_back(st.scut[so + k]);
            nw.scuid.push_back(st.scuid[so + k]);
          }
        }
        nw.acts.push_back(x);
      }
    }
    st.nodes.swap(nw.nodes);
    st.acts.swap(nw.acts);
    st.slots.swap(nw.slots);
    st.scut.swap(nw.scut);
    st.scuid.swap(nw.scuid);
    nw.clear();  // the old tree's arrays, kept for the next compaction
    if (nw.bytes() > (size_t(1) << 28)) nw.trim(0);
    root = 0;
  }
};

}  // namespace mcts_table
}  // namespace icml26
