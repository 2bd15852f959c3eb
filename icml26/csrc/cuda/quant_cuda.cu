// Packed INT4 / INT8 weight GEMV (decode) and small-M GEMM (prefill) for CUDA GPUs (icml26 quantize).
//
// Same weight layout as the CPU kernels (icml26/csrc/cpu/quant_cpu.cpp; pure-torch twin and test
// oracle icml26/ops/_ref/quant.py):
//   w[n, k] = scale[n, g] * q[n, k] + minv[n, g],   g = k / group_size,  q unsigned codes,
//   scales / mins float32 (N, K / group_size) exactly as PackedLinear holds them.
//   INT8: qweight (N, K) uint8, one code per byte.
//   INT4: qweight (N, K/2) uint8; in every block of 64 weights (32 bytes), byte j holds
//         q[64b + j] in its low nibble and q[64b + 32 + j] in its high nibble.
// y[m, n] = sum_g ( scale[n,g] * sum_{k in g} q[n,k] x[m,k] + minv[n,g] * sum_{k in g} x[m,k] ).
//
// Kernel (one for every case, templated on activation type T in {float, half, bfloat16}, BITS in
// {4, 8}, R output rows per warp, MT activation rows per CTA):
//   * a CTA of 4 warps owns 4*R consecutive output rows and MT rows of x (grid.y tiles M);
//   * every lane reads 16 bytes (one 128-bit load) of each of its warp's R weight rows per step
//     (the next step's loads are issued before this step's arithmetic):
//     INT4: half a 64-block = 32 codes (16 low nibbles -> x[k0 .. k0+15], 16 high nibbles ->
//     x[k0+32 .. k0+47], k0 = 64 b + 16 part), INT8: 16 codes -> x[16 c .. 16 c + 15];
//     a warp step covers 512 contiguous bytes of each row (coalesced);
//   * the lane's x values are loaded once per step (128-bit loads, converted to fp32) and reused
//     for the R rows; the 16 or 32 codes of a lane lie in one quantization group (INT4 needs
//     group_size % 64 == 0, INT8 group_size % 16 == 0), so per step and row the lane adds
//     scale * (sum q x) + minv * (sum x);
//   * codes -> fp32 exactly with one byte permute (0x4B000000 | byte = 2^23 + byte) and one
//     subtraction; all products and sums in fp32; a butterfly warp reduction at the end;
//     the output has the activation's dtype.
// R in {1, 2, 4} is chosen per launch so that small-N layers still fill the GPU; MT is 1 for
// decode (M = 1) and 4 otherwise (small-M prefill, weights re-read from L2 per M tile).
//
// Two ways in, one kernel:
//   * extern "C" icml26_quant_gemm_cuda(...) on raw pointers and a cudaStream_t: the launcher;
//     built alone (nvcc -DICML26_CUDA_NO_TORCH -shared) it is loaded with ctypes by
//     icml26/ops/quant_cuda.py when the torch extension cannot be built (e.g. nvcc and torch
//     from different CUDA major versions);
//   * without ICML26_CUDA_NO_TORCH, a torch registration of the same op schema as the CPU
//     kernel: TORCH_LIBRARY_IMPL(icml26, CUDA) quant_gemm, so torch.ops.icml26.quant_gemm
//     dispatches here for CUDA tensors (JIT-built by icml26/core/ext.py).

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <cstdint>

#define ICML26_QUANT_CUDA_ABI 2

namespace icml26_quant_cuda {

constexpr int kWarps = 4;  // warps per CTA

// ---------------------------------------------------------------- activations -> fp32
__device__ __forceinline__ void load16(const float* __restrict__ p, float* v) {
  const float4* q = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 a = __ldg(q + i);
    v[4 * i] = a.x; v[4 * i + 1] = a.y; v[4 * i + 2] = a.z; v[4 * i + 3] = a.w;
  }
}

// two 16-bit activations packed in one 32-bit word -> fp32 (o[0] = low half, o[1] = high half)
__device__ __forceinline__ void unpack2(const __half*, uint32_t w, float* o) {
  __half2 h;
  *reinterpret_cast<uint32_t*>(&h) = w;
  const float2 f = __half22float2(h);
  o[0] = f.x;
  o[1] = f.y;
}

__device__ __forceinline__ void unpack2(const __nv_bfloat16*, uint32_t w, float* o) {
  // bf16 -> fp32 is a 16-bit shift: exact, no intrinsic needed
  o[0] = __uint_as_float(w << 16);
  o[1] = __uint_as_float(w & 0xFFFF0000u);
}

// 16 half or bfloat16 activations: two 16-byte loads, unpacked pairwise
template <class T>
__device__ __forceinline__ void load16(const T* __restrict__ p, float* v) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 a = __ldg(q + i);
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) unpack2(p, w[j], v + 8 * i + 2 * j);
  }
}

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// byte i of w (0..255) as an exact fp32: bits 0x4B0000bb are 2^23 + bb
__device__ __forceinline__ float byte_f32(uint32_t w, int i) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u + i)) - 8388608.0f;
}

// sum over the 4 bytes of w (codes) times v[0..3]
__device__ __forceinline__ float dot4(uint32_t w, const float* v, float acc) {
  acc = fmaf(byte_f32(w, 0), v[0], acc);
  acc = fmaf(byte_f32(w, 1), v[1], acc);
  acc = fmaf(byte_f32(w, 2), v[2], acc);
  acc = fmaf(byte_f32(w, 3), v[3], acc);
  return acc;
}

// ---------------------------------------------------------------- the kernel
template <typename T, int BITS, int R, int MT>
__global__ void __launch_bounds__(kWarps * 32)
quant_gemm_kernel(const T* __restrict__ x, const uint8_t* __restrict__ qweight, const float* __restrict__ scales,
                  const float* __restrict__ mins, T* __restrict__ y, int M, int N, int K, int group_size) {
  constexpr int NX = BITS == 4 ? 32 : 16;  // activations per lane per step
  const int lane = threadIdx.x & 31;
  const int n0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * R;
  if (n0 >= N) return;  // whole warp leaves together
  const int m0 = blockIdx.y * MT;
  const int mcount = min(MT, M - m0);
  const int G = K / group_size;
  const int64_t row_bytes = int64_t(K) * BITS / 8;
  const int nchunks = int(row_bytes / 16);

  const uint4* rowp[R];
  int nr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    nr[r] = min(n0 + r, N - 1);  // rows past N repeat the last row; their sums are dropped
    rowp[r] = reinterpret_cast<const uint4*>(qweight + int64_t(nr[r]) * row_bytes);
  }
  float acc[MT][R];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.f;

  // weights of the next step are loaded before this step's arithmetic (two 128-bit loads per row in flight)
  uint4 q[R];
  if (lane < nchunks) {
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = __ldg(rowp[r] + lane);
  }
  for (int c = lane; c < nchunks; c += 32) {
    uint4 qn[R];
    if (c + 32 < nchunks) {
#pragma unroll
      for (int r = 0; r < R; ++r) qn[r] = __ldg(rowp[r] + c + 32);
    }
    const int k0 = BITS == 4 ? 64 * (c >> 1) + 16 * (c & 1) : 16 * c;
    const int g = k0 / group_size;
    float sc[R], mn[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      sc[r] = __ldg(scales + int64_t(nr[r]) * G + g);
      mn[r] = __ldg(mins + int64_t(nr[r]) * G + g);
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m < mcount) {
        float xv[NX];
        const T* xr = x + int64_t(m0 + m) * K;
        load16(xr + k0, xv);
        if (BITS == 4) load16(xr + k0 + 32, xv + 16);
        float xs = 0.f;
#pragma unroll
        for (int i = 0; i < NX; ++i) xs += xv[i];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t w[4] = {q[r].x, q[r].y, q[r].z, q[r].w};
          float d0 = 0.f, d1 = 0.f;  // two chains for latency
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (BITS == 4) {
              d0 = dot4(w[j] & 0x0F0F0F0Fu, xv + 4 * j, d0);          // low nibbles: x[k0 + 4j ..]
              d1 = dot4((w[j] >> 4) & 0x0F0F0F0Fu, xv + 16 + 4 * j, d1);  // high nibbles: x[k0 + 32 + 4j ..]
            } else {
              if (j & 1) d1 = dot4(w[j], xv + 4 * j, d1);
              else d0 = dot4(w[j], xv + 4 * j, d0);
            }
          }
          acc[m][r] = fmaf(sc[r], d0 + d1, fmaf(mn[r], xs, acc[m][r]));
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = qn[r];
  }
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[m][r];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
      acc[m][r] = v;
    }
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (m < mcount && n0 + r < N) store(y + int64_t(m0 + m) * N + n0 + r, acc[m][r]);
  }
}

// Rows per warp: as many as still leave >= 2 CTAs per SM (more rows per warp = fewer x reloads).
inline int pick_rows(int N, int sms) {
  const int target = 2 * sms;
  if ((N + 4 * kWarps - 1) / (4 * kWarps) >= target) return 4;
  if ((N + 2 * kWarps - 1) / (2 * kWarps) >= target) return 2;
  return 1;
}

inline dim3 grid_dims(int M, int N, int R, int MT) { return dim3((N + kWarps * R - 1) / (kWarps * R), (M + MT - 1) / MT); }

// ---------------------------------------------------------------- integer activations (quant_gemm_i8act)
// Same semantics as the CPU op and icml26/ops/_ref/quant.py quant_gemm_i8act: x (fp32) is quantized per
// 64-block b: xs_b = max|x_b| / qmax (qmax 127, or 16383 for 15-bit codes), xq = round(x / xs_b) (ties to
// even, as nearbyint); y[m, n] = sum_g scale[n,g] * sum_{b in g} xs_b * isum_b(n) + minv[n,g] * sum_{k in g} x[m,k]
// with isum exact in int32: __dp4a (INT8 codes; INT8 weights as q - 128 plus 128 * sum xq) or __dp2a
// (15-bit codes x bytes). Pass 1: one thread per 64-block writes xs, the block's exact-x sum and the
// codes into a workspace; pass 2: the GEMV/GEMM kernel above with integer dot products (one M row per grid.y).
template <bool X16>
__global__ void __launch_bounds__(128)
act_quant_kernel(const float* __restrict__ x, float* __restrict__ xs, float* __restrict__ xsb, void* __restrict__ xq, int nblocks) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // 64-block index over M * K / 64
  if (i >= nblocks) return;
  const float* xb = x + i * 64;
  float amax = 0.f, sum = 0.f;
  for (int j = 0; j < 64; ++j) {
    amax = fmaxf(amax, fabsf(xb[j]));
    sum += xb[j];
  }
  const float sc = amax / (X16 ? 16383.f : 127.f);
  const float inv = sc > 0.f ? 1.f / sc : 0.f;
  xs[i] = sc;
  xsb[i] = sum;
  for (int j = 0; j < 64; ++j) {
    const int v = __float2int_rn(xb[j] * inv);
    if (X16) static_cast<int16_t*>(xq)[i * 64 + j] = int16_t(v);
    else static_cast<int8_t*>(xq)[i * 64 + j] = int8_t(v);
  }
}

// isum of 4 weight bytes (w, already as signed bytes) with 4 activation codes
__device__ __forceinline__ int idot4_x8(uint32_t w, uint32_t xw, int acc) { return __dp4a(int(w), int(xw), acc); }
__device__ __forceinline__ int idot4_x16(uint32_t w, uint32_t x01, uint32_t x23, int acc) {
  return __dp2a_hi(int(x23), int(w), __dp2a_lo(int(x01), int(w), acc));  // x0 b0 + x1 b1 + x2 b2 + x3 b3
}

template <int BITS, bool X16, int R>
__global__ void __launch_bounds__(kWarps * 32)
quant_gemm_iact_kernel(const void* __restrict__ xq, const float* __restrict__ xs, const float* __restrict__ xsb,
                       const uint8_t* __restrict__ qweight, const float* __restrict__ scales, const float* __restrict__ mins,
                       float* __restrict__ y, int N, int K, int group_size) {
  const int lane = threadIdx.x & 31;
  const int n0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * R;
  if (n0 >= N) return;
  const int m = blockIdx.y;
  const int G = K / group_size, B = K / 64;
  const int64_t row_bytes = int64_t(K) * BITS / 8;
  const int nchunks = int(row_bytes / 16);
  const uint4* rowp[R];
  int nr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    nr[r] = min(n0 + r, N - 1);
    rowp[r] = reinterpret_cast<const uint4*>(qweight + int64_t(nr[r]) * row_bytes);
  }
  // this row's codes: int8 (16 per uint4) or int16 (8 per uint4)
  const uint4* xrow = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(xq) + int64_t(m) * K * (X16 ? 2 : 1));
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  for (int c = lane; c < nchunks; c += 32) {
    uint4 q[R];
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = __ldg(rowp[r] + c);
    const int k0 = BITS == 4 ? 64 * (c >> 1) + 16 * (c & 1) : 16 * c;
    const int b = k0 >> 6, g = k0 / group_size;
    const bool owner = BITS == 4 ? (c & 1) == 0 : (c & 3) == 0;  // adds the block's minv * sum x once
    // codes for x[k0 .. k0+15] (and, INT4, x[k0+32 .. k0+47]) as 32-bit words
    uint32_t xa[X16 ? 8 : 4], xh[X16 ? 8 : 4];
    {
      const int per = X16 ? 8 : 16;  // codes per uint4
#pragma unroll
      for (int h = 0; h < (X16 ? 2 : 1); ++h) {
        const uint4 a = __ldg(xrow + (k0 / per) + h);
        xa[4 * h] = a.x; xa[4 * h + 1] = a.y; xa[4 * h + 2] = a.z; xa[4 * h + 3] = a.w;
        if (BITS == 4) {
          const uint4 e = __ldg(xrow + ((k0 + 32) / per) + h);
          xh[4 * h] = e.x; xh[4 * h + 1] = e.y; xh[4 * h + 2] = e.z; xh[4 * h + 3] = e.w;
        }
      }
    }
    int xqsum = 0;  // INT8 weights: sum of the 16 codes (q - 128 trick)
    if (BITS == 8) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        xqsum = X16 ? idot4_x16(0x01010101u, xa[2 * j], xa[2 * j + 1], xqsum) : idot4_x8(0x01010101u, xa[j], xqsum);
    }
    const float xsc = __ldg(xs + int64_t(m) * B + b);
    const float xsum = owner ? __ldg(xsb + int64_t(m) * B + b) : 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t w[4] = {q[r].x, q[r].y, q[r].z, q[r].w};
      int is = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (BITS == 4) {
          const uint32_t lo = w[j] & 0x0F0F0F0Fu, hi = (w[j] >> 4) & 0x0F0F0F0Fu;
          if (X16) {
            is = idot4_x16(lo, xa[2 * j], xa[2 * j + 1], is);
            is = idot4_x16(hi, xh[2 * j], xh[2 * j + 1], is);
          } else {
            is = idot4_x8(lo, xa[j], is);
            is = idot4_x8(hi, xh[j], is);
          }
        } else {
          const uint32_t sw = w[j] ^ 0x80808080u;  // q - 128 as signed bytes
          is = X16 ? idot4_x16(sw, xa[2 * j], xa[2 * j + 1], is) : idot4_x8(sw, xa[j], is);
        }
      }
      if (BITS == 8) is += 128 * xqsum;
      const float sc = __ldg(scales + int64_t(nr[r]) * G + g), mn = __ldg(mins + int64_t(nr[r]) * G + g);
      acc[r] = fmaf(sc * xsc, float(is), fmaf(mn, xsum, acc[r]));
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
    acc[r] = v;
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (n0 + r < N) y[int64_t(m) * N + n0 + r] = acc[r];
  }
}

// workspace of quant_gemm_i8act: xs (M*B floats) | block sums (M*B floats) | pad to 16 | codes (M*K int8 or int16)
inline int64_t iact_codes_offset(int64_t M, int64_t K) { return (8 * M * (K / 64) + 15) / 16 * 16; }
inline int64_t iact_workspace_bytes(int64_t M, int64_t K, int64_t act_bits) {
  return iact_codes_offset(M, K) + M * K * (act_bits == 16 ? 2 : 1);
}

#ifndef ICML26_CUDA_HOST_EMU  // tests/ops/quant_cuda_emu.cpp runs the kernel above on the CPU
template <int BITS, bool X16, int R>
cudaError_t launch_iact_r(const float* x, const uint8_t* qw, const float* s, const float* mn, float* y, uint8_t* work, int M, int N,
                          int K, int gs, cudaStream_t st) {
  const int nb = M * (K / 64);
  float* xs = reinterpret_cast<float*>(work);
  float* xsb = xs + nb;
  void* xq = work + iact_codes_offset(M, K);
  act_quant_kernel<X16><<<(nb + 127) / 128, 128, 0, st>>>(x, xs, xsb, xq, nb);
  const dim3 grid = grid_dims(M, N, R, 1);
  quant_gemm_iact_kernel<BITS, X16, R><<<grid, kWarps * 32, 0, st>>>(xq, xs, xsb, qw, s, mn, y, N, K, gs);
  return cudaGetLastError();
}

template <int BITS, bool X16>
cudaError_t launch_iact(const float* x, const uint8_t* qw, const float* s, const float* mn, float* y, uint8_t* work, int M, int N,
                        int K, int gs, int sms, cudaStream_t st) {
  const int R = pick_rows(N, sms);
  if (R == 4) return launch_iact_r<BITS, X16, 4>(x, qw, s, mn, y, work, M, N, K, gs, st);
  if (R == 2) return launch_iact_r<BITS, X16, 2>(x, qw, s, mn, y, work, M, N, K, gs, st);
  return launch_iact_r<BITS, X16, 1>(x, qw, s, mn, y, work, M, N, K, gs, st);
}

template <typename T, int BITS, int R, int MT>
cudaError_t launch_rmt(const void* x, const uint8_t* qw, const float* s, const float* mn, void* y, int M, int N, int K, int gs,
                       cudaStream_t st) {
  const dim3 grid = grid_dims(M, N, R, MT);
  quant_gemm_kernel<T, BITS, R, MT><<<grid, kWarps * 32, 0, st>>>(static_cast<const T*>(x), qw, s, mn, static_cast<T*>(y), M, N,
                                                                  K, gs);
  return cudaGetLastError();
}

template <typename T, int BITS>
cudaError_t launch_bits(const void* x, const uint8_t* qw, const float* s, const float* mn, void* y, int M, int N, int K, int gs,
                        int sms, cudaStream_t st) {
  const int R = pick_rows(N, sms);
  if (M == 1) {
    if (R == 4) return launch_rmt<T, BITS, 4, 1>(x, qw, s, mn, y, M, N, K, gs, st);
    if (R == 2) return launch_rmt<T, BITS, 2, 1>(x, qw, s, mn, y, M, N, K, gs, st);
    return launch_rmt<T, BITS, 1, 1>(x, qw, s, mn, y, M, N, K, gs, st);
  }
  if (R == 4) return launch_rmt<T, BITS, 4, 4>(x, qw, s, mn, y, M, N, K, gs, st);
  if (R == 2) return launch_rmt<T, BITS, 2, 4>(x, qw, s, mn, y, M, N, K, gs, st);
  return launch_rmt<T, BITS, 1, 4>(x, qw, s, mn, y, M, N, K, gs, st);
}

#endif  // ICML26_CUDA_HOST_EMU

}  // namespace icml26_quant_cuda

#ifndef ICML26_CUDA_HOST_EMU
// ---------------------------------------------------------------- C launcher (ABI for ctypes)
// dtype: 0 float32, 1 float16, 2 bfloat16 (x and y). Returns 0 (cudaSuccess), a cudaError_t
// value, or -1 for arguments the kernel does not take (the caller validates first; this is a
// last guard). Pointers: x, y 16-byte aligned; qweight 16-byte aligned.
extern "C" int icml26_quant_cuda_abi() { return ICML26_QUANT_CUDA_ABI; }

namespace {
cudaError_t device_sms(int* sms) {  // SM count of the current device (cached per device)
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  static int cache[64] = {0};
  if (dev >= 0 && dev < 64 && cache[dev] > 0) {
    *sms = cache[dev];
    return cudaSuccess;
  }
  e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess && dev >= 0 && dev < 64) cache[dev] = *sms;
  return e;
}
}  // namespace

extern "C" int icml26_quant_gemm_cuda(int dtype, const void* x, const uint8_t* qweight, const float* scales, const float* mins,
                                      void* y, int64_t M, int64_t N, int64_t K, int64_t bits, int64_t group_size,
                                      void* stream) {
  using namespace icml26_quant_cuda;
  if (dtype < 0 || dtype > 2 || M <= 0 || N <= 0 || K <= 0 || group_size <= 0 || K % group_size) return -1;
  if (M > 65535LL * 4 || N > (1LL << 31) - 64 || K > (1LL << 30)) return -1;
  if (!(bits == 4 && K % 64 == 0 && group_size % 64 == 0) && !(bits == 8 && K % 16 == 0 && group_size % 16 == 0)) return -1;
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(qweight) | reinterpret_cast<uintptr_t>(y)) & 15) return -1;
  int sms = 0;
  cudaError_t e = device_sms(&sms);
  if (e != cudaSuccess) return int(e);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int m = int(M), n = int(N), k = int(K), gs = int(group_size);
  switch (dtype * 2 + (bits == 8)) {
    case 0: e = launch_bits<float, 4>(x, qweight, scales, mins, y, m, n, k, gs, sms, st); break;
    case 1: e = launch_bits<float, 8>(x, qweight, scales, mins, y, m, n, k, gs, sms, st); break;
    case 2: e = launch_bits<__half, 4>(x, qweight, scales, mins, y, m, n, k, gs, sms, st); break;
    case 3: e = launch_bits<__half, 8>(x, qweight, scales, mins, y, m, n, k, gs, sms, st); break;
    case 4: e = launch_bits<__nv_bfloat16, 4>(x, qweight, scales, mins, y, m, n, k, gs, sms, st); break;
    case 5: e = launch_bits<__nv_bfloat16, 8>(x, qweight, scales, mins, y, m, n, k, gs, sms, st); break;
    default: return -1;
  }
  return int(e);
}

// Bytes of the scratch buffer icml26_quant_gemm_i8act_cuda needs (16-byte aligned by the caller).
extern "C" int64_t icml26_quant_i8act_workspace_bytes(int64_t M, int64_t K, int64_t act_bits) {
  return icml26_quant_cuda::iact_workspace_bytes(M, K, act_bits);
}

// Packed INT4 / INT8 weights x activations quantized per 64-block to INT8 (act_bits 8) or 15-bit codes
// (act_bits 16) inside the op; x and y float32. Returns 0, a cudaError_t value, or -1 (bad arguments).
extern "C" int icml26_quant_gemm_i8act_cuda(const float* x, const uint8_t* qweight, const float* scales, const float* mins, float* y,
                                            void* work, int64_t M, int64_t N, int64_t K, int64_t bits, int64_t group_size,
                                            int64_t act_bits, void* stream) {
  using namespace icml26_quant_cuda;
  if (M <= 0 || N <= 0 || K <= 0 || K % 64 || group_size <= 0 || group_size % 64 || K % group_size) return -1;
  if ((bits != 4 && bits != 8) || (act_bits != 8 && act_bits != 16)) return -1;
  if (M > 65535 || N > (1LL << 31) - 64 || M * K > (1LL << 40)) return -1;
  if ((reinterpret_cast<uintptr_t>(qweight) | reinterpret_cast<uintptr_t>(work)) & 15) return -1;
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 3) return -1;
  int sms = 0;
  cudaError_t e = device_sms(&sms);
  if (e != cudaSuccess) return int(e);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  uint8_t* w = static_cast<uint8_t*>(work);
  const int m = int(M), n = int(N), k = int(K), gs = int(group_size);
  switch ((bits == 8) * 2 + (act_bits == 16)) {
    case 0: e = launch_iact<4, false>(x, qweight, scales, mins, y, w, m, n, k, gs, sms, st); break;
    case 1: e = launch_iact<4, true>(x, qweight, scales, mins, y, w, m, n, k, gs, sms, st); break;
    case 2: e = launch_iact<8, false>(x, qweight, scales, mins, y, w, m, n, k, gs, sms, st); break;
    default: e = launch_iact<8, true>(x, qweight, scales, mins, y, w, m, n, k, gs, sms, st); break;
  }
  return int(e);
}

// ---------------------------------------------------------------- torch registration
#ifndef ICML26_CUDA_NO_TORCH
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

namespace {

at::Tensor quant_gemm_cuda(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& mins,
                           int64_t bits, int64_t group_size, int64_t force_level) {
  (void)force_level;  // CPU ISA selector; one kernel on CUDA
  TORCH_CHECK(x.is_cuda() && qweight.device() == x.device() && scales.device() == x.device() && mins.device() == x.device(),
              "quant_gemm (CUDA): all tensors must be on the same CUDA device");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "quant_gemm (CUDA): x must be contiguous (M, K)");
  const auto dt = x.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16, "quant_gemm (CUDA): x must be float32, float16 or bfloat16");
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.is_contiguous() && qweight.dim() == 2,
              "quant_gemm (CUDA): qweight must be contiguous uint8 (N, K*bits/8)");
  TORCH_CHECK(bits == 4 || bits == 8, "quant_gemm (CUDA): bits must be 4 or 8");
  const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  TORCH_CHECK(qweight.size(1) * 8 == K * bits, "quant_gemm (CUDA): qweight width does not match K");
  TORCH_CHECK(group_size > 0 && K % group_size == 0, "quant_gemm (CUDA): group_size must divide K");
  TORCH_CHECK(bits == 4 ? group_size % 64 == 0 : (group_size % 16 == 0 && K % 16 == 0),
              "quant_gemm (CUDA): needs group_size % 64 == 0 (INT4) or % 16 == 0 (INT8)");
  const int64_t G = K / group_size;
  TORCH_CHECK(scales.scalar_type() == at::kFloat && mins.scalar_type() == at::kFloat && scales.is_contiguous() &&
              mins.is_contiguous() && scales.numel() == N * G && mins.numel() == N * G,
              "quant_gemm (CUDA): scales/mins must be contiguous float32 (N, K/group_size)");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xc = x, qc = qweight;
  if (reinterpret_cast<uintptr_t>(xc.data_ptr()) & 15) xc = x.clone();  // offset views: 128-bit loads need alignment
  if (reinterpret_cast<uintptr_t>(qc.data_ptr()) & 15) qc = qweight.clone();
  auto y = at::empty({M, N}, x.options());
  const int code = dt == at::kFloat ? 0 : dt == at::kHalf ? 1 : 2;
  const int err = icml26_quant_gemm_cuda(code, xc.data_ptr(), qc.data_ptr<uint8_t>(), scales.data_ptr<float>(),
                                         mins.data_ptr<float>(), y.data_ptr(), M, N, K, bits, group_size,
                                         c10::cuda::getCurrentCUDAStream(x.get_device()).stream());
  TORCH_CHECK(err == 0, "quant_gemm (CUDA): ",
              err < 0 ? "unsupported shape" : cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

at::Tensor quant_gemm_i8act_cuda(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& mins,
                                 int64_t group_size, int64_t force_level, int64_t bits, int64_t act_bits) {
  (void)force_level;
  TORCH_CHECK(x.is_cuda() && qweight.device() == x.device() && scales.device() == x.device() && mins.device() == x.device(),
              "quant_gemm_i8act (CUDA): all tensors must be on the same CUDA device");
  TORCH_CHECK(act_bits == 8 || act_bits == 16, "quant_gemm_i8act (CUDA): act_bits must be 8 or 16");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "quant_gemm_i8act (CUDA): x must be contiguous float32 (M, K)");
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.is_contiguous() && qweight.dim() == 2, "quant_gemm_i8act (CUDA): qweight must be contiguous uint8");
  TORCH_CHECK(bits == 4 || bits == 8, "quant_gemm_i8act (CUDA): bits must be 4 or 8");
  const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  TORCH_CHECK(qweight.size(1) * 8 == K * bits && K % 64 == 0, "quant_gemm_i8act (CUDA): qweight (N, K*bits/8) with K % 64 == 0");
  TORCH_CHECK(group_size > 0 && K % group_size == 0 && group_size % 64 == 0, "quant_gemm_i8act (CUDA): group_size must divide K and be a multiple of 64");
  const int64_t G = K / group_size;
  TORCH_CHECK(scales.scalar_type() == at::kFloat && mins.scalar_type() == at::kFloat && scales.is_contiguous() &&
              mins.is_contiguous() && scales.numel() == N * G && mins.numel() == N * G,
              "quant_gemm_i8act (CUDA): scales/mins must be contiguous float32 (N, K/group_size)");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor qc = qweight;
  if (reinterpret_cast<uintptr_t>(qc.data_ptr()) & 15) qc = qweight.clone();
  auto y = at::empty({M, N}, x.options());
  auto work = at::empty({icml26_quant_i8act_workspace_bytes(M, K, act_bits)}, x.options().dtype(at::kByte));
  const int err = icml26_quant_gemm_i8act_cuda(x.data_ptr<float>(), qc.data_ptr<uint8_t>(), scales.data_ptr<float>(),
                                               mins.data_ptr<float>(), y.data_ptr<float>(), work.data_ptr(), M, N, K, bits,
                                               group_size, act_bits, c10::cuda::getCurrentCUDAStream(x.get_device()).stream());
  TORCH_CHECK(err == 0, "quant_gemm_i8act (CUDA): ",
              err < 0 ? "unsupported shape" : cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

TORCH_LIBRARY_IMPL(icml26, CUDA, m) {
  m.impl("quant_gemm", TORCH_FN(quant_gemm_cuda));
  m.impl("quant_gemm_i8act", TORCH_FN(quant_gemm_i8act_cuda));
}
#endif  // ICML26_CUDA_NO_TORCH
#endif  // ICML26_CUDA_HOST_EMU
