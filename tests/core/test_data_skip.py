"""The skip helper of tests/conftest.py recognises each built-in data package's missing message."""

import conftest
from icml26.core.data import speech


def test_librivox_message_is_a_skip_reason_only_when_missing(monkeypatch):
    text = f"icml26: {speech.librivox_missing_message()}"
    monkeypatch.setattr(speech, "pocketsphinx_sdist", lambda: None)
    reason = conftest._missing_data_reason(text)
    assert reason is not None and reason.startswith("needs the LibriVox clips: `pip download --no-binary pocketsphinx")
    monkeypatch.setattr(speech, "pocketsphinx_sdist", lambda: "present.tar.gz")
    assert conftest._missing_data_reason(text) is None  # present here: a real failure, not a skip
    assert conftest._missing_data_reason("icml26: something else went wrong") is None
