// MuSe causal attention forward and backward for CPU (icml26 muse; the torch twin and test oracle
// is icml26/ops/_ref/muse.py::muse_attention; the wrapper and the autograd node
// MuseFunction are in icml26/ops/muse.py). Ops: muse_forward (out),
// muse_forward_lse (out and each row's log-sum-exp, saved for training), muse_backward
// (dq, dk, dv; see its comment below). The forward:
//
// Inputs: q (B, H, N, D), k, v (B, Hkv, N, D) float32 contiguous, N a multiple of the block size
// (the wrapper zero-pads, as the twin does). Causal by construction: the output of query i depends
// on tokens <= i only. Per head and block of bt tokens:
//   1. keys are put in cluster order by recursive balanced 2-means (median split of the projection
//      on the difference of the half means, `iters` times per split, stable sort: the twin's order);
//      `block` (variant 2) keeps contiguous groups. A block's key clusters serve later blocks only;
//   2. query block t >= 1 uses the centroids of block t-1's balanced query clusters; every query joins
//      its nearest (query_groups); `block`: every query is its own group;
//   3. for each centroid a: the tilted summary of every past key cluster b: L_ab = log sum_j
//      exp(c qbar.k_j), k~_ab, v~_ab (variants 0, 1); `block` gates on c q.mean(k_b) per query;
//   4. far field of query q in a: scores L_ab + c (q - qbar).k~_ab over the past clusters, values v~_ab;
//   5. retrieval: each query's own top-r past clusters by its far-field score (or its gate) are
//      attended exactly and dropped from its far field; one softmax over retrieval + far field,
//      merged by log-sum-exp with exact causal attention inside block t.
// Parallel over (head, query block) with at::parallel_for. Dot products / axpy of length D:
// AVX2+FMA or portable C++, chosen at run time (level -1 = best available, 0 portable, 1 AVX2).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define ICML26_X86 1
#endif

namespace {

// ---------------------------------------------------------------- portable
float dot_scalar(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
void axpy_scalar(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
// out[j] = scale * q . K[j], j < n (rows of length D)
void dots_scalar(const float* q, const float* K, int64_t n, int64_t D, float scale, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = scale * dot_scalar(q, K + j * D, D);
}
// s[j] = exp(s[j] - mx); returns the sum
float expsum_scalar(float* s, int64_t n, float mx) {
  float z = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    z += s[j];
  }
  return z;
}
// acc += sum_j w[j] V[j]
void wsum_scalar(const float* w, const float* V, int64_t n, int64_t D, float* acc) {
  for (int64_t j = 0; j < n; ++j) axpy_scalar(w[j], V + j * D, acc, D);
}

#ifdef ICML26_X86
// ---------------------------------------------------------------- AVX2 + FMA
__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 0x55));
  return _mm_cvtss_f32(lo);
}
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float acc = hsum256(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
__attribute__((target("avx2,fma"))) void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 al = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(al, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}
// four rows at a time: one pass over q per four keys, one horizontal sum per key
__attribute__((target("avx2,fma"))) void dots_avx2(const float* q, const float* K, int64_t n, int64_t D, float scale, float* out) {
  if (D % 8) {
    for (int64_t j = 0; j < n; ++j) out[j] = scale * dot_avx2(q, K + j * D, D);
    return;
  }
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float *k0 = K + j * D, *k1 = k0 + D, *k2 = k1 + D, *k3 = k2 + D;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int64_t e = 0; e < D; e += 8) {
      const __m256 qv = _mm256_loadu_ps(q + e);
      a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + e), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + e), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + e), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + e), a3);
    }
    out[j] = scale * hsum256(a0);
    out[j + 1] = scale * hsum256(a1);
    out[j + 2] = scale * hsum256(a2);
    out[j + 3] = scale * hsum256(a3);
  }
  for (; j < n; ++j) out[j] = scale * dot_avx2(q, K + j * D, D);
}
// exp on 8 lanes: 2^n * p(r), r = x - n ln2 (Cephes' polynomial; ~1 ulp on [-87, 88])
__attribute__((target("avx2,fma"))) inline __m256 exp256(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447504019f);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  const __m256 x2 = _mm256_mul_ps(x, x);
  y = _mm256_fmadd_ps(y, x2, _mm256_add_ps(x, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
__attribute__((target("avx2,fma"))) float expsum_avx2(float* s, int64_t n, float mx) {
  const __m256 m = _mm256_set1_ps(mx), ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 z = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_loadu_ps(s + j);
    __m256 w = exp256(_mm256_sub_ps(x, m));
    w = _mm256_andnot_ps(_mm256_cmp_ps(x, ninf, _CMP_EQ_OQ), w);  // exp(-inf) = 0
    _mm256_storeu_ps(s + j, w);
    z = _mm256_add_ps(z, w);
  }
  float acc = hsum256(z);
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    acc += s[j];
  }
  return acc;
}
// the accumulator stays in registers for D <= 64 (chunks of 64 otherwise)
__attribute__((target("avx2,fma"))) void wsum_avx2(const float* w, const float* V, int64_t n, int64_t D, float* acc) {
  if (D % 8) {
    for (int64_t j = 0; j < n; ++j) axpy_avx2(w[j], V + j * D, acc, D);
    return;
  }
  for (int64_t e0 = 0; e0 < D; e0 += 64) {
    const int64_t nv = std::min<int64_t>(64, D - e0) / 8;
    __m256 a[8];
    for (int64_t u = 0; u < nv; ++u) a[u] = _mm256_loadu_ps(acc + e0 + 8 * u);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 wj = _mm256_set1_ps(w[j]);
      const float* vj = V + j * D + e0;
      for (int64_t u = 0; u < nv; ++u) a[u] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vj + 8 * u), a[u]);
    }
    for (int64_t u = 0; u < nv; ++u) _mm256_storeu_ps(acc + e0 + 8 * u, a[u]);
  }
}
#endif

struct Ops {
  float (*dot)(const float*, const float*, int64_t);
  void (*axpy)(float, const float*, float*, int64_t);
  void (*dots)(const float*, const float*, int64_t, int64_t, float, float*);
  float (*expsum)(float*, int64_t, float);
  void (*wsum)(const float*, const float*, int64_t, int64_t, float*);
  int level;
};

bool avx2_ok() {
#ifdef ICML26_X86
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

Ops pick(int64_t level) {
#ifdef ICML26_X86
  if ((level < 0 || level >= 1) && avx2_ok()) return {dot_avx2, axpy_avx2, dots_avx2, expsum_avx2, wsum_avx2, 1};
#endif
  return {dot_scalar, axpy_scalar, dots_scalar, expsum_scalar, wsum_scalar, 0};
}

// 1. balanced recursive 2-means order of the bt rows of x (row stride D), as the twin.
void balanced_order(const float* x, int64_t bt, int64_t D, int64_t C, int64_t iters, int64_t* idx, const Ops& op,
                    std::vector<float>& proj, std::vector<float>& dvec, std::vector<int64_t>& tmp) {
  for (int64_t i = 0; i < bt; ++i) idx[i] = i;
  proj.resize(bt);
  dvec.resize(D);
  tmp.resize(bt);
  std::vector<float> c2(D);
  for (int64_t g = 1; g < C; g *= 2) {
    const int64_t m = bt / g, h = m / 2;
    for (int64_t gi = 0; gi < g; ++gi) {
      int64_t* ig = idx + gi * m;
      for (int64_t it = 0; it < iters; ++it) {
        std::fill(dvec.begin(), dvec.end(), 0.f);
        std::fill(c2.begin(), c2.end(), 0.f);
        for (int64_t j = 0; j < h; ++j) op.axpy(1.f, x + ig[j] * D, dvec.data(), D);
        for (int64_t j = h; j < m; ++j) op.axpy(1.f, x + ig[j] * D, c2.data(), D);
        for (int64_t e = 0; e < D; ++e) dvec[e] = dvec[e] / float(h) - c2[e] / float(m - h);
        for (int64_t j = 0; j < m; ++j) proj[j] = op.dot(x + ig[j] * D, dvec.data(), D);
        std::vector<int64_t> ord(m);
        std::iota(ord.begin(), ord.end(), 0);
        std::stable_sort(ord.begin(), ord.end(), [&](int64_t a, int64_t b) { return proj[a] > proj[b]; });
        for (int64_t j = 0; j < m; ++j) tmp[j] = ig[ord[j]];
        std::memcpy(ig, tmp.data(), sizeof(int64_t) * m);
      }
    }
  }
}

// 2. causal query groups of block t >= 1 (the twin's _centroids / _assign): the centroids are the
// means of the balanced clusters of block t-1's queries (qprev in the order pqprev), every query of
// block t joins its nearest (argmax q.qbar_a - |qbar_a|^2 / 2, first on ties); rows grouped by
// centroid in token order: grp[goff[a] .. goff[a + 1]). `block` (variant 2): one group per query.
void query_groups(int64_t variant, const float* qprev, const int64_t* pqprev, const float* qb, int64_t bt, int64_t D,
                  int64_t cq, const Ops& op, std::vector<float>& qbar, std::vector<float>& half, std::vector<int64_t>& asg,
                  std::vector<int64_t>& grp, std::vector<int64_t>& goff) {
  grp.resize(bt);
  if (variant == 2) {
    goff.resize(bt + 1);
    for (int64_t i = 0; i <= bt; ++i) goff[i] = i;
    for (int64_t i = 0; i < bt; ++i) grp[i] = i;
    return;
  }
  const int64_t m = bt / cq;
  qbar.assign(cq * D, 0.f);
  half.resize(cq);
  for (int64_t a = 0; a < cq; ++a) {
    float* qa = qbar.data() + a * D;
    for (int64_t i = 0; i < m; ++i) op.axpy(1.f, qprev + pqprev[a * m + i] * D, qa, D);
    for (int64_t e = 0; e < D; ++e) qa[e] /= float(m);
    half[a] = 0.5f * op.dot(qa, qa, D);
  }
  asg.resize(bt);
  goff.assign(cq + 1, 0);
  for (int64_t i = 0; i < bt; ++i) {
    int64_t best = 0;
    float bs = op.dot(qb + i * D, qbar.data(), D) - half[0];
    for (int64_t a = 1; a < cq; ++a) {
      const float sa = op.dot(qb + i * D, qbar.data() + a * D, D) - half[a];
      if (sa > bs) {
        bs = sa;
        best = a;
      }
    }
    asg[i] = best;
    ++goff[best + 1];
  }
  for (int64_t a = 0; a < cq; ++a) goff[a + 1] += goff[a];
  std::vector<int64_t> pos(goff.begin(), goff.end() - 1);
  for (int64_t i = 0; i < bt; ++i) grp[pos[asg[i]]++] = i;
}

// 1. for every (KV head, block): keys / values in cluster order (ks, vs), the original token index
// of every sorted row (korig, per KV head), the block baseline's cluster means (kmean); for every
// (head, block): the query order (permq, block-local indices). The twin's orders.
void sort_blocks(const float* qp, const float* kp0, const float* vp0, int64_t Bz, int64_t H, int64_t Hk, int64_t N, int64_t D,
                 int64_t bt, int64_t cq, int64_t ck, int64_t iters, int64_t variant, const Ops& op, std::vector<float>& ks,
                 std::vector<float>& vs, std::vector<float>& kmean, std::vector<int64_t>& permq, std::vector<int64_t>& korig) {
  const int64_t nb = N / bt, sz = bt / ck, G = Bz * H, Gk = Bz * Hk;
  ks.assign(Gk * N * D, 0.f);
  vs.assign(Gk * N * D, 0.f);
  kmean.assign(variant == 2 ? Gk * nb * ck * D : 0, 0.f);
  permq.assign(G * N, 0);
  korig.assign(Gk * N, 0);
  at::parallel_for(0, Gk * nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> proj, dvec;
    std::vector<int64_t> tmp, idx(bt);
    for (int64_t gb = b0; gb < b1; ++gb) {
      const int64_t gk = gb / nb, t = gb % nb;
      const float* kb = kp0 + (gk * N + t * bt) * D;
      const float* vb = vp0 + (gk * N + t * bt) * D;
      if (variant == 2) {
        for (int64_t i = 0; i < bt; ++i) idx[i] = i;
      } else {
        balanced_order(kb, bt, D, ck, iters, idx.data(), op, proj, dvec, tmp);
      }
      float* ksb = ks.data() + (gk * N + t * bt) * D;
      float* vsb = vs.data() + (gk * N + t * bt) * D;
      for (int64_t i = 0; i < bt; ++i) {
        std::memcpy(ksb + i * D, kb + idx[i] * D, sizeof(float) * D);
        std::memcpy(vsb + i * D, vb + idx[i] * D, sizeof(float) * D);
        korig[gk * N + t * bt + i] = t * bt + idx[i];
      }
      if (variant == 2) {
        for (int64_t b = 0; b < ck; ++b) {
          float* mu = kmean.data() + ((gk * nb + t) * ck + b) * D;
          std::fill(mu, mu + D, 0.f);
          for (int64_t j = 0; j < sz; ++j) op.axpy(1.f / float(sz), ksb + (b * sz + j) * D, mu, D);
        }
      }
    }
  });
  at::parallel_for(0, G * nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> proj, dvec;
    std::vector<int64_t> tmp;
    for (int64_t gb = b0; gb < b1; ++gb) {
      const int64_t g = gb / nb, t = gb % nb;
      int64_t* idx = permq.data() + g * N + t * bt;
      if (variant == 2) {
        for (int64_t i = 0; i < bt; ++i) idx[i] = i;
      } else {
        balanced_order(qp + (g * N + t * bt) * D, bt, D, cq, iters, idx, op, proj, dvec, tmp);
      }
    }
  });
}

}  // namespace

namespace icml26 {
namespace muse {

int64_t muse_isa_level() { return avx2_ok() ? 1 : 0; }

// the forward; with `lse`, also the log-sum-exp of every row's softmax (B, H, N) (for the backward)
at::Tensor forward_impl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, int64_t bt, int64_t cq,
                        int64_t ck, int64_t iters, int64_t r, int64_t variant, int64_t level, at::Tensor* lse) {
  TORCH_CHECK(q.dtype() == at::kFloat && k.dtype() == at::kFloat && v.dtype() == at::kFloat, "muse_forward: float32 only");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "muse_forward: inputs must be contiguous");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes(), "muse_forward: q (B,H,N,D), k, v (B,Hkv,N,D)");
  const int64_t Bz = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Hk = k.size(1);
  TORCH_CHECK(k.size(0) == Bz && k.size(2) == N && k.size(3) == D && Hk > 0 && H % Hk == 0, "muse_forward: shape mismatch");
  TORCH_CHECK(bt >= 2 && N % bt == 0 && cq >= 1 && ck >= 1 && bt % cq == 0 && bt % ck == 0, "muse_forward: bad block / cluster sizes");
  TORCH_CHECK(variant >= 0 && variant <= 2 && r >= 0 && iters >= 0, "muse_forward: bad variant / r / iters");
  const Ops op = pick(level);
  const float c = float(scale);
  const int64_t nb = N / bt, rep = H / Hk, m = bt / cq, sz = bt / ck, G = Bz * H, Gk = Bz * Hk;
  const bool tilted = variant != 2;
  const int64_t rmax = variant == 1 ? 0 : r;
  const float* qp = q.data_ptr<float>();
  const float* kp0 = k.data_ptr<float>();
  const float* vp0 = v.data_ptr<float>();
  auto out = at::empty_like(q);
  float* op_out = out.data_ptr<float>();
  if (lse != nullptr) *lse = at::empty({Bz, H, N}, q.options());
  float* plse = lse != nullptr ? lse->data_ptr<float>() : nullptr;

  // 1. key order per (KV head, block): sorted keys / values, block means (block baseline); query order
  std::vector<float> ks, vs, kmean;
  std::vector<int64_t> permq, korig;
  sort_blocks(qp, kp0, vp0, Bz, H, Hk, N, D, bt, cq, ck, iters, variant, op, ks, vs, kmean, permq, korig);

  // 2-5. per (head, query block)
  const float ninf = -std::numeric_limits<float>::infinity();
  constexpr int64_t kTile = 32;  // summaries per tile of the far field
  at::parallel_for(0, G * nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> sc(bt), L, kt, vt, gate, qbar(cq * D), half, delta(D), acc(D), sbuf, wbuf(cq * sz);
    std::vector<float> lo(bt * D), llse(bt), S, A, Dl, mxs, zs;
    std::vector<int64_t> order, ret, asg, grp, goff, RT;
    std::vector<char> isret;
    for (int64_t gb = b0; gb < b1; ++gb) {
      const int64_t g = gb / nb, t = gb % nb, gk = (g / H) * Hk + (g % H) / rep;
      const float* qb = qp + (g * N + t * bt) * D;
      const float* kb = kp0 + (gk * N + t * bt) * D;
      const float* vb = vp0 + (gk * N + t * bt) * D;
      float* ob = op_out + (g * N + t * bt) * D;
      // 5. exact causal attention inside the block
      for (int64_t i = 0; i < bt; ++i) {
        op.dots(qb + i * D, kb, i + 1, D, c, sc.data());
        const float mx = *std::max_element(sc.begin(), sc.begin() + i + 1);
        const float z = op.expsum(sc.data(), i + 1, mx);
        float* o = lo.data() + i * D;
        std::fill(o, o + D, 0.f);
        op.wsum(sc.data(), vb, i + 1, D, o);
        const float inv = 1.f / z;
        for (int64_t e = 0; e < D; ++e) o[e] *= inv;
        llse[i] = mx + std::log(z);
      }
      float* lseb = plse != nullptr ? plse + g * N + t * bt : nullptr;
      if (t == 0) {
        std::memcpy(ob, lo.data(), sizeof(float) * bt * D);
        if (lseb != nullptr) std::memcpy(lseb, llse.data(), sizeof(float) * bt);
        continue;
      }
      const int64_t kpc = t * ck;  // past key clusters
      const float* ksg = ks.data() + gk * N * D;
      const float* vsg = vs.data() + gk * N * D;
      const int64_t rr = std::min(rmax, kpc);
      // 2. causal query groups: centroids of block t-1's query clusters, nearest per query
      query_groups(variant, qb - bt * D, permq.data() + g * N + (t - 1) * bt, qb, bt, D, cq, op, qbar, half, asg, grp, goff);
      const int64_t na = int64_t(goff.size()) - 1;
      L.resize(na * kpc);
      gate.resize(na * kpc);
      if (tilted) {
        // 2. tilted summaries of every past key cluster toward each centroid (cluster in cache once)
        kt.assign(cq * kpc * D, 0.f);
        vt.assign(cq * kpc * D, 0.f);
        for (int64_t b = 0; b < kpc; ++b) {
          const float* kc = ksg + b * sz * D;
          const float* vc = vsg + b * sz * D;
          for (int64_t a = 0; a < cq; ++a) {
            float* w = wbuf.data() + a * sz;
            op.dots(qbar.data() + a * D, kc, sz, D, c, w);
            const float mx = *std::max_element(w, w + sz);
            const float z = op.expsum(w, sz, mx);
            const float inv = 1.f / z;
            for (int64_t j = 0; j < sz; ++j) w[j] *= inv;
            op.wsum(w, kc, sz, D, kt.data() + (a * kpc + b) * D);
            op.wsum(w, vc, sz, D, vt.data() + (a * kpc + b) * D);
            L[a * kpc + b] = mx + std::log(z);
          }
        }
        std::copy(L.begin(), L.end(), gate.begin());
      } else {  // MoBA: every query gates on its own q.mean(k_b)
        for (int64_t a = 0; a < na; ++a)
          op.dots(qb + a * D, kmean.data() + gk * nb * ck * D, kpc, D, c, gate.data() + a * kpc);
      }
      for (int64_t a = 0; a < na; ++a) {
        const int64_t ma = goff[a + 1] - goff[a];
        const int64_t* pa = grp.data() + goff[a];
        if (ma == 0) continue;
        const float* qa = tilted ? qbar.data() + a * D : nullptr;
        const float* La = tilted ? L.data() + a * kpc : nullptr;
        const float* kta = tilted ? kt.data() + a * kpc * D : nullptr;
        const float* vta = tilted ? vt.data() + a * kpc * D : nullptr;
        // one softmax per query over its retrieved keys and the far-field summaries
        const int64_t ns = rr * sz + (tilted ? kpc : 0);
        if (ns == 0) {
          for (int64_t i = 0; i < ma; ++i) {
            std::memcpy(ob + pa[i] * D, lo.data() + pa[i] * D, sizeof(float) * D);
            if (lseb != nullptr) lseb[pa[i]] = llse[pa[i]];
          }
          continue;
        }
        S.resize(ma * ns);
        A.assign(ma * D, 0.f);
        RT.resize(ma * rr);
        if (tilted) {
          // 4. far field L_ab + c (q - qbar_a).kt_ab: tiles of summaries shared by the group's queries
          Dl.resize(ma * D);
          for (int64_t i = 0; i < ma; ++i) {
            const float* qi = qb + pa[i] * D;
            for (int64_t e = 0; e < D; ++e) Dl[i * D + e] = qi[e] - qa[e];
          }
          for (int64_t b0 = 0; b0 < kpc; b0 += kTile) {
            const int64_t nt = std::min(kTile, kpc - b0);
            for (int64_t i = 0; i < ma; ++i) op.dots(Dl.data() + i * D, kta + b0 * D, nt, D, c, S.data() + i * ns + rr * sz + b0);
          }
          for (int64_t i = 0; i < ma; ++i) {
            float* sf = S.data() + i * ns + rr * sz;
            for (int64_t b = 0; b < kpc; ++b) sf[b] += La[b];
          }
        }
        // 3. retrieval: every query's own top-rr past clusters, by its far-field estimate of log Z_b(q)
        //    (muse) or by q.mean(k_b) (block); attended exactly and dropped from its far field
        for (int64_t i = 0; i < ma && rr > 0; ++i) {
          float* sf = S.data() + i * ns + rr * sz;
          const float* gi = tilted ? sf : gate.data() + a * kpc;
          order.resize(kpc);
          std::iota(order.begin(), order.end(), 0);
          std::partial_sort(order.begin(), order.begin() + rr, order.end(),
                            [&](int64_t x, int64_t y) { return gi[x] > gi[y] || (gi[x] == gi[y] && x < y); });
          for (int64_t j = 0; j < rr; ++j) {
            RT[i * rr + j] = order[j];
            op.dots(qb + pa[i] * D, ksg + order[j] * sz * D, sz, D, c, S.data() + i * ns + j * sz);
          }
          if (tilted)
            for (int64_t j = 0; j < rr; ++j) sf[order[j]] = ninf;
        }
        mxs.resize(ma);
        zs.resize(ma);
        for (int64_t i = 0; i < ma; ++i) {
          float* si = S.data() + i * ns;
          mxs[i] = *std::max_element(si, si + ns);
          zs[i] = op.expsum(si, ns, mxs[i]);
        }
        for (int64_t i = 0; i < ma; ++i)
          for (int64_t j = 0; j < rr; ++j)
            op.wsum(S.data() + i * ns + j * sz, vsg + RT[i * rr + j] * sz * D, sz, D, A.data() + i * D);
        if (tilted) {
          for (int64_t b0 = 0; b0 < kpc; b0 += kTile) {
            const int64_t nt = std::min(kTile, kpc - b0);
            for (int64_t i = 0; i < ma; ++i) op.wsum(S.data() + i * ns + rr * sz + b0, vta + b0 * D, nt, D, A.data() + i * D);
          }
        }
        // 5. merge with the local block by log-sum-exp
        for (int64_t i = 0; i < ma; ++i) {
          const int64_t row = pa[i];
          float* o = ob + row * D;
          const float* ol = lo.data() + row * D;
          const float* ai = A.data() + i * D;
          const float lrf = mxs[i] + std::log(zs[i]), ll = llse[row];
          const float mm = std::max(lrf, ll);
          const float wl = std::exp(ll - mm), wr = std::exp(lrf - mm);
          const float den = wl + wr, iz = 1.f / zs[i];
          for (int64_t e = 0; e < D; ++e) o[e] = (wl * ol[e] + wr * ai[e] * iz) / den;
          if (lseb != nullptr) lseb[row] = mm + std::log(den);
        }
      }
    }
  });
  return out;
}

at::Tensor muse_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, int64_t bt, int64_t cq,
                        int64_t ck, int64_t iters, int64_t r, int64_t variant, int64_t level) {
  return forward_impl(q, k, v, scale, bt, cq, ck, iters, r, variant, level, nullptr);
}

std::vector<at::Tensor> muse_forward_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, int64_t bt,
                                         int64_t cq, int64_t ck, int64_t iters, int64_t r, int64_t variant, int64_t level) {
  at::Tensor lse;
  at::Tensor out = forward_impl(q, k, v, scale, bt, cq, ck, iters, r, variant, level, &lse);
  return {out, lse};
}


// Backward of muse_forward_lse (same inputs, its output `out`, its row log-sum-exp `lse` and the
// output gradient `dout`): (dq, dk, dv). Orders, summaries and retrieved sets are recomputed block
// by block (deterministic: the forward's); cluster orders and retrieved sets are constants, the
// query centroids detached (the twin with detach_query_centroids=True). Query i's output is one
// softmax over entries e (local keys, retrieved keys, far-field summaries), logits s_e, values u_e:
//   P_e = exp(s_e - lse_i), dS_e = P_e (dO_i.u_e - dO_i.O_i), du_e += P_e dO_i;
//   exact key j: s = c q_i.k_j -> dq_i += c dS k_j, dk_j += c dS q_i;
//   summary (a, b): s = L_ab + c (q_i - qbar_a).kt_ab -> dq_i += c dS kt_ab, dkt_ab += c dS (q_i - qbar_a), dL_ab += dS;
//   through the tilt weights w_j = softmax_j(c qbar_a.k_j) of cluster b:
//     dlogit_j = w_j (dL + (k_j - kt).dkt + (v_j - vt).dvt), dk_j += w_j dkt + c dlogit_j qbar_a, dv_j += w_j dvt.
// Key / value gradients are accumulated per key over the queries of a cluster (P and dS stored
// transposed, one register-accumulated weighted sum per key). Parallel over query heads, each with
// its own dk / dv buffer, summed per KV head at the end.
std::vector<at::Tensor> muse_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                      const at::Tensor& lse, const at::Tensor& dout, double scale, int64_t bt, int64_t cq, int64_t ck,
                                      int64_t iters, int64_t r, int64_t variant, int64_t level) {
  TORCH_CHECK(q.dtype() == at::kFloat && k.dtype() == at::kFloat && v.dtype() == at::kFloat && out.dtype() == at::kFloat &&
                  lse.dtype() == at::kFloat && dout.dtype() == at::kFloat,
              "muse_backward: float32 only");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && out.is_contiguous() && lse.is_contiguous() &&
                  dout.is_contiguous(),
              "muse_backward: inputs must be contiguous");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() && out.sizes() == q.sizes() && dout.sizes() == q.sizes(),
              "muse_backward: q, out, dout (B,H,N,D), k, v (B,Hkv,N,D)");
  const int64_t Bz = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Hk = k.size(1);
  TORCH_CHECK(lse.dim() == 3 && lse.size(0) == Bz && lse.size(1) == H && lse.size(2) == N, "muse_backward: lse (B,H,N)");
  TORCH_CHECK(k.size(0) == Bz && k.size(2) == N && k.size(3) == D && Hk > 0 && H % Hk == 0, "muse_backward: shape mismatch");
  TORCH_CHECK(bt >= 2 && N % bt == 0 && cq >= 1 && ck >= 1 && bt % cq == 0 && bt % ck == 0, "muse_backward: bad block / cluster sizes");
  TORCH_CHECK(variant >= 0 && variant <= 2 && r >= 0 && iters >= 0, "muse_backward: bad variant / r / iters");
  const Ops op = pick(level);
  const float c = float(scale);
  const int64_t nb = N / bt, rep = H / Hk, m = bt / cq, sz = bt / ck, G = Bz * H, Gk = Bz * Hk;
  const bool tilted = variant != 2;
  const int64_t rmax = variant == 1 ? 0 : r;
  const float* qp = q.data_ptr<float>();
  const float* kp0 = k.data_ptr<float>();
  const float* vp0 = v.data_ptr<float>();
  const float* pout = out.data_ptr<float>();
  const float* plse = lse.data_ptr<float>();
  const float* pdo = dout.data_ptr<float>();
  std::vector<float> ks, vs, kmean;
  std::vector<int64_t> permq, korig;
  sort_blocks(qp, kp0, vp0, Bz, H, Hk, N, D, bt, cq, ck, iters, variant, op, ks, vs, kmean, permq, korig);
  auto dq = at::zeros_like(q);
  float* pdq = dq.data_ptr<float>();
  std::vector<float> dkg(G * N * D, 0.f), dvg(G * N * D, 0.f);  // per query head, token order
  const float ninf = -std::numeric_limits<float>::infinity();

  at::parallel_for(0, G, 1, [&](int64_t g0, int64_t g1) {
    std::vector<float> dsum(bt), sl(bt), dp, dsv, lPT(bt * bt), ldST(bt * bt), qbar(cq * D), L, kt, vt, W, gate, gK, gV, gL, base;
    std::vector<float> Qa(bt * D), dOa(bt * D), Da(bt * D), dQa(bt * D), PT, dST, SF, wa(cq), dl(cq), kd(cq), vd(cq), half;
    std::vector<int64_t> order, ret, asg, grp, goff, RT;
    std::vector<char> isret;
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t gk = (g / H) * Hk + (g % H) / rep;
      float* dkh = dkg.data() + g * N * D;
      float* dvh = dvg.data() + g * N * D;
      const float* ksg = ks.data() + gk * N * D;
      const float* vsg = vs.data() + gk * N * D;
      const int64_t* kog = korig.data() + gk * N;
      for (int64_t t = 0; t < nb; ++t) {
        const float* qb = qp + (g * N + t * bt) * D;
        const float* kb = kp0 + (gk * N + t * bt) * D;
        const float* vb = vp0 + (gk * N + t * bt) * D;
        const float* ob = pout + (g * N + t * bt) * D;
        const float* lb = plse + g * N + t * bt;
        const float* dob = pdo + (g * N + t * bt) * D;
        float* dqb = pdq + (g * N + t * bt) * D;
        const int64_t kpc = t * ck;
        const int64_t rr = t > 0 ? std::min(rmax, kpc) : 0;
        const bool far = tilted && t > 0;
        const int64_t wide = std::max<int64_t>(std::max(bt, sz), std::max<int64_t>(kpc, 1));
        dp.resize(wide);
        dsv.resize(wide);
        sl.resize(wide);
        for (int64_t i = 0; i < bt; ++i) dsum[i] = op.dot(dob + i * D, ob + i * D, D);
        // local block (exact, causal): rows i, keys j <= i
        for (int64_t i = 0; i < bt; ++i) {
          const float* qi = qb + i * D;
          const float* doi = dob + i * D;
          const int64_t nl = i + 1;
          op.dots(qi, kb, nl, D, c, sl.data());
          op.expsum(sl.data(), nl, lb[i]);
          op.dots(doi, vb, nl, D, 1.f, dp.data());
          for (int64_t j = 0; j < nl; ++j) {
            const float P = sl[j], dS = c * P * (dp[j] - dsum[i]);
            dsv[j] = dS;
            lPT[j * bt + i] = P;
            ldST[j * bt + i] = dS;
          }
          op.wsum(dsv.data(), kb, nl, D, dqb + i * D);
        }
        for (int64_t j = 0; j < bt; ++j) {
          op.wsum(ldST.data() + j * bt + j, qb + j * D, bt - j, D, dkh + (t * bt + j) * D);
          op.wsum(lPT.data() + j * bt + j, dob + j * D, bt - j, D, dvh + (t * bt + j) * D);
        }
        if (t == 0 || (rr == 0 && !far)) continue;
        // query groups, summaries (recomputed) and the gate
        query_groups(variant, qb - bt * D, permq.data() + g * N + (t - 1) * bt, qb, bt, D, cq, op, qbar, half, asg, grp, goff);
        const int64_t na = int64_t(goff.size()) - 1;
        L.resize(na * kpc);
        gate.resize(na * kpc);
        if (tilted) {
          kt.assign(cq * kpc * D, 0.f);
          vt.assign(cq * kpc * D, 0.f);
          W.resize(cq * kpc * sz);
          for (int64_t b = 0; b < kpc; ++b) {
            const float* kc = ksg + b * sz * D;
            const float* vc = vsg + b * sz * D;
            for (int64_t a = 0; a < cq; ++a) {
              float* w = W.data() + (a * kpc + b) * sz;
              op.dots(qbar.data() + a * D, kc, sz, D, c, w);
              const float mx = *std::max_element(w, w + sz);
              const float z = op.expsum(w, sz, mx);
              const float inv = 1.f / z;
              for (int64_t j = 0; j < sz; ++j) w[j] *= inv;
              op.wsum(w, kc, sz, D, kt.data() + (a * kpc + b) * D);
              op.wsum(w, vc, sz, D, vt.data() + (a * kpc + b) * D);
              L[a * kpc + b] = mx + std::log(z);
            }
          }
          std::copy(L.begin(), L.end(), gate.begin());
          gK.assign(kpc * cq * D, 0.f);  // (b, a) order: the cq rows of key cluster b are contiguous
          gV.assign(kpc * cq * D, 0.f);
          gL.assign(cq * kpc, 0.f);
        } else {  // MoBA: every query gates on its own q.mean(k_b)
          for (int64_t a = 0; a < na; ++a)
            op.dots(qb + a * D, kmean.data() + gk * nb * ck * D, kpc, D, c, gate.data() + a * kpc);
        }
        PT.resize(std::max<int64_t>(sz, kpc) * bt);
        dST.resize(PT.size());
        for (int64_t a = 0; a < na; ++a) {
          const int64_t ma = goff[a + 1] - goff[a];
          const int64_t* pa = grp.data() + goff[a];
          if (ma == 0) continue;
          const float* qa = tilted ? qbar.data() + a * D : nullptr;
          for (int64_t i = 0; i < ma; ++i) {
            const int64_t row = pa[i];
            std::memcpy(Qa.data() + i * D, qb + row * D, sizeof(float) * D);
            std::memcpy(dOa.data() + i * D, dob + row * D, sizeof(float) * D);
            if (tilted)
              for (int64_t e = 0; e < D; ++e) Da[i * D + e] = qb[row * D + e] - qa[e];
          }
          std::fill(dQa.begin(), dQa.begin() + ma * D, 0.f);
          // far-field logits (recomputed) and every query's retrieved clusters, as in the forward
          SF.resize(ma * kpc);
          RT.resize(ma * rr);
          if (far) {
            const float* La = L.data() + a * kpc;  // tilted: na = cq
            const float* kta = kt.data() + a * kpc * D;
            for (int64_t i = 0; i < ma; ++i) {
              float* sf = SF.data() + i * kpc;
              op.dots(Da.data() + i * D, kta, kpc, D, c, sf);
              for (int64_t b = 0; b < kpc; ++b) sf[b] += La[b];
            }
          }
          for (int64_t i = 0; i < ma && rr > 0; ++i) {
            float* sf = SF.data() + i * kpc;
            const float* gi = tilted ? sf : gate.data() + a * kpc;
            order.resize(kpc);
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + rr, order.end(),
                              [&](int64_t x, int64_t y) { return gi[x] > gi[y] || (gi[x] == gi[y] && x < y); });
            for (int64_t j = 0; j < rr; ++j) RT[i * rr + j] = order[j];
            if (tilted)
              for (int64_t j = 0; j < rr; ++j) sf[order[j]] = ninf;
          }
          // retrieved keys, query by query: dq += dS k, dk += dS q, dv += P dO
          for (int64_t i = 0; i < ma; ++i) {
            const int64_t row = pa[i];
            for (int64_t jr = 0; jr < rr; ++jr) {
              const int64_t cl = RT[i * rr + jr];
              const float* kc = ksg + cl * sz * D;
              const float* vc = vsg + cl * sz * D;
              op.dots(Qa.data() + i * D, kc, sz, D, c, sl.data());
              op.expsum(sl.data(), sz, lb[row]);
              op.dots(dOa.data() + i * D, vc, sz, D, 1.f, dp.data());
              for (int64_t j = 0; j < sz; ++j) {
                const float P = sl[j], dS = c * P * (dp[j] - dsum[row]);
                dsv[j] = dS;
                const int64_t o = kog[cl * sz + j];
                op.axpy(dS, Qa.data() + i * D, dkh + o * D, D);
                op.axpy(P, dOa.data() + i * D, dvh + o * D, D);
              }
              op.wsum(dsv.data(), kc, sz, D, dQa.data() + i * D);
            }
          }
          // far-field summaries (a query's retrieved clusters have P = 0 there)
          if (far) {
            const float* kta = kt.data() + a * kpc * D;
            const float* vta = vt.data() + a * kpc * D;
            float* gLa = gL.data() + a * kpc;
            for (int64_t i = 0; i < ma; ++i) {
              const int64_t row = pa[i];
              float* sf = SF.data() + i * kpc;
              op.expsum(sf, kpc, lb[row]);
              op.dots(dOa.data() + i * D, vta, kpc, D, 1.f, dp.data());
              for (int64_t b = 0; b < kpc; ++b) {
                const float P = sf[b], dS = P == 0.f ? 0.f : P * (dp[b] - dsum[row]);
                dsv[b] = c * dS;
                gLa[b] += dS;
                PT[b * ma + i] = P;
                dST[b * ma + i] = c * dS;
              }
              op.wsum(dsv.data(), kta, kpc, D, dQa.data() + i * D);
            }
            for (int64_t b = 0; b < kpc; ++b) {
              op.wsum(dST.data() + b * ma, Da.data(), ma, D, gK.data() + (b * cq + a) * D);
              op.wsum(PT.data() + b * ma, dOa.data(), ma, D, gV.data() + (b * cq + a) * D);
            }
          }
          for (int64_t i = 0; i < ma; ++i) op.axpy(1.f, dQa.data() + i * D, dqb + pa[i] * D, D);
        }
        // through the tilted summaries: every past key, all query clusters at once
        if (far) {
          base.resize(cq * kpc);
          for (int64_t a = 0; a < cq; ++a)
            for (int64_t b = 0; b < kpc; ++b)
              base[a * kpc + b] = gL[a * kpc + b] - op.dot(kt.data() + (a * kpc + b) * D, gK.data() + (b * cq + a) * D, D) -
                                  op.dot(vt.data() + (a * kpc + b) * D, gV.data() + (b * cq + a) * D, D);
          for (int64_t b = 0; b < kpc; ++b) {
            const float* gkb = gK.data() + b * cq * D;
            const float* gvb = gV.data() + b * cq * D;
            for (int64_t j = 0; j < sz; ++j) {
              const float* kj = ksg + (b * sz + j) * D;
              const float* vj = vsg + (b * sz + j) * D;
              op.dots(kj, gkb, cq, D, 1.f, kd.data());
              op.dots(vj, gvb, cq, D, 1.f, vd.data());
              for (int64_t a = 0; a < cq; ++a) {
                const float w = W[(a * kpc + b) * sz + j];
                wa[a] = w;
                dl[a] = c * w * (base[a * kpc + b] + kd[a] + vd[a]);
              }
              const int64_t o = kog[b * sz + j];
              op.wsum(wa.data(), gkb, cq, D, dkh + o * D);
              op.wsum(dl.data(), qbar.data(), cq, D, dkh + o * D);
              op.wsum(wa.data(), gvb, cq, D, dvh + o * D);
            }
          }
        }
      }
    }
  });
  // dk, dv: sum over the query heads of each KV head
  auto dk = at::zeros_like(k), dv = at::zeros_like(v);
  float* pdk = dk.data_ptr<float>();
  float* pdv = dv.data_ptr<float>();
  at::parallel_for(0, Gk, 1, [&](int64_t a0, int64_t a1) {
    for (int64_t gk = a0; gk < a1; ++gk) {
      const int64_t bz = gk / Hk, hk = gk % Hk;
      for (int64_t u = 0; u < rep; ++u) {
        const int64_t g = bz * H + hk * rep + u;
        op.axpy(1.f, dkg.data() + g * N * D, pdk + gk * N * D, N * D);
        op.axpy(1.f, dvg.data() + g * N * D, pdv + gk * N * D, N * D);
      }
    }
  });
  return {dq, dk, dv};
}

}  // namespace muse
}  // namespace icml26

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("muse_forward(Tensor q, Tensor k, Tensor v, float scale, int block_tokens, int query_clusters, int key_clusters, int lloyd_iters, int retrieved, int variant, int level) -> Tensor");
  m.def("muse_forward_lse(Tensor q, Tensor k, Tensor v, float scale, int block_tokens, int query_clusters, int key_clusters, int lloyd_iters, int retrieved, int variant, int level) -> Tensor[]");
  m.def("muse_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, float scale, int block_tokens, int query_clusters, int key_clusters, int lloyd_iters, int retrieved, int variant, int level) -> Tensor[]");
  m.def("muse_isa_level() -> int");
  m.impl("muse_forward", c10::DispatchKey::CPU, TORCH_FN(icml26::muse::muse_forward));
  m.impl("muse_forward_lse", c10::DispatchKey::CPU, TORCH_FN(icml26::muse::muse_forward_lse));
  m.impl("muse_backward", c10::DispatchKey::CPU, TORCH_FN(icml26::muse::muse_backward));
  m.impl("muse_isa_level", c10::DispatchKey::CatchAll, TORCH_FN(icml26::muse::muse_isa_level));
}
