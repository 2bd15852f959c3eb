// Search core of the mcts kernel (see mcts_cpu.cpp); header-only so that a standalone
// timing harness can include it without torch.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include <limits>
#include <vector>

#include "bandit_sampler.h"

namespace icml26 {
namespace mcts {


// Random numbers: the counter-based generator shared with the bandit kernels.
using icml26::bandit::ALGO_STREAM;
using icml26::bandit::key;
using icml26::bandit::std_normal;
using icml26::bandit::std_student_t;
using icml26::bandit::u01;
using icml26::bandit::u01_open;
using icml26::bandit::splitmix64;
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
  double c, tau, power, epsilon, var_floor, prior_var, delta, c_visit, c_scale, v_lo, span, r_span, m_considered, horizon, kappa, minmax;
};
constexpr int N_PRM = 16;

// key(seed, stream, idx, c) = sm(key_base(sm(seed), stream, c) ^ idx): the first two rounds
// depend only on (seed, stream, c), so each (s, a) caches them on its first visit.
inline uint64_t key_base(uint64_t sseed, uint64_t stream, uint64_t c) { return splitmix64(sseed ^ (stream * 0xD1B54A32D192ED03ULL + c)); }

// Standard normal draws: the ziggurat method with 128 layers as in Doornik's ZIGNOR (Marsaglia &
// Tsang 2000, J. Stat. Softw. 5(8); Doornik 2005, "An improved ziggurat method to generate normal
// random samples"), driven by the counter-based keys: attempt a of draw (seed, stream, idx) uses
// key(.., ZIG_C + 2a) (layer = its low 7 bits, u = its top 53 bits) and key(.., ZIG_C + 2a + 1)
// for the wedge test; the tail uses key(.., TAIL_C + 2t), key(.., TAIL_C + 2t + 1). About 98.8%
// of the draws end at the first rectangle test (no libm call). The Python twin is
// icml26/ops/_ref/mcts.py::std_normal_zig, with the same tables (glibc exp/log/sqrt).
constexpr uint64_t ZIG_C = 100, TAIL_C = 300;
constexpr int ZIG_LAYERS = 128;
constexpr double ZIG_R = 3.442619855899, ZIG_V = 9.91256303526217e-3;

struct ZigTables {
  double X[ZIG_LAYERS + 1], Rt[ZIG_LAYERS];
  ZigTables() {
    double f = std::exp(-0.5 * ZIG_R * ZIG_R);
    X[0] = ZIG_V / f;
    X[1] = ZIG_R;
    X[ZIG_LAYERS] = 0.0;
    for (int i = 2; i < ZIG_LAYERS; ++i) {
      X[i] = std::sqrt(-2.0 * std::log(ZIG_V / X[i - 1] + f));
      f = std::exp(-0.5 * X[i] * X[i]);
    }
    for (int i = 0; i < ZIG_LAYERS; ++i) Rt[i] = X[i + 1] / X[i];
  }
};

inline const ZigTables& zig() {
  static const ZigTables z;
  return z;
}

// the slow part of a draw whose first attempt (key h0) was not accepted by the rectangle test
inline double zig_slow(const ZigTables& z, uint64_t sseed, uint64_t stream, uint64_t idx, uint64_t h0) {
  uint64_t h = h0;
  for (uint64_t a = 0; a < 64; ++a) {
    if (a > 0) h = splitmix64(key_base(sseed, stream, ZIG_C + 2 * a) ^ idx);
    const int i = static_cast<int>(h & (ZIG_LAYERS - 1));
    const double u = 2.0 * u01(h) - 1.0;
    if (std::fabs(u) < z.Rt[i]) return u * z.X[i];
    if (i == 0) {  // base strip beyond R: Marsaglia's tail method
      for (uint64_t t = 0; t < 64; ++t) {
        const double x = std::log(u01_open(splitmix64(key_base(sseed, stream, TAIL_C + 2 * t) ^ idx))) / ZIG_R;
        const double y = std::log(u01_open(splitmix64(key_base(sseed, stream, TAIL_C + 2 * t + 1) ^ idx)));
        if (!(-2.0 * y < x * x)) return u < 0.0 ? x - ZIG_R : ZIG_R - x;
      }
      return u < 0.0 ? -ZIG_R : ZIG_R;  // probability < 1e-60
    }
    const double x = u * z.X[i];  // wedge
    const double f0 = std::exp(-0.5 * (z.X[i] * z.X[i] - x * x));
    const double f1 = std::exp(-0.5 * (z.X[i + 1] * z.X[i + 1] - x * x));
    if (f1 + u01(splitmix64(key_base(sseed, stream, ZIG_C + 2 * a + 1) ^ idx)) * (f0 - f1) < 1.0) return x;
  }
  return 0.0;  // probability < 1e-100
}

// Per-count tables shared by all runs of one call (index k = a visit count <= budget + 1):
// lg = log k, slg = sqrt(log k), isq = 1 / sqrt(k), inv1 = 1 / (1 + k); the same values the
// reference computes with math.log / math.sqrt / division on the integer.
struct Tables {
  std::vector<double> lg, slg, isq, inv1;
  explicit Tables(int64_t n) : lg(n + 1), slg(n + 1), isq(n + 1), inv1(n + 1) {
    for (int64_t k = 0; k <= n; ++k) {
      const double x = static_cast<double>(k);
      lg[k] = std::log(x);
      slg[k] = k >= 1 ? std::sqrt(lg[k]) : 0.0;
      isq[k] = k >= 1 ? 1.0 / std::sqrt(x) : 0.0;
      inv1[k] = 1.0 / (1.0 + x);
    }
  }
};

// exp(y) for y <= 0, to relative accuracy 1e-10 (Gumbel's fast selection path only, whose
// decisions are certified against the reference's glibc exp, see Search::gumbel_select): y = (64 q + j)
// ln2 / 64 + r with |r| <= ln2 / 128 (Cody-Waite: the high part of ln2 / 64 has 32 significant
// bits, so k ln2_hi / 64 is exact for |k| < 2^21), exp(r) by its degree-3 Taylor polynomial
// (remainder < r^4 / 24 < 4e-11), times 2^(j / 64) from a table (1 ulp) and 2^q. Below -700 it
// returns exp(-700) (absolute error < 1e-304); NaN stays NaN.
struct Exp2Table {
  double v[64];
  Exp2Table() {
    for (int j = 0; j < 64; ++j) v[j] = std::exp2(static_cast<double>(j) / 64.0);
  }
};
inline const Exp2Table& exp2_table() {
  static const Exp2Table e;
  return e;
}
inline double exp_neg(double y, const double* tab) {
  constexpr double INV = 92.33248261689366, HI = 6.93147180369123816490e-01 / 64.0, LO = 1.90821492927058770002e-10 / 64.0;
  constexpr double SHIFT = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  y = y < -700.0 ? -700.0 : y;
  const double kd = (y * INV + SHIFT) - SHIFT;
  const double r = (y - kd * HI) - kd * LO;
  const double p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0)));
  const int64_t k = static_cast<int64_t>(kd);
  const uint64_t bits = static_cast<uint64_t>((k >> 6) + 1023) << 52;  // arithmetic shift: floor(k / 64)
  double sc;
  std::memcpy(&sc, &bits, 8);
  return tab[k & 63] * sc * p;
}

#if defined(__AVX2__) && defined(__FMA__)
// exp_neg on 4 lanes (the same steps; k + 64 * 1100 > 0 lets logical shifts stand in for floor)
inline __m256d exp_neg4(__m256d y, const double* tab) {
  const __m256d INV = _mm256_set1_pd(92.33248261689366), HI = _mm256_set1_pd(6.93147180369123816490e-01 / 64.0),
                LO = _mm256_set1_pd(1.90821492927058770002e-10 / 64.0), SHIFT = _mm256_set1_pd(6755399441055744.0);
  y = _mm256_max_pd(y, _mm256_set1_pd(-700.0));  // (a NaN lane would become -700: callers pass finite y)
  const __m256d u = _mm256_add_pd(_mm256_mul_pd(y, INV), SHIFT);
  const __m256d kd = _mm256_sub_pd(u, SHIFT);
  const __m256d r = _mm256_sub_pd(_mm256_sub_pd(y, _mm256_mul_pd(kd, HI)), _mm256_mul_pd(kd, LO));
  __m256d q = _mm256_add_pd(_mm256_set1_pd(0.5), _mm256_mul_pd(r, _mm256_set1_pd(1.0 / 6.0)));
  q = _mm256_add_pd(_mm256_set1_pd(1.0), _mm256_mul_pd(r, q));
  q = _mm256_add_pd(_mm256_set1_pd(1.0), _mm256_mul_pd(r, q));
  // the low bits of u hold k (two's complement) above the bits of SHIFT
  const __m256i k = _mm256_add_epi64(_mm256_sub_epi64(_mm256_castpd_si256(u), _mm256_castpd_si256(SHIFT)), _mm256_set1_epi64x(64 * 1100));
  const __m256i j = _mm256_and_si256(k, _mm256_set1_epi64x(63));
  const __m256i ex = _mm256_slli_epi64(_mm256_add_epi64(_mm256_srli_epi64(k, 6), _mm256_set1_epi64x(1023 - 1100)), 52);
  const __m256d t = _mm256_i64gather_pd(tab, j, 8);
  return _mm256_mul_pd(_mm256_mul_pd(t, _mm256_castsi256_pd(ex)), q);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
// max and sum of the 4 lanes, in every lane
inline __m256d hmax4(__m256d v) {
  v = _mm256_max_pd(v, _mm256_permute2f128_pd(v, v, 1));
  return _mm256_max_pd(v, _mm256_permute_pd(v, 5));
}
inline __m256d hmin4(__m256d v) {
  v = _mm256_min_pd(v, _mm256_permute2f128_pd(v, v, 1));
  return _mm256_min_pd(v, _mm256_permute_pd(v, 5));
}
inline __m256d hsum4(__m256d v) {
  v = _mm256_add_pd(v, _mm256_permute2f128_pd(v, v, 1));
  return _mm256_add_pd(v, _mm256_permute_pd(v, 5));
}

// exp(y) for -700 <= y <= 0 on 4 lanes to relative accuracy 1.6e-7 (measured: 1.52e-7), for
// gumbel_select4's certified decision: y = (8 q + j) ln2 / 8 + r with |r| <= ln2 / 16 (one FMA with
// ln2 / 8 rounded; |k| < 2^14 keeps that error below 1e-13), exp(r) by its degree-3 Taylor
// polynomial in Estrin's form (remainder < e^|r| r^4 / 24 < 1.6e-7), times 2^(j / 8) from an
// 8-entry table held in two registers (no memory gather) and 2^q. Below -700 it returns about
// exp(-700). A NaN lane becomes exp(-700): callers check that y is finite.
inline __m256d exp_neg4_lo(__m256d y) {
  const __m256d SHIFT = _mm256_set1_pd(6755399441055744.0);
  y = _mm256_max_pd(y, _mm256_set1_pd(-700.0));
  const __m256d u = _mm256_fmadd_pd(y, _mm256_set1_pd(11.541560327111707), SHIFT);  // 8 / ln2
  const __m256d kd = _mm256_sub_pd(u, SHIFT);
  const __m256d r = _mm256_fmadd_pd(kd, _mm256_set1_pd(-0.08664339756999316), y);  // ln2 / 8
  const __m256d r2 = _mm256_mul_pd(r, r);
  const __m256d p = _mm256_fmadd_pd(r2, _mm256_fmadd_pd(r, _mm256_set1_pd(1.0 / 6.0), _mm256_set1_pd(0.5)), _mm256_add_pd(r, _mm256_set1_pd(1.0)));
  const __m256i k = _mm256_add_epi64(_mm256_sub_epi64(_mm256_castpd_si256(u), _mm256_castpd_si256(SHIFT)), _mm256_set1_epi64x(8 * 1100));
  // 2^(j / 8), j = k mod 8: the 32-bit halves 2 (j mod 4), 2 (j mod 4) + 1 of the low or the high table
  const __m256i T0 = _mm256_castpd_si256(_mm256_setr_pd(1.0, 1.0905077326652577, 1.189207115002721, 1.2968395546510096));
  const __m256i T1 = _mm256_castpd_si256(_mm256_setr_pd(1.4142135623730951, 1.5422108254079407, 1.681792830507429, 1.8340080864093424));
  const __m256i j2 = _mm256_slli_epi64(_mm256_and_si256(k, _mm256_set1_epi64x(3)), 1);
  const __m256i idx = _mm256_or_si256(j2, _mm256_slli_epi64(_mm256_add_epi64(j2, _mm256_set1_epi64x(1)), 32));
  const __m256d t = _mm256_blendv_pd(_mm256_castsi256_pd(_mm256_permutevar8x32_epi32(T0, idx)), _mm256_castsi256_pd(_mm256_permutevar8x32_epi32(T1, idx)),
                                     _mm256_castsi256_pd(_mm256_slli_epi64(k, 61)));  // bit 2 of j -> sign bit
  const __m256i ex = _mm256_slli_epi64(_mm256_add_epi64(_mm256_srli_epi64(k, 3), _mm256_set1_epi64x(1023 - 1100)), 52);
  return _mm256_mul_pd(_mm256_mul_pd(t, _mm256_castsi256_pd(ex)), p);
}

// gumbel_select4's bound on |T_a - S_a| (fast vs reference score of action a, see there)
constexpr double GUMBEL_TOL = 1e-6;
#endif

struct Step {
  int64_t node, sa;  // sa: the pair's index (node_off[node] + action)
  double r;
};

struct MStep {  // a step of simulate_mean's path: the pair, its reward and its new count
  int64_t sa;
  double r, dn;
};

struct Search {
  const Tree& t;
  const Prm& p;
  int algo;
  uint64_t seed, sseed;
  const double *lgt, *slg, *isq, *inv1;  // Tables(>= budget + 1)
  double log_inv_delta;
  int64_t hz;  // the horizon as a depth: depth + 1 >= hz <=> depth + 1 >= p.horizon
  bool model;  // backups through the empirical model (all but uct, sequential-halving, gumbel)
  int64_t sim = 0;
  // the value scale: fixed (p.span, p.v_lo, p.tau); p.minmax = 1: the min-max [lo_t, hi_t] of
  // every Q estimate backed up so far in this search (observe(); the reference's Search._observe);
  // p.minmax = 2: per node, the min-max of its current action estimates (node_range()), except
  // MDP-GapE's value bonus, which keeps the search-wide range (observing)
  int mode;
  bool minmax, observing;
  double span_t, vlo_t, tau_t, lo_t = INF, hi_t = -INF;
  // node statistics
  std::vector<int64_t> n;
  std::vector<double> V, VV, UV, LV;
  // (s, a) statistics
  std::vector<int64_t> N, nk;
  std::vector<double> rmean, rm2, g, Q, VQ, U, L;
  // cached per (s, a): key bases of the reward (c = 0, 1) and outcome draws; exp((Q - m)/tau) and
  // pi_tau of the last soft backup of s (MENTS, VarDE), with its normaliser Z per node
  std::vector<uint64_t> kb0, kbo;  // kb0: c = ZIG_C (gaussian) or 0 (bernoulli)
  const ZigTables& zt = zig();
  const double* e2t = exp2_table().v;
  std::vector<double> E, W, Z, T;  // T: VarDE's temperature of node s
  // outcomes: slot_of[o] = slot of outcome o in first-visit order (-1 unseen); order[off + slot] = o
  std::vector<int64_t> slot_of, order, cnt;
  std::vector<Step> path;
  std::vector<MStep> mpath;
  std::vector<double> gmb, tmp;
  const double* Kt = nullptr;  // GUMBEL: gumbel_table(), valid for visit counts <= budget + 1
  std::vector<int64_t> mxn;  // GUMBEL: max_a N(s, a) per node s (K = Kt[mxn[s]])

  Search(const Tree& t_, const Prm& p_, int algo_, uint64_t seed_, const Tables& tb)
      : t(t_), p(p_), algo(algo_), seed(seed_), sseed(splitmix64(seed_)), lgt(tb.lg.data()), slg(tb.slg.data()), isq(tb.isq.data()), inv1(tb.inv1.data()), log_inv_delta(std::log(1.0 / p_.delta)),
        hz(p_.horizon < 9e18 ? static_cast<int64_t>(std::ceil(p_.horizon)) : std::numeric_limits<int64_t>::max()),
        model(algo_ != UCT && algo_ != SH && algo_ != GUMBEL), mode(static_cast<int>(p_.minmax)), minmax(p_.minmax > 0.0),
        observing(mode == 1 || (mode == 2 && algo_ == GAPE)), span_t(p_.span), vlo_t(p_.v_lo), tau_t(p_.tau) {
    n.assign(t.n_nodes, 0);
    N.assign(t.n_sa, 0);
    g.assign(t.n_sa, 0.0);
    kb0.assign(t.n_sa, 0);
    kbo.assign(t.n_sa, 0);
    if (model) {  // the empirical model and the backed-up values (the mean-return planners read none)
      V.assign(t.n_nodes, 0.0);
      VV.assign(t.n_nodes, 0.0);
      UV.assign(t.n_nodes, 0.0);
      LV.assign(t.n_nodes, 0.0);
      nk.assign(t.n_sa, 0);
      rmean.assign(t.n_sa, 0.0);
      rm2.assign(t.n_sa, 0.0);
      Q.assign(t.n_sa, 0.0);
      VQ.assign(t.n_sa, 0.0);
      U.assign(t.n_sa, 0.0);
      L.assign(t.n_sa, 0.0);
    }
    if (algo == MENTS || algo == VARDE) {
      E.assign(t.n_sa, 0.0);
      W.assign(t.n_sa, 0.0);
      Z.assign(t.n_nodes, 0.0);
      T.assign(t.n_nodes, 0.0);
    }
    if (algo == GUMBEL) {
      int64_t amax = 1;
      for (int64_t s = 0; s < t.n_nodes; ++s) amax = std::max(amax, t.node_off[s + 1] - t.node_off[s]);
      tmp.assign(2 * amax, 0.0);
      mxn.assign(t.n_nodes, 0);
    }
    path.reserve(64);
    if (model) {
      slot_of.assign(t.n_out, -1);
      order.assign(t.n_out, 0);
      cnt.assign(t.n_out, 0);
    }
  }

  // minmax: widen [lo_t, hi_t] by a new Q estimate; span = max(hi - lo, 1e-9 max(1, |hi|)),
  // v_lo = lo, tau = p.tau * span (the reference's arithmetic)
  inline void observe(double q) {
    bool ch = false;
    if (q < lo_t) { lo_t = q; ch = true; }
    if (q > hi_t) { hi_t = q; ch = true; }
    if (ch) {
      const double s = hi_t - lo_t, f = 1e-9 * std::max(1.0, std::fabs(hi_t));
      span_t = s >= f ? s : f;
      vlo_t = lo_t;
      tau_t = p.tau * span_t;
    }
  }

  // (lo, span) of vals[a] over the tried actions (Nn[a] > 0), span floored as in observe()
  static inline void node_range(const double* vals, const int64_t* Nn, int64_t A, double& lo_out, double& span_out) {
    double lo = INF, hi = -INF;
    for (int64_t a = 0; a < A; ++a)
      if (Nn[a] > 0) {
        const double v = vals[a];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    const double s = hi - lo, f = 1e-9 * std::max(1.0, std::fabs(hi));
    lo_out = lo;
    span_out = s >= f ? s : f;
  }

  double reward(int64_t sa, int64_t j) const {
    const uint64_t s = static_cast<uint64_t>(sa), i = static_cast<uint64_t>(j);
    if (t.kind == 0) {  // ziggurat; the first rectangle test inline
      const uint64_t h = splitmix64(kb0[sa] ^ i);
      const int l = static_cast<int>(h & (ZIG_LAYERS - 1));
      const double u = 2.0 * u01(h) - 1.0;
      const double z = std::fabs(u) < zt.Rt[l] ? u * zt.X[l] : zig_slow(zt, sseed, s, i, h);
      return t.mean[sa] + t.scale[sa] * z;
    }
    if (t.kind == 1) return t.mean[sa] + t.scale[sa] * std_student_t(seed, s, i, t.df);
    return u01(splitmix64(kb0[sa] ^ i)) < t.mean[sa] ? 1.0 : 0.0;
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
    if (algo == GUMBEL) return gumbel_select(s, lo, A);  // (simulate_mean selects for GUMBEL itself)
    for (int64_t a = 0; a < A; ++a)
      if (N[lo + a] == 0) return a;
    if (algo == UCT || algo == POWER || algo == SH) {
      // UCB1: Q + c span sqrt(log n) / sqrt(N), from the tables
      const double* vals = (algo != POWER) ? &g[lo] : &Q[lo];
      double span = span_t, vl;
      if (mode == 2) node_range(vals, &N[lo], A, vl, span);
      const double sl = slg[n[s]], cs = p.c * span;
      double best = -INF;
      int64_t bi = 0;
      for (int64_t a = 0; a < A; ++a) {
        const double sc = vals[a] + cs * (sl * isq[N[lo + a]]);
        if (sc > best) { best = sc; bi = a; }
      }
      return bi;
    }
    if (algo == MENTS || algo == VARDE) {
      if (algo == VARDE)
        for (int64_t a = 0; a < A; ++a)
          if (N[lo + a] < 2) return a;
      // every action has been tried, so the last soft backup of s (node_value) computed
      // exp((Q - m)/tau), their sum and pi_tau over all actions with the current Q: reuse them
      if (algo == MENTS) {
        const double z = Z[s];
        const double lam = std::min(1.0, p.epsilon * static_cast<double>(A) / lgt[n[s] + 1]);
        const double u = u01(key(seed, ALGO_STREAM, static_cast<uint64_t>(sim), static_cast<uint64_t>(depth)));
        double acc = 0.0;
        for (int64_t a = 0; a < A; ++a) {
          acc += (1.0 - lam) * E[lo + a] / z + lam / static_cast<double>(A);
          if (u < acc) return a;
        }
        return A - 1;
      }
      double best = -INF;
      int64_t bi = 0;
      for (int64_t a = 0; a < A; ++a) {
        const double w = W[lo + a];
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
    return 0;  // (unreachable: GUMBEL returned above)
  }

  // K = (c_visit + k) c_scale / span for visit counts k <= budget + 1 (the reference's division);
  // minmax: the table holds (c_visit + k) c_scale (divided by 1.0, exactly) and span moves
  double gumbel_K(int64_t mx) const { return minmax ? Kt[mx] / span_t : Kt[mx]; }

  // the K table for counts 0..n, kept per thread between searches with the same parameters (a
  // batch-1 caller would otherwise redo n divisions per search)
  const double* gumbel_table(int64_t n) const {
    struct Cache {
      double c_visit = NAN, c_scale = NAN, span = NAN;
      std::vector<double> K;
    };
    static thread_local Cache c;
    const double span = minmax ? 1.0 : p.span;
    if (!(c.c_visit == p.c_visit && c.c_scale == p.c_scale && c.span == span) || static_cast<int64_t>(c.K.size()) <= n) {
      c.c_visit = p.c_visit;
      c.c_scale = p.c_scale;
      c.span = span;
      c.K.resize(std::max<int64_t>(n + 1, 4096));
      for (size_t k = 0; k < c.K.size(); ++k) c.K[k] = (p.c_visit + static_cast<double>(k)) * p.c_scale / span;
    }
    return c.K.data();
  }

  int64_t gumbel_select(int64_t s, int64_t lo, int64_t A) {
    // GUMBEL below the root: argmax_a pi'(a) - N(a) / (1 + n), pi' = softmax(x), x_a = K (g_a - v_lo),
    // K = (c_visit + max_b N(b)) c_scale / span; the reference computes
    //   S_a = fl(fl(e_a * fl(1 / z)) - fl(N_a * fl(1 / (1 + n)))), e_a = exp(x_a - m), z = sum_b e_b,
    // with glibc's exp (3 calls per node visit). Only the index of the best S_a leaves this
    // function, so a certified fast path decides it: the same x_a and m, e_a from exp_neg /
    // exp_neg4 (relative error < 1e-10 against the true exponential; glibc's is within 1 ulp),
    // and scores T_a with |T_a - S_a| <= tol. When the best T leads every other by more than
    // 2 tol, the reference's argmax (first index of the largest S_a) is that action; otherwise
    // (near or exact ties, non-finite values) the reference's own arithmetic runs. So the result
    // is the reference's, bit for bit, and the fast path calls no libm function. Nodes with 4
    // actions take gumbel_select4 (the same scheme, vectorised), which calls this on its rare
    // fallbacks.
    const int64_t* Nn = &N[lo];
    const double* gv = &g[lo];
    int64_t mx = 0;
    double gm = -INF;
    for (int64_t a = 0; a < A; ++a) {
      if (Nn[a] == 0) return a;
      mx = std::max(mx, Nn[a]);
      gm = std::max(gm, gv[a]);
    }
    double vlo = vlo_t, K;
    if (mode == 2) {
      double span;
      node_range(gv, Nn, A, vlo, span);
      K = Kt[mx] / span;
    } else {
      K = gumbel_K(mx);
    }
    double* x = tmp.data();
    double chk = 0.0;
    for (int64_t a = 0; a < A; ++a) {
      x[a] = K * (gv[a] - vlo);
      chk += x[a];
    }
    // m = max_a x_a: for K > 0, t -> fl(K fl(t - v_lo)) is non-decreasing, so m = K (max g - v_lo)
    // exactly, computed beside K instead of after the x_a
    double m = -INF;
    if (K > 0.0) {
      m = K * (gm - vlo);
    } else {
      for (int64_t a = 0; a < A; ++a) m = std::max(m, x[a]);
    }
    const double inn = inv1[n[s]];
    if (chk - chk == 0.0) {  // every x_a finite (else NaN or inf: the reference's arithmetic below)
      // compare z T_a = e_a - N_a z / (1 + n) (z > 0: the same order, no division)
      double* e = x + A;
      int64_t a0 = 0;
#if defined(__AVX2__) && defined(__FMA__)
      const __m256d mv = _mm256_set1_pd(m);
      for (; a0 + 4 <= A; a0 += 4) _mm256_storeu_pd(e + a0, exp_neg4(_mm256_sub_pd(_mm256_loadu_pd(x + a0), mv), e2t));
#endif
      for (int64_t a = a0; a < A; ++a) e[a] = exp_neg(x[a] - m, e2t);
      double z0 = 0.0, z1 = 0.0;  // two chains (any order: the bound covers the rounding)
      int64_t a1 = 0;
      for (; a1 + 2 <= A; a1 += 2) {
        z0 += e[a1];
        z1 += e[a1 + 1];
      }
      if (a1 < A) z0 += e[a1];
      const double z = z0 + z1;
      const double zn = z * inn;
      double b1 = -INF, b2 = -INF;
      int64_t bi = 0;
      for (int64_t a = 0; a < A; ++a) {
        const double sc = e[a] - static_cast<double>(Nn[a]) * zn;
        if (sc > b1) {
          b2 = b1;
          b1 = sc;
          bi = a;
        } else if (sc > b2) {
          b2 = sc;
        }
      }
      // |T_a - S_a| <= tol: exp_neg's error (1e-10 relative), the sums' rounding (A terms) and the
      // reference's own (1 ulp per exp), with a wide margin; scaled by z here
      const double tol = 1e-9 * static_cast<double>(A + 1) * z;
      if (b1 - b2 > 2.0 * tol && b1 - b2 < INF) return bi;  // (A = 1: b2 = -inf, b1 - b2 = inf)
      if (A == 1) return 0;
    }
    // the reference's arithmetic (near ties)
    for (int64_t a = 0; a < A; ++a) x[a] = K * (gv[a] - vlo);
    for (int64_t a = 0; a < A; ++a) x[a] = x[a] == m ? 1.0 : std::exp(x[a] - m);  // exp(0) = 1 exactly
    double z = 0.0;
    for (int64_t a = 0; a < A; ++a) z += x[a];
    const double iz = 1.0 / z;
    double best = -INF;
    int64_t bi = 0;
    for (int64_t a = 0; a < A; ++a) {
      const double sc = x[a] * iz - static_cast<double>(Nn[a]) * inn;
      if (sc > best) { best = sc; bi = a; }
    }
    return bi;
  }

#if defined(__AVX2__) && defined(__FMA__)
  // gumbel_select for a node with 4 actions (the common shape): the same certified scheme, one
  // AVX2 register per quantity. It computes x_a, m and x_a - m exactly as the reference does
  // (K = Kt[mxn[s]] is the reference's K), then e'_a = exp_neg4_lo(x_a - m) = e_a (1 + d_a) with
  // |d_a| < 1.6e-7 + 1 ulp (glibc's exp is within 1 ulp), z' = sum e'_b and
  // F_a = e'_a - z' N_a / (1 + n) (one FMA). With T_a = F_a / z', |T_a - S_a| <= 2 max|d| + the
  // roundings of both sides (a few 1e-16: every term is <= 1 and z' >= 1) < 3.3e-7 < GUMBEL_TOL.
  // If only the best lane has F_a > max F - 2 GUMBEL_TOL z', the best leads every other S_a by
  // more than 0, so it is the reference's argmax (then unique). Otherwise (ties, near ties:
  // about 1 selection in 10^5 on the benchmark tree), and for non-finite x_a or K <= 0,
  // gumbel_select runs the reference's arithmetic. Underflow: lanes below exp(-700) err by
  // < 1e-304 in absolute terms, against z' >= 1.
  int64_t gumbel_select4(int64_t s, int64_t lo) {
    const int64_t ns = n[s];
    // the first action not yet tried: it serves nodes below the root only (the root's actions
    // come from the halving schedule), whose visits 1-4 took actions 0-3 in turn
    if (ns < 4) return ns;
    const __m256i ni = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&N[lo]));
    const __m256d gv = _mm256_loadu_pd(&g[lo]);
    double K, vl = vlo_t;
    if (mode == 2) {  // the node's range (every action tried: ns >= 4 below the root), as node_range()
      const double hi = _mm256_cvtsd_f64(hmax4(gv));
      vl = _mm256_cvtsd_f64(hmin4(gv));
      const double sp = hi - vl, f = 1e-9 * std::max(1.0, std::fabs(hi));
      K = Kt[mxn[s]] / (sp >= f ? sp : f);
    } else {
      K = gumbel_K(mxn[s]);  // max_a N_a: simulate_mean keeps mxn up to date
    }
    if (!(K > 0.0)) return gumbel_select(s, lo, 4);
    const __m256d vlo = _mm256_set1_pd(vl), Kv = _mm256_set1_pd(K);
    const __m256d x = _mm256_mul_pd(Kv, _mm256_sub_pd(gv, vlo));
    const __m256d m = _mm256_mul_pd(Kv, _mm256_sub_pd(hmax4(gv), vlo));  // = max_a x_a (K > 0, see gumbel_select)
    if (_mm256_movemask_pd(_mm256_cmp_pd(_mm256_sub_pd(x, x), _mm256_setzero_pd(), _CMP_EQ_OQ)) != 15) return gumbel_select(s, lo, 4);
    const __m256d e = exp_neg4_lo(_mm256_sub_pd(x, m));
    const __m256d z = hsum4(e);
    // N_a as doubles (exact below 2^52): the bits of 2^52 + N_a, minus 2^52
    const __m256d nd = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(ni, _mm256_set1_epi64x(0x4330000000000000LL))), _mm256_set1_pd(4503599627370496.0));
    const __m256d w = _mm256_mul_pd(nd, _mm256_set1_pd(inv1[ns]));  // N_a / (1 + n)
    const __m256d sc = _mm256_fnmadd_pd(w, z, e);  // z T_a = e_a - z N_a / (1 + n)
    // the lanes within 2 tol z of the best: the decision is certified when only the best one is
    const __m256d cut = _mm256_fnmadd_pd(z, _mm256_set1_pd(2.0 * GUMBEL_TOL), hmax4(sc));
    const int tm = _mm256_movemask_pd(_mm256_cmp_pd(sc, cut, _CMP_GT_OQ));
    // one branch per answer (not a computed index): the processor predicts the child and starts
    // the next step's loads and arithmetic before this decision is known
    if (tm == 1) return 0;
    if (tm == 2) return 1;
    if (tm == 4) return 2;
    if (tm == 8) return 3;
    return gumbel_select(s, lo, 4);  // a tie or a near tie
  }
#endif

  // simulate + backup for the mean-return planners (UCT, SH, GUMBEL: no empirical model, no
  // soft backup), specialised per algorithm and noise kind: the same draws, counts and
  // arithmetic in the same order as the general loop (so the same results, bit for bit), with
  // the tree's arrays and the statistics' bases in locals, the horizon as an integer depth and
  // the path (pair, reward, new count) in a buffer kept between simulations. Gumbel keeps only
  // max_a N(s, a) per node; its K is read from the table when a selection needs it. Gumbel: 1.1-1.2x
  // the general loop's simulations per second on the benchmark tree (paired, same process).
  template <int ALG, int KIND>
  void simulate_mean(int64_t root_action) {
    const int64_t *node_off = t.node_off, *out_off = t.out_off, *child = t.child;
    const double *mean = t.mean, *scale = t.scale, *prob = t.prob;
    int64_t* Nv = N.data();
    int64_t* nv = n.data();
    uint64_t* k0 = kb0.data();
    uint64_t* ko = kbo.data();
    double* gv = g.data();
    MStep* ps = mpath.data();
    int64_t plen = static_cast<int64_t>(mpath.size());  // (the buffer: its size, not its content)
    int64_t s = 0, depth = 0;
    int64_t a = root_action;  // (< 0: select; the root's only)
    while (true) {
      if (depth == plen) {  // a path longer than any before: grow the buffer
        mpath.resize(static_cast<size_t>(2 * plen + 8));
        ps = mpath.data();
        plen = static_cast<int64_t>(mpath.size());
      }
      if (a >= 0) {
      } else if (ALG == GUMBEL) {
        const int64_t lo = node_off[s], A = node_off[s + 1] - lo;
#if defined(__AVX2__) && defined(__FMA__)
        a = A == 4 ? gumbel_select4(s, lo) : gumbel_select(s, lo, A);
#else
        a = gumbel_select(s, lo, A);
#endif
      } else {
        a = select(s, depth);
      }
      const int64_t sa = node_off[s] + a;
      const int64_t j = Nv[sa];
      const int64_t o0 = out_off[sa], no = out_off[sa + 1] - o0;
      if (j == 0) {
        k0[sa] = key_base(sseed, static_cast<uint64_t>(sa), KIND == 0 ? ZIG_C : 0);
        if (no > 1) ko[sa] = key_base(sseed, static_cast<uint64_t>(sa), OUTCOME_C);
      }
      double r;
      if (KIND == 0) {  // reward(): the ziggurat's first rectangle test inline
        const uint64_t h = splitmix64(k0[sa] ^ static_cast<uint64_t>(j));
        const int l = static_cast<int>(h & (ZIG_LAYERS - 1));
        const double u = 2.0 * u01(h) - 1.0;
        const double z = std::fabs(u) < zt.Rt[l] ? u * zt.X[l] : zig_slow(zt, sseed, static_cast<uint64_t>(sa), static_cast<uint64_t>(j), h);
        r = mean[sa] + scale[sa] * z;
      } else {
        r = reward(sa, j);
      }
      int64_t k = 0;
      if (no > 1) {  // (one outcome: k = 0 whatever the draw)
        const double u = u01(splitmix64(ko[sa] ^ static_cast<uint64_t>(j)));
        k = no - 1;
        double acc = 0.0;
        for (int64_t i = 0; i < no; ++i) {
          acc += prob[o0 + i];
          if (u < acc) { k = i; break; }
        }
      }
      Nv[sa] = j + 1;
      nv[s] += 1;
      if (ALG == GUMBEL) {  // sigma's scale at s for gumbel_select4
        mxn[s] = std::max(mxn[s], j + 1);
      }
      ps[depth] = {sa, r, static_cast<double>(j + 1)};
      const int64_t c = child[o0 + k];
      if (c < 0 || depth + 1 >= hz) break;
      s = c;
      depth += 1;
      a = -1;
    }
    // backup: mean returns
    const double gamma = t.gamma;
    double G = 0.0;
    for (int64_t i = depth; i >= 0; --i) {
      const int64_t sa = ps[i].sa;
      G = ps[i].r + gamma * G;
      gv[sa] += (G - gv[sa]) / ps[i].dn;
      if (observing) observe(gv[sa]);
    }
    sim += 1;
  }

  void simulate(int64_t root_action) {
    if (algo == GUMBEL) return t.kind == 0 ? simulate_mean<GUMBEL, 0>(root_action) : simulate_mean<GUMBEL, 1>(root_action);
    if (algo == UCT) return t.kind == 0 ? simulate_mean<UCT, 0>(root_action) : simulate_mean<UCT, 1>(root_action);
    if (algo == SH) return t.kind == 0 ? simulate_mean<SH, 0>(root_action) : simulate_mean<SH, 1>(root_action);
    // the planners with an empirical model: POWER, MENTS, VARDE, GAPE
    path.clear();
    int64_t s = 0, depth = 0;
    while (true) {
      const int64_t a = (depth == 0 && root_action >= 0) ? root_action : select(s, depth);
      const int64_t sa = t.node_off[s] + a;
      const int64_t j = N[sa];
      const int64_t o0 = t.out_off[sa], o1 = t.out_off[sa + 1];
      if (j == 0) {
        kb0[sa] = key_base(sseed, static_cast<uint64_t>(sa), t.kind == 0 ? ZIG_C : 0);
        if (o1 - o0 > 1) kbo[sa] = key_base(sseed, static_cast<uint64_t>(sa), OUTCOME_C);
      }
      const double r = reward(sa, j);
      int64_t k = 0;
      if (o1 - o0 > 1) {  // (one outcome: k = 0 whatever the draw)
        const double u = u01(splitmix64(kbo[sa] ^ static_cast<uint64_t>(j)));
        k = o1 - o0 - 1;
        double acc = 0.0;
        for (int64_t i = o0; i < o1; ++i) {
          acc += t.prob[i];
          if (u < acc) { k = i - o0; break; }
        }
      }
      N[sa] += 1;
      n[s] += 1;
      const int64_t o = o0 + k;
      if (model) {  // the empirical model (reward moments, outcome counts) of the soft/bound backups
        const double nn = static_cast<double>(N[sa]);
        const double d = r - rmean[sa];
        rmean[sa] += d / nn;
        rm2[sa] += d * (r - rmean[sa]);
        if (slot_of[o] < 0) {
          slot_of[o] = nk[sa];
          order[o0 + nk[sa]] = o;
          nk[sa] += 1;
        }
        cnt[o0 + slot_of[o]] += 1;
      }
      path.push_back({s, sa, r});
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

  // the backups through the empirical model (the mean-return planners back up in simulate_mean)
  void backup() {
    const double gamma = t.gamma;
    double G = 0.0;
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const int64_t s = it->node, sa = it->sa;
      G = it->r + gamma * G;
      const int64_t nn = N[sa];
      const double dn = static_cast<double>(nn);
      const int64_t o0 = t.out_off[sa];
      double ev = 0.0;
      for (int64_t i = 0; i < nk[sa]; ++i) ev += (static_cast<double>(cnt[o0 + i]) / dn) * child_val(order[o0 + i], V);
      Q[sa] = rmean[sa] + gamma * ev;
      if (observing) observe(Q[sa]);
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
        const double beta = log_inv_delta + lgt[nn + 1];
        const double w = std::sqrt(beta / (2.0 * dn));
        double eu = 0.0, el = 0.0;
        for (int64_t i = 0; i < nk[sa]; ++i) {
          const double pb = static_cast<double>(cnt[o0 + i]) / dn;
          eu += pb * child_val(order[o0 + i], UV);
          el += pb * child_val(order[o0 + i], LV);
        }
        U[sa] = rmean[sa] + p.r_span * w + gamma * (eu + span_t * w);
        L[sa] = rmean[sa] - p.r_span * w + gamma * (el - span_t * w);
      }
      node_value(s);
    }
  }

  void node_value(int64_t s) {
    const int64_t lo = t.node_off[s], A = t.node_off[s + 1] - lo;
    if (algo == POWER) {
      double vlo = vlo_t, span;
      if (mode == 2) node_range(&Q[lo], &N[lo], A, vlo, span);
      double acc = 0.0;
      for (int64_t a = 0; a < A; ++a)
        if (N[lo + a] > 0) {
          double x = Q[lo + a] - vlo;
          if (x < 0.0) x = 0.0;
          acc += (static_cast<double>(N[lo + a]) / static_cast<double>(n[s])) * std::pow(x, p.power);
        }
      V[s] = vlo + std::pow(acc, 1.0 / p.power);
    } else if (algo == MENTS || algo == VARDE) {
      double tau = tau_t;
      if (mode == 2) {
        double vl, span;
        node_range(&Q[lo], &N[lo], A, vl, span);
        tau = p.tau * span;
      }
      if (algo == VARDE && p.kappa > 0.0) {  // tau(s) = kappa * standard error of Q(s, .)
        double sv = 0.0;
        int64_t k = 0;
        for (int64_t a = 0; a < A; ++a)
          if (N[lo + a] > 0) {
            sv += VQ[lo + a];
            k += 1;
          }
        tau = p.kappa * std::sqrt(sv / static_cast<double>(k));
      }
      double m = -INF;
      for (int64_t a = 0; a < A; ++a)
        if (N[lo + a] > 0 && Q[lo + a] > m) m = Q[lo + a];
      double z = 0.0;
      int64_t k = 0;
      for (int64_t a = 0; a < A; ++a)
        if (N[lo + a] > 0) {
          E[lo + a] = Q[lo + a] == m ? 1.0 : std::exp((Q[lo + a] - m) / tau);  // exp(0) = 1 exactly
          z += E[lo + a];
          k += 1;
        }
      Z[s] = z;
      if (algo == MENTS) {
        V[s] = m + tau * std::log(z);  // log-sum-exp (soft Bellman)
      } else {
        T[s] = tau;
        V[s] = m + tau * std::log(z / static_cast<double>(k));  // mellowmax: between the mean and the max
      }
      if (algo == VARDE) {
        double vv = 0.0;
        for (int64_t a = 0; a < A; ++a)
          if (N[lo + a] > 0) {
            const double w = E[lo + a] / z;
            W[lo + a] = w;
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
    double vlo = vlo_t, span = span_t;
    if (mode == 2) node_range(g.data(), N.data(), t.node_off[1], vlo, span);
    return gmb[a] + (p.c_visit + static_cast<double>(mx)) * p.c_scale * (g[a] - vlo) / span;
  }

  int64_t halving(int64_t budget) {
    const int64_t A = t.node_off[1];
    std::vector<int64_t> surv;
    if (algo == GUMBEL) {
      Kt = gumbel_table(budget + 1);  // (visit counts <= budget)
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

}  // namespace mcts
}  // namespace icml26
