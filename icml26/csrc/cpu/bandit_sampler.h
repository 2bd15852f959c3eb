// Counter-based reward sampler shared by the bandit kernels (bai, bai_fc).
//
// Reward of the j-th pull (0-based) of arm k in run `seed` is a pure function of
// (seed, k, j): every algorithm sees the same reward stream per arm (common random
// numbers), runs are reproducible, and the NumPy twin in icml26/ops/_ref/bandit_sampler.py
// reproduces the same values (bit-exact for bernoulli/empirical; to ~1 ulp of libm for
// the others).
//
// Arm kinds and params (K x 3, row-major):
//   0 bernoulli   (p, -, -)
//   1 gaussian    (mean, std, -)
//   2 student_t   (mean, scale, df)  Bailey's polar method (Bailey 1994, Math. Comp. 62)
//   3 lognormal   (mean, sigma, -)   exp(m + sigma z), m = log(mean) - sigma^2 / 2
//   4 empirical   (-, -, -)          uniform resampling of emp_values[off[k] : off[k+1]]
#pragma once
#include <cmath>
#include <cstdint>

namespace icml26 {
namespace bandit {

constexpr uint64_t ALGO_STREAM = 1ULL << 40;  // streams >= this are for algorithm randomness

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// key(seed, stream, idx, c) = sm(sm(sm(seed) ^ (stream * M + c)) ^ idx)
inline uint64_t key(uint64_t seed, uint64_t stream, uint64_t idx, uint64_t c) {
  uint64_t a = splitmix64(seed);
  uint64_t b = splitmix64(a ^ (stream * 0xD1B54A32D192ED03ULL + c));
  return splitmix64(b ^ idx);
}

// [0, 1)
inline double u01(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }
// (0, 1)
inline double u01_open(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53; }

inline double std_normal(uint64_t seed, uint64_t stream, uint64_t idx) {
  const double u1 = u01_open(key(seed, stream, idx, 0));
  const double u2 = u01(key(seed, stream, idx, 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

inline double std_student_t(uint64_t seed, uint64_t stream, uint64_t idx, double df) {
  for (uint64_t a = 0; a < 64; ++a) {
    const double U = 2.0 * u01(key(seed, stream, idx, 2 + 2 * a)) - 1.0;
    const double V = 2.0 * u01(key(seed, stream, idx, 3 + 2 * a)) - 1.0;
    const double W = U * U + V * V;
    if (W > 0.0 && W <= 1.0) return U * std::sqrt(df * (std::pow(W, -2.0 / df) - 1.0) / W);
  }
  return 0.0;  // probability (1 - pi/4)^64 < 1e-42
}

struct ArmTable {
  const int32_t* kind;        // (K,)
  const double* params;       // (K, 3)
  const double* emp_values;   // (M,)
  const int64_t* emp_offsets; // (K + 1,)
  int64_t K;
};

inline double sample(const ArmTable& t, uint64_t seed, int64_t k, int64_t j) {
  const double* p = t.params + 3 * k;
  const uint64_t s = static_cast<uint64_t>(k), i = static_cast<uint64_t>(j);
  switch (t.kind[k]) {
    case 0: return u01(key(seed, s, i, 0)) < p[0] ? 1.0 : 0.0;
    case 1: return p[0] + p[1] * std_normal(seed, s, i);
    case 2: return p[0] + p[1] * std_student_t(seed, s, i, p[2]);
    case 3: return std::exp(std::log(p[0]) - 0.5 * p[1] * p[1] + p[1] * std_normal(seed, s, i));
    case 4: {
      const int64_t lo = t.emp_offsets[k], n = t.emp_offsets[k + 1] - lo;
      int64_t r = static_cast<int64_t>(u01(key(seed, s, i, 0)) * static_cast<double>(n));
      if (r >= n) r = n - 1;
      return t.emp_values[lo + r];
    }
    default: return 0.0;
  }
}

// Random priority of arm k in run `seed`, used to break exact ties (larger wins), so
// that no arm position is favoured.
inline double tie_rank(uint64_t seed, int64_t k) { return u01(key(seed, ALGO_STREAM, static_cast<uint64_t>(k), 0)); }

}  // namespace bandit
}  // namespace icml26
