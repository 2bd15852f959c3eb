// Runs the CUDA kernel of icml26/csrc/cuda/quant_cuda.cu on the CPU (test harness, no GPU needed).
//
// The kernel source is included unchanged; the few device intrinsics it uses are given host
// definitions with the semantics of the CUDA documentation (__ldg, __byte_perm, __uint_as_float,
// __shfl_xor_sync), and every warp runs as 32 std::threads that meet at a barrier in each
// shuffle, so the per-lane arithmetic, the chunk / nibble / group indexing, the row tiling (R),
// the M tiling (MT), the grid sizes and the warp reduction are the code that runs on a GPU.
// Not covered: real memory behaviour (alignment faults, coalescing), the launcher's CUDA calls.
//
// Usage: quant_cuda_emu IN OUT   IN = int32 header {dtype, bits, M, N, K, group_size, sms, act_bits}
//        followed by x (M*K elements of dtype: 0 f32, 1 f16, 2 bf16), qweight (N*K*bits/8 bytes),
//        scales and mins (float32, N*K/group_size each); OUT = y (M*N elements of dtype).
//        act_bits 0: quant_gemm; 8 / 16: quant_gemm_i8act (both passes; x float32).
#define ICML26_CUDA_HOST_EMU 1
#define ICML26_CUDA_NO_TORCH 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)

namespace emu {
struct Warp {
  std::barrier<> bar{32};
  float slot[32];
};
thread_local Warp* warp = nullptr;
thread_local int lane = 0;
}  // namespace emu

thread_local dim3 blockIdx, threadIdx, blockDim;

template <class T>
inline T __ldg(const T* p) { return *p; }

inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  uint8_t b[8];
  std::memcpy(b, &x, 4);
  std::memcpy(b + 4, &y, 4);
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= unsigned(b[(s >> (4 * n)) & 7]) << (8 * n);
  return r;
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline int min(int a, int b) { return a < b ? a : b; }

inline int __float2int_rn(float v) { return int(std::nearbyint(v)); }  // default rounding: ties to even

inline int __dp4a(int a, int b, int c) {  // 4 signed bytes x 4 signed bytes + c
  for (int i = 0; i < 4; ++i) c += int(int8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
  return c;
}
inline int __dp2a_lo(int a, int b, int c) {  // 2 signed int16 of a x signed bytes 0, 1 of b + c
  return c + int(int16_t(a)) * int(int8_t(b)) + int(int16_t(a >> 16)) * int(int8_t(b >> 8));
}
inline int __dp2a_hi(int a, int b, int c) {  // 2 signed int16 of a x signed bytes 2, 3 of b + c
  return c + int(int16_t(a)) * int(int8_t(b >> 16)) + int(int16_t(a >> 16)) * int(int8_t(b >> 24));
}

inline float __shfl_xor_sync(unsigned, float v, int off) {
  emu::warp->slot[emu::lane] = v;
  emu::warp->bar.arrive_and_wait();
  const float r = emu::warp->slot[emu::lane ^ off];
  emu::warp->bar.arrive_and_wait();
  return r;
}

#include "../../icml26/csrc/cuda/quant_cuda.cu"

using namespace icml26_quant_cuda;

// Runs `kernel()` for every block of `grid`, one warp at a time, each lane on its own thread
// (the warp's shuffles synchronise through emu::Warp).
template <typename F>
void emulate(const dim3 grid, F kernel) {
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx)
      for (int w = 0; w < kWarps; ++w) {
        emu::Warp wp;
        std::vector<std::thread> th;
        for (int l = 0; l < 32; ++l)
          th.emplace_back([&, l] {
            blockIdx = dim3(bx, by, 1);
            threadIdx = dim3(w * 32 + l, 1, 1);
            emu::warp = &wp;
            emu::lane = l;
            kernel();
          });
        for (auto& t : th) t.join();
      }
}

template <typename T, int BITS, int R, int MT>
void run_grid(const T* x, const uint8_t* q, const float* s, const float* mn, T* y, int M, int N, int K, int gs) {
  emulate(grid_dims(M, N, R, MT), [&] { quant_gemm_kernel<T, BITS, R, MT>(x, q, s, mn, y, M, N, K, gs); });
}

template <typename T, int BITS>
void run_bits(const void* x, const uint8_t* q, const float* s, const float* mn, void* y, int M, int N, int K, int gs, int sms) {
  const T* xt = static_cast<const T*>(x);
  T* yt = static_cast<T*>(y);
  const int R = pick_rows(N, sms);  // the launcher's choices
  if (M == 1) {
    if (R == 4) return run_grid<T, BITS, 4, 1>(xt, q, s, mn, yt, M, N, K, gs);
    if (R == 2) return run_grid<T, BITS, 2, 1>(xt, q, s, mn, yt, M, N, K, gs);
    return run_grid<T, BITS, 1, 1>(xt, q, s, mn, yt, M, N, K, gs);
  }
  if (R == 4) return run_grid<T, BITS, 4, 4>(xt, q, s, mn, yt, M, N, K, gs);
  if (R == 2) return run_grid<T, BITS, 2, 4>(xt, q, s, mn, yt, M, N, K, gs);
  return run_grid<T, BITS, 1, 4>(xt, q, s, mn, yt, M, N, K, gs);
}

template <int BITS, bool X16, int R>
void run_iact_grid(const void* xq, const float* xs, const float* xsb, const uint8_t* q, const float* s, const float* mn, float* y,
                   int M, int N, int K, int gs) {
  emulate(grid_dims(M, N, R, 1), [&] { quant_gemm_iact_kernel<BITS, X16, R>(xq, xs, xsb, q, s, mn, y, N, K, gs); });
}

template <int BITS, bool X16>
void run_iact(const float* x, const uint8_t* q, const float* s, const float* mn, float* y, int M, int N, int K, int gs, int sms) {
  // pass 1 exactly as the launcher lays out the workspace
  std::vector<uint4> work((iact_workspace_bytes(M, K, X16 ? 16 : 8) + 15) / 16);
  uint8_t* wb = reinterpret_cast<uint8_t*>(work.data());
  const int nb = M * (K / 64);
  float* xs = reinterpret_cast<float*>(wb);
  float* xsb = xs + nb;
  void* xq = wb + iact_codes_offset(M, K);
  blockDim = dim3(128, 1, 1);
  for (int b = 0; b < (nb + 127) / 128; ++b)
    for (int t = 0; t < 128; ++t) {
      blockIdx = dim3(b, 1, 1);
      threadIdx = dim3(t, 1, 1);
      act_quant_kernel<X16>(x, xs, xsb, xq, nb);
    }
  const int R = pick_rows(N, sms);
  if (R == 4) return run_iact_grid<BITS, X16, 4>(xq, xs, xsb, q, s, mn, y, M, N, K, gs);
  if (R == 2) return run_iact_grid<BITS, X16, 2>(xq, xs, xsb, q, s, mn, y, M, N, K, gs);
  return run_iact_grid<BITS, X16, 1>(xq, xs, xsb, q, s, mn, y, M, N, K, gs);
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) return 3;
  int32_t h[8];
  if (std::fread(h, 4, 8, f) != 8) return 4;
  const int dtype = h[0], bits = h[1], M = h[2], N = h[3], K = h[4], gs = h[5], sms = h[6], act_bits = h[7];
  const size_t esz = dtype == 0 ? 4 : 2, G = size_t(K / gs);
  std::vector<uint8_t> x(size_t(M) * K * esz), q(size_t(N) * K * bits / 8), y(size_t(M) * N * esz);
  std::vector<float> s(N * G), mn(N * G);
  if (std::fread(x.data(), 1, x.size(), f) != x.size() || std::fread(q.data(), 1, q.size(), f) != q.size() ||
      std::fread(s.data(), 4, s.size(), f) != s.size() || std::fread(mn.data(), 4, mn.size(), f) != mn.size())
    return 5;
  std::fclose(f);
  if (act_bits) {
    if (dtype != 0) return 6;
    const float* xf = reinterpret_cast<const float*>(x.data());
    float* yf = reinterpret_cast<float*>(y.data());
    if (bits == 4 && act_bits == 8) run_iact<4, false>(xf, q.data(), s.data(), mn.data(), yf, M, N, K, gs, sms);
    else if (bits == 4) run_iact<4, true>(xf, q.data(), s.data(), mn.data(), yf, M, N, K, gs, sms);
    else if (act_bits == 8) run_iact<8, false>(xf, q.data(), s.data(), mn.data(), yf, M, N, K, gs, sms);
    else run_iact<8, true>(xf, q.data(), s.data(), mn.data(), yf, M, N, K, gs, sms);
  } else switch (dtype * 2 + (bits == 8)) {
    case 0: run_bits<float, 4>(x.data(), q.data(), s.data(), mn.data(), y.data(), M, N, K, gs, sms); break;
    case 1: run_bits<float, 8>(x.data(), q.data(), s.data(), mn.data(), y.data(), M, N, K, gs, sms); break;
    case 2: run_bits<__half, 4>(x.data(), q.data(), s.data(), mn.data(), y.data(), M, N, K, gs, sms); break;
    case 3: run_bits<__half, 8>(x.data(), q.data(), s.data(), mn.data(), y.data(), M, N, K, gs, sms); break;
    case 4: run_bits<__nv_bfloat16, 4>(x.data(), q.data(), s.data(), mn.data(), y.data(), M, N, K, gs, sms); break;
    case 5: run_bits<__nv_bfloat16, 8>(x.data(), q.data(), s.data(), mn.data(), y.data(), M, N, K, gs, sms); break;
    default: return 6;
  }
  FILE* o = std::fopen(argv[2], "wb");
  if (!o || std::fwrite(y.data(), 1, y.size(), o) != y.size()) return 7;
  std::fclose(o);
  return 0;
}
