// Tile-based Gaussian splatting rasterizer (forward and backward) on the CPU.
//
// The image is cut into 16x16 tiles; every tile holds the list of the 2D Gaussians whose
// screen-space box touches it, sorted front to back (binning in Python, icml26/ops/splat.py,
// for the pure torch twin icml26/ops/_ref/splat.py; the same projection and binning in C++ at
// the end of this file for the kernel path).
// Per pixel (centre of column u at u + 0.5), front to back (3DGS, Kerbl et al. 2023, Eq. 3):
//   power = -1/2 (a dx^2 + c dy^2) - b dx dy     (conic [[a, b], [b, c]] = inverse 2D covariance)
//   alpha = min(0.99, o exp(power)); skipped when power > 0 or alpha < 1/255
//   stop (this Gaussian excluded) when T (1 - alpha) < 1e-4
//   C += colour * alpha * T;  T *= 1 - alpha
// The alpha output is 1 - T_final (the rendering of a constant-1 channel).
// Backward walks each tile list in reverse from the last contributor and recovers T by
// dividing by (1 - alpha) (as 3DGS does); it returns dL/d mean2d, dL/d conic, dL/d colour,
// dL/d opacity. Gradients of a Gaussian are summed over a tile's pixels in SIMD lanes, then
// into a per-thread buffer (OpenMP over tiles, a static round-robin schedule so that each tile
// always lands in the same thread's buffer), then reduced: no atomics, deterministic for a fixed
// thread count. The inner loops run over the 256 pixels of a tile (`omp simd`: AVX2
// lanes, with glibc's vector exp) for one Gaussian at a time, so each pixel keeps its own
// front-to-back order; only the rows and columns of the tile inside the Gaussian's
// alpha >= 1/255 box (pixel_box) are visited.
// float32 with AVX2 + FMA (compile time): explicit 8-lane code over half tile rows, a polynomial
// exp (< 2 ulp), chunks with no live pixel skipped (forward: all stopped; backward: all past
// their last contributor), and the backward's loops fused into one pass per Gaussian with
// gradients summed in registers. float64 (gradcheck, brute-force oracle) keeps the loop below.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

constexpr int BS = 16;
constexpr int NPIX = BS * BS;

void check_inputs(const at::Tensor& mean2d, const at::Tensor& conic, const at::Tensor& colors, const at::Tensor& opac,
                  const at::Tensor& plist, const at::Tensor& offsets, int64_t width, int64_t height) {
  TORCH_CHECK(mean2d.dim() == 2 && mean2d.size(1) == 2, "splat: mean2d must be (N, 2)");
  const auto n = mean2d.size(0);
  TORCH_CHECK(conic.dim() == 2 && conic.size(0) == n && conic.size(1) == 3, "splat: conic must be (N, 3)");
  TORCH_CHECK(colors.dim() == 2 && colors.size(0) == n, "splat: colors must be (N, C)");
  TORCH_CHECK(opac.dim() == 1 && opac.size(0) == n, "splat: opacities must be (N,)");
  TORCH_CHECK(mean2d.scalar_type() == conic.scalar_type() && mean2d.scalar_type() == colors.scalar_type() &&
                  mean2d.scalar_type() == opac.scalar_type(), "splat: float inputs must share one dtype");
  TORCH_CHECK(plist.scalar_type() == at::kInt && offsets.scalar_type() == at::kLong, "splat: point list int32, offsets int64");
  const int64_t tx = (width + BS - 1) / BS, ty = (height + BS - 1) / BS;
  TORCH_CHECK(offsets.dim() == 1 && offsets.size(0) == tx * ty + 1, "splat: offsets must have tiles + 1 entries");
  TORCH_CHECK(width > 0 && height > 0, "splat: empty image");
}

// The tile-local pixel box [u0, u1] x [v0, v1] outside which o exp(power) < 1/255 (so no pixel
// there is touched: skipping it changes nothing), with one pixel of margin; false when empty.
// The ellipse d^T conic d <= 2 ln(255 o) has half-widths sqrt(2 ln(255 o) Sigma_xx) and
// sqrt(2 ln(255 o) Sigma_yy), Sigma = conic^-1.
template <typename T>
inline bool pixel_box(T mx, T my, T a, T b, T c, T o, int64_t x0, int64_t y0, int& u0, int& u1, int& v0, int& v1) {
  const T det = a * c - b * b;
  if (!(o * T(255) > T(1)) || !(det > T(0))) return false;
  const T k2 = T(2) * std::log(o * T(255));
  const T rx = std::sqrt(k2 * c / det), ry = std::sqrt(k2 * a / det);
  if (!(rx == rx) || !(ry == ry)) return false;  // NaN
  const T lx = mx - rx - T(0.5) - T(x0), hx = mx + rx - T(0.5) - T(x0);
  const T ly = my - ry - T(0.5) - T(y0), hy = my + ry - T(0.5) - T(y0);
  if (hx < T(-1) || hy < T(-1) || lx > T(BS) || ly > T(BS)) return false;
  u0 = std::max(0, int(std::floor(std::max(lx, T(-1)))) - 1);
  u1 = std::min(BS - 1, int(std::ceil(std::min(hx, T(BS)))) + 1);
  v0 = std::max(0, int(std::floor(std::max(ly, T(-1)))) - 1);
  v1 = std::min(BS - 1, int(std::ceil(std::min(hy, T(BS)))) + 1);
  return u0 <= u1 && v0 <= v1;
}

#if defined(__AVX2__) && defined(__FMA__)
#define SPLAT_AVX2 1
// ------------------------------------------------------------------ float32, AVX2 + FMA
// Eight pixels of one tile row at a time (a tile row is two such chunks; chunk q = 2 row + half).
// Every chunk that meets the Gaussian's pixel box is evaluated whole: lanes outside the box get
// o exp(power) < 1/255 and the per-pixel rule skips them, so the result is that of the scalar loop.

// exp(x) for x <= 0 (Cephes expf: Cody-Waite reduction, degree-6 polynomial; relative error below
// 2 ulp on [-87.3, 0]; below -87.3 the value of exp(-87.3) ~ 1e-38, far under any threshold used).
inline __m256 exp_nonpos_ps(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(_mm256_mul_ps(y, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One tile's forward. Tr, acc (C x 256), last: the tile's state (in: T = 1, acc = 0, last = 0).
void forward_tile_avx2(const float* m2, const float* cn, const float* col, const float* op, const int32_t* plist, int64_t s,
                       int64_t e, int64_t x0, int64_t y0, int64_t C, float* Tr, float* acc, int32_t* last) {
  alignas(32) int32_t alive[NPIX];
  for (int p = 0; p < NPIX; ++p) alive[p] = -1;
  uint32_t live = 0xffffffffu;  // bit q: chunk q has a pixel still compositing
  const __m256 lane = _mm256_setr_ps(0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f);
  const __m256 pxh[2] = {_mm256_add_ps(_mm256_set1_ps(float(x0)), lane), _mm256_add_ps(_mm256_set1_ps(float(x0 + 8)), lane)};
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.f), cap = _mm256_set1_ps(0.99f),
               amin = _mm256_set1_ps(float(1.0 / 255.0)), tmin = _mm256_set1_ps(1e-4f), mhalf = _mm256_set1_ps(-0.5f);
  for (int64_t k = s; k < e && live != 0; ++k) {
    const int32_t g = plist[k];
    const float mx = m2[2 * g], my = m2[2 * g + 1], a = cn[3 * g], b = cn[3 * g + 1], c = cn[3 * g + 2], o = op[g];
    int u0, u1, v0, v1;
    if (!pixel_box(mx, my, a, b, c, o, x0, y0, u0, u1, v0, v1)) continue;
    const __m256i kk = _mm256_set1_epi32(int32_t(k - s + 1));
    const __m256 vmx = _mm256_set1_ps(mx), va = _mm256_set1_ps(a), vo = _mm256_set1_ps(o);
    const __m256 dxh[2] = {_mm256_sub_ps(pxh[0], vmx), _mm256_sub_ps(pxh[1], vmx)};
    const __m256 adxh[2] = {_mm256_mul_ps(va, dxh[0]), _mm256_mul_ps(va, dxh[1])};
    const int h0 = u0 >> 3, h1 = u1 >> 3;
    for (int row = v0; row <= v1; ++row) {
      const float dy = float(y0 + row) + 0.5f - my;
      const __m256 cdy2 = _mm256_set1_ps(c * dy * dy), bdy = _mm256_set1_ps(b * dy);
      for (int h = h0; h <= h1; ++h) {
        const int q = 2 * row + h;
        if (!((live >> q) & 1u)) continue;
        const int p = 8 * q;
        const __m256 dx = dxh[h];
        const __m256 power = _mm256_fnmadd_ps(bdy, dx, _mm256_mul_ps(mhalf, _mm256_fmadd_ps(adxh[h], dx, cdy2)));
        const __m256 al = _mm256_min_ps(cap, _mm256_mul_ps(vo, exp_nonpos_ps(_mm256_min_ps(power, zero))));
        const __m256 av = _mm256_castsi256_ps(_mm256_load_si256((const __m256i*)(alive + p)));
        const __m256 ok = _mm256_and_ps(av, _mm256_and_ps(_mm256_cmp_ps(power, zero, _CMP_LE_OQ), _mm256_cmp_ps(al, amin, _CMP_GE_OQ)));
        if (_mm256_movemask_ps(ok) == 0) continue;
        const __m256 T0 = _mm256_load_ps(Tr + p);
        const __m256 tt = _mm256_mul_ps(T0, _mm256_sub_ps(one, al));
        const __m256 stop = _mm256_and_ps(ok, _mm256_cmp_ps(tt, tmin, _CMP_LT_OQ));
        const __m256 use = _mm256_andnot_ps(stop, ok);
        const __m256 w = _mm256_and_ps(use, _mm256_mul_ps(al, T0));
        _mm256_store_ps(Tr + p, _mm256_blendv_ps(T0, tt, use));
        const __m256i lv = _mm256_load_si256((const __m256i*)(last + p));
        _mm256_store_si256((__m256i*)(last + p), _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(lv), _mm256_castsi256_ps(kk), use)));
        if (_mm256_movemask_ps(stop) != 0) {
          const __m256 na = _mm256_andnot_ps(stop, av);
          _mm256_store_si256((__m256i*)(alive + p), _mm256_castps_si256(na));
          if (_mm256_movemask_ps(na) == 0) live &= ~(1u << q);
        }
        for (int64_t ch = 0; ch < C; ++ch) {
          float* ac = acc + ch * NPIX + p;
          _mm256_store_ps(ac, _mm256_fmadd_ps(w, _mm256_set1_ps(col[g * C + ch]), _mm256_load_ps(ac)));
        }
      }
    }
  }
}

// One tile's backward: walks the list from the last contributor to the front (recovering T by
// division, as the scalar loop does) and adds this tile's gradient of each Gaussian to gdst rows.
void backward_tile_avx2(const float* m2, const float* cn, const float* col, const float* op, const int32_t* plist, int64_t s,
                        int64_t x0, int64_t y0, int64_t C, int64_t stride, float* Tr, const int32_t* last, const float* gA,
                        const float* gI, float* SA, float* S, float* mine) {
  int32_t qlast[2 * BS];
  int32_t maxlast = 0;
  for (int q = 0; q < 2 * BS; ++q) {
    int32_t m = 0;
    for (int l = 0; l < 8; ++l) m = std::max(m, last[8 * q + l]);
    qlast[q] = m;
    maxlast = std::max(maxlast, m);
  }
  const __m256 lane = _mm256_setr_ps(0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f);
  const __m256 pxh[2] = {_mm256_add_ps(_mm256_set1_ps(float(x0)), lane), _mm256_add_ps(_mm256_set1_ps(float(x0 + 8)), lane)};
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.f), cap = _mm256_set1_ps(0.99f),
               amin = _mm256_set1_ps(float(1.0 / 255.0)), mhalf = _mm256_set1_ps(-0.5f);
  __m256 gcol[16];
  std::vector<__m256> gcol_big(C > 16 ? size_t(C) : 0);
  __m256* gcv = C > 16 ? gcol_big.data() : gcol;
  for (int32_t j = maxlast - 1; j >= 0; --j) {
    const int32_t g = plist[s + j];
    const float mx = m2[2 * g], my = m2[2 * g + 1], a = cn[3 * g], b = cn[3 * g + 1], c = cn[3 * g + 2], o = op[g];
    int u0, u1, v0, v1;
    if (!pixel_box(mx, my, a, b, c, o, x0, y0, u0, u1, v0, v1)) continue;
    const __m256i vj = _mm256_set1_epi32(j);
    const __m256 vmx = _mm256_set1_ps(mx), va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), vo = _mm256_set1_ps(o);
    const __m256 dxh[2] = {_mm256_sub_ps(pxh[0], vmx), _mm256_sub_ps(pxh[1], vmx)};
    const __m256 adxh[2] = {_mm256_mul_ps(va, dxh[0]), _mm256_mul_ps(va, dxh[1])};
    const __m256 bdxh[2] = {_mm256_mul_ps(vb, dxh[0]), _mm256_mul_ps(vb, dxh[1])};
    __m256 gmx = zero, gmy = zero, gxx = zero, gxy = zero, gyy = zero, go = zero;
    for (int64_t ch = 0; ch < C; ++ch) gcv[ch] = zero;
    bool any = false;
    const int h0 = u0 >> 3, h1 = u1 >> 3;
    for (int row = v0; row <= v1; ++row) {
      const float dyf = float(y0 + row) + 0.5f - my;
      const __m256 dy = _mm256_set1_ps(dyf), cdy2 = _mm256_set1_ps(c * dyf * dyf), bdy = _mm256_set1_ps(b * dyf),
                   cdy = _mm256_set1_ps(c * dyf);
      for (int h = h0; h <= h1; ++h) {
        const int q = 2 * row + h;
        if (j >= qlast[q]) continue;
        const int p = 8 * q;
        const __m256 dx = dxh[h];
        const __m256 power = _mm256_fnmadd_ps(bdy, dx, _mm256_mul_ps(mhalf, _mm256_fmadd_ps(adxh[h], dx, cdy2)));
        const __m256 gg = exp_nonpos_ps(_mm256_min_ps(power, zero));
        const __m256 ar = _mm256_mul_ps(vo, gg);
        const __m256 aa = _mm256_min_ps(cap, ar);
        const __m256 before = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_load_si256((const __m256i*)(last + p)), vj));
        const __m256 in = _mm256_and_ps(before, _mm256_and_ps(_mm256_cmp_ps(power, zero, _CMP_LE_OQ), _mm256_cmp_ps(aa, amin, _CMP_GE_OQ)));
        if (_mm256_movemask_ps(in) == 0) continue;
        any = true;
        const __m256 oma = _mm256_sub_ps(one, aa);
        const __m256 T = _mm256_blendv_ps(_mm256_load_ps(Tr + p), _mm256_div_ps(_mm256_load_ps(Tr + p), oma), in);
        _mm256_store_ps(Tr + p, T);
        const __m256 w = _mm256_and_ps(in, _mm256_mul_ps(aa, T));
        const __m256 sa = _mm256_load_ps(SA + p);
        __m256 dla = _mm256_and_ps(in, _mm256_mul_ps(_mm256_sub_ps(one, sa), _mm256_load_ps(gA + p)));
        _mm256_store_ps(SA + p, _mm256_blendv_ps(sa, _mm256_fmadd_ps(oma, sa, aa), in));
        for (int64_t ch = 0; ch < C; ++ch) {
          const __m256 cc = _mm256_set1_ps(col[g * C + ch]);
          const __m256 gc = _mm256_load_ps(gI + ch * NPIX + p);
          float* Sp = S + ch * NPIX + p;
          const __m256 sc = _mm256_load_ps(Sp);
          gcv[ch] = _mm256_fmadd_ps(w, gc, gcv[ch]);
          dla = _mm256_add_ps(dla, _mm256_and_ps(in, _mm256_mul_ps(_mm256_sub_ps(cc, sc), gc)));
          _mm256_store_ps(Sp, _mm256_blendv_ps(sc, _mm256_fmadd_ps(oma, sc, _mm256_mul_ps(aa, cc)), in));
        }
        // d alpha / d (o G) is 0 where the 0.99 cap is active
        const __m256 d = _mm256_and_ps(_mm256_and_ps(in, _mm256_cmp_ps(ar, cap, _CMP_LE_OQ)), _mm256_mul_ps(dla, T));
        go = _mm256_fmadd_ps(gg, d, go);
        const __m256 dp = _mm256_mul_ps(_mm256_mul_ps(gg, vo), d);  // dL/d power
        gmx = _mm256_fmadd_ps(dp, _mm256_fmadd_ps(vb, dy, adxh[h]), gmx);
        gmy = _mm256_fmadd_ps(dp, _mm256_add_ps(bdxh[h], cdy), gmy);
        const __m256 dpx = _mm256_mul_ps(dp, dx);
        gxx = _mm256_fmadd_ps(dpx, dx, gxx);
        gxy = _mm256_fmadd_ps(dpx, dy, gxy);
        gyy = _mm256_fmadd_ps(_mm256_mul_ps(dp, dy), dy, gyy);
      }
    }
    if (!any) continue;
    float* gdst = mine + size_t(g) * size_t(stride);
    gdst[0] += hsum_ps(gmx);
    gdst[1] += hsum_ps(gmy);
    gdst[2] += -0.5f * hsum_ps(gxx);
    gdst[3] += -hsum_ps(gxy);
    gdst[4] += -0.5f * hsum_ps(gyy);
    gdst[5] += hsum_ps(go);
    for (int64_t ch = 0; ch < C; ++ch) gdst[6 + ch] += hsum_ps(gcv[ch]);
  }
}
#endif

// 32-byte aligned float scratch of n floats inside v
inline float* aligned_scratch(std::vector<float>& v, size_t n) {
  v.assign(n + 8, 0.f);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 31) & ~uintptr_t(31));
}

template <typename T>
void forward_impl(const T* m2, const T* cn, const T* col, const T* op, const int32_t* plist, const int64_t* off,
                  int64_t W, int64_t H, int64_t C, T* img, T* tfin, int32_t* ncon) {
  const int64_t tx = (W + BS - 1) / BS, ty = (H + BS - 1) / BS, ntiles = tx * ty;
  const T cap = T(0.99), amin = T(1.0 / 255.0), tmin = T(1e-4);
#pragma omp parallel for schedule(dynamic, 1) num_threads(at::get_num_threads())
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t x0 = (t % tx) * BS, y0 = (t / tx) * BS;
    alignas(64) T px[NPIX], py[NPIX], Tr[NPIX], w[NPIX];
    alignas(64) int32_t last[NPIX];
    alignas(64) T alive[NPIX];
    std::vector<T> acc(C * NPIX, T(0));
    for (int p = 0; p < NPIX; ++p) {
      px[p] = T(x0 + p % BS) + T(0.5);
      py[p] = T(y0 + p / BS) + T(0.5);
      Tr[p] = T(1);
      last[p] = 0;
      // pixels beyond the image edge are computed but never written
      alive[p] = T(1);
    }
    const int64_t s = off[t], e = off[t + 1];
#ifdef SPLAT_AVX2
    if constexpr (std::is_same_v<T, float>) {
      std::vector<float> accv;
      float* acf = aligned_scratch(accv, size_t(C) * NPIX);
      forward_tile_avx2(m2, cn, col, op, plist, s, e, x0, y0, C, Tr, acf, last);
      for (int p = 0; p < NPIX; ++p) {
        const int64_t x = x0 + p % BS, y = y0 + p / BS;
        if (x >= W || y >= H) continue;
        const int64_t q = y * W + x;
        for (int64_t ch = 0; ch < C; ++ch) img[q * C + ch] = acf[ch * NPIX + p];
        tfin[q] = Tr[p];
        ncon[q] = last[p];
      }
      continue;
    }
#endif
    int n_alive = NPIX;
    for (int64_t k = s; k < e && n_alive > 0; ++k) {
      const int32_t g = plist[k];
      const T mx = m2[2 * g], my = m2[2 * g + 1], a = cn[3 * g], b = cn[3 * g + 1], c = cn[3 * g + 2], o = op[g];
      const int32_t kk = int32_t(k - s + 1);
      int u0, u1, v0, v1;
      if (!pixel_box(mx, my, a, b, c, o, x0, y0, u0, u1, v0, v1)) continue;
      int dead = 0;
      for (int row = v0; row <= v1; ++row) {
#pragma omp simd reduction(+ : dead)
      for (int p = row * BS + u0; p <= row * BS + u1; ++p) {
        const T dx = px[p] - mx, dy = py[p] - my;
        const T power = T(-0.5) * (a * dx * dx + c * dy * dy) - b * dx * dy;
        const T al = std::min(cap, o * std::exp(std::min(power, T(0))));
        const bool ok = alive[p] > T(0) && power <= T(0) && al >= amin;
        const T tt = Tr[p] * (T(1) - al);
        const bool stop = ok && tt < tmin;
        const bool use = ok && !stop;
        w[p] = use ? al * Tr[p] : T(0);
        Tr[p] = use ? tt : Tr[p];
        last[p] = use ? kk : last[p];
        alive[p] = stop ? T(0) : alive[p];
        dead += stop ? 1 : 0;
      }
      }
      n_alive -= dead;
      for (int64_t ch = 0; ch < C; ++ch) {
        const T cc = col[g * C + ch];
        T* ac = acc.data() + ch * NPIX;
        for (int row = v0; row <= v1; ++row) {
#pragma omp simd
          for (int p = row * BS + u0; p <= row * BS + u1; ++p) ac[p] += w[p] * cc;
        }
      }
    }
    for (int p = 0; p < NPIX; ++p) {
      const int64_t x = x0 + p % BS, y = y0 + p / BS;
      if (x >= W || y >= H) continue;
      const int64_t q = y * W + x;
      for (int64_t ch = 0; ch < C; ++ch) img[q * C + ch] = acc[ch * NPIX + p];
      tfin[q] = Tr[p];
      ncon[q] = last[p];
    }
  }
}

template <typename T>
void backward_impl(const T* m2, const T* cn, const T* col, const T* op, const int32_t* plist, const int64_t* off,
                   int64_t W, int64_t H, int64_t C, int64_t N, const T* tfin, const int32_t* ncon, const T* gimg,
                   const T* galpha, T* gm2, T* gcn, T* gcol, T* gop) {
  const int64_t tx = (W + BS - 1) / BS, ty = (H + BS - 1) / BS, ntiles = tx * ty;
  const T cap = T(0.99), amin = T(1.0 / 255.0);
  const int nth = std::max(1, at::get_num_threads());
  const int64_t stride = 6 + C;  // per Gaussian: mx, my, a, b, c, o, colours
  std::vector<T> buf(size_t(nth) * size_t(N) * size_t(stride), T(0));
#pragma omp parallel for schedule(static, 1) num_threads(nth)
  for (int64_t t = 0; t < ntiles; ++t) {
#ifdef _OPENMP
    const int tid = omp_get_thread_num();
#else
    const int tid = 0;
#endif
    T* mine = buf.data() + size_t(tid) * size_t(N) * size_t(stride);
    const int64_t x0 = (t % tx) * BS, y0 = (t / tx) * BS;
    alignas(64) T px[NPIX], py[NPIX], Tr[NPIX], w[NPIX], msk[NPIX], dla[NPIX], SA[NPIX], gA[NPIX], G[NPIX], al[NPIX], araw[NPIX];
    alignas(64) int32_t last[NPIX];
    std::vector<T> S(C * NPIX, T(0)), gI(C * NPIX, T(0));
    int32_t maxlast = 0;
    for (int p = 0; p < NPIX; ++p) {
      const int64_t x = x0 + p % BS, y = y0 + p / BS;
      px[p] = T(x) + T(0.5);
      py[p] = T(y) + T(0.5);
      SA[p] = T(0);
      if (x < W && y < H) {
        const int64_t q = y * W + x;
        Tr[p] = tfin[q];
        last[p] = ncon[q];
        gA[p] = galpha[q];
        for (int64_t ch = 0; ch < C; ++ch) gI[ch * NPIX + p] = gimg[q * C + ch];
      } else {
        Tr[p] = T(1);
        last[p] = 0;
        gA[p] = T(0);
      }
      maxlast = std::max(maxlast, last[p]);
    }
    const int64_t s = off[t];
#ifdef SPLAT_AVX2
    if constexpr (std::is_same_v<T, float>) {
      std::vector<float> sv;
      float* Sf = aligned_scratch(sv, size_t(C) * NPIX * 2);
      float* gIf = Sf + size_t(C) * NPIX;
      for (int64_t i = 0; i < C * NPIX; ++i) gIf[i] = gI[i];
      backward_tile_avx2(m2, cn, col, op, plist, s, x0, y0, C, stride, Tr, last, gA, gIf, SA, Sf, mine);
      continue;
    }
#endif
    for (int32_t j = maxlast - 1; j >= 0; --j) {
      const int32_t g = plist[s + j];
      const T mx = m2[2 * g], my = m2[2 * g + 1], a = cn[3 * g], b = cn[3 * g + 1], c = cn[3 * g + 2], o = op[g];
      int u0, u1, v0, v1;
      if (!pixel_box(mx, my, a, b, c, o, x0, y0, u0, u1, v0, v1)) continue;
      T* gdst = mine + size_t(g) * size_t(stride);
      T gmx = 0, gmy = 0, ga = 0, gb = 0, gc_ = 0, go = 0;
      for (int row = v0; row <= v1; ++row) {
      const int pa = row * BS + u0, pb = row * BS + u1;
#pragma omp simd
      for (int p = pa; p <= pb; ++p) {
        const T dx = px[p] - mx, dy = py[p] - my;
        const T power = T(-0.5) * (a * dx * dx + c * dy * dy) - b * dx * dy;
        const T gg = std::exp(std::min(power, T(0)));
        const T ar = o * gg;
        const T aa = std::min(cap, ar);
        const bool in = j < last[p] && power <= T(0) && aa >= amin;
        G[p] = gg;
        araw[p] = ar;
        al[p] = in ? aa : T(0);
        msk[p] = in ? T(1) : T(0);
        Tr[p] = in ? Tr[p] / (T(1) - aa) : Tr[p];
        w[p] = in ? aa * Tr[p] : T(0);
        // alpha channel (colour 1): dL/dalpha_j / T_j += (1 - S_{j+1}) dL/dA
        dla[p] = in ? (T(1) - SA[p]) * gA[p] : T(0);
        SA[p] = in ? aa + (T(1) - aa) * SA[p] : SA[p];
      }
      for (int64_t ch = 0; ch < C; ++ch) {
        const T cc = col[g * C + ch];
        T* Sc = S.data() + ch * NPIX;
        const T* gc = gI.data() + ch * NPIX;
        T gsum = T(0);
#pragma omp simd reduction(+ : gsum)
        for (int p = pa; p <= pb; ++p) {
          gsum += w[p] * gc[p];
          dla[p] += msk[p] * (cc - Sc[p]) * gc[p];
          Sc[p] = msk[p] > T(0) ? al[p] * cc + (T(1) - al[p]) * Sc[p] : Sc[p];
        }
        gdst[6 + ch] += gsum;
      }
#pragma omp simd reduction(+ : gmx, gmy, ga, gb, gc_, go)
      for (int p = pa; p <= pb; ++p) {
        const T dx = px[p] - mx, dy = py[p] - my;
        // d alpha / d (o G) is 0 where the 0.99 cap is active
        const T d = (msk[p] > T(0) && araw[p] <= cap) ? dla[p] * Tr[p] : T(0);
        go += G[p] * d;
        const T dp = G[p] * o * d;  // dL/d power
        gmx += dp * (a * dx + b * dy);
        gmy += dp * (b * dx + c * dy);
        ga += T(-0.5) * dx * dx * dp;
        gb += -dx * dy * dp;
        gc_ += T(-0.5) * dy * dy * dp;
      }
      }
      gdst[0] += gmx;
      gdst[1] += gmy;
      gdst[2] += ga;
      gdst[3] += gb;
      gdst[4] += gc_;
      gdst[5] += go;
    }
  }
  at::parallel_for(0, N, 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t g = lo; g < hi; ++g) {
      T acc[6] = {0, 0, 0, 0, 0, 0};
      for (int th = 0; th < nth; ++th) {
        const T* src = buf.data() + (size_t(th) * size_t(N) + size_t(g)) * size_t(stride);
        for (int k = 0; k < 6; ++k) acc[k] += src[k];
        for (int64_t ch = 0; ch < C; ++ch) gcol[g * C + ch] += src[6 + ch];
      }
      gm2[2 * g] = acc[0];
      gm2[2 * g + 1] = acc[1];
      gcn[3 * g] = acc[2];
      gcn[3 * g + 1] = acc[3];
      gcn[3 * g + 2] = acc[4];
      gop[g] = acc[5];
    }
  });
}

std::vector<at::Tensor> splat_forward(const at::Tensor& mean2d_, const at::Tensor& conic_, const at::Tensor& colors_,
                                      const at::Tensor& opac_, const at::Tensor& plist_, const at::Tensor& offsets_,
                                      int64_t width, int64_t height) {
  check_inputs(mean2d_, conic_, colors_, opac_, plist_, offsets_, width, height);
  auto mean2d = mean2d_.contiguous(), conic = conic_.contiguous(), colors = colors_.contiguous(), opac = opac_.contiguous();
  auto plist = plist_.contiguous(), offsets = offsets_.contiguous();
  const int64_t C = colors.size(1);
  auto img = at::zeros({height, width, C}, colors.options());
  auto tfin = at::ones({height, width}, colors.options());
  auto ncon = at::zeros({height, width}, colors.options().dtype(at::kInt));
  AT_DISPATCH_FLOATING_TYPES(colors.scalar_type(), "splat_forward", [&] {
    forward_impl<scalar_t>(mean2d.data_ptr<scalar_t>(), conic.data_ptr<scalar_t>(), colors.data_ptr<scalar_t>(),
                           opac.data_ptr<scalar_t>(), plist.data_ptr<int32_t>(), offsets.data_ptr<int64_t>(), width, height, C,
                           img.data_ptr<scalar_t>(), tfin.data_ptr<scalar_t>(), ncon.data_ptr<int32_t>());
  });
  return {img, tfin, ncon};
}

std::vector<at::Tensor> splat_backward(const at::Tensor& mean2d_, const at::Tensor& conic_, const at::Tensor& colors_,
                                       const at::Tensor& opac_, const at::Tensor& plist_, const at::Tensor& offsets_,
                                       int64_t width, int64_t height, const at::Tensor& tfin_, const at::Tensor& ncon_,
                                       const at::Tensor& gimg_, const at::Tensor& galpha_) {
  check_inputs(mean2d_, conic_, colors_, opac_, plist_, offsets_, width, height);
  auto mean2d = mean2d_.contiguous(), conic = conic_.contiguous(), colors = colors_.contiguous(), opac = opac_.contiguous();
  auto plist = plist_.contiguous(), offsets = offsets_.contiguous();
  auto tfin = tfin_.contiguous(), ncon = ncon_.contiguous();
  auto gimg = gimg_.to(colors.scalar_type()).contiguous(), galpha = galpha_.to(colors.scalar_type()).contiguous();
  const int64_t C = colors.size(1), N = mean2d.size(0);
  TORCH_CHECK(gimg.sizes() == at::IntArrayRef({height, width, C}), "splat_backward: grad image must be (H, W, C)");
  TORCH_CHECK(galpha.sizes() == at::IntArrayRef({height, width}), "splat_backward: grad alpha must be (H, W)");
  auto gm2 = at::zeros_like(mean2d), gcn = at::zeros_like(conic), gcol = at::zeros_like(colors), gop = at::zeros_like(opac);
  AT_DISPATCH_FLOATING_TYPES(colors.scalar_type(), "splat_backward", [&] {
    backward_impl<scalar_t>(mean2d.data_ptr<scalar_t>(), conic.data_ptr<scalar_t>(), colors.data_ptr<scalar_t>(),
                            opac.data_ptr<scalar_t>(), plist.data_ptr<int32_t>(), offsets.data_ptr<int64_t>(), width, height, C, N,
                            tfin.data_ptr<scalar_t>(), ncon.data_ptr<int32_t>(), gimg.data_ptr<scalar_t>(),
                            galpha.data_ptr<scalar_t>(), gm2.data_ptr<scalar_t>(), gcn.data_ptr<scalar_t>(),
                            gcol.data_ptr<scalar_t>(), gop.data_ptr<scalar_t>());
  });
  return {gm2, gcn, gcol, gop};
}

// ------------------------------------------------------------------ projection and binning
// The EWA projection of icml26/ops/splat.py::project (same formulas, same order of operations
// where it matters) and the tile binning of bin_gaussians (same double arithmetic for the tile
// box, same lists: each tile's run in depth order, ties by index), so that the kernel path does
// no per-Gaussian torch work. Its backward (means, scales, quats) is below; opacities get no
// gradient here (the radius is not differentiated, as in the torch projection).

template <typename T>
struct Cam {
  T R[9], t[3];
  T fx, fy, cx, cy, limx, limy, near_, blur;
};

template <typename T>
inline void quat_rot(const T* q, T* Rg, T* qn, T& nrm) {
  const T n0 = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  nrm = std::max(n0, T(1e-12));
  const T w = q[0] / nrm, x = q[1] / nrm, y = q[2] / nrm, z = q[3] / nrm;
  qn[0] = w, qn[1] = x, qn[2] = y, qn[3] = z;
  Rg[0] = 1 - 2 * (y * y + z * z), Rg[1] = 2 * (x * y - w * z), Rg[2] = 2 * (x * z + w * y);
  Rg[3] = 2 * (x * y + w * z), Rg[4] = 1 - 2 * (x * x + z * z), Rg[5] = 2 * (y * z - w * x);
  Rg[6] = 2 * (x * z - w * y), Rg[7] = 2 * (y * z + w * x), Rg[8] = 1 - 2 * (x * x + y * y);
}

// Everything the forward and backward of one Gaussian need.
template <typename T>
struct ProjState {
  T pc[3], zs, txz, tyz, M[9], S[9] /* camera-space covariance */, J[6], sxx, sxy, syy, det;
  bool zvalid, valid, inx, iny;
};

template <typename T>
inline void project_one(const Cam<T>& k, const T* mu, const T* s, const T* q, ProjState<T>& st, T* Rg, T* qn, T& nrm) {
  for (int i = 0; i < 3; ++i) st.pc[i] = mu[0] * k.R[3 * i] + mu[1] * k.R[3 * i + 1] + mu[2] * k.R[3 * i + 2] + k.t[i];
  st.zvalid = st.pc[2] > k.near_;
  st.zs = st.zvalid ? st.pc[2] : T(1);
  const T u = st.pc[0] / st.zs, v = st.pc[1] / st.zs;
  st.inx = u >= -k.limx && u <= k.limx;
  st.iny = v >= -k.limy && v <= k.limy;
  st.txz = std::min(std::max(u, -k.limx), k.limx);
  st.tyz = std::min(std::max(v, -k.limy), k.limy);
  quat_rot(q, Rg, qn, nrm);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) st.M[3 * i + j] = Rg[3 * i + j] * s[j];
  T cov[9], RC[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) cov[3 * i + j] = st.M[3 * i] * st.M[3 * j] + st.M[3 * i + 1] * st.M[3 * j + 1] + st.M[3 * i + 2] * st.M[3 * j + 2];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) RC[3 * i + j] = k.R[3 * i] * cov[j] + k.R[3 * i + 1] * cov[3 + j] + k.R[3 * i + 2] * cov[6 + j];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) st.S[3 * i + j] = RC[3 * i] * k.R[3 * j] + RC[3 * i + 1] * k.R[3 * j + 1] + RC[3 * i + 2] * k.R[3 * j + 2];
  st.J[0] = k.fx / st.zs, st.J[1] = 0, st.J[2] = -k.fx * st.txz / st.zs;
  st.J[3] = 0, st.J[4] = k.fy / st.zs, st.J[5] = -k.fy * st.tyz / st.zs;
  T JS[6];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) JS[3 * i + j] = st.J[3 * i] * st.S[j] + st.J[3 * i + 1] * st.S[3 + j] + st.J[3 * i + 2] * st.S[6 + j];
  const T c00 = JS[0] * st.J[0] + JS[1] * st.J[1] + JS[2] * st.J[2];
  const T c01 = JS[0] * st.J[3] + JS[1] * st.J[4] + JS[2] * st.J[5];
  const T c11 = JS[3] * st.J[3] + JS[4] * st.J[4] + JS[5] * st.J[5];
  st.sxx = c00 + k.blur, st.sxy = c01, st.syy = c11 + k.blur;
  st.det = st.sxx * st.syy - st.sxy * st.sxy;
  st.valid = st.zvalid && st.det > T(0);
}

template <typename T>
void project_bin_impl(const Cam<T>& k, const T* mu, const T* sc, const T* qu, const T* op, int64_t N, int64_t W, int64_t H,
                      T* m2, T* cn, T* depth, int64_t* radii, std::vector<int32_t>& plist, std::vector<int64_t>& offsets) {
  const T amin = T(1.0 / 255.0);
  at::parallel_for(0, N, 2048, [&](int64_t lo, int64_t hi) {
    for (int64_t g = lo; g < hi; ++g) {
      ProjState<T> st;
      T Rg[9], qn[4], nrm;
      project_one(k, mu + 3 * g, sc + 3 * g, qu + 4 * g, st, Rg, qn, nrm);
      m2[2 * g] = k.fx * st.pc[0] / st.zs + k.cx;
      m2[2 * g + 1] = k.fy * st.pc[1] / st.zs + k.cy;
      depth[g] = st.pc[2];
      const T dets = st.valid ? st.det : T(1);
      cn[3 * g] = st.syy / dets, cn[3 * g + 1] = -st.sxy / dets, cn[3 * g + 2] = st.sxx / dets;
      const T mid = T(0.5) * (st.sxx + st.syy);
      const T lam = mid + std::sqrt(std::max(mid * mid - dets, T(0.1)));
      const T o = op[g];
      const T kk = std::log(std::max(o * T(255), T(1)));
      const T r = std::ceil(std::sqrt(T(2) * kk * lam));
      radii[g] = (st.valid && o >= amin && std::isfinite(lam) && std::isfinite(r)) ? int64_t(r) : 0;
    }
  });
  const int64_t tx = (W + BS - 1) / BS, ty = (H + BS - 1) / BS, nt = tx * ty;
  std::vector<int32_t> ids;
  std::vector<int32_t> box(4 * size_t(N));
  ids.reserve(size_t(N));
  offsets.assign(size_t(nt) + 1, 0);
  for (int64_t g = 0; g < N; ++g) {
    const double r = double(radii[g]), mx = double(m2[2 * g]), my = double(m2[2 * g + 1]);
    if (!(r > 0) || !std::isfinite(mx) || !std::isfinite(my)) continue;
    if (!(mx + r >= 0 && mx - r < double(W) && my + r >= 0 && my - r < double(H))) continue;
    const int64_t x0 = std::clamp<int64_t>(int64_t(std::floor((mx - r) / BS)), 0, tx - 1);
    const int64_t x1 = std::clamp<int64_t>(int64_t(std::floor((mx + r) / BS)), 0, tx - 1);
    const int64_t y0 = std::clamp<int64_t>(int64_t(std::floor((my - r) / BS)), 0, ty - 1);
    const int64_t y1 = std::clamp<int64_t>(int64_t(std::floor((my + r) / BS)), 0, ty - 1);
    box[4 * g] = int32_t(x0), box[4 * g + 1] = int32_t(x1), box[4 * g + 2] = int32_t(y0), box[4 * g + 3] = int32_t(y1);
    for (int64_t yy = y0; yy <= y1; ++yy)
      for (int64_t xx = x0; xx <= x1; ++xx) ++offsets[size_t(yy * tx + xx) + 1];
    ids.push_back(int32_t(g));
  }
  // front to back, ties by index (the inside Gaussians have finite depth > near)
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return depth[a] < depth[b]; });
  for (int64_t t = 0; t < nt; ++t) offsets[size_t(t) + 1] += offsets[size_t(t)];
  plist.resize(size_t(offsets[size_t(nt)]));
  std::vector<int64_t> pos(offsets.begin(), offsets.end() - 1);
  for (const int32_t g : ids) {
    const int32_t* bx = box.data() + 4 * size_t(g);
    for (int64_t yy = bx[2]; yy <= bx[3]; ++yy)
      for (int64_t xx = bx[0]; xx <= bx[1]; ++xx) plist[size_t(pos[size_t(yy * tx + xx)]++)] = g;
  }
}

template <typename T>
void project_backward_impl(const Cam<T>& k, const T* mu, const T* sc, const T* qu, int64_t N, const T* gm2, const T* gcn,
                           T* gmu, T* gsc, T* gqu) {
  at::parallel_for(0, N, 2048, [&](int64_t lo, int64_t hi) {
    for (int64_t g = lo; g < hi; ++g) {
      ProjState<T> st;
      T Rg[9], qn[4], nrm;
      const T* s = sc + 3 * g;
      project_one(k, mu + 3 * g, s, qu + 4 * g, st, Rg, qn, nrm);
      const T zs = st.zs, ga = gcn[3 * g], gb = gcn[3 * g + 1], gc = gcn[3 * g + 2];
      // conic = (syy, -sxy, sxx) / dets, dets = det where valid, else the constant 1
      T gxx, gxy, gyy;
      if (st.valid) {
        const T d = st.det, gdet = -(ga * st.syy - gb * st.sxy + gc * st.sxx) / (d * d);
        gxx = gc / d + gdet * st.syy;
        gyy = ga / d + gdet * st.sxx;
        gxy = -gb / d - T(2) * gdet * st.sxy;
      } else {
        gxx = gc, gyy = ga, gxy = -gb;
      }
      // c2 = J S J^T with dL/dc2 = [[gxx, gxy], [0, gyy]]; Gs = G + G^T
      const T Gs[4] = {2 * gxx, gxy, gxy, 2 * gyy};
      T GJ[6];  // Gs J (2x3)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) GJ[3 * i + j] = Gs[2 * i] * st.J[j] + Gs[2 * i + 1] * st.J[3 + j];
      T gJ[6];  // Gs J S
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) gJ[3 * i + j] = GJ[3 * i] * st.S[j] + GJ[3 * i + 1] * st.S[3 + j] + GJ[3 * i + 2] * st.S[6 + j];
      T gS[9];  // J^T Gs J (= dL/dS + its transpose)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) gS[3 * i + j] = st.J[i] * GJ[j] + st.J[3 + i] * GJ[3 + j];
      T tmp[9], gcov[9];  // R^T gS R
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) tmp[3 * i + j] = k.R[i] * gS[j] + k.R[3 + i] * gS[3 + j] + k.R[6 + i] * gS[6 + j];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) gcov[3 * i + j] = tmp[3 * i] * k.R[j] + tmp[3 * i + 1] * k.R[3 + j] + tmp[3 * i + 2] * k.R[6 + j];
      T gM[9];  // (gcov + gcov^T) M, gcov here already symmetric-summed
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) gM[3 * i + j] = gcov[3 * i] * st.M[j] + gcov[3 * i + 1] * st.M[3 + j] + gcov[3 * i + 2] * st.M[6 + j];
      // J entries: J00 = fx / zs, J02 = -fx txz / zs, J11 = fy / zs, J12 = -fy tyz / zs
      const T izs = T(1) / zs, izs2 = izs * izs;
      T gzs = -gJ[0] * k.fx * izs2 + gJ[2] * k.fx * st.txz * izs2 - gJ[4] * k.fy * izs2 + gJ[5] * k.fy * st.tyz * izs2;
      const T gu = st.inx ? -gJ[2] * k.fx * izs : T(0), gv = st.iny ? -gJ[5] * k.fy * izs : T(0);
      const T gmx = gm2[2 * g], gmy = gm2[2 * g + 1];
      T gpc[3];
      gpc[0] = gu * izs + gmx * k.fx * izs;
      gpc[1] = gv * izs + gmy * k.fy * izs;
      gzs += -(gu + gmx * k.fx) * st.pc[0] * izs2 - (gv + gmy * k.fy) * st.pc[1] * izs2;
      gpc[2] = st.zvalid ? gzs : T(0);
      for (int j = 0; j < 3; ++j) gmu[3 * g + j] = k.R[j] * gpc[0] + k.R[3 + j] * gpc[1] + k.R[6 + j] * gpc[2];
      // M = Rg diag(s)
      T gR[9];
      for (int j = 0; j < 3; ++j) {
        gsc[3 * g + j] = gM[j] * Rg[j] + gM[3 + j] * Rg[3 + j] + gM[6 + j] * Rg[6 + j];
        for (int i = 0; i < 3; ++i) gR[3 * i + j] = gM[3 * i + j] * s[j];
      }
      const T w = qn[0], x = qn[1], y = qn[2], z = qn[3];
      T gq[4];
      gq[0] = 2 * (-z * gR[1] + y * gR[2] + z * gR[3] - x * gR[5] - y * gR[6] + x * gR[7]);
      gq[1] = 2 * (y * gR[1] + z * gR[2] + y * gR[3] - 2 * x * gR[4] - w * gR[5] + z * gR[6] + w * gR[7] - 2 * x * gR[8]);
      gq[2] = 2 * (-2 * y * gR[0] + x * gR[1] + w * gR[2] + x * gR[3] + z * gR[5] - w * gR[6] + z * gR[7] - 2 * y * gR[8]);
      gq[3] = 2 * (-2 * z * gR[0] - w * gR[1] + x * gR[2] + w * gR[3] - 2 * z * gR[4] + y * gR[5] + x * gR[6] + y * gR[7]);
      // qn = q / max(|q|, 1e-12)
      const T n0 = std::sqrt(qu[4 * g] * qu[4 * g] + qu[4 * g + 1] * qu[4 * g + 1] + qu[4 * g + 2] * qu[4 * g + 2] + qu[4 * g + 3] * qu[4 * g + 3]);
      const T dotq = n0 > T(1e-12) ? w * gq[0] + x * gq[1] + y * gq[2] + z * gq[3] : T(0);
      for (int i = 0; i < 4; ++i) gqu[4 * g + i] = (gq[i] - qn[i] * dotq) / nrm;
    }
  });
}

template <typename T>
Cam<T> make_cam(const at::Tensor& viewmat, double fx, double fy, double cx, double cy, int64_t W, int64_t H, double near_, double blur) {
  auto V = viewmat.to(at::kDouble).contiguous();
  const double* v = V.data_ptr<double>();
  Cam<T> k;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) k.R[3 * i + j] = T(v[4 * i + j]);
    k.t[i] = T(v[4 * i + 3]);
  }
  k.fx = T(fx), k.fy = T(fy), k.cx = T(cx), k.cy = T(cy);
  k.limx = T(1.3 * 0.5 * double(W) / fx), k.limy = T(1.3 * 0.5 * double(H) / fy);
  k.near_ = T(near_), k.blur = T(blur);
  return k;
}

void check_project(const at::Tensor& means, const at::Tensor& scales, const at::Tensor& quats, const at::Tensor& viewmat) {
  const auto n = means.size(0);
  TORCH_CHECK(means.dim() == 2 && means.size(1) == 3, "splat: means must be (N, 3)");
  TORCH_CHECK(scales.dim() == 2 && scales.size(0) == n && scales.size(1) == 3, "splat: scales must be (N, 3)");
  TORCH_CHECK(quats.dim() == 2 && quats.size(0) == n && quats.size(1) == 4, "splat: quats must be (N, 4)");
  TORCH_CHECK(viewmat.dim() == 2 && viewmat.size(0) == 4 && viewmat.size(1) == 4, "splat: viewmat must be (4, 4)");
  TORCH_CHECK(means.scalar_type() == scales.scalar_type() && means.scalar_type() == quats.scalar_type(),
              "splat: float inputs must share one dtype");
}

std::vector<at::Tensor> splat_project_bin(const at::Tensor& means_, const at::Tensor& scales_, const at::Tensor& quats_,
                                          const at::Tensor& opac_, const at::Tensor& viewmat, double fx, double fy, double cx,
                                          double cy, int64_t width, int64_t height, double near_, double blur) {
  check_project(means_, scales_, quats_, viewmat);
  TORCH_CHECK(width > 0 && height > 0, "splat: empty image");
  const int64_t N = means_.size(0);
  TORCH_CHECK(opac_.dim() == 1 && opac_.size(0) == N, "splat: opacities must be (N,)");
  auto means = means_.contiguous(), scales = scales_.contiguous(), quats = quats_.contiguous();
  auto opac = opac_.to(means.scalar_type()).contiguous();
  auto m2 = at::empty({N, 2}, means.options()), cn = at::empty({N, 3}, means.options()), depth = at::empty({N}, means.options());
  auto radii = at::empty({N}, means.options().dtype(at::kLong));
  std::vector<int32_t> pl;
  std::vector<int64_t> off;
  AT_DISPATCH_FLOATING_TYPES(means.scalar_type(), "splat_project_bin", [&] {
    const auto k = make_cam<scalar_t>(viewmat, fx, fy, cx, cy, width, height, near_, blur);
    project_bin_impl<scalar_t>(k, means.data_ptr<scalar_t>(), scales.data_ptr<scalar_t>(), quats.data_ptr<scalar_t>(),
                               opac.data_ptr<scalar_t>(), N, width, height, m2.data_ptr<scalar_t>(), cn.data_ptr<scalar_t>(),
                               depth.data_ptr<scalar_t>(), radii.data_ptr<int64_t>(), pl, off);
  });
  auto plist = at::empty({int64_t(pl.size())}, means.options().dtype(at::kInt));
  if (!pl.empty()) std::copy(pl.begin(), pl.end(), plist.data_ptr<int32_t>());
  auto offsets = at::empty({int64_t(off.size())}, means.options().dtype(at::kLong));
  std::copy(off.begin(), off.end(), offsets.data_ptr<int64_t>());
  return {m2, cn, depth, radii, plist, offsets};
}

std::vector<at::Tensor> splat_project_backward(const at::Tensor& means_, const at::Tensor& scales_, const at::Tensor& quats_,
                                               const at::Tensor& viewmat, double fx, double fy, double cx, double cy, int64_t width,
                                               int64_t height, double near_, double blur, const at::Tensor& gm2_, const at::Tensor& gcn_) {
  check_project(means_, scales_, quats_, viewmat);
  const int64_t N = means_.size(0);
  auto means = means_.contiguous(), scales = scales_.contiguous(), quats = quats_.contiguous();
  auto gm2 = gm2_.to(means.scalar_type()).contiguous(), gcn = gcn_.to(means.scalar_type()).contiguous();
  TORCH_CHECK(gm2.sizes() == at::IntArrayRef({N, 2}) && gcn.sizes() == at::IntArrayRef({N, 3}), "splat_project_backward: grad shapes");
  auto gmu = at::empty_like(means), gsc = at::empty_like(scales), gqu = at::empty_like(quats);
  AT_DISPATCH_FLOATING_TYPES(means.scalar_type(), "splat_project_backward", [&] {
    const auto k = make_cam<scalar_t>(viewmat, fx, fy, cx, cy, width, height, near_, blur);
    project_backward_impl<scalar_t>(k, means.data_ptr<scalar_t>(), scales.data_ptr<scalar_t>(), quats.data_ptr<scalar_t>(), N,
                                    gm2.data_ptr<scalar_t>(), gcn.data_ptr<scalar_t>(), gmu.data_ptr<scalar_t>(),
                                    gsc.data_ptr<scalar_t>(), gqu.data_ptr<scalar_t>());
  });
  return {gmu, gsc, gqu};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("splat_forward(Tensor mean2d, Tensor conic, Tensor colors, Tensor opacities, Tensor point_list, Tensor tile_offsets, "
        "int width, int height) -> Tensor[]");
  m.def("splat_backward(Tensor mean2d, Tensor conic, Tensor colors, Tensor opacities, Tensor point_list, Tensor tile_offsets, "
        "int width, int height, Tensor final_T, Tensor n_contrib, Tensor grad_image, Tensor grad_alpha) -> Tensor[]");
  m.def("splat_project_bin(Tensor means, Tensor scales, Tensor quats, Tensor opacities, Tensor viewmat, float fx, float fy, "
        "float cx, float cy, int width, int height, float near, float blur) -> Tensor[]");
  m.def("splat_project_backward(Tensor means, Tensor scales, Tensor quats, Tensor viewmat, float fx, float fy, float cx, float cy, "
        "int width, int height, float near, float blur, Tensor grad_mean2d, Tensor grad_conic) -> Tensor[]");
  m.impl("splat_project_bin", c10::DispatchKey::CPU, TORCH_FN(splat_project_bin));
  m.impl("splat_project_backward", c10::DispatchKey::CPU, TORCH_FN(splat_project_backward));
  m.impl("splat_forward", c10::DispatchKey::CPU, TORCH_FN(splat_forward));
  m.impl("splat_backward", c10::DispatchKey::CPU, TORCH_FN(splat_backward));
}
