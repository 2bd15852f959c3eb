"""Fuzz: filter-data's document reader (JSONL, gzip). Every line either yields a document
that the writer can write back, or is an InputError with one line (or, with skip_bad, a
counted bad line); never another exception (see tests/fuzz/_fuzz.py for the profiles)."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.fuzz._fuzz import NASTY_TEXT, fuzz_pair, one_line, parses_or_input_error, st, values

from icml26.core.errors import InputError
from icml26.methods.filtering import jsonl as J

JSON_FRAGMENTS = [
    '{"text": ',
    '"a"',
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '"\\ud83d\\ude00"',
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "1" * 5000,
    "[",
    "]",
    "{",
    "}",
    ", ",
    ": ",
    '"metadata": ',
    '"id": ',
    "null",
    "true",
    "\\",
    '"',
    "\n",
    "\r",
    "\x00",
    "\xff",
    "\u00e9",
    "\ufeff",
    " ",
]
LINES = st.one_of(
    st.lists(st.sampled_from(JSON_FRAGMENTS), max_size=12).map("".join),
    st.builds(
        lambda t, md, i: json.dumps({"text": t, "metadata": md, "id": i}, ensure_ascii=False),
        st.one_of(st.text(max_size=10), NASTY_TEXT, st.integers()),
        values(4),
        values(2),
    ),
    st.text(max_size=40),
    st.integers(1, 60).map(lambda n: "[" * n + "]" * n),
)


def _documents(tmp_dir, data: bytes, name: str, skip_bad: bool):
    p = tmp_dir / name
    p.write_bytes(data)
    stats = J.ReadStats()
    docs = [d for _, d in J.iter_documents(str(p), skip_bad=skip_bad, stats=stats)]
    out = tmp_dir / "out.jsonl"
    with J.DocumentWriter(str(out)) as w:  # what was read can be written back
        for d in docs:
            w.write(d)
    assert [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] == docs
    return docs, stats


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_jsonl")


def _lines_prop(tmp_dir, args):
    lines, skip_bad, gz = args
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    if gz:
        data = gzip.compress(data, mtime=0)
    parses_or_input_error(_documents, tmp_dir, data, "in.jsonl.gz" if gz else "in.jsonl", skip_bad)


test_jsonl_lines, test_jsonl_lines_slow = fuzz_pair(
    st.tuples(st.lists(LINES, max_size=5), st.booleans(), st.booleans())
)(_lines_prop)


def _bytes_prop(tmp_dir, args):
    data, skip_bad, cut = args
    gz = gzip.compress(b'{"text": "a"}\n' * 20, mtime=0)
    if cut is not None:  # a damaged gzip stream
        at, junk = cut
        data = gz[:at] + junk + gz[at + len(junk) :]
    parses_or_input_error(_documents, tmp_dir, data, "in.jsonl", skip_bad)


test_jsonl_bytes, test_jsonl_bytes_slow = fuzz_pair(
    st.tuples(
        st.binary(max_size=200),
        st.booleans(),
        st.one_of(st.none(), st.tuples(st.integers(0, 60), st.binary(min_size=1, max_size=30))),
    )
)(_bytes_prop)


@pytest.mark.parametrize(
    "line, msg",
    [
        (b"[" * 100_000, "not valid JSON (nested too deep)"),  # RecursionError
        (b'{"text": "a", "n": ' + b"1" * 5000 + b"}", "not valid JSON (Exceeds the limit (4300 digits)"),  # ValueError
        (b'{"text": "a", "metadata": {"x": NaN}}', "not valid JSON (NaN is not JSON)"),  # read, then the writer raised
        (b'{"text": "a", "metadata": {"x": 1e999}}', "not valid JSON (1e999 is beyond float range)"),
        (b'{"text": "a\\ud800"}', "lone surrogate"),  # read, then UnicodeEncodeError in the writer
    ],
)
def test_jsonl_regressions(tmp_dir, line, msg):
    with pytest.raises(InputError) as e:
        _documents(tmp_dir, line + b"\n", "in.jsonl", False)
    assert msg in one_line(e.value) and "in.jsonl:1:" in str(e.value)
    docs, stats = _documents(tmp_dir, line + b"\n" + b'{"text": "ok"}\n', "in.jsonl", True)
    assert docs == [{"text": "ok"}] and stats.bad == 1


def test_jsonl_surrogate_pair_is_text(tmp_dir):
    docs, _ = _documents(tmp_dir, b'{"text": "\\ud83d\\ude00"}\n', "in.jsonl", False)
    assert docs == [{"text": "\U0001f600"}]


def test_corrupt_gzip_stream_is_an_input_error(tmp_dir):
    """A damaged deflate block raised zlib.error (not an OSError) from the reader."""
    gz = gzip.compress(b'{"text": "a"}\n' * 100, mtime=0)
    with pytest.raises(InputError) as e:
        _documents(tmp_dir, gz[:10] + b"\xff" * 50 + gz[60:], "in.jsonl.gz", False)
    assert "cannot read compressed input" in one_line(e.value)


def test_writer_refuses_nan_from_parquet_metadata(tmp_path):
    """A document from a parquet file can hold NaN; the writer says so (InputError) and leaves nothing."""
    out = tmp_path / "out.jsonl"
    with pytest.raises(InputError, match="holds NaN or infinity"):
        with J.DocumentWriter(str(out)) as w:
            w.write({"text": "a", "id": "d1", "metadata": {"score": float("nan")}})
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_writer_escapes_unicode_line_separators(tmp_dir):
    """U+0085 / U+2028 / U+2029 inside a text stay inside its line for readers that split on them."""
    doc = {"text": "a\x85b\u2028c\u2029d", "id": 1}
    line = J.dumps(doc)
    assert len(line.splitlines()) == 1 and json.loads(line) == doc
    docs, _ = _documents(tmp_dir, (line + "\n").encode("utf-8"), "sep.jsonl", False)
    assert docs == [doc]
