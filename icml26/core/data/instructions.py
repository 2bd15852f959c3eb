"""Instruction-style client tasks for federated fine-tuning, from the Debian texts or a user's JSONL.

Built-in task source ``debian``: five domains, one rule each (Het-CPFLoRA, official code
tongxin-tx/Het-CPFLoRA; texts from Debian packages, docs/fed-lora.md):

  wordnet      "Define the word '<lemma>'."                      -> its WordNet gloss (examples cut)
  gcide        "Give the dictionary definition of '<headword>'."  -> the first sense of the Webster 1913 entry
  kjv          "Continue the verse: <first half>"                 -> the clause's second half (King James Bible)
  fortunes     "Complete the quote: <first half>"                 -> the rest of the fortune
  python-docs  "Explain what the Python function <name> does."    -> the first sentence(s) of its reST description

A user's own tasks: a JSONL file, one ``{"instruction": ..., "output": ..., "category": ...}``
object per line (the layout of the official Het-CPFLoRA / FedDPA data; ``task`` is read when
``category`` is absent); each category is a domain.

``client_tasks(...)`` splits the domains' examples into disjoint train / test pools (80 / 20 by
a seeded shuffle), gives every client a domain mixture drawn from Dirichlet(alpha) (non-IID;
small alpha: about one domain per client) and draws its train and test examples from it, without
replacement; the cross-domain test set draws equally from every domain's test pool.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from icml26.core.errors import InputError

DOMAINS = ("wordnet", "gcide", "kjv", "fortunes", "python-docs")
_DEBIAN = {
    "wordnet": "wordnet-base",
    "gcide": "dict-gcide",
    "kjv": "bible-kjv",
    "fortunes": "fortunes",
    "python-docs": "python3.11-doc",
}
POOL_CAP = 4000  # examples kept per domain (seeded sample): enough for any client split here


@dataclass(frozen=True)
class Example:
    instruction: str
    output: str
    domain: str


def _words(s: str) -> list[str]:
    return s.split()


def _wordnet() -> list[tuple[str, str]]:
    from icml26.core.data import debian_path

    out = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in (
            debian_path(f"/usr/share/wordnet/data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines()
        ):
            if line.startswith("  ") or "|" not in line:
                continue
            head, gloss = line.split("|", 1)
            f = head.split()
            if len(f) < 5:
                continue
            word = f[4].replace("_", " ")
            gloss = gloss.split('; "')[0].strip().rstrip(";").strip()
            if word.isascii() and 3 <= len(_words(gloss)) <= 30:
                out.append((f"Define the word '{word}'.", gloss))
    return out


def _gcide() -> list[tuple[str, str]]:
    from icml26.core.data.text import load_corpus

    out = []
    for e in load_corpus("gcide"):
        m = re.match(r"^([A-Za-z][A-Za-z \-']{1,30}?) \\", e)
        if not m:
            continue
        body = e.split("\n", 1)[1] if "\n" in e else ""
        body = re.sub(r"\[[^\]]*\]", " ", body)  # etymology and source tags
        body = re.sub(r"--\s*\w[\w .]*\.", " ", body)  # "--Bailey." citations
        body = " ".join(body.split())
        body = re.sub(r"^\d+\.\s*(\([^)]*\)\s*)?", "", body)  # a sense number and field label
        sent = re.split(r"(?<=[.;])\s", body, maxsplit=1)[0].rstrip(".;").strip()
        if sent and sent[0].isupper() and 3 <= len(_words(sent)) <= 30 and sent.isascii():
            out.append((f"Give the dictionary definition of '{m.group(1).strip()}'.", sent + "."))
    return out


def _half_split(text: str, prefix: str, lo: int, hi: int) -> tuple[str, str] | None:
    w = _words(text)
    if not lo <= len(w) <= hi:
        return None
    k = len(w) // 2
    return f"{prefix}{' '.join(w[:k])}", " ".join(w[k:])


def _kjv() -> list[tuple[str, str]]:
    from icml26.core.data.text import load_corpus

    out = []
    for ch in load_corpus("kjv"):
        for clause in re.split(r"(?<=[.:;?!])\s+", ch):
            p = _half_split(clause, "Continue the verse: ", 10, 30)
            if p:
                out.append(p)
    return out


def _fortunes() -> list[tuple[str, str]]:
    from icml26.core.data.text import load_corpus

    out = []
    for f in load_corpus("fortunes"):
        t = " ".join(f.split())
        if t.isascii():
            p = _half_split(t, "Complete the quote: ", 10, 40)
            if p:
                out.append(p)
    return out


def _python_docs() -> list[tuple[str, str]]:
    from icml26.core.data import debian_path

    out = []
    root = debian_path("/usr/share/doc/python3.11/html/_sources")
    pat = re.compile(
        r"^\.\. (?:function|method):: ([A-Za-z_][\w.]*)\(.*\n((?:[ \t]+\S.*\n)*)\s*\n((?:[ \t]+.*\n)+?)\s*\n", re.M
    )
    for f in sorted(root.rglob("*.rst.txt")):
        mod = ""
        txt = f.read_text(encoding="utf-8", errors="replace")
        mm = re.search(r"^\.\. module:: ([\w.]+)", txt, re.M)
        if mm:
            mod = mm.group(1)
        for m in pat.finditer(txt):
            if ":noindex:" in m.group(2):
                continue
            name = m.group(1)
            if mod and "." not in name:
                name = f"{mod}.{name}"
            body = " ".join(m.group(3).split())
            body = re.sub(r":\w+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", body).replace("``", "").replace("*", "")
            sent = re.split(r"(?<=\.)\s", body, maxsplit=1)[0].strip()
            if 4 <= len(_words(sent)) <= 40 and sent.isascii() and not sent.startswith(".."):
                out.append((f"Explain what the Python function {name} does.", sent))
    return out


_BUILDERS = {"wordnet": _wordnet, "gcide": _gcide, "kjv": _kjv, "fortunes": _fortunes, "python-docs": _python_docs}


_POOL_VERSION = 1  # bump when a rule changes: the cached pools are rebuilt


@lru_cache(maxsize=None)
def _domain_pool(domain: str) -> tuple[Example, ...]:
    """A domain's examples, built once and cached as JSONL under ``$ICML26_CACHE/instructions``."""
    from icml26.core.data import cache_root
    from icml26.core.output import atomic_write_text

    f = cache_root() / "instructions" / f"{domain}-v{_POOL_VERSION}.jsonl"
    if f.is_file():
        try:
            return tuple(
                Example(r["instruction"], r["output"], domain)
                for r in map(json.loads, f.read_text(encoding="utf-8").splitlines())
            )
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache: rebuilt below
    pairs = sorted(set(_BUILDERS[domain]()))
    random.Random(f"pool-{domain}").shuffle(pairs)
    out = tuple(Example(i, o, domain) for i, o in pairs[:POOL_CAP])
    try:
        atomic_write_text(
            f, "".join(json.dumps({"instruction": e.instruction, "output": e.output}) + "\n" for e in out)
        )
    except OSError:
        pass
    return out


def require_tasks(tasks: str, domains: tuple[str, ...] = ()) -> None:
    """Check the task source before a run (InputError / MissingDataError naming the fix);
    ``domains``: the subset used (empty: all)."""
    if tasks == "debian":
        from icml26.core.data import require_debian

        for d in domains or DOMAINS:
            if d not in DOMAINS:
                raise InputError(f"domains: unknown {d!r}; the debian tasks have {', '.join(DOMAINS)}")
            require_debian(_DEBIAN[d])
        return
    pools = read_jsonl_tasks(tasks)
    for d in domains:
        if d not in pools:
            raise InputError(f"domains: {d!r} is not a category of {tasks!r} (it has {', '.join(sorted(pools))})")


def read_jsonl_tasks(path: str) -> dict[str, list[Example]]:
    """A user's JSONL task file -> {category: examples}; InputError on a bad file or line."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError(
            f"tasks {path!r}: expected 'debian' or a JSONL file of {{instruction, output, category}} records; no "
            "such file"
        )
    out: dict[str, list[Example]] = {}
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise InputError(f"tasks {path!r} is not UTF-8") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            raise InputError(f"tasks {path!r} line {i}: not a JSON object") from None
        if not isinstance(r, dict) or not isinstance(r.get("instruction"), str) or not isinstance(r.get("output"), str):
            raise InputError(f"tasks {path!r} line {i}: needs string fields 'instruction' and 'output'")
        cat = str(r.get("category", r.get("task", "default")))
        inp = r.get("input")
        instr = r["instruction"] + (f"\n{inp}" if isinstance(inp, str) and inp.strip() else "")
        out.setdefault(cat, []).append(Example(instr, r["output"], cat))
    if not out:
        raise InputError(f"tasks {path!r} holds no records")
    return out


def domain_pools(tasks: str = "debian", domains: tuple[str, ...] = ()) -> dict[str, list[Example]]:
    """{domain: examples} of a task source (``debian`` or a JSONL path), deterministic order;
    ``domains``: keep these only (empty: all)."""
    require_tasks(tasks, domains)
    if tasks == "debian":
        return {d: list(_domain_pool(d)) for d in (domains or DOMAINS)}
    pools = read_jsonl_tasks(tasks)
    for d, xs in pools.items():
        random.Random(f"pool-{d}").shuffle(xs)
    return {d: xs for d, xs in pools.items() if not domains or d in domains}


@dataclass
class ClientSplit:
    """The examples of every client and the cross-domain test set.

    train / test: one list per client; mixture: each client's Dirichlet domain weights
    (dict domain -> weight); global_test: the cross-domain test set."""

    train: list[list[Example]]
    test: list[list[Example]]
    mixture: list[dict[str, float]]
    global_test: list[Example]


def _draw(pool: dict[str, list[Example]], counts: dict[str, int]) -> list[Example]:
    out = []
    for d, k in counts.items():
        out.extend(pool[d][:k])
        del pool[d][:k]
    return out


def _counts(weights, domains, n: int, avail: dict[str, int]) -> dict[str, int]:
    """n examples split by ``weights`` (largest remainder), moved to other domains where a pool runs dry."""
    raw = [w * n for w in weights]
    c = [int(x) for x in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - c[i], reverse=True)[: n - sum(c)]:
        c[i] += 1
    out = dict(zip(domains, c))
    short = 0
    for d in domains:
        if out[d] > avail[d]:
            short += out[d] - avail[d]
            out[d] = avail[d]
    for d in sorted(domains, key=lambda d: -weights[domains.index(d)]):
        take = min(short, avail[d] - out[d])
        out[d] += take
        short -= take
    if short:
        raise InputError(
            f"the task source runs out of examples: a draw of {n} finds only {n - short} left in its domains "
            f"(train and test examples are drawn without replacement, client after client); lower train_examples, "
            f"test_examples, global_test_examples or clients, or give a larger --tasks file"
        )
    return out


def client_tasks(
    tasks: str,
    clients: int,
    train_examples: int,
    test_examples: int,
    global_test_examples: int,
    alpha: float,
    seed: int,
    domains: tuple[str, ...] = (),
) -> ClientSplit:
    """Split a task source over ``clients`` by Dirichlet(``alpha``) domain mixtures (see module doc).

    InputError when the source has too few examples for the sizes asked."""
    import numpy as np

    pools = domain_pools(tasks, tuple(domains))
    domains = sorted(pools)
    train_pool, test_pool = {}, {}
    for d in domains:
        xs = list(pools[d])
        k = max(1, int(round(0.8 * len(xs)))) if len(xs) > 1 else len(xs)
        train_pool[d], test_pool[d] = xs[:k], xs[k:]
    rng = np.random.default_rng(seed)
    n_dom = len(domains)
    g_counts = _counts([1.0 / n_dom] * n_dom, domains, global_test_examples, {d: len(test_pool[d]) for d in domains})
    global_test = _draw(test_pool, g_counts)
    train, test, mix = [], [], []
    for _ in range(clients):
        w = rng.dirichlet([alpha] * n_dom) if n_dom > 1 else np.ones(1)
        w = [float(x) for x in w]
        mix.append(dict(zip(domains, w)))
        train.append(_draw(train_pool, _counts(w, domains, train_examples, {d: len(train_pool[d]) for d in domains})))
        test.append(_draw(test_pool, _counts(w, domains, test_examples, {d: len(test_pool[d]) for d in domains})))
    return ClientSplit(train, test, mix, global_test)
