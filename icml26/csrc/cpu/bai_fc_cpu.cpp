// Fixed-confidence best-arm identification (icml26 bai --delta): one run per seed, seeds in
// parallel (at::parallel_for). Algorithms, equations and sources are documented in
// icml26/ops/bai_fc.py; the NumPy twin icml26/ops/_ref/bai_fc.py performs the same
// floating-point operations in the same order (sequential sums over arms, Welford updates,
// the same bisection iterates), so that both give the same pulls and recommendations.
//
// Op: icml26::bai_fc_run(kind, params, emp_values, emp_offsets, seeds, algo, fparams, iparams,
//                        delta, budget, max_pulls) -> (recommendation, counts, pulls, stopped)
//   algo: 0 varde, 1 uniform, 2 lucb, 3 kl-lucb, 4 track-and-stop, 5 top-two-ts
//   fparams (float64): var_floor, tau, variance_exponent, tts_beta, budget_delta, reward_lo,
//                      reward_width (> 0: rewards normalised to (x - lo) / width at the draw,
//                      scale s = 1; 0: rewards as drawn, s = max - min observed so far, 1 while
//                      0); var_floor is in units of s^2 and tau of s (affine invariance)
//   iparams (int64):   warm_start, tas_bisection_iters, tts_max_resample, threshold (0 heuristic,
//                      1 theory), noise (0 bernoulli, 1 gaussian)
//   delta > 0: fixed confidence (stop by the rule, at most max_pulls); else budget pulls exactly.
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "bandit_sampler.h"

namespace icml26 {
namespace bai_fc {

using bandit::ALGO_STREAM;
using bandit::key;
using bandit::u01;
using bandit::u01_open;

constexpr uint64_t P_WARM = 1, P_COIN = 2, P_POST = 3, P_CHAL = 4;
constexpr int TN_TRIES = 64;
constexpr double KL_EPS = 1e-12;
constexpr int KL_LUCB_ITERS = 32;
constexpr int GAMMA_TRIES = 64;
constexpr double LUCB_K1 = 1.25, KLLUCB_K1 = 405.5, KLLUCB_ALPHA = 1.1;
constexpr double INF = std::numeric_limits<double>::infinity();

struct Params {
  int algo, noise, thr, warm, tas_iters;
  int64_t tts_cap;
  double var_floor, tau, ve, tts_beta, budget_delta, delta, lo, width;
  bool fc;
  int64_t limit;
};

inline double clip01(double x) { return std::fmin(std::fmax(x, KL_EPS), 1.0 - KL_EPS); }

inline double kl_bern(double x, double y) {
  x = clip01(x);
  y = clip01(y);
  return x * (std::log(x) - std::log(y)) + (1.0 - x) * (std::log(1.0 - x) - std::log(1.0 - y));
}

// argmax of v over eligible arms (elig may be null); exact ties -> larger tie rank
inline int64_t pick_max(const double* v, const double* tie, const bool* elig, int64_t K) {
  double best = -INF;
  for (int64_t k = 0; k < K; ++k)
    if ((!elig || elig[k]) && v[k] > best) best = v[k];
  int64_t arg = 0;
  double br = -1.0;
  bool any = false;
  for (int64_t k = 0; k < K; ++k) {
    const bool cand = (!elig || elig[k]) && v[k] == best;
    const double r = cand ? tie[k] : -1.0;
    if (!any || r > br) {
      br = r;
      arg = k;
      any = true;
    }
  }
  return arg;
}

inline double glr_threshold(double t, double delta, int64_t K, int kind) {
  if (kind == 0) return std::log((1.0 + std::log(t)) / delta);
  return std::log(2.0 * static_cast<double>(K - 1) / delta) + std::log(t);
}

inline double lucb_threshold(double t, double delta, int64_t K, int kind, bool kl) {
  if (kind == 0) return std::log((1.0 + std::log(t)) / delta);
  if (kl) return std::log(KLLUCB_K1 * static_cast<double>(K) / delta) + KLLUCB_ALPHA * std::log(t);
  return std::log(LUCB_K1 * static_cast<double>(K) / delta) + 4.0 * std::log(t);
}

inline double normal(uint64_t seed, uint64_t t, uint64_t c) {
  const uint64_t st = ALGO_STREAM + P_POST;
  const double u1 = u01_open(key(seed, st, t, c));
  const double u2 = u01(key(seed, st, t, c + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Marsaglia & Tsang (2000), shape >= 1
inline double gamma_draw(uint64_t seed, uint64_t t, uint64_t c0, double shape) {
  const uint64_t st = ALGO_STREAM + P_POST;
  const double d = shape - 1.0 / 3.0;
  const double cc = 1.0 / std::sqrt(9.0 * d);
  for (int j = 0; j < GAMMA_TRIES; ++j) {
    const uint64_t cj = c0 + 3ULL * static_cast<uint64_t>(j);
    const double z = normal(seed, t, cj);
    const double u = u01_open(key(seed, st, t, cj + 2));
    double v = 1.0 + cc * z;
    v = v * v * v;
    if (v > 0.0 && std::log(u) < 0.5 * z * z + d - d * v + d * std::log(v)) return d * v;
  }
  return d;
}

// Box-Muller standard normal from key(seed, ALGO+stream, t, c) and (.., c + 1)
inline double normal_in(uint64_t seed, uint64_t stream, uint64_t t, uint64_t c) {
  const uint64_t st = ALGO_STREAM + stream;
  const double u1 = u01_open(key(seed, st, t, c));
  const double u2 = u01(key(seed, st, t, c + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// log Phi(x): log(erfc(-x / sqrt 2) / 2), the asymptotic series below x = -30
inline double log_ndtr(double x) {
  if (x > -30.0) return std::log(0.5 * std::erfc(-x / 1.4142135623730951));
  const double y = 1.0 / (x * x);
  return -0.5 * x * x - std::log(-x) - 0.9189385332046728 + std::log1p(y * (-1.0 + y * (3.0 - 15.0 * y)));
}

// Z ~ N(0, 1) conditioned on Z > a: normal rejection for a < 0.5, else Robert (1995)'s
// exponential proposal; counters c0 .. c0 + 2 TN_TRIES - 1 of stream P_CHAL
inline double trunc_normal(uint64_t seed, uint64_t t, uint64_t c0, double a) {
  const uint64_t st = ALGO_STREAM + P_CHAL;
  if (a < 0.5) {
    for (int j = 0; j < TN_TRIES; ++j) {
      const double z = normal_in(seed, P_CHAL, t, c0 + 2ULL * static_cast<uint64_t>(j));
      if (z > a) return z;
    }
    return a;
  }
  const double al = 0.5 * (a + std::sqrt(a * a + 4.0));
  for (int j = 0; j < TN_TRIES; ++j) {
    const uint64_t cj = c0 + 2ULL * static_cast<uint64_t>(j);
    const double z = a - std::log(u01_open(key(seed, st, t, cj))) / al;
    const double d = z - al;
    if (u01(key(seed, st, t, cj + 1)) <= std::exp(-0.5 * d * d)) return z;
  }
  return a;
}

struct Run {
  const bandit::ArmTable& tab;
  const Params& P;
  uint64_t seed;
  int64_t K;
  std::vector<int64_t> N;
  std::vector<double> mean, M2, sums, tie, var, buf, buf2, buf3;
  std::unique_ptr<bool[]> elig;
  double obs_min = INF, obs_max = -INF;

  double scale() const {
    if (P.width > 0.0) return 1.0;
    const double r = obs_max - obs_min;
    return r > 0.0 ? r : 1.0;
  }

  Run(const bandit::ArmTable& t, const Params& p, uint64_t s)
      : tab(t), P(p), seed(s), K(t.K), N(K, 0), mean(K, 0.0), M2(K, 0.0), sums(K, 0.0), tie(K), var(K),
        buf(K), buf2(K), buf3(K), elig(new bool[K]) {
    for (int64_t k = 0; k < K; ++k) tie[k] = bandit::tie_rank(seed, k);
  }

  void update_var() {
    const double sc = scale(), vf = P.var_floor * sc * sc;
    for (int64_t k = 0; k < K; ++k)
      var[k] = N[k] < 2 ? INF : std::fmax(M2[k] / (static_cast<double>(N[k]) - 1.0), vf);
  }

  double glr_stat(int64_t a) const {
    const double Na = static_cast<double>(N[a]), ma = mean[a];
    double zmin = INF;
    for (int64_t b = 0; b < K; ++b) {
      if (b == a) continue;
      const double Nb = static_cast<double>(N[b]), mb = mean[b];
      double z;
      if (mb >= ma) {
        z = 0.0;
      } else if (P.noise == 0) {
        const double m = (Na * ma + Nb * mb) / (Na + Nb);
        z = Na * kl_bern(ma, m) + Nb * kl_bern(mb, m);
      } else {
        const double g = ma - mb;
        z = g * g / (2.0 * (var[a] / Na + var[b] / Nb));
      }
      if (z < zmin) zmin = z;
    }
    return zmin;
  }

  // KL bound by bisection (upper: max q in [mu,1]; lower: min q in [0,mu]) with N d(mu,q) <= beta
  double kl_bound(double mu, double n, double beta, bool upper) const {
    const double x = clip01(mu), lx = std::log(x), l1x = std::log(1.0 - x);
    double lo = upper ? mu : 0.0, hi = upper ? 1.0 : mu;
    for (int i = 0; i < KL_LUCB_ITERS; ++i) {
      const double q = 0.5 * (lo + hi);
      const double y = clip01(q);
      const bool inside = n * (x * (lx - std::log(y)) + (1.0 - x) * (l1x - std::log(1.0 - y))) <= beta;
      if (upper) {
        if (inside) lo = q; else hi = q;
      } else {
        if (inside) hi = q; else lo = q;
      }
    }
    return upper ? lo : hi;
  }

  // Garivier & Kaufmann (2016) w* by nested bisection into w (K)
  void wstar(int64_t a, double* w) {
    const double ma = mean[a];
    bool degenerate = false;
    for (int64_t b = 0; b < K; ++b)
      if (b != a && ma - mean[b] <= 1e-12) degenerate = true;
    if (degenerate) {
      for (int64_t k = 0; k < K; ++k) w[k] = 1.0 / static_cast<double>(K);
      return;
    }
    const int iters = P.tas_iters;
    double* x = buf2.data();
    if (P.noise == 0) {
      const double mA = clip01(ma);
      const double lA = std::log(mA), l1A = std::log(1.0 - mA);
      double* mb = buf3.data();
      std::vector<double> lb(K), l1b(K);
      double ymax = INF;
      for (int64_t b = 0; b < K; ++b) {
        mb[b] = clip01(mean[b]);
        lb[b] = std::log(mb[b]);
        l1b[b] = std::log(1.0 - mb[b]);
        if (b != a) {
          const double d = kl_bern(mA, mb[b]);
          if (d < ymax) ymax = d;
        }
      }
      auto solve = [&](double y, int64_t b, double& xo) -> double {  // returns ratio
        double lo = mb[b], hi = mA;
        for (int i = 0; i < iters; ++i) {
          const double m = 0.5 * (lo + hi);
          const double lm = std::log(m), l1m = std::log(1.0 - m);
          const double xx = (mA - m) / (m - mb[b]);
          const double g = (mA * (lA - lm) + (1.0 - mA) * (l1A - l1m)) + xx * (mb[b] * (lb[b] - lm) + (1.0 - mb[b]) * (l1b[b] - l1m));
          if (g > y) lo = m; else hi = m;
        }
        const double m = 0.5 * (lo + hi);
        const double lm = std::log(m), l1m = std::log(1.0 - m);
        xo = (mA - m) / (m - mb[b]);
        return (mA * (lA - lm) + (1.0 - mA) * (l1A - l1m)) / (mb[b] * (lb[b] - lm) + (1.0 - mb[b]) * (l1b[b] - l1m));
      };
      double lo = 0.0, hi = ymax;
      for (int it = 0; it < iters; ++it) {
        const double y = 0.5 * (lo + hi);
        double F = 0.0, xd;
        for (int64_t b = 0; b < K; ++b) F = F + (b == a ? 0.0 : solve(y, b, xd));
        if (F < 1.0) lo = y; else hi = y;
      }
      const double y = 0.5 * (lo + hi);
      for (int64_t b = 0; b < K; ++b) {
        if (b == a) x[b] = 1.0;
        else solve(y, b, x[b]);
      }
    } else {
      const double va = var[a];
      double ymax = INF;
      for (int64_t b = 0; b < K; ++b) {
        if (b == a) continue;
        const double g = ma - mean[b];
        const double d = g * g / (2.0 * va);
        if (d < ymax) ymax = d;
      }
      double lo = 0.0, hi = ymax;
      for (int it = 0; it < iters; ++it) {
        const double y = 0.5 * (lo + hi);
        double F = 0.0;
        for (int64_t b = 0; b < K; ++b) {
          double r = 0.0;
          if (b != a) {
            const double g = ma - mean[b];
            const double xx = 2.0 * y * var[b] / (g * g - 2.0 * y * va);
            r = xx * xx * va / var[b];
          }
          F = F + r;
        }
        if (F < 1.0) lo = y; else hi = y;
      }
      const double y = 0.5 * (lo + hi);
      for (int64_t b = 0; b < K; ++b) {
        if (b == a) { x[b] = 1.0; continue; }
        const double g = ma - mean[b];
        x[b] = 2.0 * y * var[b] / (g * g - 2.0 * y * va);
      }
    }
    double tot = 0.0;
    for (int64_t k = 0; k < K; ++k) tot = tot + x[k];
    for (int64_t k = 0; k < K; ++k) w[k] = x[k] / tot;
  }

  void posterior(uint64_t t, uint64_t r, double* th) const {
    for (int64_t k = 0; k < K; ++k) {
      const uint64_t base = (r * static_cast<uint64_t>(K) + static_cast<uint64_t>(k)) * static_cast<uint64_t>(2 * 3 * GAMMA_TRIES);
      if (P.noise == 0) {
        const double a = std::fmax(1.0 + sums[k], 1.0);
        const double b = std::fmax(1.0 + static_cast<double>(N[k]) - sums[k], 1.0);
        const double g1 = gamma_draw(seed, t, base, a);
        const double g2 = gamma_draw(seed, t, base + 3ULL * GAMMA_TRIES, b);
        th[k] = g1 / (g1 + g2);
      } else {
        th[k] = mean[k] + std::sqrt(var[k] / static_cast<double>(N[k])) * normal(seed, t, base);
      }
    }
  }

  // Top-two TS challenger under the gaussian model, drawn from the posterior conditioned on
  // argmax != lead (Karp-Luby-Madras union sampler, exact; see icml26/ops/bai_fc.py)
  int64_t gauss_challenger(uint64_t t, int64_t lead, double* th) {
    double* s2 = buf2.data();
    double* w = buf3.data();
    for (int64_t k = 0; k < K; ++k) s2[k] = var[k] / static_cast<double>(N[k]);
    double lmax = -INF;
    for (int64_t k = 0; k < K; ++k) {
      if (k == lead) continue;
      w[k] = log_ndtr((mean[k] - mean[lead]) / std::sqrt(s2[k] + s2[lead]));
      if (w[k] > lmax) lmax = w[k];
    }
    double tot = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      w[k] = k == lead ? 0.0 : std::exp(w[k] - lmax);
      tot = tot + w[k];
    }
    for (int64_t k = 0; k < K; ++k) elig[k] = k != lead;
    const uint64_t st = ALGO_STREAM + P_CHAL, Ku = static_cast<uint64_t>(K);
    const uint64_t stride = 4ULL + 2ULL * TN_TRIES + 2ULL * Ku;
    for (int64_t r = 0; r < P.tts_cap; ++r) {
      const uint64_t base = static_cast<uint64_t>(r) * stride;
      const double u = u01(key(seed, st, t, base)) * tot;
      int64_t c = -1;
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        if (k == lead) continue;
        acc = acc + w[k];
        c = k;
        if (u < acc) break;
      }
      const double m = mean[c] - mean[lead], v = s2[c] + s2[lead], sv = std::sqrt(v);
      const double d = m + sv * trunc_normal(seed, t, base + 1, -m / sv);
      const double z2 = normal_in(seed, P_CHAL, t, base + 1 + 2ULL * TN_TRIES);
      th[c] = mean[c] + s2[c] / v * (d - m) + std::sqrt(s2[c] * s2[lead] / v) * z2;
      th[lead] = th[c] - d;
      int64_t cnt = 0;
      const uint64_t zc = base + 3 + 2ULL * TN_TRIES;
      for (int64_t k = 0; k < K; ++k) {
        if (k == lead) continue;
        if (k != c) th[k] = mean[k] + std::sqrt(s2[k]) * normal_in(seed, P_CHAL, t, zc + 2ULL * static_cast<uint64_t>(k));
        if (th[k] > th[lead]) ++cnt;
      }
      if (cnt < 1) cnt = 1;
      const double ua = u01(key(seed, st, t, base + 3 + 2ULL * TN_TRIES + 2ULL * Ku));
      if (ua * static_cast<double>(cnt) < 1.0 || r + 1 == P.tts_cap) return pick_max(th, tie.data(), elig.get(), K);
    }
    return lead;  // unreachable (tts_cap >= 1)
  }

  void pull(int64_t k) {
    const int64_t j = N[k];
    double x = bandit::sample(tab, seed, k, j);
    if (P.width > 0.0) x = (x - P.lo) / P.width;
    obs_min = std::fmin(obs_min, x);
    obs_max = std::fmax(obs_max, x);
    const int64_t nn = j + 1;
    double mo = mean[k];
    const double d = x - mo;
    mo = mo + d / static_cast<double>(nn);
    mean[k] = mo;
    M2[k] = M2[k] + d * (x - mo);
    N[k] = nn;
    sums[k] += x;
  }

  // returns stopped
  bool go() {
    const bool lucb = P.algo == 2 || P.algo == 3;
    int64_t pend = -1;
    double* th = buf.data();
    while (true) {
      int64_t t = 0, nmin = std::numeric_limits<int64_t>::max();
      for (int64_t k = 0; k < K; ++k) {
        t += N[k];
        if (N[k] < nmin) nmin = N[k];
      }
      const bool warming = nmin < P.warm;
      const int64_t best = pick_max(mean.data(), tie.data(), nullptr, K);
      update_var();
      const double tt = static_cast<double>(t < 1 ? 1 : t);
      // 1. stopping rule
      int64_t chal = -1;
      bool stop = false;
      if (lucb && !warming) {
        const bool kl = P.algo == 3;
        const double beta = lucb_threshold(tt, P.fc ? P.delta : P.budget_delta, K, P.thr, kl);
        double* U = buf.data();
        double* L = buf3.data();
        for (int64_t k = 0; k < K; ++k) {
          const double n = static_cast<double>(N[k]);
          if (P.noise == 0 && kl) {
            U[k] = kl_bound(mean[k], n, beta, true);
            L[k] = k == best ? kl_bound(mean[k], n, beta, false) : 0.0;
          } else {
            const double vv = P.noise == 0 ? 0.25 : var[k];
            const double rad = std::sqrt(2.0 * vv * beta / n);
            U[k] = mean[k] + rad;
            L[k] = mean[k] - rad;
          }
          elig[k] = k != best;
        }
        chal = pick_max(U, tie.data(), elig.get(), K);
        if (P.fc) stop = pend < 0 && L[best] > U[chal];
      } else if (!lucb && P.fc && !warming) {
        stop = glr_stat(best) > glr_threshold(tt, P.delta, K, P.thr);
      }
      if (stop) return true;
      if (t >= P.limit) return false;
      // 2. sampling rule
      int64_t arm;
      if (warming) {
        for (int64_t k = 0; k < K; ++k) {
          th[k] = u01(key(seed, ALGO_STREAM + P_WARM, static_cast<uint64_t>(nmin), static_cast<uint64_t>(k)));
          elig[k] = N[k] == nmin;
        }
        arm = pick_max(th, tie.data(), elig.get(), K);
      } else {
        switch (P.algo) {
          case 0: {  // VarDE
            double mx = -INF;
            for (int64_t k = 0; k < K; ++k) mx = std::fmax(mx, mean[k]);
            const double sc = scale(), tau = P.tau * sc, vf = P.var_floor * sc * sc;
            for (int64_t k = 0; k < K; ++k) {
              const double Nf = static_cast<double>(N[k]);
              const double w = std::exp((mean[k] - mx) / tau);
              double v = std::fmax(M2[k] / (Nf - 1.0), vf);
              if (P.ve != 1.0) v = std::pow(v, P.ve);
              th[k] = N[k] < 2 ? INF : w * w * v / (Nf * (Nf + 1.0));
            }
            arm = pick_max(th, tie.data(), nullptr, K);
            break;
          }
          case 1: {
            for (int64_t k = 0; k < K; ++k) th[k] = -static_cast<double>(N[k]);
            arm = pick_max(th, tie.data(), nullptr, K);
            break;
          }
          case 2:
          case 3: {
            if (pend >= 0) {
              arm = pend;
              pend = -1;
            } else {
              arm = best;
              pend = chal;
            }
            break;
          }
          case 4: {  // Track-and-Stop
            const double tf = static_cast<double>(t);
            const double lim = std::sqrt(tf) - 0.5 * static_cast<double>(K);
            bool forced = false;
            for (int64_t k = 0; k < K; ++k) {
              elig[k] = static_cast<double>(N[k]) < lim;
              forced = forced || elig[k];
              th[k] = -static_cast<double>(N[k]);
            }
            if (forced) {
              arm = pick_max(th, tie.data(), elig.get(), K);
            } else {
              double* w = buf.data();
              wstar(best, w);
              for (int64_t k = 0; k < K; ++k) w[k] = tf * w[k] - static_cast<double>(N[k]);
              arm = pick_max(w, tie.data(), nullptr, K);
            }
            break;
          }
          default: {  // top-two Thompson sampling
            const uint64_t tu = static_cast<uint64_t>(t);
            posterior(tu, 0, th);
            const int64_t lead = pick_max(th, tie.data(), nullptr, K);
            const bool coin = u01(key(seed, ALGO_STREAM + P_COIN, tu, 0)) < P.tts_beta;
            arm = lead;
            if (!coin && P.noise == 1) {
              arm = gauss_challenger(tu, lead, th);
            } else if (!coin) {
              for (int64_t r = 1; r <= P.tts_cap; ++r) {
                posterior(tu, static_cast<uint64_t>(r), th);
                int64_t j = pick_max(th, tie.data(), nullptr, K);
                if (j == lead && r == P.tts_cap) {
                  for (int64_t k = 0; k < K; ++k) elig[k] = k != lead;
                  j = pick_max(th, tie.data(), elig.get(), K);
                }
                if (j != lead) {
                  arm = j;
                  break;
                }
              }
            }
            break;
          }
        }
      }
      // 3. pull
      pull(arm);
    }
  }
};

std::vector<at::Tensor> bai_fc_run(const at::Tensor& kind, const at::Tensor& params, const at::Tensor& emp_values,
                                   const at::Tensor& emp_offsets, const at::Tensor& seeds, int64_t algo,
                                   const at::Tensor& fparams, const at::Tensor& iparams, double delta, int64_t budget,
                                   int64_t max_pulls) {
  TORCH_CHECK(kind.scalar_type() == at::kInt && params.scalar_type() == at::kDouble &&
                  emp_values.scalar_type() == at::kDouble && emp_offsets.scalar_type() == at::kLong &&
                  seeds.scalar_type() == at::kLong && fparams.scalar_type() == at::kDouble &&
                  iparams.scalar_type() == at::kLong,
              "bai_fc_run: wrong dtypes");
  TORCH_CHECK(algo >= 0 && algo <= 5, "bai_fc_run: algo must be in [0, 5]");
  TORCH_CHECK(fparams.numel() == 7 && iparams.numel() == 5, "bai_fc_run: fparams must have 7 entries, iparams 5");
  auto kd = kind.contiguous(), pr = params.contiguous(), ev = emp_values.contiguous(), eo = emp_offsets.contiguous();
  auto sd = seeds.contiguous();
  auto fp = fparams.contiguous(), ip = iparams.contiguous();
  const int64_t K = kd.numel(), S = sd.numel();
  TORCH_CHECK(pr.numel() == 3 * K && eo.numel() == K + 1, "bai_fc_run: table shapes");
  const double* f = fp.data_ptr<double>();
  const int64_t* i = ip.data_ptr<int64_t>();
  Params P;
  P.algo = static_cast<int>(algo);
  P.var_floor = f[0];
  P.tau = f[1];
  P.ve = f[2];
  P.tts_beta = f[3];
  P.budget_delta = f[4];
  P.lo = f[5];
  P.width = f[6];
  P.warm = static_cast<int>(i[0]);
  P.tas_iters = static_cast<int>(i[1]);
  P.tts_cap = i[2];
  P.thr = static_cast<int>(i[3]);
  P.noise = static_cast<int>(i[4]);
  P.fc = delta > 0.0;
  P.delta = delta;
  P.limit = P.fc ? max_pulls : budget;
  bandit::ArmTable tab{kd.data_ptr<int32_t>(), pr.data_ptr<double>(), ev.data_ptr<double>(), eo.data_ptr<int64_t>(), K};
  auto rec = at::zeros({S}, at::kLong);
  auto counts = at::zeros({S, K}, at::kLong);
  auto pulls = at::zeros({S}, at::kLong);
  auto stopped = at::zeros({S}, at::kBool);
  const int64_t* sp = sd.data_ptr<int64_t>();
  int64_t* rp = rec.data_ptr<int64_t>();
  int64_t* cp = counts.data_ptr<int64_t>();
  int64_t* pp = pulls.data_ptr<int64_t>();
  bool* stp = stopped.data_ptr<bool>();
  at::parallel_for(0, S, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      Run run(tab, P, static_cast<uint64_t>(sp[s]));
      stp[s] = run.go();
      int64_t tot = 0;
      for (int64_t k = 0; k < K; ++k) {
        cp[s * K + k] = run.N[k];
        tot += run.N[k];
      }
      pp[s] = tot;
      rp[s] = pick_max(run.mean.data(), run.tie.data(), nullptr, K);
    }
  });
  return {rec, counts, pulls, stopped};
}

}  // namespace bai_fc
}  // namespace icml26

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("bai_fc_run(Tensor kind, Tensor params, Tensor emp_values, Tensor emp_offsets, Tensor seeds, int algo, "
        "Tensor fparams, Tensor iparams, float delta, int budget, int max_pulls) -> Tensor[]");
  m.impl("bai_fc_run", c10::DispatchKey::CPU, TORCH_FN(icml26::bai_fc::bai_fc_run));
}
