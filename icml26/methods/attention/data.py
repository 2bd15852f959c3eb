"""``icml26 muse`` text: the train / val / test split rule (``split_of``), token windows, the
``data`` record of which tokens were read, and every input check before the config record
(``preflight``). See ``icml26.methods.attention.harness`` for the protocol."""

from __future__ import annotations

from icml26.core.data import text as T
from icml26.core.errors import InputError
from icml26.methods.attention.config import PERIOD, RUN, Config


def split_of(index: int) -> str:
    """The split of document ``index`` (corpus order): see the module doc."""
    g = (index // RUN) % PERIOD
    return "test" if g == PERIOD - 1 else "val" if g == PERIOD - 2 else "train"


def _documents(text: str | None):
    """The documents of each source in turn (read lazily: GCIDE only when python-docs ran out)."""
    if text is not None:
        yield T._chunks(T.read_text_file(text), 4000)
        return
    yield T.load_corpus("python-docs")
    yield T.load_corpus("gcide")


def split_text(split: str, chars: int, text: str | None = None) -> str:
    """About ``chars`` characters of ``split`` (train / val / test), documents joined by blank lines;
    ``all``: the whole of the user's file ``text``."""
    if split == "all":
        return T.read_text_file(text)
    parts, total = [], 0
    for docs in _documents(text):
        for i, d in enumerate(docs):
            if split_of(i) == split:
                parts.append(d)
                total += len(d) + 2
                if total >= chars:
                    return "\n\n".join(parts)
    return "\n\n".join(parts)


def token_windows(tok, split: str, n_tokens: int, windows: int, text: str | None = None) -> list[list[int]]:
    """``windows`` non-overlapping windows of ``n_tokens`` tokens of ``split`` (InputError if too short)."""
    return _windows(tok, split, n_tokens, windows, text)[0]


def eval_windows(tok, cfg: Config, n_tokens: int) -> tuple[list[list[int]], dict]:
    """The windows bench / eval read at ``n_tokens``, and the ``data`` record saying which tokens they
    are. On the user's whole file (split "all") as many whole windows as fit, up to ``cfg.windows``."""
    split = cfg.split
    wins, total = _windows(tok, split, n_tokens, cfg.windows, cfg.text, fit=split == "all")
    where = "the whole file" if split == "all" else f"the {split} split (the split rule, in corpus order)"
    rec = {
        "kind": "data",
        "context_tokens": n_tokens,
        "source": cfg.text if cfg.text is not None else "python-docs + gcide (built in)",
        "split": split,
        "windows": len(wins),
        "token_ranges": [[i * n_tokens, (i + 1) * n_tokens] for i in range(len(wins))],
        "tokens_available": total,
        "note": f"token_ranges index the tokens of {where}; the rest was not evaluated",
    }
    return wins, rec


def _windows(tok, split, n_tokens, windows, text=None, fit=False):
    if split == "all":
        s = split_text("all", 0, text)
        ids = tok(s, add_special_tokens=False)["input_ids"] if tok is not None else list(s.encode("utf-8"))
        if len(ids) < n_tokens:
            raise InputError(f"{text!r} has {len(ids)} tokens; one window of {n_tokens} needs {n_tokens}")
        k = min(windows, len(ids) // n_tokens) if fit else windows
        if len(ids) < k * n_tokens:
            raise InputError(f"{text!r} has {len(ids)} tokens; {k} window(s) of {n_tokens} need {k * n_tokens}")
        return [ids[i * n_tokens : (i + 1) * n_tokens] for i in range(k)], len(ids)
    need = n_tokens * windows
    chars = need * 5
    while True:
        s = split_text(split, chars, text)
        ids = tok(s, add_special_tokens=False)["input_ids"] if tok is not None else list(s.encode("utf-8"))
        if len(ids) >= need or len(s) < chars * 0.9:
            break
        chars *= 2
    if len(ids) < need:
        where = repr(text) if text else "the built-in corpora"
        raise InputError(
            f"the {split} split of {where} has {len(ids)} tokens; {windows} window(s) of {n_tokens} need {need}"
        )
    return [ids[i * n_tokens : (i + 1) * n_tokens] for i in range(windows)], len(ids)
