"""Build the HQ set and the raw pool from real Debian text, reproducibly (``make-corpus``).

No web crawl ships offline, so the pool is made like one: informal real text plus real
text put through seeded, documented degradations. Every document records where it came
from in ``metadata`` (``source``, ``degradation``, ``split``), so selections can be audited.

HQ sources (curated prose): ``python-docs``, ``gcide``, ``wordnet`` (8 consecutive glosses
per document), ``kjv`` (one chapter per document). From each source ``docs_per_source``
documents are drawn without replacement and split disjointly into

  ``hq``           40%  the high-quality reference set (classifier positives)
  ``hq_heldout``   10%  held-out HQ text (implicit-filtering analysis, LM evaluation)
  pool, clean      20%  real text left as it is (the "gold" a filter should keep)
  pool, degraded   30%  one degradation each (below)

plus ``docs_per_source`` informal documents from ``fortunes`` (pool only); 20% of the
shuffled pool is held out (``pool_heldout``).

Line-level corruption (``insert_bad_lines``): bad lines from the ``train`` templates or from
disjoint ``eval`` ones (``TEMPLATE_SETS``). Degradations (document + seeded ``numpy`` Generator):
  ``boilerplate``  web navigation / cookie / footer lines around and inside the text
  ``shuffle``      the words of the document in a random order
  ``truncate``     only the first 5-25% of the characters, cut mid-word
  ``repeat``       one sentence or line repeated 6-20 times in a row, then the start of the text
  ``spam``         keyword spam and links interleaved with the sentences
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from icml26.core.settings import setting

HQ_SOURCES = ("python-docs", "gcide", "wordnet", "kjv")
INFORMAL_SOURCE = "fortunes"
DEGRADATIONS = ("boilerplate", "shuffle", "truncate", "repeat", "spam")
FILES = ("hq", "hq_heldout", "pool", "pool_heldout")

_NAV = [
    "Home | About | Contact | Blog | Login",
    "Skip to main content",
    "Menu  Search  Sign in  Register",
    "Posted by admin in Uncategorized",
    "Share this: Facebook Twitter Pinterest Email Print",
    "Related posts:",
    "Leave a comment",
    "Previous post / Next post",
    "Tags: news, info, misc, top 10",
    "Subscribe to our newsletter!",
    "Read more >>",
    "Page 1 of 7  Next >",
]
_FOOT = [
    "This website uses cookies to improve your experience. Accept | Decline",
    "Copyright (c) 2024 All rights reserved. Privacy Policy | Terms of Use | Sitemap",
    "Powered by WordPress | Theme by ThemeForest",
    "Back to top ^",
    "You must be logged in to post a comment.",
    "Advertisement",
]
_SPAM = [
    "buy cheap",
    "best price",
    "click here",
    "free shipping",
    "limited offer",
    "casino bonus",
    "win money now",
    "lose weight fast",
    "100% free",
    "hot deals",
    "discount code",
    "replica watches",
    "make $$$ from home",
    "top rated",
    "order now",
]
_DOMAINS = ["best-deals-online.biz", "cheap-pills.top", "free-money.win", "casino-bonus.xyz", "win-big.click"]
# Evaluation templates for inserted bad lines: no line, keyword or domain shared with the ones above,
# which build the classifier's training pool (so a line-level evaluation measures generalisation).
_NAV_EVAL = [
    "Start page > Products > Garden tools",
    "Jump to navigation",
    "My account  Wishlist  Cart (0)",
    "Filed under: General",
    "Pin it  Tweet  WhatsApp  LinkedIn",
    "You may also like",
    "Write a review",
    "Older entries  Newer entries",
    "Categories: Lifestyle, Travel, Food",
    "Join our mailing list today",
    "Continue reading",
    "Showing results 11-20",
]
_FOOT_EVAL = [
    "We value your privacy. Manage preferences | Allow all",
    "(c) 2023 Example Media Group. Imprint | Legal notice | Accessibility",
    "Built with Drupal | Hosted by Acme Cloud",
    "Scroll up",
    "Comments are closed.",
    "Sponsored content",
]
_SPAM_EVAL = [
    "cheapest loans",
    "act fast",
    "exclusive deal",
    "no prescription",
    "crypto giveaway",
    "earn passive income",
    "miracle cure",
    "risk free",
    "flash sale",
    "promo coupon",
    "designer handbags",
    "get rich quick",
    "vip members only",
    "lowest rates",
    "claim your prize",
]
_DOMAINS_EVAL = [
    "super-savings.shop",
    "quick-loans.info",
    "prize-claim.site",
    "pharma-direct.store",
    "vip-offers.online",
]
TEMPLATE_SETS = {
    "train": {"nav": _NAV, "foot": _FOOT, "spam": _SPAM, "domains": _DOMAINS},
    "eval": {"nav": _NAV_EVAL, "foot": _FOOT_EVAL, "spam": _SPAM_EVAL, "domains": _DOMAINS_EVAL},
}


def _sentences(text: str) -> list[str]:
    parts = [p for p in re.split(r"(?<=[.!?;:])\s+|\n+", text) if p.strip()]
    return parts or [text]


def boilerplate(text: str, rng: np.random.Generator) -> str:
    lines = text.split("\n")
    head = [str(x) for x in rng.choice(_NAV, size=int(rng.integers(2, 5)), replace=False)]
    foot = [str(x) for x in rng.choice(_FOOT, size=int(rng.integers(2, 4)), replace=False)]
    for _ in range(int(rng.integers(1, 4))):  # a few menu lines inside the text
        lines.insert(int(rng.integers(0, len(lines) + 1)), str(rng.choice(_NAV)))
    return "\n".join(head + lines + foot)


def shuffle(text: str, rng: np.random.Generator) -> str:
    words = text.split()
    rng.shuffle(words)
    return " ".join(words)


def truncate(text: str, rng: np.random.Generator) -> str:
    n = max(12, int(len(text) * rng.uniform(0.05, 0.25)))
    return text[:n]


def repeat(text: str, rng: np.random.Generator) -> str:
    sents = _sentences(text)
    s = sents[int(rng.integers(0, len(sents)))].strip()
    rest = text[: max(40, len(text) // 4)]
    return "\n".join([s] * int(rng.integers(6, 21))) + "\n" + rest


def spam(text: str, rng: np.random.Generator) -> str:
    out = []
    for s in _sentences(text):
        out.append(s)
        if rng.random() < 0.6:
            kw = " ".join(str(x) for x in rng.choice(_SPAM, size=int(rng.integers(2, 5))))
            out.append(
                f"{kw.upper() if rng.random() < 0.3 else kw} http://{rng.choice(_DOMAINS)}/?ref={int(rng.integers(1e6))}"
            )
    return " ".join(out)


BAD_LINE_KINDS = ("boilerplate", "spam", "informal", "shuffled")


def bad_line(kind: str, rng: np.random.Generator, informal_lines: list[str], templates: str = "train") -> str:
    """One inserted line of ``kind`` (BAD_LINE_KINDS):

    ``boilerplate``  a navigation / cookie / footer line
    ``spam``         2-4 spam keywords and a link
    ``informal``     a line of informal text (``informal_lines``: lines of fortunes)
    ``shuffled``     such an informal line with its words in a random order
    templates: ``train`` (the lines that build the training pool's degradations) or ``eval``
    (disjoint lines, keywords and domains: ``TEMPLATE_SETS``)."""
    if templates not in TEMPLATE_SETS:
        raise ValueError(f"templates must be one of {', '.join(TEMPLATE_SETS)}, got {templates!r}")
    t = TEMPLATE_SETS[templates]
    if kind == "boilerplate":
        return str(rng.choice(t["nav"] + t["foot"]))
    if kind == "spam":
        kw = " ".join(str(x) for x in rng.choice(t["spam"], size=int(rng.integers(2, 5))))
        return f"{kw.upper() if rng.random() < 0.3 else kw} http://{rng.choice(t['domains'])}/?ref={int(rng.integers(1e6))}"
    if kind in ("informal", "shuffled"):
        line = informal_lines[int(rng.integers(len(informal_lines)))]
        if kind == "informal":
            return line
        words = line.split()
        rng.shuffle(words)
        return " ".join(words)
    raise ValueError(f"bad-line kind must be one of {', '.join(BAD_LINE_KINDS)}, got {kind!r}")


def insert_bad_lines(
    text: str,
    n_bad: int,
    rng: np.random.Generator,
    informal_lines: list[str],
    kinds: tuple[str, ...] = BAD_LINE_KINDS,
    templates: str = "train",
) -> tuple[str, list[str | None]]:
    """``text`` with ``n_bad`` bad lines inserted at uniformly drawn line boundaries (before the
    first line, between two lines, after the last), each of a kind drawn uniformly from
    ``kinds``. Returns the new text and one label per line of it (``text.split("\n")``):
    None for the document's own lines (kept in their order), else the inserted line's kind.
    ``informal_lines``: non-blank lines of informal text, for ``informal``/``shuffled``;
    ``templates``: see :func:`bad_line`."""
    lines = text.split("\n")
    out: list[tuple[str, str | None]] = [(ln, None) for ln in lines]
    for _ in range(int(n_bad)):
        kind = kinds[int(rng.integers(len(kinds)))]
        out.insert(int(rng.integers(0, len(out) + 1)), (bad_line(kind, rng, informal_lines, templates), kind))
    return "\n".join(ln for ln, _ in out), [k for _, k in out]


DEGRADE: dict[str, Callable[[str, np.random.Generator], str]] = {
    "boilerplate": boilerplate,
    "shuffle": shuffle,
    "truncate": truncate,
    "repeat": repeat,
    "spam": spam,
}


def source_documents(name: str) -> list[str]:
    """Real documents of one source (see module doc); MissingDataError if not installed."""
    from icml26.core.data.text import load_corpus

    docs = load_corpus(name)
    if name == "wordnet":
        docs = ["\n".join(docs[i : i + 8]) for i in range(0, len(docs) - 7, 8)]
    return [d for d in docs if len(d.strip()) >= 20]


@dataclass(frozen=True)
class CorpusConfig:
    docs_per_source: int = setting(2000, "documents drawn from each source (capped by what exists)", sized=10**7)
    pool_heldout_fraction: float = setting(
        0.2,
        "share of the pool held out as pool_heldout.jsonl (never trained on; analyze / proxy evaluate on it)",
        unit="fraction",
    )
    hq_sources: tuple[str, ...] = HQ_SOURCES  # curated sources of the HQ set: python-docs, gcide, wordnet, kjv

    def __post_init__(self):
        if self.docs_per_source < 10:
            raise ValueError(f"docs_per_source must be >= 10, got {self.docs_per_source}")
        if not 0.0 < self.pool_heldout_fraction < 1.0:
            raise ValueError(f"pool_heldout_fraction must be in (0, 1), got {self.pool_heldout_fraction}")
        bad = [s for s in self.hq_sources if s not in HQ_SOURCES]
        if bad or not self.hq_sources:
            raise ValueError(
                f"hq_sources must be a non-empty subset of {', '.join(HQ_SOURCES)}, got {list(self.hq_sources)}"
            )


def build(cfg: CorpusConfig, seed: int) -> dict[str, list[dict]]:
    """The four document lists ``{"hq", "hq_heldout", "pool", "pool_heldout"}`` (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[dict]] = {k: [] for k in FILES}
    pool: list[dict] = []
    for src in cfg.hq_sources:
        docs = source_documents(src)
        n = min(cfg.docs_per_source, len(docs))
        pick = rng.choice(len(docs), n, replace=False)
        cuts = np.cumsum([int(0.4 * n), int(0.1 * n), int(0.2 * n)])
        for j, i in enumerate(pick):
            text = docs[int(i)]
            doc_id = f"{src}-{int(i)}"
            if j < cuts[0]:
                out["hq"].append(
                    {"text": text, "id": doc_id, "metadata": {"source": src, "degradation": "none", "split": "hq"}}
                )
            elif j < cuts[1]:
                out["hq_heldout"].append(
                    {
                        "text": text,
                        "id": doc_id,
                        "metadata": {"source": src, "degradation": "none", "split": "hq_heldout"},
                    }
                )
            elif j < cuts[2]:
                pool.append({"text": text, "id": doc_id, "metadata": {"source": src, "degradation": "none"}})
            else:
                deg = DEGRADATIONS[int(rng.integers(len(DEGRADATIONS)))]
                pool.append(
                    {
                        "text": DEGRADE[deg](text, rng),
                        "id": f"{doc_id}-{deg}",
                        "metadata": {"source": src, "degradation": deg},
                    }
                )
    informal = source_documents(INFORMAL_SOURCE)
    for i in rng.choice(len(informal), min(cfg.docs_per_source, len(informal)), replace=False):
        pool.append(
            {
                "text": informal[int(i)],
                "id": f"{INFORMAL_SOURCE}-{int(i)}",
                "metadata": {"source": INFORMAL_SOURCE, "degradation": "none"},
            }
        )
    order = rng.permutation(len(pool))
    n_held = int(round(len(pool) * cfg.pool_heldout_fraction))
    for k, i in enumerate(order):
        d = pool[int(i)]
        split = "pool_heldout" if k < n_held else "pool"
        d["metadata"]["split"] = split
        out[split].append(d)
    return out


def is_gold(doc: dict) -> bool:
    """A pool document that is clean curated text (what a filter should keep)."""
    md = doc.get("metadata") or {}
    return md.get("degradation") == "none" and md.get("source") in HQ_SOURCES


def write(parts: dict[str, list[dict]], out_dir: str | Path) -> Iterator[dict]:
    """Write ``<name>.jsonl`` atomically for each part; yield one ``result`` record per file."""
    from icml26.methods.filtering.jsonl import DocumentWriter

    out_dir = Path(out_dir)
    for name in FILES:
        docs = parts[name]
        with DocumentWriter(str(out_dir / f"{name}.jsonl")) as w:
            for d in docs:
                w.write(d)
        by: dict[str, int] = {}
        for d in docs:
            key = d["metadata"]["degradation"] if d["metadata"]["degradation"] != "none" else d["metadata"]["source"]
            by[key] = by.get(key, 0) + 1
        yield {
            "kind": "result",
            "file": f"{name}.jsonl",
            "n_docs": len(docs),
            "n_chars": int(sum(len(d["text"]) for d in docs)),
            "gold_fraction": float(np.mean([is_gold(d) for d in docs])) if docs else None,
            "composition": by,
        }
