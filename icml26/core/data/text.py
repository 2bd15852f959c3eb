"""Real text corpora from Debian packages (installed by ``make data``).

``load_corpus(name)`` returns a list of documents (str), deterministic order:
  python-docs  Python 3.11 reST documentation sources (one document per section-sized chunk)
  gcide        Webster 1913 dictionary entries
  wordnet      WordNet glosses
  kjv          King James Bible, one document per chapter
  fortunes     informal quotes and jokes (split on ``\\n%\\n``)
``read_text_file(path)`` reads a user's own UTF-8 text file.
"""

from __future__ import annotations

import gzip
import re
import subprocess
from functools import lru_cache
from pathlib import Path

from icml26.core.data import debian_path, require_debian
from icml26.core.errors import InputError

CORPORA = {
    "python-docs": "python3.11-doc",
    "gcide": "dict-gcide",
    "wordnet": "wordnet-base",
    "kjv": "bible-kjv",
    "fortunes": "fortunes",
}


def read_text_file(path: str | Path) -> str:
    p = Path(path).expanduser()
    if p.is_dir():
        raise InputError(f"{str(path)!r} is a directory, expected a file (a UTF-8 text file)")
    if not p.is_file():
        raise InputError(f"text file {str(path)!r} does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"text file {str(path)!r} is not UTF-8 (byte {e.start})") from None
    if not text.strip():
        raise InputError(f"text file {str(path)!r} is empty")
    return text


def _chunks(text: str, max_chars: int) -> list[str]:
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    out, cur = [], ""
    for p in paras:
        if cur and len(cur) + len(p) + 2 > max_chars:
            out.append(cur)
            cur = ""
        cur = f"{cur}\n\n{p}" if cur else p
    if cur:
        out.append(cur)
    return out


@lru_cache(maxsize=None)
def _load(name: str, max_chars: int) -> tuple[str, ...]:
    require_corpus(name)
    docs: list[str] = []
    if name == "python-docs":
        root = debian_path("/usr/share/doc/python3.11/html/_sources")
        for f in sorted(root.rglob("*.rst.txt")):
            docs.extend(_chunks(f.read_text(encoding="utf-8", errors="replace"), max_chars))
    elif name == "fortunes":
        root = debian_path("/usr/share/games/fortunes")
        for f in sorted(root.iterdir()):
            if f.is_file() and not f.suffix and not f.name.endswith(".dat"):
                raw = f.read_text(encoding="utf-8", errors="replace")
                docs.extend(d.strip() for d in raw.split("\n%\n") if d.strip())
    elif name == "wordnet":
        for pos in ("noun", "verb", "adj", "adv"):
            for line in (
                debian_path(f"/usr/share/wordnet/data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines()
            ):
                if line.startswith("  ") or "|" not in line:
                    continue
                gloss = line.split("|", 1)[1].strip()
                if gloss:
                    docs.append(gloss)
    elif name == "gcide":
        raw = gzip.open(debian_path("/usr/share/dictd/gcide.dict.dz"), "rt", encoding="utf-8", errors="replace").read()
        docs.extend(e.strip() for e in re.split(r"\n(?=\S)", raw) if len(e.strip()) > 40)
    elif name == "kjv":
        out = subprocess.run(
            [str(debian_path("/usr/bin/bible")), "-f", "gen1:1-rev22:21"], capture_output=True, text=True, check=True
        ).stdout
        chapters: dict[str, list[str]] = {}
        for line in out.splitlines():
            m = re.match(r"^([1-3]?[A-Za-z]+\d+):(\d+)\s+(.*)$", line.strip())
            if m:
                chapters.setdefault(m.group(1), []).append(m.group(3))
            elif chapters and line.strip():
                last = next(reversed(chapters))
                chapters[last][-1] += " " + line.strip()
        docs.extend(" ".join(v) for v in chapters.values())
    return tuple(docs)


def require_corpus(name: str) -> None:
    """Check that built-in corpus ``name`` can be read, without reading it: InputError for an
    unknown name, MissingDataError (naming the install command) when its package is missing.
    Commands call it before their config record."""
    if name not in CORPORA:
        raise InputError(f"unknown corpus {name!r}; built-ins: {', '.join(CORPORA)}")
    require_debian(CORPORA[name])


def load_corpus(name: str, *, max_chars: int = 4000) -> list[str]:
    """Documents of a built-in corpus (see module doc). MissingDataError if not installed."""
    return list(_load(name, max_chars))
