"""``av-digits`` robustness variants: the distribution-shift audio is spoken only by voices held out of
training, the LibriVox background is mixed at the stated SNR (a real LibriVox segment, found back by
cross-correlation), a build made without the LibriVox clips is keyed apart (never reused once they are
installed) and an older build is never silently reused; tests needing the clips skip with the pip command."""

import json

import numpy as np
import pytest

from conftest import need, need_mnist
from icml26.core.data import multimodal as mm
from icml26.core.data import speech
from icml26.core.errors import InputError, MissingDataError

TINY = dict(train_size=40, test_size=20, clips_per_class=2)


def _need_espeak():
    need(lambda: speech.espeak_binary() is not None, f"needs espeak-ng: {speech.ESPEAK_INSTALL}")


def _need_librivox():
    need(lambda: speech.pocketsphinx_sdist() is not None, speech.librivox_missing_message())


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory):
    need_mnist()
    _need_espeak()
    spec = mm.AVDigitsSpec(seed=3, **TINY)
    return spec, mm.build_av_digits(tmp_path_factory.mktemp("avd") / "set", spec)


def test_shift_voices_are_installed_and_disjoint_from_training():
    _need_espeak()
    installed = set(speech.espeak_voices())
    assert set(mm.SHIFT_VOICES) <= installed and set(mm.TRAIN_VOICES) <= installed
    assert not set(mm.SHIFT_VOICES) & set(mm.TRAIN_VOICES)


@pytest.mark.slow  # a real (tiny) build: MNIST, espeak-ng, LibriVox; about 15 s idle, 50 s at load 8
def test_held_out_voices_never_appear_in_training(tiny_build):
    spec, d = tiny_build
    z = np.load(d / "audio.npz", allow_pickle=False)
    train, test, shift = set(z["voice_train"]), set(z["voice_test"]), set(z["voice_test_shift"])
    assert len(z["voice_train"]) == spec.train_size and len(z["voice_test_shift"]) == spec.test_size
    assert train <= set(mm.TRAIN_VOICES) and test <= set(mm.TRAIN_VOICES)
    assert shift <= set(mm.SHIFT_VOICES) and len(shift) >= 2  # several held-out voices, none heard in training
    assert not shift & train
    assert z["x_test_shift"].shape == z["x_test"].shape
    assert not np.allclose(z["x_test_shift"], z["x_test"])
    ms = mm.load_folder(d, ("image", "audio", "text"))
    assert np.array_equal(ms.y_test, z["y_test"])  # the same test samples (labels), spoken by other voices
    assert "shift" in ms.test_variants["audio"]
    stamp = json.loads((d / "spec.json").read_text())
    assert stamp["version"] == mm.AV_VERSION and stamp["librivox_noise"] == (speech.pocketsphinx_sdist() is not None)
    if speech.pocketsphinx_sdist() is not None:
        assert ms.test_variants["audio"]["librivox_noise"].shape == ms.test["audio"].shape


def test_librivox_background_is_mixed_at_the_stated_snr():
    _need_espeak()
    _need_librivox()
    from scipy.signal import correlate

    background = speech.babble()
    pool = [[("en-us", speech.synthesize(w, voice="en-us"))] for w in ("zero", "one")]
    labels = np.array([0, 1, 1, 0, 1, 0])
    spec = mm.AVDigitsSpec()
    for snr in (spec.librivox_snr_db, -3.0):
        noisy, clean, voices = mm.audio_waves(
            labels, pool, spec, np.random.default_rng(1), background=background, snr=snr
        )
        resid = (noisy - clean).astype(np.float64)
        got = 10 * np.log10(np.mean(clean.astype(np.float64) ** 2, 1) / np.mean(resid**2, 1))
        np.testing.assert_allclose(got, snr, atol=0.02)
        assert list(voices) == ["en-us"] * len(labels)
        for r in resid[:2]:  # the noise is a contiguous segment of the real recording (normalised correlation ~ 1)
            c = correlate(background.astype(np.float64), r, mode="valid", method="fft")
            k = int(np.argmax(c))
            seg = background[k : k + r.shape[0]].astype(np.float64)
            assert c[k] / (np.linalg.norm(seg) * np.linalg.norm(r)) > 0.999


def test_white_noise_snr_in_the_documented_range():
    rng = np.random.default_rng(0)
    tone = (0.4 * np.sin(np.arange(12000) * 0.07)).astype(np.float32)
    spec = mm.AVDigitsSpec()
    noisy, clean, _ = mm.audio_waves(np.zeros(20, dtype=int), [[("en-us", tone)]], spec, rng)
    snr = 10 * np.log10(np.mean(clean.astype(np.float64) ** 2, 1) / np.mean((noisy - clean).astype(np.float64) ** 2, 1))
    assert snr.min() >= spec.snr_db_low - 0.1 and snr.max() <= spec.snr_db_high + 0.1
    assert snr.max() - snr.min() > 3  # drawn per sample, not one fixed level


def test_missing_librivox_keys_the_build_apart_and_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(speech, "pocketsphinx_sdist", lambda: None)
    name = mm.av_digits_dir(mm.AVDigitsSpec()).name
    assert name == f"{mm.AV_VERSION}-seed0-nolibrivox"
    assert mm.build_stamp(mm.AVDigitsSpec())["librivox_noise"] is False
    with pytest.raises(MissingDataError, match="pip download --no-binary pocketsphinx --no-deps pocketsphinx==5.1.1"):
        speech.librivox_clips()


def test_an_older_build_is_not_reused(tmp_path):
    """A folder holding a build of the previous format (spec.json without the version) is refused, not reused."""
    from dataclasses import asdict

    assert mm.AV_VERSION != "v1" and mm.av_digits_dir().name.startswith(f"{mm.AV_VERSION}-seed0")
    old = asdict(mm.AVDigitsSpec())
    (tmp_path / "spec.json").write_text(json.dumps(old))
    with pytest.raises(InputError, match="other settings"):
        mm.build_av_digits(tmp_path, mm.AVDigitsSpec())
