"""PLY point files for ``icml26 hdr-gs``: read the vertex positions of a point cloud (COLMAP /
3DGS ``points3D.ply``, ascii or binary) and write trained Gaussians in the INRIA 3DGS layout
(graphdeco-inria/gaussian-splatting ``GaussianModel.save_ply``): float32 x, y, z, nx, ny, nz,
f_dc_0..2, f_rest_0..(3 ((deg + 1)^2 - 1) - 1), opacity (logit), scale_0..2 (log),
rot_0..3 (w, x, y, z quaternion), binary little endian, which 3DGS viewers open."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml26.core.errors import InputError
from icml26.core.output import atomic_write_bytes

_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2", "ushort": "u2",
    "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4", "float": "f4", "float32": "f4",
    "double": "f8", "float64": "f8",
}  # fmt: skip


def read_vertices(path: str | Path) -> dict[str, np.ndarray]:
    """The vertex element's scalar properties of a PLY file (the first element must be
    ``vertex``): {name: (N,) array}; InputError on anything else."""
    p = Path(path)
    b = p.read_bytes()
    end = b.find(b"end_header")
    if not b.startswith(b"ply") or end < 0:
        raise InputError(f"{str(p)!r} is not a PLY file")
    body = b[b.index(b"\n", end) + 1 :]
    fmt, n, props, element = None, None, [], None
    for line in b[:end].decode("ascii", "replace").splitlines()[1:]:
        w = line.split()
        if not w or w[0] in ("comment", "obj_info"):
            continue
        if w[0] == "format":
            fmt = w[1]
        elif w[0] == "element":
            if element == "vertex":
                break  # later elements (faces) are not read
            element, n = w[1], int(w[2])
            if element != "vertex":
                raise InputError(f"PLY {str(p)!r}: the first element is {element!r}, not vertex")
        elif w[0] == "property" and element == "vertex":
            if w[1] == "list" or w[1] not in _TYPES:
                raise InputError(f"PLY {str(p)!r}: vertex property {' '.join(w[1:])!r} is not supported")
            props.append((w[2], _TYPES[w[1]]))
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian") or n is None or not props:
        raise InputError(f"PLY {str(p)!r}: no vertex element in a known format ({fmt})")
    if fmt == "ascii":
        rows = body.decode("ascii", "replace").split("\n")[:n]
        a = np.array([r.split()[: len(props)] for r in rows], dtype=np.float64)
        if a.shape != (n, len(props)):
            raise InputError(f"PLY {str(p)!r}: {a.shape[0]} vertex rows, header says {n}")
        return {name: a[:, k] for k, (name, _) in enumerate(props)}
    dt = np.dtype([(name, ("<" if fmt == "binary_little_endian" else ">") + t) for name, t in props])
    if len(body) < n * dt.itemsize:
        raise InputError(f"PLY {str(p)!r}: truncated ({len(body)} bytes for {n} vertices)")
    a = np.frombuffer(body, dtype=dt, count=n)
    return {name: a[name].astype(np.float64) for name, _ in props}


def write_gaussians(path: str | Path, means, log_scales, quats, logit_opacity, f_dc, f_rest=None) -> Path:
    """Write Gaussians in the INRIA 3DGS layout (module docstring). f_dc: (N, 3) SH DC colour
    coefficients; f_rest: (N, 3, K) higher-order SH (K = 0 when None); normals are zero, as 3DGS
    writes them. Atomic."""
    means = np.asarray(means, np.float32)
    n = means.shape[0]
    f_rest = np.zeros((n, 3, 0), np.float32) if f_rest is None else np.asarray(f_rest, np.float32)
    cols = {"x": means[:, 0], "y": means[:, 1], "z": means[:, 2]}
    cols.update({k: np.zeros(n, np.float32) for k in ("nx", "ny", "nz")})
    cols.update({f"f_dc_{i}": np.asarray(f_dc, np.float32)[:, i] for i in range(3)})
    flat = f_rest.reshape(n, -1)  # channel-major, as 3DGS's transpose(1, 2).flatten(1)
    cols.update({f"f_rest_{i}": flat[:, i] for i in range(flat.shape[1])})
    cols["opacity"] = np.asarray(logit_opacity, np.float32).reshape(n)
    cols.update({f"scale_{i}": np.asarray(log_scales, np.float32)[:, i] for i in range(3)})
    cols.update({f"rot_{i}": np.asarray(quats, np.float32)[:, i] for i in range(4)})
    dt = np.dtype([(k, "<f4") for k in cols])
    rec = np.empty(n, dtype=dt)
    for k, v in cols.items():
        rec[k] = v
    head = "ply\nformat binary_little_endian 1.0\n" + f"element vertex {n}\n"
    head += "".join(f"property float {k}\n" for k in cols) + "end_header\n"
    return atomic_write_bytes(Path(path), head.encode("ascii") + rec.tobytes())
