// Packed INT4 / INT8 weight x fp32 activation GEMV/GEMM for CPU (icml26 quantize).
//
// Weight layout (see icml26/ops/quant.py, the Python twin is icml26/ops/_ref/quant.py):
//   w[n, k] = scale[n, g] * q[n, k] + minv[n, g],   g = k / group_size,  q unsigned codes.
//   INT8: qweight (N, K) uint8, one code per byte.
//   INT4: qweight (N, K/2) uint8; in every block of 64 weights (32 bytes), byte j holds
//         q[64b + j] in its low nibble and q[64b + 32 + j] in its high nibble, so a block
//         unpacks with one AND and one shift+AND into two runs of 32 codes in order.
// y[m, n] = sum_g ( scale[n,g] * sum_{k in g} q[n,k] x[m,k] + minv[n,g] * sum_{k in g} x[m,k] ).
//
// Runtime dispatch (chosen once): AVX-512F/BW, else AVX2+FMA, else portable C++.
// Rows of the output are split across threads with at::parallel_for.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define ICML26_X86 1
#endif

namespace {

// ---------------------------------------------------------------- portable
float dot_q4_scalar(const uint8_t* q, const float* x, int64_t nblocks) {
  float acc = 0.f;
  for (int64_t b = 0; b < nblocks; ++b) {
    const uint8_t* qb = q + b * 32;
    const float* xb = x + b * 64;
    for (int j = 0; j < 32; ++j) {
      acc += float(qb[j] & 0x0F) * xb[j] + float(qb[j] >> 4) * xb[32 + j];
    }
  }
  return acc;
}

float dot_q8_scalar(const uint8_t* q, const float* x, int64_t n) {
  float acc = 0.f;
  for (int64_t j = 0; j < n; ++j) acc += float(q[j]) * x[j];
  return acc;
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

__attribute__((target("avx2,fma"))) inline __m256 u8x8_to_ps(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

__attribute__((target("avx2,fma"))) float dot_q4_avx2(const uint8_t* q, const float* x, int64_t nblocks) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 32));
    const __m256i lo = _mm256_and_si256(v, mask);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
    const float* xb = x + b * 64;
    __m128i l0 = _mm256_castsi256_si128(lo), l1 = _mm256_extracti128_si256(lo, 1);
    __m128i h0 = _mm256_castsi256_si128(hi), h1 = _mm256_extracti128_si256(hi, 1);
    a0 = _mm256_fmadd_ps(u8x8_to_ps(l0), _mm256_loadu_ps(xb + 0), a0);
    a1 = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(l0, 8)), _mm256_loadu_ps(xb + 8), a1);
    a2 = _mm256_fmadd_ps(u8x8_to_ps(l1), _mm256_loadu_ps(xb + 16), a2);
    a3 = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(l1, 8)), _mm256_loadu_ps(xb + 24), a3);
    a0 = _mm256_fmadd_ps(u8x8_to_ps(h0), _mm256_loadu_ps(xb + 32), a0);
    a1 = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(h0, 8)), _mm256_loadu_ps(xb + 40), a1);
    a2 = _mm256_fmadd_ps(u8x8_to_ps(h1), _mm256_loadu_ps(xb + 48), a2);
    a3 = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(h1, 8)), _mm256_loadu_ps(xb + 56), a3);
  }
  return hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

__attribute__((target("avx2,fma"))) float dot_q8_avx2(const uint8_t* q, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + j));
    __m128i l = _mm256_castsi256_si128(v), h = _mm256_extracti128_si256(v, 1);
    a0 = _mm256_fmadd_ps(u8x8_to_ps(l), _mm256_loadu_ps(x + j), a0);
    a1 = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(l, 8)), _mm256_loadu_ps(x + j + 8), a1);
    a2 = _mm256_fmadd_ps(u8x8_to_ps(h), _mm256_loadu_ps(x + j + 16), a2);
    a3 = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(h, 8)), _mm256_loadu_ps(x + j + 24), a3);
  }
  float acc = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; j < n; ++j) acc += float(q[j]) * x[j];
  return acc;
}

// ---------------------------------------------------------------- AVX-512F/BW
__attribute__((target("avx512f,avx512bw"))) inline __m512 u8x16_to_ps(__m128i v) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
}

__attribute__((target("avx512f,avx512bw"))) float dot_q4_avx512(const uint8_t* q, const float* x, int64_t nblocks) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 32));
    const __m256i lo = _mm256_and_si256(v, mask);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
    const float* xb = x + b * 64;
    a0 = _mm512_fmadd_ps(u8x16_to_ps(_mm256_castsi256_si128(lo)), _mm512_loadu_ps(xb + 0), a0);
    a1 = _mm512_fmadd_ps(u8x16_to_ps(_mm256_extracti128_si256(lo, 1)), _mm512_loadu_ps(xb + 16), a1);
    a0 = _mm512_fmadd_ps(u8x16_to_ps(_mm256_castsi256_si128(hi)), _mm512_loadu_ps(xb + 32), a0);
    a1 = _mm512_fmadd_ps(u8x16_to_ps(_mm256_extracti128_si256(hi, 1)), _mm512_loadu_ps(xb + 48), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

__attribute__((target("avx512f,avx512bw"))) float dot_q8_avx512(const uint8_t* q, const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    a0 = _mm512_fmadd_ps(u8x16_to_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j))), _mm512_loadu_ps(x + j), a0);
    a1 = _mm512_fmadd_ps(u8x16_to_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j + 16))), _mm512_loadu_ps(x + j + 16), a1);
  }
  float acc = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; j < n; ++j) acc += float(q[j]) * x[j];
  return acc;
}
#endif

// ---------------------------------------------------------------- INT4 weights x INT8 activations
// x is quantized per 64-block: xq = round(x / xs[b]) in [-127, 127], xs[b] = max|x_b| / 127.
// dot over nblocks = sum_b xs[b] * sum_j q_j xq_j (exact integer inner sums).
float dot_q4_q8_scalar(const uint8_t* q, const int8_t* xq, const float* xs, int64_t nblocks) {
  float acc = 0.f;
  for (int64_t b = 0; b < nblocks; ++b) {
    const uint8_t* qb = q + b * 32;
    const int8_t* xb = xq + b * 64;
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += int32_t(qb[j] & 0x0F) * xb[j] + int32_t(qb[j] >> 4) * xb[32 + j];
    acc += xs[b] * float(s);
  }
  return acc;
}

#ifdef ICML26_X86
__attribute__((target("avx2,fma"))) float dot_q4_q8_avx2(const uint8_t* q, const int8_t* xq, const float* xs, int64_t nblocks) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 32));
    const __m256i lo = _mm256_and_si256(v, mask);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 64));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 64 + 32));
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1));
    const __m256i p32 = _mm256_madd_epi16(p, ones);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(xs[b]), acc);
  }
  return hsum256(acc);
}
#endif

using DotFn = float (*)(const uint8_t*, const float*, int64_t);
using DotQ8Fn = float (*)(const uint8_t*, const int8_t*, const float*, int64_t);

struct Isa {
  DotFn q4 = dot_q4_scalar;
  DotFn q8 = dot_q8_scalar;
  DotQ8Fn q4q8 = dot_q4_q8_scalar;
  int64_t level = 0;  // 0 portable, 1 avx2, 2 avx512
  Isa() {
#ifdef ICML26_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
      q4 = dot_q4_avx512; q8 = dot_q8_avx512; q4q8 = dot_q4_q8_avx2; level = 2;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      q4 = dot_q4_avx2; q8 = dot_q8_avx2; q4q8 = dot_q4_q8_avx2; level = 1;
    }
#endif
  }
};

Isa& isa(int64_t force = -1) {
  static Isa s;
  return s;
}

at::Tensor quant_gemm(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& mins,
                      int64_t bits, int64_t group_size, int64_t force_level) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous float32 (M, K)");
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.is_contiguous() && qweight.dim() == 2, "qweight must be contiguous uint8 (N, K*bits/8)");
  TORCH_CHECK(bits == 4 || bits == 8, "bits must be 4 or 8");
  const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  TORCH_CHECK(qweight.size(1) * 8 == K * bits, "qweight width does not match K");
  TORCH_CHECK(group_size > 0 && K % group_size == 0, "group_size must divide K");
  TORCH_CHECK(bits == 8 || group_size % 64 == 0, "INT4 needs group_size % 64 == 0");
  const int64_t G = K / group_size;
  TORCH_CHECK(scales.scalar_type() == at::kFloat && mins.scalar_type() == at::kFloat && scales.is_contiguous() && mins.is_contiguous(), "scales/mins must be contiguous float32");
  TORCH_CHECK(scales.numel() == N * G && mins.numel() == N * G, "scales/mins must be (N, K/group_size)");
  Isa& cpu = isa();
  DotFn dot = bits == 4 ? cpu.q4 : cpu.q8;
  if (force_level == 0) dot = bits == 4 ? dot_q4_scalar : dot_q8_scalar;
#ifdef ICML26_X86
  if (force_level == 1 && __builtin_cpu_supports("avx2")) dot = bits == 4 ? dot_q4_avx2 : dot_q8_avx2;
#endif
  auto y = at::empty({M, N}, x.options());
  // per-group sums of x (shared by all rows)
  std::vector<float> xsum(M * G, 0.f);
  const float* xp = x.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.f;
      for (int64_t k = 0; k < group_size; ++k) s += xp[m * K + g * group_size + k];
      xsum[m * G + g] = s;
    }
  const uint8_t* qp = qweight.data_ptr<uint8_t>();
  const float* sp = scales.data_ptr<float>();
  const float* mp = mins.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t row_bytes = K * bits / 8, grp_bytes = group_size * bits / 8;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1));
  at::parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* qrow = qp + n * row_bytes;
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = xp + m * K;
        float acc = 0.f;
        for (int64_t g = 0; g < G; ++g) {
          const float d = bits == 4 ? dot(qrow + g * grp_bytes, xr + g * group_size, group_size / 64)
                                    : dot(qrow + g * grp_bytes, xr + g * group_size, group_size);
          acc += sp[n * G + g] * d + mp[n * G + g] * xsum[m * G + g];
        }
        yp[m * N + n] = acc;
      }
    }
  });
  return y;
}

// INT4 weights x activations quantized to INT8 per block of 64 (llama.cpp-style Q8 activations).
at::Tensor quant_gemm_i8act(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& mins,
                            int64_t group_size, int64_t force_level) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous float32 (M, K)");
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.is_contiguous() && qweight.dim() == 2, "qweight must be contiguous uint8");
  const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  TORCH_CHECK(qweight.size(1) * 2 == K && K % 64 == 0, "INT4 qweight (N, K/2) with K % 64 == 0");
  TORCH_CHECK(group_size > 0 && K % group_size == 0 && group_size % 64 == 0, "group_size must divide K and be a multiple of 64");
  const int64_t G = K / group_size, B = K / 64, BG = group_size / 64;
  TORCH_CHECK(scales.numel() == N * G && mins.numel() == N * G && scales.is_contiguous() && mins.is_contiguous() &&
              scales.scalar_type() == at::kFloat && mins.scalar_type() == at::kFloat, "scales/mins must be float32 (N, K/group_size)");
  DotQ8Fn dot = isa().q4q8;
  if (force_level == 0) dot = dot_q4_q8_scalar;
  const float* xp = x.data_ptr<float>();
  std::vector<int8_t> xq(M * K);
  std::vector<float> xs(M * B), xsum(M * G, 0.f);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < B; ++b) {
      const float* xb = xp + m * K + b * 64;
      float amax = 0.f;
      for (int j = 0; j < 64; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float sc = amax / 127.f;
      const float inv = sc > 0.f ? 1.f / sc : 0.f;
      xs[m * B + b] = sc;
      for (int j = 0; j < 64; ++j) xq[m * K + b * 64 + j] = int8_t(std::nearbyint(xb[j] * inv));
    }
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.f;
      for (int64_t k = 0; k < group_size; ++k) s += xp[m * K + g * group_size + k];
      xsum[m * G + g] = s;
    }
  }
  auto y = at::empty({M, N}, x.options());
  const uint8_t* qp = qweight.data_ptr<uint8_t>();
  const float* sp = scales.data_ptr<float>();
  const float* mp = mins.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1));
  at::parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* qrow = qp + n * (K / 2);
      for (int64_t m = 0; m < M; ++m) {
        float acc = 0.f;
        for (int64_t g = 0; g < G; ++g) {
          const float d = dot(qrow + g * group_size / 2, xq.data() + m * K + g * group_size, xs.data() + m * B + g * BG, BG);
          acc += sp[n * G + g] * d + mp[n * G + g] * xsum[m * G + g];
        }
        yp[m * N + n] = acc;
      }
    }
  });
  return y;
}

int64_t quant_isa_level() { return isa().level; }

}  // namespace

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("quant_gemm(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int bits, int group_size, int force_level=-1) -> Tensor");
  m.def("quant_isa_level() -> int");
  m.def("quant_gemm_i8act(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int group_size, int force_level=-1) -> Tensor");
  m.impl("quant_gemm_i8act", c10::DispatchKey::CPU, TORCH_FN(quant_gemm_i8act));
  m.impl("quant_gemm", c10::DispatchKey::CPU, TORCH_FN(quant_gemm));
  m.impl("quant_isa_level", c10::DispatchKey::CatchAll, TORCH_FN(quant_isa_level));
}
