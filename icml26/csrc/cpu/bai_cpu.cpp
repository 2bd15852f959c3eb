// Fixed-budget best-arm identification: many independent runs (one per seed) in parallel.
//
// Ops (namespace icml26):
//   bai_fixed_budget(kind, params, emp_values, emp_offsets, seeds, algo_code, budget, p)
//       -> (recommendation (S,) int64, counts (S, K) int64)
//   bandit_sample(kind, params, emp_values, emp_offsets, seeds, arms, idx) -> (S,) float64
//
// The algorithms, their sources and parameters are documented in icml26/ops/bai.py; the
// NumPy twin icml26/ops/_ref/bai.py performs the same floating-point operations in the
// same order (compile with -ffp-contract=off), so both give identical pulls except for
// rare libm-vs-NumPy ulp differences in continuous rewards / exp.
//
// Parameter vector p (float64), see _PKEYS in icml26/ops/bai.py:
//   0 tau, 1 var_floor, 2 warm_start, 3 smoother, 4 variance_exponent,
//   5 use_influence_weights, 6 use_empirical_variance, 7 const_c, 8 entmax_alpha,
//   9 pairwise_delta, 10 power_p, 11 ucbe_a, 12 ugape_a, 13 cr_variant (0 = A, 1 = C),
//   14 reward_lo, 15 reward_width: width > 0 -> every reward is normalised to
//      (x - reward_lo) / reward_width at the draw (a declared reward range; [0, 1] leaves
//      the rewards as they are, bit for bit) and the scale s below is 1; width 0 -> the
//      rewards are used as drawn and s = max - min of the rewards observed so far in the run
//      (1 while that is 0). Every parameter in reward units is multiplied by s (tau,
//      pairwise_delta, the power smoother's shift), by s^2 (var_floor, ucbe_a, ugape_a), and
//      continuous rejects compares gap / s with G: decisions do not change under r -> a r + b.
//   16 mean_estimator (VarDE: 0 = the running mean, 1 = median of means, 2 = trimmed mean),
//   17 mom_groups, 18 trim (read only when p has 19 entries; see RobustLoc).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "bandit_sampler.h"

namespace icml26 {
namespace bai {

using bandit::ArmTable;
constexpr double INF = std::numeric_limits<double>::infinity();
constexpr uint64_t P_UNIFORM_ORDER = 1, P_WARM_ORDER = 2;

enum Algo { VARDE = 0, UNIFORM = 1, SR = 2, SH = 3, UCBE = 4, UGAPE = 5, CR = 6 };
enum Smoother { LSE = 0, CONSTANT = 1, SPARSEMAX = 2, ENTMAX = 3, PAIRWISE = 4, POWER = 5 };

inline double logbar(int64_t K) {
  double s = 0.5;
  for (int64_t i = 2; i <= K; ++i) s += 1.0 / static_cast<double>(i);
  return s;
}

inline int64_t ceil_log2(int64_t K) {
  int64_t r = 0, v = 1;
  while (v < K) { v *= 2; ++r; }
  return r;
}

// One run: per-arm Welford statistics and the run's tie ranks.
struct Run {
  const ArmTable& t;
  uint64_t seed;
  int64_t K;
  int64_t* N;  // (K,) row of the output counts
  std::vector<double> mean, M2, tie;
  double lo, width;  // declared reward range (width > 0) or online scale (width == 0)
  double obs_min = INF, obs_max = -INF;

  Run(const ArmTable& table, uint64_t s, int64_t* counts, double lo_, double width_) : t(table), seed(s), K(table.K), N(counts),
      mean(table.K, 0.0), M2(table.K, 0.0), tie(table.K), lo(lo_), width(width_) {
    for (int64_t k = 0; k < K; ++k) { N[k] = 0; tie[k] = bandit::tie_rank(seed, k); }
  }
  // reward scale: 1 for a declared range (rewards already normalised), else the observed range
  double scale() const {
    if (width > 0.0) return 1.0;
    const double r = obs_max - obs_min;
    return r > 0.0 ? r : 1.0;
  }
  double pull(int64_t k) {
    double x = bandit::sample(t, seed, k, N[k]);
    if (width > 0.0) x = (x - lo) / width;
    obs_min = std::min(obs_min, x);
    obs_max = std::max(obs_max, x);
    const int64_t n = N[k] + 1;
    const double d = x - mean[k];
    mean[k] = mean[k] + d / static_cast<double>(n);
    M2[k] += d * (x - mean[k]);
    N[k] = n;
    return x;
  }
  // argmax over eligible arms of v; exact ties -> larger tie rank
  template <class V, class E>
  int64_t pick_max(const V& v, const E& eligible) const {
    int64_t b = -1;
    for (int64_t k = 0; k < K; ++k) {
      if (!eligible(k)) continue;
      if (b < 0 || v(k) > v(b) || (v(k) == v(b) && tie[k] > tie[b])) b = k;
    }
    return b;
  }
  template <class V, class E>
  int64_t pick_min(const V& v, const E& eligible) const {
    int64_t b = -1;
    for (int64_t k = 0; k < K; ++k) {
      if (!eligible(k)) continue;
      if (b < 0 || v(k) < v(b) || (v(k) == v(b) && tie[k] > tie[b])) b = k;
    }
    return b;
  }
  int64_t best_mean() const {
    return pick_max([&](int64_t k) { return mean[k]; }, [](int64_t) { return true; });
  }
  // per-run random permutation: ascending u01(key(seed, ALGO + purpose, k, c)), stable
  std::vector<int64_t> order(uint64_t purpose, uint64_t c) const {
    std::vector<double> u(K);
    for (int64_t k = 0; k < K; ++k) u[k] = bandit::u01(bandit::key(seed, bandit::ALGO_STREAM + purpose, static_cast<uint64_t>(k), c));
    std::vector<int64_t> o(K);
    std::iota(o.begin(), o.end(), 0);
    std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) { return u[a] < u[b]; });
    return o;
  }
};

// ------------------------------------------------------------------------------ VarDE
inline double pw(double x, double e) { return e == 2.0 ? x * x : std::pow(x, e); }

// VarDE's location estimates under mean_estimator mom / trimmed (the twin of
// icml26/ops/_ref/bai.py::RobustLoc), updated after each pull of arm k with its n-th reward x:
//   mom: the j-th reward (0-based) of an arm joins block j mod g (running mean per block);
//        loc = the median of the min(n, g) non-empty block means (mean of the two middle ones
//        when that number is even);
//   trimmed: loc = the mean of the rewards sorted ascending without the floor(trim n) smallest
//        and largest (scipy.stats.trim_mean's rule), summed in ascending order.
// Both are affine-equivariant, so decisions stay invariant under r -> a r + b.
struct RobustLoc {
  int kind;
  int64_t g;
  double trim;
  std::vector<double> loc, bm, tmp;
  std::vector<int64_t> bn;
  std::vector<std::vector<double>> xs;
  RobustLoc(int64_t K, int kind_, int64_t g_, double trim_) : kind(kind_), g(g_ < 1 ? 1 : g_), trim(trim_), loc(K, 0.0) {
    if (kind == 1) { bm.assign(K * g, 0.0); bn.assign(K * g, 0); }
    if (kind == 2) xs.resize(K);
  }
  void add(int64_t k, int64_t n, double x) {
    if (kind == 1) {
      const int64_t b = k * g + (n - 1) % g;
      bn[b] += 1;
      bm[b] = bm[b] + (x - bm[b]) / static_cast<double>(bn[b]);
      const int64_t used = std::min(n, g);
      tmp.assign(bm.begin() + k * g, bm.begin() + k * g + used);
      std::sort(tmp.begin(), tmp.end());
      loc[k] = used % 2 ? tmp[used / 2] : 0.5 * (tmp[used / 2 - 1] + tmp[used / 2]);
    } else {
      auto& v = xs[k];
      v.insert(std::upper_bound(v.begin(), v.end(), x), x);
      const int64_t cut = static_cast<int64_t>(trim * static_cast<double>(n));
      double s = 0.0;
      for (int64_t i = cut; i < n - cut; ++i) s += v[i];
      loc[k] = s / static_cast<double>(n - 2 * cut);
    }
  }
};

// Unnormalised influence weights w (a common factor does not change the argmax); mu: the arms'
// location estimates (the running means, or RobustLoc's).
void varde_weights(const Run& r, const std::vector<double>& mu, const double* p, double sc, std::vector<double>& w, std::vector<double>& tmp) {
  const int64_t K = r.K;
  const double tau = p[0] * sc;
  switch (static_cast<int>(p[3])) {
    case LSE: {
      double m = mu[0];
      for (int64_t k = 1; k < K; ++k) m = std::max(m, mu[k]);
      for (int64_t k = 0; k < K; ++k) w[k] = std::exp((mu[k] - m) / tau);
      break;
    }
    case CONSTANT: {
      const int64_t b = r.pick_max([&](int64_t k) { return mu[k]; }, [](int64_t) { return true; });
      for (int64_t k = 0; k < K; ++k) w[k] = 1.0;
      w[b] = p[7];
      break;
    }
    case SPARSEMAX: {
      for (int64_t k = 0; k < K; ++k) tmp[k] = mu[k] / tau;
      std::vector<double> zs(tmp.begin(), tmp.begin() + K);
      std::sort(zs.begin(), zs.end(), std::greater<double>());
      double cs = 0.0, cs_k = 0.0;
      int64_t kmax = 0;
      for (int64_t i = 0; i < K; ++i) {
        cs += zs[i];
        if (1.0 + static_cast<double>(i + 1) * zs[i] > cs) { kmax = i + 1; cs_k = cs; }
      }
      const double thr = (cs_k - 1.0) / static_cast<double>(kmax);
      for (int64_t k = 0; k < K; ++k) w[k] = std::max(tmp[k] - thr, 0.0);
      break;
    }
    case ENTMAX: {
      const double am1 = p[8] - 1.0, inv = 1.0 / am1;
      double zmax = -INF;
      for (int64_t k = 0; k < K; ++k) { tmp[k] = mu[k] / tau * am1; zmax = std::max(zmax, tmp[k]); }
      double lo = zmax - 1.0, hi = zmax - std::pow(1.0 / static_cast<double>(K), am1);
      for (int it = 0; it < 50; ++it) {
        const double mid = 0.5 * (lo + hi);
        double tot = 0.0;
        for (int64_t k = 0; k < K; ++k) tot = tot + pw(std::max(tmp[k] - mid, 0.0), inv);
        if (tot >= 1.0) lo = mid; else hi = mid;
      }
      for (int64_t k = 0; k < K; ++k) w[k] = pw(std::max(tmp[k] - lo, 0.0), inv);
      break;
    }
    case PAIRWISE: {
      const double pd = p[9] * sc;
      const double d2 = pd * pd;
      double s = mu[0];
      w[0] = 1.0;
      for (int64_t k = 1; k < K; ++k) {
        const double b = mu[k];
        const double h = 0.5 * (s - b);
        const double rr = std::sqrt(h * h + d2);
        const double da = 0.5 + h / (2.0 * rr), db = 0.5 - h / (2.0 * rr);
        for (int64_t i = 0; i < k; ++i) w[i] *= da;
        w[k] = db;
        s = 0.5 * (s + b) + rr;
      }
      break;
    }
    case POWER: {
      double m = mu[0];
      for (int64_t k = 1; k < K; ++k) m = std::min(m, mu[k]);
      for (int64_t k = 0; k < K; ++k) w[k] = std::pow(mu[k] - m + tau, p[10] - 1.0);
      break;
    }
    default:
      for (int64_t k = 0; k < K; ++k) w[k] = 1.0;
  }
}

int64_t run_varde(Run& r, int64_t budget, const double* p, int64_t np_) {
  const int64_t K = r.K;
  int64_t spent = 0;
  const int est = np_ >= 19 ? static_cast<int>(p[16]) : 0;
  RobustLoc rl(est != 0 ? K : 0, est, np_ >= 19 ? static_cast<int64_t>(p[17]) : 1, np_ >= 19 ? p[18] : 0.0);
  const std::vector<double>& mu = est != 0 ? rl.loc : r.mean;
  auto pull = [&](int64_t k) {
    const double x = r.pull(k);
    if (est != 0) rl.add(k, r.N[k], x);
  };
  if (est != 0) rl.loc.assign(K, 0.0);
  const int64_t rounds = static_cast<int64_t>(p[2]);
  for (int64_t rd = 0; rd < rounds && spent < budget; ++rd) {  // 1. warm start
    const auto o = r.order(P_WARM_ORDER, static_cast<uint64_t>(rd));
    for (int64_t i = 0; i < K && spent < budget; ++i) { pull(o[i]); ++spent; }
  }
  const bool use_w = p[5] != 0.0, use_v = p[6] != 0.0;
  const bool lse = static_cast<int>(p[3]) == LSE;
  const double ve = p[4];
  double floor_ = p[1], tau = p[0], sc_prev = 0.0;
  std::vector<double> w(K, 1.0), tmp(K), score(K);
  auto arm_score = [&](int64_t k) {
    if (r.N[k] < 2) return INF;
    const double n = static_cast<double>(r.N[k]);
    double v = use_v ? std::max(r.M2[k] / (n - 1.0), floor_) : 1.0;
    if (ve != 1.0) v = std::pow(v, ve);
    return w[k] * w[k] * v / (n * (n + 1.0));
  };
  // Scores are cached: a pull changes only the pulled arm's statistics, and with the LSE
  // smoother w_k = exp((mu_k - max mu) / tau) changes for other arms only when max mu does.
  // The values are the same as a full recomputation (same inputs, same operations).
  int64_t last = -1;
  double m_prev = 0.0;
  for (; spent < budget; ++spent) {  // 3. pull argmax of the variance drop
    bool all = last < 0;
    const double sc = r.scale();
    if (all || sc != sc_prev) {  // tau and var_floor in reward units: every score changes
      all = true;
      tau = p[0] * sc;
      floor_ = p[1] * sc * sc;
      sc_prev = sc;
    }
    if (use_w && lse) {
      double m = mu[0];
      for (int64_t k = 1; k < K; ++k) m = std::max(m, mu[k]);
      if (all || m != m_prev) {
        all = true;
        for (int64_t k = 0; k < K; ++k) w[k] = std::exp((mu[k] - m) / tau);
      } else {
        w[last] = std::exp((mu[last] - m) / tau);
      }
      m_prev = m;
    } else if (use_w) {
      varde_weights(r, mu, p, sc, w, tmp);
      all = true;
    }
    if (all) {
      for (int64_t k = 0; k < K; ++k) score[k] = arm_score(k);
    } else {
      score[last] = arm_score(last);
    }
    last = r.pick_max([&](int64_t k) { return score[k]; }, [](int64_t) { return true; });
    pull(last);
  }
  return r.pick_max([&](int64_t k) { return mu[k]; }, [](int64_t) { return true; });  // 4. (best_mean() for the running mean)
}

// ------------------------------------------------------------------------------ baselines
int64_t run_uniform(Run& r, int64_t budget) {
  const int64_t K = r.K;
  const auto o = r.order(P_UNIFORM_ORDER, 0);
  for (int64_t i = 0; i < K; ++i) {
    const int64_t c = budget / K + (i < budget % K ? 1 : 0);
    while (r.N[o[i]] < c) r.pull(o[i]);
  }
  return r.best_mean();
}

int64_t run_sr(Run& r, int64_t budget) {
  const int64_t K = r.K;
  const double lb = logbar(K);
  std::vector<char> active(K, 1);
  for (int64_t k = 1; k < K; ++k) {
    const int64_t nk = static_cast<int64_t>(std::ceil(static_cast<double>(budget - K) / (lb * static_cast<double>(K + 1 - k))));
    for (int64_t a = 0; a < K; ++a)
      if (active[a]) while (r.N[a] < nk) r.pull(a);
    const int64_t worst = r.pick_min([&](int64_t a) { return r.mean[a]; }, [&](int64_t a) { return active[a] != 0; });
    active[worst] = 0;
  }
  return r.pick_max([&](int64_t a) { return r.mean[a]; }, [&](int64_t a) { return active[a] != 0; });
}

int64_t run_sh(Run& r, int64_t budget) {
  const int64_t K = r.K, L = ceil_log2(K);
  std::vector<char> active(K, 1);
  std::vector<double> rmean(K);
  std::vector<int64_t> idx;
  int64_t size = K;
  for (int64_t round = 0; round < L; ++round) {
    const int64_t t_r = budget / (size * L);
    idx.clear();
    for (int64_t a = 0; a < K; ++a) {
      if (!active[a]) continue;
      idx.push_back(a);
      double m = 0.0;
      for (int64_t c = 1; c <= t_r; ++c) {
        const double x = r.pull(a);
        m = m + (x - m) / static_cast<double>(c);
      }
      rmean[a] = m;
    }
    const int64_t keep = (size + 1) / 2;
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      if (rmean[a] != rmean[b]) return rmean[a] > rmean[b];
      return r.tie[a] > r.tie[b];
    });
    for (size_t i = static_cast<size_t>(keep); i < idx.size(); ++i) active[idx[i]] = 0;
    size = keep;
  }
  for (int64_t a = 0; a < K; ++a)
    if (active[a]) return a;
  return 0;
}

int64_t run_ucbe(Run& r, int64_t budget, double a) {
  const int64_t K = r.K;
  std::vector<double> idx(K);
  for (int64_t t = 0; t < budget; ++t) {
    for (int64_t k = 0; k < K; ++k)
      idx[k] = r.N[k] == 0 ? INF : r.mean[k] + r.scale() * std::sqrt(a / static_cast<double>(r.N[k]));
    r.pull(r.pick_max([&](int64_t k) { return idx[k]; }, [](int64_t) { return true; }));
  }
  return r.best_mean();
}

int64_t run_ugape(Run& r, int64_t budget, double a) {
  const int64_t K = r.K;
  for (int64_t k = 0; k < K; ++k) r.pull(k);
  std::vector<double> beta(K), U(K), L(K), B(K);
  double best_b = INF;
  int64_t rec = 0;
  auto all = [](int64_t) { return true; };
  for (int64_t t = K; t < budget; ++t) {
    const double sc = r.scale();
    for (int64_t k = 0; k < K; ++k) {
      beta[k] = sc * std::sqrt(a / static_cast<double>(r.N[k]));
      U[k] = r.mean[k] + beta[k];
      L[k] = r.mean[k] - beta[k];
    }
    const int64_t i1 = r.pick_max([&](int64_t k) { return U[k]; }, all);
    double u2 = -INF;
    for (int64_t k = 0; k < K; ++k)
      if (k != i1) u2 = std::max(u2, U[k]);
    for (int64_t k = 0; k < K; ++k) B[k] = (k == i1 ? u2 : U[i1]) - L[k];
    const int64_t J = r.pick_min([&](int64_t k) { return B[k]; }, all);
    const int64_t u = r.pick_max([&](int64_t k) { return U[k]; }, [&](int64_t k) { return k != J; });
    const bool pickJ = beta[J] > beta[u] || (beta[J] == beta[u] && r.tie[J] > r.tie[u]);
    if (B[J] < best_b) { best_b = B[J]; rec = J; }
    r.pull(pickJ ? J : u);
  }
  return rec;
}

int64_t run_cr(Run& r, int64_t budget, bool conservative) {
  const int64_t K = r.K;
  for (int64_t k = 0; k < K; ++k) r.pull(k);
  std::vector<char> active(K, 1);
  std::vector<double> lbs(K + 1);
  for (int64_t j = 0; j <= K; ++j) lbs[j] = logbar(j);
  const double T = static_cast<double>(budget);
  auto is_active = [&](int64_t k) { return active[k] != 0; };
  for (int64_t t = K; t < budget; ++t) {
    int64_t j = 0, nrej_max = 0;
    bool any_rej = false;
    double n_act = 0.0, n_rej = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      if (active[k]) { ++j; n_act = n_act + static_cast<double>(r.N[k]); }
      else { any_rej = true; nrej_max = std::max(nrej_max, r.N[k]); n_rej = n_rej + static_cast<double>(r.N[k]); }
    }
    if (j > 2) {
      const int64_t l = r.pick_min([&](int64_t k) { return r.mean[k]; }, is_active);
      const bool elim_ok = !any_rej || r.N[l] > nrej_max;
      double ref;
      if (!conservative) {
        double tot = 0.0;
        for (int64_t k = 0; k < K; ++k)
          if (active[k] && k != l) tot = tot + r.mean[k];
        ref = tot / static_cast<double>(j - 1);
      } else {
        ref = INF;
        for (int64_t k = 0; k < K; ++k)
          if (active[k] && k != l) ref = std::min(ref, r.mean[k]);
      }
      const double gap = ref - r.mean[l];
      const double denom = T - n_rej;
      const double beta = denom > 0 ? lbs[j] * n_act / denom : INF;
      const double G = beta > 0 ? 1.0 / std::sqrt(beta) - 1.0 : INF;
      if (elim_ok && gap > G * r.scale()) active[l] = 0;
    }
    r.pull(r.pick_min([&](int64_t k) { return static_cast<double>(r.N[k]); }, is_active));
  }
  return r.pick_max([&](int64_t k) { return r.mean[k]; }, is_active);
}

// ------------------------------------------------------------------------------ ops
ArmTable make_table(const at::Tensor& kind, const at::Tensor& params, const at::Tensor& emp_values,
                    const at::Tensor& emp_offsets) {
  TORCH_CHECK(kind.dtype() == at::kInt && kind.dim() == 1 && kind.is_contiguous(), "kind must be contiguous (K,) int32");
  const int64_t K = kind.size(0);
  TORCH_CHECK(params.dtype() == at::kDouble && params.is_contiguous() && params.numel() == 3 * K, "params must be contiguous (K, 3) float64");
  TORCH_CHECK(emp_values.dtype() == at::kDouble && emp_values.is_contiguous(), "emp_values must be contiguous float64");
  TORCH_CHECK(emp_offsets.dtype() == at::kLong && emp_offsets.is_contiguous() && emp_offsets.numel() == K + 1, "emp_offsets must be contiguous (K+1,) int64");
  return ArmTable{kind.data_ptr<int32_t>(), params.data_ptr<double>(), emp_values.data_ptr<double>(),
                  emp_offsets.data_ptr<int64_t>(), K};
}

std::tuple<at::Tensor, at::Tensor> bai_fixed_budget(const at::Tensor& kind, const at::Tensor& params,
                                                    const at::Tensor& emp_values, const at::Tensor& emp_offsets,
                                                    const at::Tensor& seeds, int64_t algo, int64_t budget,
                                                    const at::Tensor& p) {
  const ArmTable t = make_table(kind, params, emp_values, emp_offsets);
  TORCH_CHECK(seeds.dtype() == at::kLong && seeds.dim() == 1 && seeds.is_contiguous(), "seeds must be contiguous (S,) int64");
  TORCH_CHECK(p.dtype() == at::kDouble && p.is_contiguous() && p.numel() >= 16, "p must be contiguous float64 with 16 entries");
  TORCH_CHECK(algo >= 0 && algo <= 6, "unknown algo code ", algo);
  TORCH_CHECK(budget >= t.K, "budget ", budget, " < K = ", t.K);
  const int64_t S = seeds.size(0), K = t.K;
  auto rec = at::empty({S}, at::kLong);
  auto cnt = at::zeros({S, K}, at::kLong);
  const int64_t* sd = seeds.data_ptr<int64_t>();
  int64_t* rp = rec.data_ptr<int64_t>();
  int64_t* cp = cnt.data_ptr<int64_t>();
  const double* pp = p.data_ptr<double>();
  const int64_t np_ = p.numel();
  TORCH_CHECK(np_ < 19 || (pp[16] >= 0.0 && pp[16] <= 2.0 && pp[17] >= 1.0 && pp[18] >= 0.0 && pp[18] < 0.5), "bad mean_estimator parameters");
  at::parallel_for(0, S, 1, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      Run r(t, static_cast<uint64_t>(sd[s]), cp + s * K, pp[14], pp[15]);
      int64_t out = 0;
      switch (algo) {
        case VARDE: out = run_varde(r, budget, pp, np_); break;
        case UNIFORM: out = run_uniform(r, budget); break;
        case SR: out = run_sr(r, budget); break;
        case SH: out = run_sh(r, budget); break;
        case UCBE: out = run_ucbe(r, budget, pp[11]); break;
        case UGAPE: out = run_ugape(r, budget, pp[12]); break;
        case CR: out = run_cr(r, budget, pp[13] != 0.0); break;
      }
      rp[s] = out;
    }
  });
  return {rec, cnt};
}

at::Tensor bandit_sample(const at::Tensor& kind, const at::Tensor& params, const at::Tensor& emp_values,
                         const at::Tensor& emp_offsets, const at::Tensor& seeds, const at::Tensor& arms,
                         const at::Tensor& idx) {
  const ArmTable t = make_table(kind, params, emp_values, emp_offsets);
  TORCH_CHECK(seeds.dtype() == at::kLong && arms.dtype() == at::kLong && idx.dtype() == at::kLong,
              "seeds, arms, idx must be int64");
  TORCH_CHECK(seeds.is_contiguous() && arms.is_contiguous() && idx.is_contiguous(), "inputs must be contiguous");
  const int64_t S = seeds.numel();
  TORCH_CHECK(arms.numel() == S && idx.numel() == S, "seeds, arms, idx must have the same size");
  auto out = at::empty({S}, at::kDouble);
  const int64_t *sd = seeds.data_ptr<int64_t>(), *ar = arms.data_ptr<int64_t>(), *ix = idx.data_ptr<int64_t>();
  double* op = out.data_ptr<double>();
  for (int64_t s = 0; s < S; ++s) TORCH_CHECK(ar[s] >= 0 && ar[s] < t.K, "arm out of range");
  at::parallel_for(0, S, 1024, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) op[s] = bandit::sample(t, static_cast<uint64_t>(sd[s]), ar[s], ix[s]);
  });
  return out;
}

}  // namespace bai
}  // namespace icml26

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("bai_fixed_budget(Tensor kind, Tensor params, Tensor emp_values, Tensor emp_offsets, Tensor seeds, int algo, int budget, Tensor p) -> (Tensor, Tensor)");
  m.def("bandit_sample(Tensor kind, Tensor params, Tensor emp_values, Tensor emp_offsets, Tensor seeds, Tensor arms, Tensor idx) -> Tensor");
  m.impl("bai_fixed_budget", c10::DispatchKey::CPU, TORCH_FN(icml26::bai::bai_fixed_budget));
  m.impl("bandit_sample", c10::DispatchKey::CPU, TORCH_FN(icml26::bai::bandit_sample));
}
