"""CUDA path of the packed INT4 / INT8 GEMV / small-M GEMM (``icml26/csrc/cuda/quant_cuda.cu``).

Same packed layout, same per-group fp32 scales and offsets as the CPU kernel
(``icml26/csrc/cpu/quant_cpu.cpp``); the pure-torch twin ``icml26/ops/_ref/quant.py`` is the
oracle. ``icml26.ops.quant.quant_gemm`` / ``quant_linear`` come here for CUDA tensors, so a
``PackedLinear`` whose buffers live on a GPU runs this kernel (``model.to("cuda")``).

How the kernel is reached (resolved once, on first use, see ``backend()``):

1. ``"ext-cuda"``: the file is JIT-built as a torch extension (``icml26/core/ext.py``,
   ``torch.utils.cpp_extension`` with nvcc) that adds a CUDA kernel to the existing op
   ``torch.ops.icml26.quant_gemm`` (``TORCH_LIBRARY_IMPL(icml26, CUDA)``);
2. ``"ctypes-cuda"``: if that build fails (no ninja, nvcc of another CUDA major version than
   torch's, ...), the kernel and its C launcher alone are built with nvcc into a shared library
   and called through ctypes with ``data_ptr()`` and the current stream;
3. ``"ref"``: dequantize + matmul with torch on the GPU (one warning says why);
   ``"no-cuda"`` on machines without a CUDA build of torch or without a device.

``ICML26_CUDA_ROUTE=torch|ctypes`` restricts step 1/2 (tests use it); ``ICML26_FORCE_REF=1``
forces the reference. Activations may be float32, float16 or bfloat16 (output in the same
dtype; fp32 accumulation). ``quant_gemm_i8act`` (activations quantized per 64-block to INT8 or
15-bit codes inside the op, integer dot products) has a CUDA kernel too (both routes).
``quant_linear`` on CUDA uses the kernel up to ``GEMM_MAX_ROWS`` rows and dequantize + cuBLAS above;
its ``int_act`` option (the CPU's integer activations) is not used on CUDA: activations stay exact.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import torch
from torch import Tensor

from icml26.core import ext
from icml26.ops._ref import quant as _ref

SOURCE = "cuda/quant_cuda.cu"  # relative to icml26/csrc
ABI = 2
GEMM_MAX_ROWS = 16  # kernel up to this many rows (decode GEMV, small-M prefill); dequantize + cuBLAS above
# the flags torch.utils.cpp_extension gives nvcc (half/bf16 operators off): the kernel builds with them
NVCC_COMMON_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]
_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

_lock = threading.Lock()
_state: dict = {}


def source_path() -> Path:
    return ext.CSRC / SOURCE


def nvcc() -> str | None:
    """Path of nvcc: $CUDA_HOME/bin, $CUDA_PATH/bin, PATH, /usr/local/cuda/bin (None if absent)."""
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if base and Path(base, "bin", "nvcc").is_file():
            return str(Path(base, "bin", "nvcc"))
    found = shutil.which("nvcc")
    if found:
        return found
    return "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None


def supported(bits: int, group_size: int, k: int) -> bool:
    """Shapes the CUDA kernel takes (others go to the reference path)."""
    if bits == 4:
        return k % 64 == 0 and group_size % 64 == 0
    return bits == 8 and k % 16 == 0 and group_size % 16 == 0


# ----------------------------------------------------------------------------- ctypes route
def build_ctypes_lib(arch: str, out_dir: str | Path | None = None) -> Path:
    """nvcc-build the kernel + C launcher (no torch) for ``sm_<arch>`` (e.g. "90") into a shared
    library (cached by source hash, flags and nvcc version); returns its path. Works without a GPU."""
    exe = nvcc()
    if exe is None:
        raise RuntimeError("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    flags = [
        "-O3",
        "-std=c++17",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-DICML26_CUDA_NO_TORCH",
        *NVCC_COMMON_FLAGS,
        f"-gencode=arch=compute_{arch},code=[sm_{arch},compute_{arch}]",
    ]
    src = source_path()
    h = hashlib.sha256(src.read_bytes())
    h.update(" ".join(flags).encode())
    h.update(subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout.encode())
    base = Path(out_dir) if out_dir is not None else ext.cache_dir()
    lib = base / f"quant_cuda_ctypes-{h.hexdigest()[:16]}" / "libicml26_quant_cuda.so"
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=lib.parent)
    os.close(fd)
    try:
        r = subprocess.run([exe, *flags, str(src), "-o", tmp], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


def load_ctypes_lib(path: str | Path) -> ctypes.CDLL:
    """Load the library built by ``build_ctypes_lib`` and declare its C signatures."""
    lib = ctypes.CDLL(str(path))
    lib.icml26_quant_cuda_abi.restype = ctypes.c_int
    lib.icml26_quant_cuda_abi.argtypes = []
    i64, vp = ctypes.c_int64, ctypes.c_void_p
    lib.icml26_quant_gemm_cuda.restype = ctypes.c_int
    lib.icml26_quant_gemm_cuda.argtypes = [ctypes.c_int, vp, vp, vp, vp, vp, i64, i64, i64, i64, i64, vp]
    lib.icml26_quant_i8act_workspace_bytes.restype = i64
    lib.icml26_quant_i8act_workspace_bytes.argtypes = [i64, i64, i64]
    lib.icml26_quant_gemm_i8act_cuda.restype = ctypes.c_int
    lib.icml26_quant_gemm_i8act_cuda.argtypes = [vp, vp, vp, vp, vp, vp, i64, i64, i64, i64, i64, i64, vp]
    if lib.icml26_quant_cuda_abi() != ABI:
        raise RuntimeError(f"{path}: ABI {lib.icml26_quant_cuda_abi()} != {ABI}")
    return lib


def _aligned(t: Tensor) -> Tensor:
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _check_launch(x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, bits: int) -> None:
    """The ctypes route hands raw pointers to the kernel, so check what the torch route's TORCH_CHECKs
    check: one CUDA device, x (M, K), packed uint8 weights of K * bits / 8 bytes per row, one scale row
    and one min row per output. Raises ValueError."""
    dev = x.device
    if dev.type != "cuda" or any(t.device != dev for t in (qweight, scales, mins)):
        raise ValueError(
            f"quant_gemm (CUDA): all tensors must be on one CUDA device, got x on {dev}, qweight on {qweight.device}, "
            f"scales on {scales.device}, mins on {mins.device}"
        )
    if x.dim() != 2 or qweight.dim() != 2 or qweight.dtype != torch.uint8:
        raise ValueError(
            f"quant_gemm (CUDA): expected x (M, K) and uint8 qweight (N, K*bits/8), got {tuple(x.shape)} and "
            f"{qweight.dtype} {tuple(qweight.shape)}"
        )
    if (
        qweight.shape[1] * 8 != x.shape[1] * bits
        or scales.shape[0] != qweight.shape[0]
        or mins.shape[0] != qweight.shape[0]
    ):
        raise ValueError(
            f"quant_gemm (CUDA): shapes do not match: x {tuple(x.shape)}, qweight {tuple(qweight.shape)} at "
            f"{bits} bits, "
            f"scales {tuple(scales.shape)}, mins {tuple(mins.shape)}"
        )


def ctypes_gemm(
    lib: ctypes.CDLL, x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, bits: int, group_size: int
) -> Tensor:
    """y = x @ W^T through the ctypes launcher; tensors contiguous on one CUDA device (ValueError otherwise)."""
    _check_launch(x, qweight, scales, mins, bits)
    m, k = x.shape
    n = qweight.shape[0]
    x, qweight = _aligned(x), _aligned(qweight)
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    with torch.cuda.device(x.device):
        stream = torch.cuda.current_stream(x.device).cuda_stream
        err = lib.icml26_quant_gemm_cuda(
            _DTYPES[x.dtype],
            x.data_ptr(),
            qweight.data_ptr(),
            scales.data_ptr(),
            mins.data_ptr(),
            y.data_ptr(),
            m,
            n,
            k,
            bits,
            group_size,
            stream,
        )
    if err != 0:
        raise RuntimeError(
            f"icml26 quant_gemm CUDA launch failed: {'unsupported shape' if err < 0 else f'cudaError {err}'}"
        )
    return y


def ctypes_gemm_i8act(
    lib: ctypes.CDLL,
    x: Tensor,
    qweight: Tensor,
    scales: Tensor,
    mins: Tensor,
    group_size: int,
    bits: int,
    act_bits: int,
) -> Tensor:
    """``quant_gemm_i8act`` through the ctypes launcher; x float32 (M, K), tensors contiguous on one CUDA device "
    "(ValueError otherwise)."""
    _check_launch(x, qweight, scales, mins, bits)
    m, k = x.shape
    n = qweight.shape[0]
    qweight = _aligned(qweight)
    y = torch.empty(m, n, dtype=torch.float32, device=x.device)
    work = torch.empty(int(lib.icml26_quant_i8act_workspace_bytes(m, k, act_bits)), dtype=torch.uint8, device=x.device)
    with torch.cuda.device(x.device):
        stream = torch.cuda.current_stream(x.device).cuda_stream
        err = lib.icml26_quant_gemm_i8act_cuda(
            x.data_ptr(),
            qweight.data_ptr(),
            scales.data_ptr(),
            mins.data_ptr(),
            y.data_ptr(),
            work.data_ptr(),
            m,
            n,
            k,
            bits,
            group_size,
            act_bits,
            stream,
        )
    if err != 0:
        raise RuntimeError(
            f"icml26 quant_gemm_i8act CUDA launch failed: {'unsupported shape' if err < 0 else f'cudaError {err}'}"
        )
    return y


# ----------------------------------------------------------------------------- resolution
def _resolve() -> str:
    if ext.force_ref():
        _state["why"] = "ICML26_FORCE_REF=1"
        return "ref"
    if torch.version.cuda is None:
        _state["why"] = "torch is a CPU-only build"
        return "no-cuda"
    if not torch.cuda.is_available():
        _state["why"] = "no CUDA device"
        return "no-cuda"
    route = os.environ.get("ICML26_CUDA_ROUTE", "auto")
    why = []
    major, minor = torch.cuda.get_device_capability()
    if route in ("auto", "torch"):
        from icml26.ops import quant as cpu_ops

        if cpu_ops.backend() == "ref":  # the op schema lives in the CPU extension
            why.append("torch route: the CPU extension (op schema) is unavailable")
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                b = ext.load("quant_cuda_torch", [SOURCE], extra_cflags=[f"-DICML26_CUDA_SM={major}{minor}"], cuda=True)
            if b == "ext-cuda" and torch._C._dispatch_has_kernel_for_dispatch_key("icml26::quant_gemm", "CUDA"):
                return "ext-cuda"
            why.append(f"torch route: {ext.why('quant_cuda_torch') or 'no CUDA kernel registered'}")
    if route in ("auto", "ctypes"):
        try:
            _state["lib"] = load_ctypes_lib(build_ctypes_lib(f"{major}{minor}"))
            if why:
                _state["why"] = "; ".join(why)
            return "ctypes-cuda"
        except Exception as e:  # noqa: BLE001
            why.append(f"ctypes route: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
    _state["why"] = "; ".join(why) or f"unknown ICML26_CUDA_ROUTE={route!r}"
    warnings.warn(
        f"icml26: the CUDA quant kernel is unavailable ({_state['why']}); using dequantize + matmul on the GPU",
        RuntimeWarning,
        stacklevel=3,
    )
    return "ref"


def backend() -> str:
    """'ext-cuda' | 'ctypes-cuda' | 'ref' | 'no-cuda' (see the module doc)."""
    with _lock:
        if "backend" not in _state:
            _state["backend"] = _resolve()
        return _state["backend"]


def why() -> str | None:
    return _state.get("why")


def reset() -> None:
    with _lock:
        _state.clear()
        ext.reset("quant_cuda_torch")


# ----------------------------------------------------------------------------- ops
def quant_gemm(x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, bits: int, group_size: int) -> Tensor:
    """y = x @ W^T for CUDA tensors (validated by ``icml26.ops.quant._check``); x (M, K) float32 /
    float16 / bfloat16 -> (M, N) of x's dtype."""
    if x.shape[0] == 0 or qweight.shape[0] == 0:  # before backend(): an empty call never triggers a build
        return x.new_zeros(x.shape[0], qweight.shape[0])
    b = backend()
    if supported(bits, group_size, x.shape[1]):
        if b == "ext-cuda":
            return torch.ops.icml26.quant_gemm(
                x.contiguous(), qweight.contiguous(), scales.contiguous(), mins.contiguous(), bits, group_size, -1
            )
        if b == "ctypes-cuda":
            return ctypes_gemm(
                _state["lib"],
                x.contiguous(),
                qweight.contiguous(),
                scales.contiguous(),
                mins.contiguous(),
                bits,
                group_size,
            )
    return _ref.quant_gemm(x.float(), qweight, scales, mins, bits, group_size).to(x.dtype)


def quant_gemm_i8act(
    x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, group_size: int, bits: int, act_bits: int
) -> Tensor:
    """The integer-activation op for CUDA tensors (validated by ``icml26.ops.quant``): x quantized per
    64-block to INT8 / 15-bit codes inside, integer dot products (dp4a / dp2a); output float32 cast to x's dtype."""
    if x.shape[0] == 0 or qweight.shape[0] == 0:
        return x.new_zeros(x.shape[0], qweight.shape[0])
    b = backend()
    xf = x.float().contiguous()
    if b == "ext-cuda":
        y = torch.ops.icml26.quant_gemm_i8act(
            xf, qweight.contiguous(), scales.contiguous(), mins.contiguous(), group_size, -1, bits, act_bits
        )
    elif b == "ctypes-cuda":
        y = ctypes_gemm_i8act(
            _state["lib"], xf, qweight.contiguous(), scales.contiguous(), mins.contiguous(), group_size, bits, act_bits
        )
    else:
        y = _ref.quant_gemm_i8act(xf, qweight, scales, mins, group_size, bits, act_bits)
    return y.to(x.dtype)


def linear(x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, bits: int, group_size: int) -> Tensor:
    """Linear layer on (..., K) CUDA input: the kernel for <= GEMM_MAX_ROWS rows, dequantize + cuBLAS otherwise."""
    shp = x.shape
    x2 = x.reshape(-1, shp[-1])
    if x2.dtype not in _DTYPES:
        x2 = x2.float()
    if x2.shape[0] <= GEMM_MAX_ROWS:
        y = quant_gemm(x2.contiguous(), qweight, scales, mins, bits, group_size)
    else:
        y = x2 @ _ref.dequant(qweight, scales, mins, bits, group_size).to(x2.dtype).T
    return y.reshape(*shp[:-1], y.shape[-1])
