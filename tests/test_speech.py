"""icml26.core.data.speech: espeak-ng synthesis, resampling, log-mel / MFCC against oracles, LibriVox clips."""

import numpy as np
import pytest
import torch

from conftest import need
from icml26.core.data import speech
from icml26.core.errors import InputError, MissingDataError


def _need_espeak():
    need(lambda: speech.espeak_binary() is not None, f"needs espeak-ng: {speech.ESPEAK_INSTALL}")


def test_synthesis_voices_speed_and_pitch():
    _need_espeak()
    slow = speech.synthesize("seven", voice="en-us", speed_wpm=110, pitch=30)
    fast = speech.synthesize("seven", voice="en-us", speed_wpm=220, pitch=30)
    other = speech.synthesize("seven", voice="en-gb", variant="f3", speed_wpm=110, pitch=70)
    assert slow.dtype == np.float32 and 0.2 * 16000 < slow.shape[0] < 2.0 * 16000
    assert fast.shape[0] < 0.8 * slow.shape[0]  # twice the speed: clearly shorter
    assert np.abs(slow).max() <= 1.0 and np.abs(slow).max() > 0.05
    n = min(slow.shape[0], other.shape[0])
    assert not np.allclose(slow[:n], other[:n])
    assert "en-us" in speech.espeak_voices() and not any(v == "variant" for v in speech.espeak_voices())
    with pytest.raises(InputError, match="voice"):
        speech.synthesize("seven", voice="xx-nonexistent")
    with pytest.raises(InputError, match="speed_wpm"):
        speech.synthesize("seven", speed_wpm=10)


def test_missing_espeak_names_the_install_command(monkeypatch):
    monkeypatch.setattr(speech.shutil, "which", lambda name: None)
    with pytest.raises(MissingDataError, match="apt-get install -y espeak-ng"):
        speech.synthesize("one")


def test_resample_keeps_a_tone_and_the_duration():
    sr_in = 22050
    t = np.arange(sr_in) / sr_in
    x = np.sin(2 * np.pi * 440.0 * t).astype(np.float32)
    y = speech.resample(x, sr_in, 16000)
    assert y.shape[0] == 16000
    f = np.fft.rfftfreq(16000, 1 / 16000)[np.argmax(np.abs(np.fft.rfft(y)))]
    assert abs(f - 440.0) <= 1.0
    ref = np.sin(2 * np.pi * 440.0 * np.arange(16000) / 16000)
    assert np.abs(y[200:-200] - ref[200:-200]).max() < 0.02


def test_mel_filterbank_and_log_mel_peak_at_the_tone():
    fb = speech.mel_filterbank(40, 400, 16000)
    assert fb.shape == (40, 201) and fb.max() == pytest.approx(1.0, abs=0.05)
    assert speech.hz_to_mel(700.0) == pytest.approx(2595 * np.log10(2))
    assert speech.mel_to_hz(speech.hz_to_mel(1234.5)) == pytest.approx(1234.5)
    x = np.sin(2 * np.pi * 1000.0 * np.arange(16000) / 16000).astype(np.float32)
    lm = speech.log_mel(x, n_fft=400, hop=160, n_mels=40)
    assert lm.shape == (40, 101)
    centres = speech.mel_to_hz(np.linspace(speech.hz_to_mel(0), speech.hz_to_mel(8000), 42)[1:-1])
    assert int(lm[:, 50].argmax()) == int(np.argmin(np.abs(centres - 1000.0)))
    # oracle: the same power spectrum by numpy's FFT of a Hann-windowed frame
    frame = x[50 * 160 - 200 : 50 * 160 + 200] * np.hanning(401)[:-1]
    p = np.abs(np.fft.rfft(frame)) ** 2
    ref = np.log(fb @ p + 1e-6)
    torch.testing.assert_close(lm[:, 50], torch.from_numpy(ref.astype(np.float32)), rtol=1e-3, atol=2e-3)
    mf = speech.mfcc(x, n_mfcc=13)
    assert mf.shape == (13, 101)
    assert float(mf[0, 50]) == pytest.approx(float(lm[:, 50].sum() / np.sqrt(40)), rel=1e-4)


def test_add_noise_hits_the_snr():
    rng = np.random.default_rng(0)
    x = np.sin(np.arange(16000) * 0.05).astype(np.float32)
    y = speech.add_noise(x, 5.0, rng)
    snr = 10 * np.log10(np.mean(x**2) / np.mean((y - x) ** 2))
    assert snr == pytest.approx(5.0, abs=0.05)


def test_wav_round_trip(tmp_path):
    x = (0.5 * np.sin(np.arange(800) * 0.1)).astype(np.float32)
    speech.write_wav(tmp_path / "a.wav", x, 16000)
    y, sr = speech.read_wav(tmp_path / "a.wav")
    assert sr == 16000 and np.abs(y - x).max() < 1e-4


def test_librivox_clips_from_the_pocketsphinx_sdist():
    need(lambda: speech.pocketsphinx_sdist() is not None, speech.librivox_missing_message())
    clips = speech.librivox_clips()
    assert len(clips) == 5
    total = sum(c.audio.shape[0] for c in clips) / 16000
    assert 20 < total < 30  # 24.7 s in all (DATA.md)
    assert all(c.sample_rate == 16000 and len(c.transcript.split()) > 5 for c in clips)
    assert clips[0].transcript.startswith("and mister john dashwood")
