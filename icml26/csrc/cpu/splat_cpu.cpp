// Tile-based Gaussian splatting rasterizer (forward and backward) on the CPU.
//
// The image is cut into 16x16 tiles; every tile holds the list of the 2D Gaussians whose
// screen-space box touches it, sorted front to back (the binning is done in Python,
// icml26/ops/splat.py, and shared with the pure torch twin icml26/ops/_ref/splat.py).
// Per pixel (centre of column u at u + 0.5), front to back (3DGS, Kerbl et al. 2023, Eq. 3):
//   power = -1/2 (a dx^2 + c dy^2) - b dx dy     (conic [[a, b], [b, c]] = inverse 2D covariance)
//   alpha = min(0.99, o exp(power)); skipped when power > 0 or alpha < 1/255
//   stop (this Gaussian excluded) when T (1 - alpha) < 1e-4
//   C += colour * alpha * T;  T *= 1 - alpha
// The alpha output is 1 - T_final (the rendering of a constant-1 channel).
// Backward walks each tile list in reverse from the last contributor and recovers T by
// dividing by (1 - alpha) (as 3DGS does); it returns dL/d mean2d, dL/d conic, dL/d colour,
// dL/d opacity. Gradients of a Gaussian are summed over a tile's pixels in SIMD lanes, then
// into a per-thread buffer (OpenMP over tiles), then reduced: no atomics, deterministic for
// a fixed thread count. The inner loops run over the 256 pixels of a tile (`omp simd`: AVX2
// lanes, with glibc's vector exp) for one Gaussian at a time, so each pixel keeps its own
// front-to-back order; only the rows and columns of the tile inside the Gaussian's
// alpha >= 1/255 box (pixel_box) are visited.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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
    int n_alive = NPIX;
    const int64_t s = off[t], e = off[t + 1];
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
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
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

}  // namespace

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("splat_forward(Tensor mean2d, Tensor conic, Tensor colors, Tensor opacities, Tensor point_list, Tensor tile_offsets, "
        "int width, int height) -> Tensor[]");
  m.def("splat_backward(Tensor mean2d, Tensor conic, Tensor colors, Tensor opacities, Tensor point_list, Tensor tile_offsets, "
        "int width, int height, Tensor final_T, Tensor n_contrib, Tensor grad_image, Tensor grad_alpha) -> Tensor[]");
  m.impl("splat_forward", c10::DispatchKey::CPU, TORCH_FN(splat_forward));
  m.impl("splat_backward", c10::DispatchKey::CPU, TORCH_FN(splat_backward));
}
