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
// Two op families:
//  quant_gemm       fp32 activations; runtime dispatch (chosen once): AVX-512F/BW, else
//                   AVX2+FMA, else portable C++.
//  quant_gemm_i8act activations quantized per 64-block inside the op to INT8 (act_bits 8) or
//                   to 15-bit codes held as two int8 halves (act_bits 16), integer dot
//                   products (INT4 or INT8 weights), 4 weight rows per pass; runtime dispatch
//                   (__builtin_cpu_supports): AVX512-VNNI+VL, else AVX-VNNI (vpdpbusd), else
//                   AVX2 (vpmaddubsw + vpmaddwd), else portable C++.
//  quant_linear_tiled  prefill (M > a few rows): the weight dequantized tile by tile into a
//                   cache-resident buffer, each tile through the BLAS GEMM.
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

// ---------------------------------------------------------------- packed weights x INT8 activations
// x is quantized per 64-block: xq = round(x / xs[b]) in [-127, 127], xs[b] = max|x_b| / 127.
// For R = 4 rows at once (the x block is loaded once for 4 weight rows):
//   out[r] = sum_b xs[b] * isum_b(r),  isum_b(r) = sum_{j in block b} q[r, j] * xq[j]  (exact int32).
// INT4 rows: 32 bytes per 64-block (nibble layout above). INT8 rows: 64 bytes per block,
// unsigned codes 0..255. AVX2 has no unsigned x signed byte dot without 16-bit saturation
// (vpmaddubsw: 255 * 127 * 2 > 32767), so INT8 codes are split into nibbles there:
// q = 16 hi + lo, and vpmaddwd weights the hi products by 16. AVX-VNNI / AVX512-VNNI
// (vpdpbusd) multiply u8 x s8 and add 4 products into int32 without saturation.
// Rows past the end are handled by the caller by repeating a valid row pointer.
using DotI8Fn = void (*)(const uint8_t* const*, const int8_t*, const float*, int64_t, float*);

void dot4_q4_i8_scalar(const uint8_t* const* rows, const int8_t* xq, const float* xs, int64_t nb, float* out) {
  for (int r = 0; r < 4; ++r) {
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* qb = rows[r] + b * 32;
      const int8_t* xb = xq + b * 64;
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += int32_t(qb[j] & 0x0F) * xb[j] + int32_t(qb[j] >> 4) * xb[32 + j];
      acc += xs[b] * float(s);
    }
    out[r] = acc;
  }
}

void dot4_q8_i8_scalar(const uint8_t* const* rows, const int8_t* xq, const float* xs, int64_t nb, float* out) {
  for (int r = 0; r < 4; ++r) {
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* qb = rows[r] + b * 64;
      const int8_t* xb = xq + b * 64;
      int32_t s = 0;
      for (int j = 0; j < 64; ++j) s += int32_t(qb[j]) * xb[j];
      acc += xs[b] * float(s);
    }
    out[r] = acc;
  }
}

using DotX16Fn = void (*)(const uint8_t* const*, const int8_t*, const int8_t*, const float*, int64_t, float*);

void dot4_q4_x16_scalar(const uint8_t* const* rows, const int8_t* xl, const int8_t* xh, const float* xs, int64_t nb, float* out) {
  for (int r = 0; r < 4; ++r) {
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* qb = rows[r] + b * 32;
      const int8_t *lb = xl + b * 64, *hb = xh + b * 64;
      int32_t s = 0;
      for (int j = 0; j < 32; ++j)
        s += int32_t(qb[j] & 0x0F) * (128 * hb[j] + lb[j]) + int32_t(qb[j] >> 4) * (128 * hb[32 + j] + lb[32 + j]);
      acc += xs[b] * float(s);
    }
    out[r] = acc;
  }
}

void dot4_q8_x16_scalar(const uint8_t* const* rows, const int8_t* xl, const int8_t* xh, const float* xs, int64_t nb, float* out) {
  for (int r = 0; r < 4; ++r) {
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* qb = rows[r] + b * 64;
      const int8_t *lb = xl + b * 64, *hb = xh + b * 64;
      int32_t s = 0;
      for (int j = 0; j < 64; ++j) s += int32_t(qb[j]) * (128 * hb[j] + lb[j]);
      acc += xs[b] * float(s);
    }
    out[r] = acc;
  }
}

#ifdef ICML26_X86
// One body for every x86 variant: ISUM_Q4(v, x0, x1) / ISUM_Q8(v0, v1, x0, x1) give the
// __m256i of eight int32 partial sums of one 64-block.
#define ICML26_DOT4_BODY(BYTES, ISUM)                                                            \
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),          \
         a3 = _mm256_setzero_ps();                                                              \
  const uint8_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];                     \
  for (int64_t b = 0; b < nb; ++b) {                                                            \
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 64));       \
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 64 + 32));  \
    const __m256 sc = _mm256_broadcast_ss(xs + b);                                              \
    a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(r0 + b * BYTES, x0, x1)), sc, a0);             \
    a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(r1 + b * BYTES, x0, x1)), sc, a1);             \
    a2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(r2 + b * BYTES, x0, x1)), sc, a2);             \
    a3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(r3 + b * BYTES, x0, x1)), sc, a3);             \
  }                                                                                             \
  out[0] = hsum256(a0); out[1] = hsum256(a1); out[2] = hsum256(a2); out[3] = hsum256(a3);

#define LD(p) _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))

// AVX2: vpmaddubsw (u8 x s8 -> s16 pairs) + vpmaddwd (-> s32)
__attribute__((target("avx2,fma"))) inline __m256i isum_q4_avx2(const uint8_t* p, __m256i x0, __m256i x1) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = LD(p);
  const __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  // |lo*x0 pair| + |hi*x1 pair| <= 4 * 15 * 127 < 32767: no saturation
  return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1)), _mm256_set1_epi16(1));
}
__attribute__((target("avx2,fma"))) inline __m256i isum_q8_avx2(const uint8_t* p, __m256i x0, __m256i x1) {
  const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi16(16);
  const __m256i v0 = LD(p), v1 = LD(p + 32);
  const __m256i lo = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(v0, mask), x0),
                                      _mm256_maddubs_epi16(_mm256_and_si256(v1, mask), x1));
  const __m256i hi = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), mask), x0),
                                      _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), mask), x1));
  return _mm256_add_epi32(_mm256_madd_epi16(lo, one), _mm256_madd_epi16(hi, sixteen));
}
__attribute__((target("avx2,fma"))) void dot4_q4_i8_avx2(const uint8_t* const* rows, const int8_t* xq, const float* xs, int64_t nb, float* out) {
  ICML26_DOT4_BODY(32, isum_q4_avx2)
}
__attribute__((target("avx2,fma"))) void dot4_q8_i8_avx2(const uint8_t* const* rows, const int8_t* xq, const float* xs, int64_t nb, float* out) {
  ICML26_DOT4_BODY(64, isum_q8_avx2)
}

// AVX-VNNI (256-bit VEX vpdpbusd). Compiled everywhere, run only where the CPU reports it.
__attribute__((target("avx2,fma,avxvnni"))) inline __m256i isum_q4_avxvnni(const uint8_t* p, __m256i x0, __m256i x1) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = LD(p);
  const __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo, x0), hi, x1);
}
__attribute__((target("avx2,fma,avxvnni"))) inline __m256i isum_q8_avxvnni(const uint8_t* p, __m256i x0, __m256i x1) {
  return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), LD(p), x0), LD(p + 32), x1);
}
__attribute__((target("avx2,fma,avxvnni"))) void dot4_q4_i8_avxvnni(const uint8_t* const* rows, const int8_t* xq, const float* xs, int64_t nb, float* out) {
  ICML26_DOT4_BODY(32, isum_q4_avxvnni)
}
__attribute__((target("avx2,fma,avxvnni"))) void dot4_q8_i8_avxvnni(const uint8_t* const* rows, const int8_t* xq, const float* xs, int64_t nb, float* out) {
  ICML26_DOT4_BODY(64, isum_q8_avxvnni)
}

// AVX512-VNNI with VL (EVEX vpdpbusd on 256-bit registers).
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni"))) inline __m256i isum_q4_avx512vnni(const uint8_t* p, __m256i x0, __m256i x1) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = LD(p);
  const __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, x0), hi, x1);
}
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni"))) inline __m256i isum_q8_avx512vnni(const uint8_t* p, __m256i x0, __m256i x1) {
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), LD(p), x0), LD(p + 32), x1);
}
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni"))) void dot4_q4_i8_avx512vnni(const uint8_t* const* rows, const int8_t* xq, const float* xs, int64_t nb, float* out) {
  ICML26_DOT4_BODY(32, isum_q4_avx512vnni)
}
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni"))) void dot4_q8_i8_avx512vnni(const uint8_t* const* rows, const int8_t* xq, const float* xs, int64_t nb, float* out) {
  ICML26_DOT4_BODY(64, isum_q8_avx512vnni)
}

// ---- 15-bit activations as two int8 halves: xq = 128 * xh + xl, xl in [0, 127], xh in [-128, 127]
// (|xq| <= 16383 per 64-block, scale max|x_b| / 16383). Used by default at decode: per-64-block
// INT8 activations lose the small channels of blocks that hold an outlier channel.
#define ICML26_DOT4_BODY16(BYTES, ISUM)                                                          \
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),          \
         a3 = _mm256_setzero_ps();                                                              \
  const uint8_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];                     \
  for (int64_t b = 0; b < nb; ++b) {                                                            \
    const __m256i l0 = LD(xl + b * 64), l1 = LD(xl + b * 64 + 32);                              \
    const __m256i h0 = LD(xh + b * 64), h1 = LD(xh + b * 64 + 32);                              \
    const __m256 sc = _mm256_broadcast_ss(xs + b);                                              \
    a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(r0 + b * BYTES, l0, l1, h0, h1)), sc, a0);     \
    a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(r1 + b * BYTES, l0, l1, h0, h1)), sc, a1);     \
    a2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(r2 + b * BYTES, l0, l1, h0, h1)), sc, a2);     \
    a3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(r3 + b * BYTES, l0, l1, h0, h1)), sc, a3);     \
  }                                                                                             \
  out[0] = hsum256(a0); out[1] = hsum256(a1); out[2] = hsum256(a2); out[3] = hsum256(a3);

__attribute__((target("avx2,fma"))) inline __m256i isum_q4_x16_avx2(const uint8_t* p, __m256i l0, __m256i l1, __m256i h0, __m256i h1) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = LD(p);
  const __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  // each int16 sum <= 4 * 15 * 128 = 7680: no saturation
  const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(lo, l0), _mm256_maddubs_epi16(hi, l1));
  const __m256i c = _mm256_add_epi16(_mm256_maddubs_epi16(lo, h0), _mm256_maddubs_epi16(hi, h1));
  return _mm256_add_epi32(_mm256_madd_epi16(a, _mm256_set1_epi16(1)), _mm256_madd_epi16(c, _mm256_set1_epi16(128)));
}
__attribute__((target("avx2,fma"))) inline __m256i isum_q8_x16_avx2(const uint8_t* p, __m256i l0, __m256i l1, __m256i h0, __m256i h1) {
  // weights q = 16 wh + wl (nibbles) times x = 128 xh + xl: four exact int16 partial products
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v0 = LD(p), v1 = LD(p + 32);
  const __m256i wl0 = _mm256_and_si256(v0, mask), wl1 = _mm256_and_si256(v1, mask);
  const __m256i wh0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), mask), wh1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), mask);
  const __m256i ll = _mm256_add_epi16(_mm256_maddubs_epi16(wl0, l0), _mm256_maddubs_epi16(wl1, l1));
  const __m256i hl = _mm256_add_epi16(_mm256_maddubs_epi16(wh0, l0), _mm256_maddubs_epi16(wh1, l1));
  const __m256i lh = _mm256_add_epi16(_mm256_maddubs_epi16(wl0, h0), _mm256_maddubs_epi16(wl1, h1));
  const __m256i hh = _mm256_add_epi16(_mm256_maddubs_epi16(wh0, h0), _mm256_maddubs_epi16(wh1, h1));
  return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(ll, _mm256_set1_epi16(1)), _mm256_madd_epi16(hl, _mm256_set1_epi16(16))),
                          _mm256_add_epi32(_mm256_madd_epi16(lh, _mm256_set1_epi16(128)), _mm256_madd_epi16(hh, _mm256_set1_epi16(2048))));
}
__attribute__((target("avx2,fma"))) void dot4_q4_x16_avx2(const uint8_t* const* rows, const int8_t* xl, const int8_t* xh, const float* xs, int64_t nb, float* out) {
  ICML26_DOT4_BODY16(32, isum_q4_x16_avx2)
}
__attribute__((target("avx2,fma"))) void dot4_q8_x16_avx2(const uint8_t* const* rows, const int8_t* xl, const int8_t* xh, const float* xs, int64_t nb, float* out) {
  ICML26_DOT4_BODY16(64, isum_q8_x16_avx2)
}
#undef ICML26_DOT4_BODY16
#undef LD
#undef ICML26_DOT4_BODY
#endif

using DotFn = float (*)(const uint8_t*, const float*, int64_t);

constexpr int64_t kMinChunkBytes = 1 << 20;  // weight bytes per parallel_for chunk

// Integer-activation ISA levels: 0 portable, 1 AVX2 (vpmaddubsw), 3 AVX-VNNI, 4 AVX512-VNNI.
struct IntIsa {
  DotI8Fn q4 = dot4_q4_i8_scalar, q8 = dot4_q8_i8_scalar;
  DotX16Fn q4x16 = dot4_q4_x16_scalar, q8x16 = dot4_q8_x16_scalar;  // AVX2 at every level >= 1
  int64_t level = 0;
};

bool int_level_supported(int64_t level) {
  if (level == 0) return true;
#ifdef ICML26_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (level == 1) return avx2;
  if (level == 3) return avx2 && __builtin_cpu_supports("avxvnni");
  if (level == 4) return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
  return false;
}

IntIsa int_isa_at(int64_t level) {
  IntIsa s;
#ifdef ICML26_X86
  if (level >= 1) { s.q4x16 = dot4_q4_x16_avx2; s.q8x16 = dot4_q8_x16_avx2; }
  if (level == 1) { s.q4 = dot4_q4_i8_avx2; s.q8 = dot4_q8_i8_avx2; }
  if (level == 3) { s.q4 = dot4_q4_i8_avxvnni; s.q8 = dot4_q8_i8_avxvnni; }
  if (level == 4) { s.q4 = dot4_q4_i8_avx512vnni; s.q8 = dot4_q8_i8_avx512vnni; }
#endif
  s.level = level;
  return s;
}

const IntIsa& int_isa() {
  static IntIsa best = [] {
    for (int64_t l : {4, 3, 1})
      if (int_level_supported(l)) return int_isa_at(l);
    return int_isa_at(0);
  }();
  return best;
}

struct Isa {
  DotFn q4 = dot_q4_scalar;
  DotFn q8 = dot_q8_scalar;
  int64_t level = 0;  // 0 portable, 1 avx2, 2 avx512
  Isa() {
#ifdef ICML26_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
      q4 = dot_q4_avx512; q8 = dot_q8_avx512; level = 2;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      q4 = dot_q4_avx2; q8 = dot_q8_avx2; level = 1;
    }
#endif
  }
};

Isa& isa() {
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
  // at least kMinChunkBytes of weights per thread: the per-layer decode GEMVs (<= 1 MiB) stay on
  // one thread, where a thread wake-up costs more than it saves (and, on a shared machine, a
  // thread waiting for a busy core stalls the whole op)
  const int64_t grain = std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(row_bytes, 1));
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

// Packed INT4 / INT8 weights x activations quantized to INT8 per block of 64
// (llama.cpp-style Q8 activations); force_level: -1 best, else an integer ISA level (see IntIsa).
at::Tensor quant_gemm_i8act(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& mins,
                            int64_t group_size, int64_t force_level, int64_t bits, int64_t act_bits) {
  TORCH_CHECK(act_bits == 8 || act_bits == 16, "act_bits must be 8 or 16 (15-bit codes as two int8 halves)");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous float32 (M, K)");
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.is_contiguous() && qweight.dim() == 2, "qweight must be contiguous uint8");
  TORCH_CHECK(bits == 4 || bits == 8, "bits must be 4 or 8");
  const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  TORCH_CHECK(qweight.size(1) * 8 == K * bits && K % 64 == 0, "qweight (N, K*bits/8) with K % 64 == 0");
  TORCH_CHECK(group_size > 0 && K % group_size == 0 && group_size % 64 == 0, "group_size must divide K and be a multiple of 64");
  const int64_t G = K / group_size, B = K / 64, BG = group_size / 64;
  TORCH_CHECK(scales.numel() == N * G && mins.numel() == N * G && scales.is_contiguous() && mins.is_contiguous() &&
              scales.scalar_type() == at::kFloat && mins.scalar_type() == at::kFloat, "scales/mins must be float32 (N, K/group_size)");
  IntIsa is = int_isa();
  if (force_level >= 0) {
    TORCH_CHECK(int_level_supported(force_level), "integer ISA level ", force_level, " is not supported by this CPU");
    is = int_isa_at(force_level);
  }
  const DotI8Fn dot = bits == 4 ? is.q4 : is.q8;
  const DotX16Fn dot16 = bits == 4 ? is.q4x16 : is.q8x16;
  const bool x16 = act_bits == 16;
  const float qmax = x16 ? 16383.f : 127.f;
  const float* xp = x.data_ptr<float>();
  std::vector<int8_t> xq(M * K), xh(x16 ? M * K : 0);
  std::vector<float> xs(M * B), xsum(M * G, 0.f);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < B; ++b) {
      const float* xb = xp + m * K + b * 64;
      float amax = 0.f;
      for (int j = 0; j < 64; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float sc = amax / qmax;
      const float inv = sc > 0.f ? 1.f / sc : 0.f;
      xs[m * B + b] = sc;
      if (x16) {
        for (int j = 0; j < 64; ++j) {
          const int32_t v = int32_t(std::nearbyint(xb[j] * inv));  // [-16383, 16383]
          const int32_t hi = v >> 7;                                // floor(v / 128) in [-128, 127]
          xh[m * K + b * 64 + j] = int8_t(hi);
          xq[m * K + b * 64 + j] = int8_t(v - 128 * hi);            // [0, 127]
        }
      } else {
        for (int j = 0; j < 64; ++j) xq[m * K + b * 64 + j] = int8_t(std::nearbyint(xb[j] * inv));
      }
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
  const int64_t row_bytes = K * bits / 8, grp_bytes = group_size * bits / 8;
  const int64_t NB = (N + 3) / 4;  // blocks of 4 rows
  const int64_t grain = std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(4 * row_bytes, 1));  // see quant_gemm
  at::parallel_for(0, NB, grain, [&](int64_t b0, int64_t b1) {
    const uint8_t* rows[4];
    float d[4];
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t n = blk * 4, R = std::min<int64_t>(4, N - n);
      for (int64_t m = 0; m < M; ++m) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int64_t g = 0; g < G; ++g) {
          for (int r = 0; r < 4; ++r) rows[r] = qp + (n + std::min<int64_t>(r, R - 1)) * row_bytes + g * grp_bytes;
          if (x16)
            dot16(rows, xq.data() + m * K + g * group_size, xh.data() + m * K + g * group_size, xs.data() + m * B + g * BG, BG, d);
          else
            dot(rows, xq.data() + m * K + g * group_size, xs.data() + m * B + g * BG, BG, d);
          for (int64_t r = 0; r < R; ++r) acc[r] += sp[(n + r) * G + g] * d[r] + mp[(n + r) * G + g] * xsum[m * G + g];
        }
        for (int64_t r = 0; r < R; ++r) yp[m * N + n + r] = acc[r];
      }
    }
  });
  return y;
}

// ---------------------------------------------------------------- prefill (M > a few rows)
// Dequantize one packed row into fp32 (w = scale * q + min per group).
inline void dequant_row(const uint8_t* q, const float* sc, const float* mi, int64_t K, int64_t bits,
                        int64_t group_size, float* w) {
  if (bits == 4 && group_size % 64 == 0) {
    const int64_t per = group_size / 64;
    for (int64_t b = 0; b < K / 64; ++b) {
      const uint8_t* qb = q + b * 32;
      float* wb = w + b * 64;
      const float s = sc[b / per], m = mi[b / per];
      for (int j = 0; j < 32; ++j) {
        wb[j] = float(qb[j] & 0x0F) * s + m;
        wb[32 + j] = float(qb[j] >> 4) * s + m;
      }
    }
  } else if (bits == 4) {
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t byte = q[(k / 64) * 32 + (k % 32)];
      const int code = (k % 64) < 32 ? (byte & 0x0F) : (byte >> 4);
      w[k] = float(code) * sc[k / group_size] + mi[k / group_size];
    }
  } else {
    for (int64_t g = 0; g < K / group_size; ++g) {
      const float s = sc[g], m = mi[g];
      for (int64_t k = g * group_size; k < (g + 1) * group_size; ++k) w[k] = float(q[k]) * s + m;
    }
  }
}

// y = x @ W^T for M > a few rows: the weight is dequantized tile by tile (tile_rows rows, a buffer
// that stays in cache) and each tile goes through the BLAS GEMM, so the fp32 weight is never
// written out whole. Output computed transposed (N, M) so that a tile's rows are contiguous.
at::Tensor quant_linear_tiled(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                              const at::Tensor& mins, int64_t bits, int64_t group_size, int64_t tile_rows) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "quant_linear_tiled: x must be (M, K) float32");
  TORCH_CHECK(bits == 4 || bits == 8, "quant_linear_tiled: bits must be 4 or 8");
  const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  TORCH_CHECK(group_size > 0 && K % group_size == 0 && (bits == 8 || K % 64 == 0), "quant_linear_tiled: bad shapes");
  TORCH_CHECK(qweight.size(1) == (bits == 4 ? K / 2 : K), "quant_linear_tiled: qweight does not match K");
  const int64_t G = K / group_size, row_bytes = bits == 4 ? K / 2 : K;
  auto xc = x.contiguous();
  auto q = qweight.contiguous();
  auto s = scales.contiguous().to(at::kFloat);
  auto mn = mins.contiguous().to(at::kFloat);
  auto yT = at::empty({N, M}, x.options());
  const int64_t T = std::max<int64_t>(1, std::min<int64_t>(tile_rows, N));
  auto tile = at::empty({T, K}, x.options());
  auto xT = xc.t();
  const uint8_t* qp = q.data_ptr<uint8_t>();
  const float* sp = s.data_ptr<float>();
  const float* mp = mn.data_ptr<float>();
  float* tp = tile.data_ptr<float>();
  for (int64_t n0 = 0; n0 < N; n0 += T) {
    const int64_t nt = std::min(T, N - n0);
    for (int64_t r = 0; r < nt; ++r)
      dequant_row(qp + (n0 + r) * row_bytes, sp + (n0 + r) * G, mp + (n0 + r) * G, K, bits, group_size, tp + r * K);
    auto out = yT.narrow(0, n0, nt);
    at::mm_out(out, tile.narrow(0, 0, nt), xT);
  }
  return yT.t();
}

int64_t quant_isa_level() { return isa().level; }
int64_t quant_int_isa_level() { return int_isa().level; }
bool quant_int_level_supported(int64_t level) { return int_level_supported(level); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("quant_gemm(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int bits, int group_size, int force_level=-1) -> Tensor");
  m.def("quant_isa_level() -> int");
  m.def("quant_int_isa_level() -> int");
  m.def("quant_int_level_supported(int level) -> bool");
  m.def("quant_gemm_i8act(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int group_size, int force_level=-1, int bits=4, int act_bits=8) -> Tensor");
  m.impl("quant_gemm_i8act", c10::DispatchKey::CPU, TORCH_FN(quant_gemm_i8act));
  m.impl("quant_gemm", c10::DispatchKey::CPU, TORCH_FN(quant_gemm));
  m.def("quant_linear_tiled(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int bits, int group_size, int tile_rows) -> Tensor");
  m.impl("quant_linear_tiled", c10::DispatchKey::CPU, TORCH_FN(quant_linear_tiled));
  m.impl("quant_isa_level", c10::DispatchKey::CatchAll, TORCH_FN(quant_isa_level));
  m.impl("quant_int_isa_level", c10::DispatchKey::CatchAll, TORCH_FN(quant_int_isa_level));
  m.impl("quant_int_level_supported", c10::DispatchKey::CatchAll, TORCH_FN(quant_int_level_supported));
}
