"""CUDA path of the packed INT4 / INT8 GEMV / small-M GEMM (icml26/csrc/cuda/quant_cuda.cu).

Without a GPU (any machine with the CUDA toolkit):
  * nvcc compiles the kernel to PTX for sm_80, and builds the ctypes library for sm_90 (SASS +
    PTX), which loads and answers (no device: a CUDA error code, bad shapes: -1);
  * the kernel source itself runs on the CPU under a host emulation (tests/ops/quant_cuda_emu.cpp:
    32 threads per warp, a barrier per shuffle) and matches the ``_ref`` twin for INT4 / INT8,
    fp32 / fp16 / bf16 activations, every rows-per-warp choice and M tiling, and for the
    integer-activation op (INT8 / 15-bit codes, dp4a / dp2a) with an outlier channel;
  * (slow) the torch registration compiles against torch's headers.
With a CUDA build of torch and a GPU (marker ``gpu``; ``make test`` leaves them out, run
``pytest -m gpu tests/ops/test_quant_cuda.py`` or benchmarks/quantize_cuda.sh): both routes
(torch op, ctypes) against ``_ref`` for both ops, and a PackedLinear on CUDA against the same
layer on CPU.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from icml26.ops import quant as ops
from icml26.ops import quant_cuda
from icml26.ops._ref import quant as ref

ROOT = Path(__file__).resolve().parents[2]
NVCC_SKIP = "needs nvcc (CUDA toolkit)"
HAS_GPU = torch.version.cuda is not None and torch.cuda.is_available()


def _nvcc() -> str:
    exe = quant_cuda.nvcc()
    if exe is None:
        pytest.skip(NVCC_SKIP)
    return exe


def _cuda_include() -> Path:
    exe = _nvcc()
    cands = [
        Path(p) / "include"
        for p in (quant_cuda.os.environ.get("CUDA_HOME"), quant_cuda.os.environ.get("CUDA_PATH"))
        if p
    ]
    cands += [Path(exe).resolve().parent.parent / "include", Path("/usr/local/cuda/include")]
    try:  # nvcc may be a wrapper script: ask it where its toolkit is
        out = subprocess.run(
            [exe, "--dryrun", "-E", "-x", "cu", "/dev/null"], capture_output=True, text=True, timeout=60
        ).stderr
        cands += [
            Path(line.split("=", 1)[1].strip())
            for line in out.splitlines()
            if "TOP=" in line
            for line in [line.split("#$ ")[-1]]
            if line.startswith("TOP=")
        ]
    except (OSError, subprocess.SubprocessError):
        pass
    for c in cands:
        if (c / "cuda_fp16.h").is_file():
            return c
        if (c / "include" / "cuda_fp16.h").is_file():
            return c / "include"
    pytest.skip(NVCC_SKIP + ": CUDA headers (cuda_fp16.h) not found")


def _case(dtype, bits, m, n, k, gs, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype)
    codes = torch.randint(0, 2**bits, (n, k), dtype=torch.uint8, generator=g)
    qw = ref.pack_int4(codes) if bits == 4 else codes
    s = torch.rand(n, k // gs, generator=g) * 0.05 + 0.01
    mn = -s * torch.randint(0, 2**bits, (n, k // gs), generator=g).float()
    return [t.to(device) for t in (x, qw, s, mn)]


def _tol(dtype):
    return {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]


def _assert_close(y, x, qw, s, mn, bits, gs):
    want = ref.quant_gemm(x.float().cpu(), qw.cpu(), s.cpu(), mn.cpu(), bits, gs)
    got = y.float().cpu()
    assert got.shape == want.shape and y.dtype == x.dtype
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    assert err <= _tol(x.dtype) * scale, f"max |err| {err:.3g} vs scale {scale:.3g}"


# ----------------------------------------------------------------------------- no GPU needed
def test_kernel_compiles_to_ptx_sm80(tmp_path):
    exe = _nvcc()
    out = tmp_path / "q80.ptx"
    r = subprocess.run(
        [
            exe,
            "-ptx",
            "-arch=sm_80",
            "-std=c++17",
            "-DICML26_CUDA_NO_TORCH",
            *quant_cuda.NVCC_COMMON_FLAGS,
            str(quant_cuda.source_path()),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ptx = out.read_text()
    # quant_gemm: 3 activation dtypes x 2 widths x 3 rows-per-warp x 2 M tiles; quant_gemm_i8act: 2 widths x
    # 2 activation codes x 3 rows-per-warp + 2 activation-quantization passes
    assert ptx.count(".entry") == 36 + 12 + 2 and "quant_gemm_kernel" in ptx and "quant_gemm_iact_kernel" in ptx


def test_ctypes_library_builds_for_sm90_and_loads(tmp_path):
    _nvcc()
    lib_path = quant_cuda.build_ctypes_lib("90", tmp_path)
    assert lib_path.is_file() and quant_cuda.build_ctypes_lib("90", tmp_path) == lib_path  # cached
    lib = quant_cuda.load_ctypes_lib(lib_path)
    assert lib.icml26_quant_cuda_abi() == quant_cuda.ABI
    # shapes the kernel does not take are refused before any CUDA call
    assert lib.icml26_quant_gemm_cuda(0, None, None, None, None, None, 1, 8, 65, 4, 64, None) == -1
    assert lib.icml26_quant_gemm_cuda(0, None, None, None, None, None, 1, 8, 128, 4, 32, None) == -1
    assert lib.icml26_quant_gemm_cuda(3, None, None, None, None, None, 1, 8, 128, 4, 64, None) == -1
    if not HAS_GPU:  # no driver / device here: the launcher returns the CUDA error instead of launching
        assert lib.icml26_quant_gemm_cuda(0, None, None, None, None, None, 1, 8, 128, 4, 64, None) > 0
    # integer-activation op: workspace = 2 floats per 64-block (padded to 16 bytes) + the codes
    assert lib.icml26_quant_i8act_workspace_bytes(3, 128, 8) == 48 + 3 * 128
    assert lib.icml26_quant_i8act_workspace_bytes(1, 192, 16) == 32 + 2 * 192
    assert (
        lib.icml26_quant_gemm_i8act_cuda(None, None, None, None, None, None, 1, 8, 96, 4, 32, 8, None) == -1
    )  # K % 64
    assert (
        lib.icml26_quant_gemm_i8act_cuda(None, None, None, None, None, None, 1, 8, 128, 4, 64, 4, None) == -1
    )  # act_bits


@pytest.fixture(scope="module")
def emu_binary(tmp_path_factory):
    inc = _cuda_include()
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a C++ compiler (g++)")
    exe = tmp_path_factory.mktemp("emu") / "quant_cuda_emu"
    r = subprocess.run(
        [cxx, "-std=c++20", "-O1", "-pthread", f"-I{inc}", str(ROOT / "tests/ops/quant_cuda_emu.cpp"), "-o", str(exe)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return exe


def _emu(exe, tmp_path, x, qw, s, mn, bits, gs, sms, act_bits=0):
    m, k = x.shape
    n = qw.shape[0]
    code = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[x.dtype]
    raw = lambda t: t.contiguous().view(torch.uint8).numpy().tobytes()  # noqa: E731
    hdr = torch.tensor([code, bits, m, n, k, gs, sms, act_bits], dtype=torch.int32)
    fin, fout = tmp_path / "in.bin", tmp_path / "out.bin"
    fin.write_bytes(raw(hdr) + raw(x) + raw(qw) + raw(s.float()) + raw(mn.float()))
    r = subprocess.run([str(exe), str(fin), str(fout)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return torch.frombuffer(bytearray(fout.read_bytes()), dtype=torch.uint8).view(x.dtype).reshape(m, n)


# (dtype, bits, M, N, K, group_size, SMs): SMs steer the rows-per-warp choice R (4 / 2 / 1) exactly as
# the launcher does; M > 1 runs the M tiles of 4 (with a partial tile); K = 1152 INT4 gives lanes two steps
EMU_CASES = [
    (torch.float32, 4, 1, 72, 192, 64, 2),  # R = 4, groups of 64
    (torch.float32, 4, 5, 37, 128, 128, 100),  # R = 1, M tiles 4 + 1, per channel
    (torch.float16, 4, 1, 72, 256, 128, 3),  # R = 2
    (torch.bfloat16, 4, 2, 24, 1152, 128, 1),  # two steps per lane, partial row tile
    (torch.float32, 8, 1, 50, 80, 16, 1),  # INT8, groups of 16, 5 chunks per row
    (torch.bfloat16, 8, 3, 33, 96, 32, 1),  # INT8 bf16, partial row tile
    (torch.float16, 8, 4, 20, 48, 48, 100),  # INT8 fp16 per channel, one full M tile
    (torch.float32, 8, 2, 40, 768, 64, 1),  # INT8, all 32 lanes busy (48 chunks): the full warp reduction
]


@pytest.mark.parametrize("dtype,bits,m,n,k,gs,sms", EMU_CASES)
def test_kernel_source_matches_ref_under_host_emulation(emu_binary, tmp_path, dtype, bits, m, n, k, gs, sms):
    x, qw, s, mn = _case(dtype, bits, m, n, k, gs, seed=m * 1000 + n)
    y = _emu(emu_binary, tmp_path, x, qw, s, mn, bits, gs, sms)
    _assert_close(y, x, qw, s, mn, bits, gs)


# (bits, act_bits, M, N, K, group_size, SMs) for quant_gemm_i8act (x float32; K, groups multiples of 64)
EMU_IACT_CASES = [
    (4, 8, 1, 72, 192, 64, 2),  # R = 4
    (4, 16, 3, 37, 1152, 128, 100),  # R = 1, two steps per lane, 3 M rows
    (8, 8, 1, 72, 256, 128, 3),  # INT8 weights (q - 128 trick), R = 2
    (8, 16, 2, 33, 768, 64, 1),  # INT8 x 15-bit codes, all lanes busy, partial row tile
]


@pytest.mark.parametrize("bits,act_bits,m,n,k,gs,sms", EMU_IACT_CASES)
def test_integer_activation_kernel_matches_ref_under_host_emulation(
    emu_binary, tmp_path, bits, act_bits, m, n, k, gs, sms
):
    x, qw, s, mn = _case(torch.float32, bits, m, n, k, gs, seed=7 * n + m)
    x[0, 5] = 40.0  # an outlier channel, as in SmolLM2's RMSNorm outputs
    y = _emu(emu_binary, tmp_path, x, qw, s, mn, bits, gs, sms, act_bits)
    want = ref.quant_gemm_i8act(x, qw, s, mn, gs, bits, act_bits)
    assert (y - want).abs().max().item() <= 1e-5 * want.abs().max().item()


def test_cpu_tensors_never_reach_the_cuda_path(monkeypatch):
    if not HAS_GPU:
        quant_cuda.reset()
        assert quant_cuda.backend() in ("no-cuda", "ref")

    def boom(*a, **k):
        raise AssertionError("CPU tensors must not go to the CUDA path")

    monkeypatch.setattr(quant_cuda, "linear", boom)
    monkeypatch.setattr(quant_cuda, "quant_gemm", boom)
    monkeypatch.setattr(ops, "backend", lambda: "ref")  # no C++ build needed for this dispatch check
    x, qw, s, mn = _case(torch.float32, 4, 2, 16, 128, 64)
    y = ops.quant_linear(x, qw, s, mn, 4, 64, int_act=0)
    torch.testing.assert_close(y, ref.quant_gemm(x, qw, s, mn, 4, 64), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="float16 / bfloat16 on CUDA"):
        ops.quant_gemm(x.half(), qw, s, mn, 4, 64)


def test_cuda_linear_routing(monkeypatch):
    """quant_cuda.linear's choices, with the launcher replaced by the reference (runs on CPU tensors):
    kernel for <= GEMM_MAX_ROWS rows and supported shapes, dequantize + matmul above, reference otherwise."""
    calls = []

    def fake(lib, x, qw, s, mn, bits, gs):
        calls.append((x.shape[0], x.dtype, bits, gs))
        return ref.quant_gemm(x.float(), qw, s, mn, bits, gs).to(x.dtype)

    monkeypatch.setitem(quant_cuda._state, "backend", "ctypes-cuda")
    monkeypatch.setitem(quant_cuda._state, "lib", None)
    monkeypatch.setattr(quant_cuda, "ctypes_gemm", fake)
    x, qw, s, mn = _case(torch.float32, 4, 16, 24, 128, 64)
    y = quant_cuda.linear(x.reshape(2, 8, 128), qw, s, mn, 4, 64)
    assert calls == [(16, torch.float32, 4, 64)] and y.shape == (2, 8, 24)
    torch.testing.assert_close(y.reshape(16, 24), ref.quant_gemm(x, qw, s, mn, 4, 64), rtol=1e-5, atol=1e-5)
    xb = torch.randn(17, 128, dtype=torch.bfloat16)
    assert (
        quant_cuda.linear(xb, qw, s, mn, 4, 64).dtype == torch.bfloat16 and len(calls) == 1
    )  # 17 rows: dequantize + matmul
    x8, q8, s8, m8 = _case(torch.float16, 8, 3, 10, 72, 24)  # INT8 groups of 24: not a kernel shape -> reference
    y8 = quant_cuda.linear(x8, q8, s8, m8, 8, 24)
    assert len(calls) == 1 and y8.dtype == torch.float16
    assert quant_cuda.quant_gemm(x[:0], qw, s, mn, 4, 64).shape == (0, 24)


def _torch_shim_dir(tmp_path) -> Path | None:
    """The CPU build of torch lacks one generated config header of c10/cuda; give it (as a CUDA build has it)."""
    inc = Path(torch.__file__).parent / "include"
    if (inc / "c10/cuda/impl/cuda_cmake_macros.h").is_file():
        return None
    d = tmp_path / "shim"
    (d / "c10/cuda/impl").mkdir(parents=True)
    (d / "c10/cuda/impl/cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    return d


@pytest.mark.slow
def test_torch_registration_compiles_against_torch_headers(tmp_path):
    """The exact translation unit torch.utils.cpp_extension compiles on a GPU machine (nvcc -c, ~2 min here)."""
    exe = _nvcc()
    inc = Path(torch.__file__).parent / "include"
    shim = _torch_shim_dir(tmp_path)
    cmd = [
        exe,
        "-c",
        "-std=c++20",
        *quant_cuda.NVCC_COMMON_FLAGS,
        "-gencode=arch=compute_90,code=sm_90",
        "-Xcompiler",
        "-fPIC",
        "-DTORCH_EXTENSION_NAME=quant_cuda",
        f"-I{inc}",
        f"-I{inc}/torch/csrc/api/include",
        *([f"-I{shim}"] if shim else []),
        str(quant_cuda.source_path()),
        "-o",
        str(tmp_path / "quant_cuda.o"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "quant_cuda.o").stat().st_size > 0


# ----------------------------------------------------------------------------- GPU
GPU_CASES = [
    (dt, bits, m, n, k, gs)
    for dt in (torch.float32, torch.float16, torch.bfloat16)
    for (bits, m, n, k, gs) in (
        (4, 1, 576, 576, 576),
        (4, 1, 1536, 576, 64),
        (4, 3, 577, 1536, 128),
        (4, 16, 4096, 4096, 128),
        (4, 7, 49152, 576, 576),
        (8, 1, 576, 576, 576),
        (8, 5, 1000, 1536, 32),
        (8, 16, 4096, 4096, 4096),
    )
]
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device and a CUDA build of torch")


@pytest.mark.gpu
@gpu
def test_gpu_kernel_is_built():
    _nvcc()
    quant_cuda.reset()
    assert quant_cuda.backend() in ("ext-cuda", "ctypes-cuda"), quant_cuda.why()


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype,bits,m,n,k,gs", GPU_CASES)
def test_gpu_torch_op_matches_ref(dtype, bits, m, n, k, gs):
    _nvcc()
    if quant_cuda.backend() != "ext-cuda":
        pytest.skip(f"torch route not built here ({quant_cuda.why()}); the ctypes test covers the kernel")
    x, qw, s, mn = _case(dtype, bits, m, n, k, gs, device="cuda")
    y = torch.ops.icml26.quant_gemm(x, qw, s, mn, bits, gs, -1)
    _assert_close(y, x, qw, s, mn, bits, gs)
    _assert_close(ops.quant_gemm(x, qw, s, mn, bits, gs), x, qw, s, mn, bits, gs)


@pytest.fixture(scope="module")
def ctypes_lib(tmp_path_factory):
    _nvcc()
    major, minor = torch.cuda.get_device_capability()
    return quant_cuda.load_ctypes_lib(quant_cuda.build_ctypes_lib(f"{major}{minor}", tmp_path_factory.mktemp("lib")))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype,bits,m,n,k,gs", GPU_CASES)
def test_gpu_ctypes_route_matches_ref(ctypes_lib, dtype, bits, m, n, k, gs):
    x, qw, s, mn = _case(dtype, bits, m, n, k, gs, device="cuda")
    st = torch.cuda.Stream()
    with torch.cuda.stream(st):  # the launcher runs on torch's current stream
        y = quant_cuda.ctypes_gemm(ctypes_lib, x, qw, s, mn, bits, gs)
    st.synchronize()
    _assert_close(y, x, qw, s, mn, bits, gs)


IACT_GPU_CASES = [
    (bits, ab, m, n, k, gs)
    for bits in (4, 8)
    for ab in (8, 16)
    for (m, n, k, gs) in ((1, 576, 576, 576), (1, 1536, 576, 64), (3, 577, 1536, 128), (1, 49152, 576, 576))
]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("bits,act_bits,m,n,k,gs", IACT_GPU_CASES)
def test_gpu_integer_activation_op_matches_ref(ctypes_lib, bits, act_bits, m, n, k, gs):
    x, qw, s, mn = _case(torch.float32, bits, m, n, k, gs, device="cuda")
    want = ref.quant_gemm_i8act(x.cpu(), qw.cpu(), s.cpu(), mn.cpu(), gs, bits, act_bits)
    outs = [quant_cuda.ctypes_gemm_i8act(ctypes_lib, x, qw, s, mn, gs, bits, act_bits)]
    if quant_cuda.backend() == "ext-cuda":
        outs.append(torch.ops.icml26.quant_gemm_i8act(x, qw, s, mn, gs, -1, bits, act_bits))
    outs.append(ops.quant_gemm_i8act(x, qw, s, mn, gs, bits=bits, act_bits=act_bits))
    for y in outs:
        assert (y.cpu() - want).abs().max().item() <= 1e-5 * want.abs().max().item()


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("bits,gs", [(4, 64), (4, 0), (8, 0)])
def test_gpu_packed_linear_matches_cpu(bits, gs):
    from icml26.methods.quantization import pack
    from icml26.methods.quantization.qmodel import QSpec

    k, n = 576, 1536
    g = torch.Generator().manual_seed(1)
    gsz = gs or k
    codes = torch.randint(0, 2**bits, (n, k), dtype=torch.uint8, generator=g)
    t = {
        "qweight": ref.pack_int4(codes) if bits == 4 else codes,
        "scales": (torch.rand(n, k // gsz, generator=g) * 0.02).half(),
        "zeros": torch.randint(0, 2**bits, (n, k // gsz), generator=g).to(torch.uint8),
    }
    cpu = pack.PackedLinear(t, k, bits, QSpec(wbits=bits, group_size=gs))
    cpu.int_act = 0  # exact fp32 activations on CPU, as on CUDA
    dev = pack.PackedLinear(t, k, bits, QSpec(wbits=bits, group_size=gs)).to("cuda")
    for rows in (1, 4, 40):  # decode GEMV, small-M kernel, dequantize + cuBLAS
        x = torch.randn(1, rows, k, generator=g)
        want = cpu(x)
        got = dev(x.cuda()).cpu()
        assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
