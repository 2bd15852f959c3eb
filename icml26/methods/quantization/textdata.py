"""Calibration and evaluation text of ``icml26 quantize``: a built-in corpus split by document
(doc i -> evaluation iff i % 10 == 9, else calibration; ``evaluate.split_corpus``) or the user's
files, cut into chunks of ``seq_len`` tokens; and the check that a user file shares no lines with
the corpus side it is paired with.
"""

from __future__ import annotations

from icml26.core.data.text import load_corpus, read_text_file
from icml26.core.errors import InputError
from icml26.methods.quantization import evaluate as E
from icml26.methods.quantization.config import Config


def load_text(cfg: Config, tok):
    """(calibration chunks, evaluation chunks, e2e chunks, source description).

    Each side is the user's file when given (calib_text / eval_text), else the built-in
    corpus' split for that side (evaluate.split_corpus: doc i -> eval iff i % 10 == 9): a user
    file on one side and the corpus on the other is allowed (e.g. your own evaluation text,
    calibration on the corpus' calibration documents)."""
    rule = f"{cfg.corpus}: doc i -> eval iff i % {E.EVAL_EVERY} == {E.EVAL_EVERY - 1}, else calibration"
    if cfg.calib_text is None or cfg.eval_text is None:
        corpus_calib, corpus_eval = E.split_corpus(load_corpus(cfg.corpus))
    calib_docs = [read_text_file(cfg.calib_text)] if cfg.calib_text is not None else corpus_calib
    eval_docs = [read_text_file(cfg.eval_text)] if cfg.eval_text is not None else corpus_eval
    if cfg.calib_text is not None and cfg.eval_text is not None:
        src = f"calib={cfg.calib_text}, eval={cfg.eval_text}"
    elif cfg.calib_text is None and cfg.eval_text is None:
        src = rule
    elif cfg.eval_text is not None:
        src = f"calib={cfg.corpus} calibration documents (built in; {rule}), eval={cfg.eval_text}"
    else:
        src = f"calib={cfg.calib_text}, eval={cfg.corpus} evaluation documents (built in; {rule})"
    try:
        cs = E.token_stream(tok, calib_docs, cfg.calib_tokens)
        es = E.token_stream(tok, eval_docs, cfg.eval_tokens)
    except ValueError as e:
        raise InputError(str(e)) from None
    return E.chunks(cs, cfg.seq_len), E.chunks(es, cfg.seq_len), E.chunks(cs, min(cfg.e2e_seq_len, cfg.seq_len)), src


def shared_lines(tok, calib: list, evalc: list, min_chars: int = 40) -> int:
    """Distinct lines (>= min_chars characters) of the calibration text used (chunks of token
    ids, decoded) that occur verbatim in the evaluation text used: 0 when the two are
    disjoint. The check of a user file against the corpus split on the other side."""
    ev = "\n".join(tok.decode(c[0].tolist()) for c in evalc)
    lines = {ln.strip() for c in calib for ln in tok.decode(c[0].tolist()).splitlines() if len(ln.strip()) >= min_chars}
    return sum(1 for ln in lines if ln in ev)
