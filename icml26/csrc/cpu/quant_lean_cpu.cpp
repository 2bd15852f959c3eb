// Small fused ops of the lean batch-1 decode runtime (icml26/methods/quantization/lean.py).
// Each replaces several tiny torch ops whose per-call overhead dominated a decode step.
// Pure-torch twins (oracles in the tests) are in icml26/ops/_ref/quant.py.
//
//   lean_add_rmsnorm(x, delta, w, eps):  x += delta (in place, if delta is given);
//                                        returns w * x / sqrt(mean(x^2) + eps)    (rows of x)
//   lean_silu_mul(gu):                   gu (M, 2I) -> silu(gu[:, :I]) * gu[:, I:]  (M, I)
//   lean_attn_decode(qkv, cos, sin_signed, kc, vc, pos, n_heads, n_kv, scale):
//       one token: qkv (1, (H + 2 Hkv) D) = [q | k | v]; RoPE on q and k with the row `pos` of
//       the tables (rot[j] = x[j] cos[j] + x[(j + D/2) % D] sin_signed[j], i.e. HF's
//       x cos + rotate_half(x) sin); writes k, v at position pos of the layer's caches
//       kc, vc (Hkv, T_max, D); softmax(scale q k^T) v over positions 0..pos, query head h
//       reading KV head h / (H / Hkv) (GQA). Returns (1, H D).

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

at::Tensor lean_add_rmsnorm(at::Tensor x, const c10::optional<at::Tensor>& delta, const at::Tensor& w, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous float32 (M, d)");
  const int64_t M = x.size(0), d = x.size(1);
  TORCH_CHECK(w.scalar_type() == at::kFloat && w.is_contiguous() && w.numel() == d, "w must be float32 (d,)");
  float* xp = x.data_ptr<float>();
  if (delta.has_value() && delta->defined()) {
    const at::Tensor& dl = *delta;
    TORCH_CHECK(dl.scalar_type() == at::kFloat && dl.is_contiguous() && dl.numel() == M * d, "delta must be float32 like x");
    const float* dp = dl.data_ptr<float>();
    for (int64_t i = 0; i < M * d; ++i) xp[i] += dp[i];
  }
  auto y = at::empty_like(x);
  float* yp = y.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = xp + m * d;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
    const float r = 1.f / std::sqrt(ss / float(d) + float(eps));
    for (int64_t j = 0; j < d; ++j) yp[m * d + j] = wp[j] * (xr[j] * r);
  }
  return y;
}

at::Tensor lean_silu_mul(const at::Tensor& gu) {
  TORCH_CHECK(gu.dim() == 2 && gu.scalar_type() == at::kFloat && gu.is_contiguous() && gu.size(1) % 2 == 0,
              "gu must be contiguous float32 (M, 2I)");
  const int64_t M = gu.size(0), I = gu.size(1) / 2;
  auto y = at::empty({M, I}, gu.options());
  const float* p = gu.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < I; ++j) {
      const float g = p[m * 2 * I + j];
      yp[m * I + j] = g / (1.f + std::exp(-g)) * p[m * 2 * I + I + j];
    }
  return y;
}

at::Tensor lean_attn_decode(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin_signed, at::Tensor kc, at::Tensor vc,
                            int64_t pos, int64_t n_heads, int64_t n_kv, double scale) {
  TORCH_CHECK(kc.dim() == 3 && vc.dim() == 3 && kc.is_contiguous() && vc.is_contiguous() && kc.scalar_type() == at::kFloat &&
              vc.scalar_type() == at::kFloat && kc.sizes() == vc.sizes(), "kc, vc must be contiguous float32 (Hkv, T_max, D)");
  const int64_t Hk = kc.size(0), T = kc.size(1), D = kc.size(2), H = n_heads, half = D / 2;
  TORCH_CHECK(Hk == n_kv && H % Hk == 0 && D % 2 == 0, "head counts do not match the cache");
  TORCH_CHECK(pos >= 0 && pos < T, "pos outside the cache");
  TORCH_CHECK(qkv.scalar_type() == at::kFloat && qkv.is_contiguous() && qkv.numel() == (H + 2 * Hk) * D, "qkv must be float32 (1, (H + 2 Hkv) D)");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin_signed.scalar_type() == at::kFloat && cos.is_contiguous() && sin_signed.is_contiguous() &&
              cos.dim() == 2 && cos.size(1) == D && cos.size(0) > pos && sin_signed.sizes() == cos.sizes(), "cos/sin tables must be float32 (T, D)");
  const float* qp = qkv.data_ptr<float>();
  const float* kp = qp + H * D;
  const float* vp = kp + Hk * D;
  const float* c = cos.data_ptr<float>() + pos * D;
  const float* s = sin_signed.data_ptr<float>() + pos * D;
  float* kcp = kc.data_ptr<float>();
  float* vcp = vc.data_ptr<float>();
  // rot[j] = x[j] c[j] + x[(j + D/2) % D] s[j], written as two loops without the modulo
  auto rope = [&](const float* x, float* dst, float mul) {
    for (int64_t j = 0; j < half; ++j) dst[j] = (x[j] * c[j] + x[j + half] * s[j]) * mul;
    for (int64_t j = half; j < D; ++j) dst[j] = (x[j] * c[j] + x[j - half] * s[j]) * mul;
  };
  for (int64_t h = 0; h < Hk; ++h) {
    rope(kp + h * D, kcp + (h * T + pos) * D, 1.f);
    std::copy(vp + h * D, vp + (h + 1) * D, vcp + (h * T + pos) * D);
  }
  auto out = at::empty({1, H * D}, qkv.options());
  float* op = out.data_ptr<float>();
  const int64_t G = H / Hk, L = pos + 1;
  std::vector<float> q(D), sc(L);
  for (int64_t h = 0; h < H; ++h) {
    rope(qp + h * D, q.data(), float(scale));
    const float* K = kcp + (h / G) * T * D;
    const float* V = vcp + (h / G) * T * D;
    float mx = -INFINITY;
    for (int64_t t = 0; t < L; ++t) {
      float a = 0.f;
      const float* kr = K + t * D;
      const float* qd = q.data();
#pragma omp simd reduction(+ : a)
      for (int64_t j = 0; j < D; ++j) a += qd[j] * kr[j];
      sc[t] = a;
      mx = std::max(mx, a);
    }
    float z = 0.f;
    for (int64_t t = 0; t < L; ++t) {
      sc[t] = std::exp(sc[t] - mx);
      z += sc[t];
    }
    const float iz = 1.f / z;
    float* o = op + h * D;
    std::fill(o, o + D, 0.f);
    for (int64_t t = 0; t < L; ++t) {
      const float p = sc[t] * iz;
      const float* vr = V + t * D;
      for (int64_t j = 0; j < D; ++j) o[j] += p * vr[j];
    }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("lean_add_rmsnorm(Tensor(a!) x, Tensor? delta, Tensor w, float eps) -> Tensor");
  m.def("lean_silu_mul(Tensor gu) -> Tensor");
  m.def("lean_attn_decode(Tensor qkv, Tensor cos, Tensor sin_signed, Tensor(a!) kc, Tensor(b!) vc, int pos, int n_heads, int n_kv, float scale) -> Tensor");
  m.impl("lean_add_rmsnorm", c10::DispatchKey::CPU, TORCH_FN(lean_add_rmsnorm));
  m.impl("lean_silu_mul", c10::DispatchKey::CPU, TORCH_FN(lean_silu_mul));
  m.impl("lean_attn_decode", c10::DispatchKey::CPU, TORCH_FN(lean_attn_decode));
}
