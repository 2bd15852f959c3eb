"""Speech pieces of icml26 mamoe: WER, k-means units, Griffin-Lim, pocketsphinx on real LibriVox speech."""

import numpy as np
import pytest

from conftest import need
from icml26.methods.speech import units as U
from icml26.methods.speech import vocoder as V
from icml26.methods.speech import wer as W


def test_edit_distance_hand_computed():
    assert W.edit_distance("kitten", "sitting") == 3  # k->s, e->i, +g
    assert W.edit_distance([], ["a", "b"]) == 2
    assert W.edit_distance(["a", "b", "c"], []) == 3
    assert W.edit_distance("flaw", "lawn") == 2


def test_wer_hand_computed():
    # one substitution (sat -> sit) and one deletion (the): 2 / 6
    assert W.wer(["the cat sat on the mat"], ["the cat sit on mat"]) == pytest.approx(2 / 6)
    # one insertion: 1 / 2
    assert W.wer(["a b"], ["a x b"]) == pytest.approx(0.5)
    # corpus level: (2 + 1) / (6 + 2), normalization ignores case and punctuation
    assert W.wer(["The cat sat on the mat.", "a b"], ["the cat sit on mat", "A, x b!"]) == pytest.approx(3 / 8)
    assert W.wer(["don't stop"], ["dont stop"]) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        W.wer(["a"], [])
    assert W.unit_error_rate([[1, 2, 3]], [[1, 3]]) == pytest.approx(1 / 3)


def test_kmeans_deterministic_per_seed_and_recovers_clusters():
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 10, (5, 3))
    x = np.concatenate([c + rng.normal(0, 0.3, (200, 3)) for c in centers])
    a = U.kmeans(x, 5, seed=1)
    b = U.kmeans(x, 5, seed=1)
    assert np.array_equal(a, b)
    lab = U.assign(x, a)
    for i in range(5):  # each true cluster maps to one unit
        assert np.bincount(lab[i * 200 : (i + 1) * 200]).max() == 200
    assert len(set(lab.tolist())) == 5
    with pytest.raises(ValueError):
        U.kmeans(x[:3], 5)


def test_dedup():
    assert U.dedup([3, 3, 5, 5, 5, 3]) == [3, 5, 3]
    assert U.dedup([]) == []


def test_units_of_real_speech_deterministic_per_seed():
    from icml26.core.data import speech as S

    need(lambda: S.espeak_binary() is not None, f"needs espeak-ng: {S.ESPEAK_INSTALL}")
    waves = [
        S.synthesize(t, voice=v) for t, v in (("a range of mental vision", "en-us"), ("a flawless gemstone", "en-gb"))
    ]
    c1 = U.UnitCodec.fit(waves, 16, seed=3)
    c2 = U.UnitCodec.fit(waves, 16, seed=3)
    c3 = U.UnitCodec.fit(waves, 16, seed=4)
    assert np.array_equal(c1.centroids, c2.centroids)
    assert np.array_equal(c1.encode(waves[0]), c2.encode(waves[0]))
    assert not np.array_equal(c1.centroids, c3.centroids)
    u = c1.encode(waves[0])
    assert u.shape[0] == 1 + len(waves[0]) // U.HOP  # 25 Hz frames
    assert len(set(u.tolist())) > 4


def test_griffin_lim_reaches_the_target_magnitude():
    import torch

    t = np.arange(16000) / 16000
    x = (0.5 * np.sin(2 * np.pi * 440 * t) + 0.3 * np.sin(2 * np.pi * 1250 * t)).astype(np.float32)
    win = torch.hann_window(V.N_FFT)
    mag = torch.stft(torch.from_numpy(x), V.N_FFT, hop_length=V.HOP_OUT, window=win, return_complex=True).abs()

    def sc(iters):  # spectral convergence of the rebuilt waveform
        y = V.griffin_lim(mag.numpy(), iters=iters)
        got = torch.stft(torch.from_numpy(y), V.N_FFT, hop_length=V.HOP_OUT, window=win, return_complex=True).abs()
        n = min(got.shape[1], mag.shape[1])
        g, m = got[:, 2 : n - 2], mag[:, 2 : n - 2]
        g = g * (m.norm() / g.norm())  # the output is peak-normalized
        return float((g - m).norm() / m.norm())

    random_phase, gl = sc(0), sc(48)
    assert gl < 0.1 and gl < 0.3 * random_phase, (gl, random_phase)
    # the mel pseudo-inverse keeps the mel energy of a frame
    lm = U.frame_features(x)
    back = V.mel_to_magnitude(lm)
    assert back.shape == (V.N_FFT // 2 + 1, lm.shape[0]) and (back >= 0).all()


def test_pocketsphinx_recognizes_real_librivox_speech():
    from icml26.core.data import speech as S

    need(W.pocketsphinx_available, f"needs pocketsphinx: {W.PSPHINX_INSTALL}")
    need(lambda: S.pocketsphinx_sdist() is not None, S.librivox_missing_message())
    c = [c for c in S.librivox_clips() if c.id.endswith("0930")][0]  # "he might even have been made amiable himself"
    assert W.wer([c.transcript], [W.recognize(c.audio)]) < 0.35


def test_closed_vocabulary_keeps_sentences_of_the_most_frequent_words():
    from icml26.methods.speech.train import closed_vocabulary

    sents = ["a b c", "a b", "b d", "a e", "c a b"]  # counts: a 4, b 4, c 2, d 1, e 1
    assert closed_vocabulary(sents, 2) == ["a b"]
    assert closed_vocabulary(sents, 3) == ["a b c", "a b", "c a b"]
    assert closed_vocabulary(sents, 4) == ["a b c", "a b", "b d", "c a b"]  # d before e: first appearance
    assert closed_vocabulary(sents, 0) == sents
