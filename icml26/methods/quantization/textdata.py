"""Calibration and evaluation text of ``icml26 quantize``: a built-in corpus split by document
(doc i -> evaluation iff i % 10 == 9, else calibration; ``evaluate.split_corpus``) or the user's
files, cut into chunks of ``seq_len`` tokens; the validation side (``eval_split=validation``):
held-out text of the calibration source, disjoint from the calibration tokens and from the
evaluation text; and the check that two sides share no lines.
"""

from __future__ import annotations

import torch

from icml26.core.data.text import load_corpus, read_text_file
from icml26.core.errors import InputError
from icml26.methods.quantization import evaluate as E
from icml26.methods.quantization.config import Config


def split_after(tok, docs: list[str], n_first: int, n_second: int, skip=None, skip_line=None):
    """(first, second) token streams of ``docs`` in order: the first ``n_first`` tokens, then
    ``n_second`` tokens from the documents after them (the rest of the text when it is one
    document), so the two share no text; ``skip(doc)`` True leaves a later document out of the
    second, and with one document ``skip_line(line)`` True leaves a line of its rest out (the rest
    decoded, filtered and tokenized again only when a line was left out). ValueError when the text
    is too short."""
    ids: list[int] = []
    k = 0
    while k < len(docs) and len(ids) < n_first:
        ids.extend(tok(docs[k] + "\n\n", add_special_tokens=False)["input_ids"])
        k += 1
    if len(docs) == 1:
        rest = ids[n_first:]
        if skip_line is not None and rest:
            lines = tok.decode(rest).split("\n")
            kept = [ln for ln in lines if not skip_line(ln)]
            if len(kept) < len(lines):
                rest = tok("\n".join(kept), add_special_tokens=False)["input_ids"]
    else:
        rest = []
        for d in docs[k:]:
            if len(rest) >= n_second:
                break
            if skip is None or not skip(d):
                rest.extend(tok(d + "\n\n", add_special_tokens=False)["input_ids"])
    if len(ids) < n_first or len(rest) < n_second:
        raise ValueError(
            f"the calibration text has too few tokens for {n_first} calibration tokens and {n_second} validation "
            "tokens after them (eval_split=validation; lower calib_tokens or eval_tokens)"
        )
    return torch.tensor(ids[:n_first], dtype=torch.long), torch.tensor(rest[:n_second], dtype=torch.long)


def _lines(text: str, min_chars: int = 40) -> set[str]:
    return {ln.strip() for ln in text.splitlines() if len(ln.strip()) >= min_chars}


def load_text(cfg: Config, tok):
    """(calibration chunks, evaluation chunks, e2e chunks, source description).

    With ``eval_split=validation`` the scored chunks are the validation side instead: eval_tokens
    tokens of the calibration source after the calibration tokens (from the next document), never
    the evaluation text, so settings can be chosen without looking at it.

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
        if cfg.eval_split == "validation":  # no document that shares a line with the evaluation text used
            test = tok.decode(E.token_stream(tok, eval_docs, cfg.eval_tokens).tolist())
            skipped = []

            def overlaps(doc: str) -> bool:
                hit = any(ln in test for ln in _lines(doc))
                skipped.extend([1] if hit else [])
                return hit

            def shared_line(line: str) -> bool:  # one file: the same rule, line by line
                hit = len(line.strip()) >= 40 and line.strip() in test
                skipped.extend([1] if hit else [])
                return hit

            cs, es = split_after(
                tok, calib_docs, cfg.calib_tokens, cfg.eval_tokens, skip=overlaps, skip_line=shared_line
            )
            side = cfg.calib_text or f"{cfg.corpus} calibration documents"
            where, unit = (
                ("the rest of the file", "lines") if len(calib_docs) == 1 else ("next document on", "documents")
            )
            src = (
                f"validation = {side} after the calibration tokens ({where}; {len(skipped)} {unit} that "
                f"share a line with the evaluation text left out); {src}"
            )
        else:
            cs = E.token_stream(tok, calib_docs, cfg.calib_tokens)
            es = E.token_stream(tok, eval_docs, cfg.eval_tokens)
    except ValueError as e:
        raise InputError(str(e)) from None
    return E.chunks(cs, cfg.seq_len), E.chunks(es, cfg.seq_len), E.chunks(cs, min(cfg.e2e_seq_len, cfg.seq_len)), src


def eval_chunks(cfg: Config, tok) -> list:
    """The evaluation text's chunks (the test side), whatever eval_split says."""
    docs = [read_text_file(cfg.eval_text)] if cfg.eval_text is not None else E.split_corpus(load_corpus(cfg.corpus))[1]
    return E.chunks(E.token_stream(tok, docs, cfg.eval_tokens), cfg.seq_len)


def shared_lines(tok, calib: list, evalc: list, min_chars: int = 40) -> int:
    """Distinct lines (>= min_chars characters) of the calibration text used (chunks of token
    ids, decoded) that occur verbatim in the evaluation text used: 0 when the two are
    disjoint. The check of a user file against the corpus split on the other side."""
    ev = "\n".join(tok.decode(c[0].tolist()) for c in evalc)
    lines = {ln for c in calib for ln in _lines(tok.decode(c[0].tolist()), min_chars)}
    return sum(1 for ln in lines if ln in ev)
