"""Settings of ``icml26 mamoe`` (torch-free: checked before the method's imports)."""

from __future__ import annotations

import math  # noqa: F401
from dataclasses import dataclass, field  # noqa: F401
from typing import Literal  # noqa: F401

from icml26.core.settings import Work

VARIANTS = ("mamoe", "moe", "mamoe-noshared", "dense")  # as mamoe.VARIANTS


STAGES = ("asr", "tts")


@dataclass(frozen=True)
class Config:
    model: str = (
        "smollm2-135m"  # a causal LLaMA: smollm2-135m, an HF folder, or tiny-random (random LLaMA, SmolLM2 tokenizer)
    )
    data: str = ""  # a `icml26 mamoe prepare` folder; "" prepares one in the cache ($ICML26_CACHE/mamoe/), reused
    corpus: str = "wordnet"  # sentences to speak (icml26.core.data.text)
    max_words: int = 10  # longest sentence kept (words; at least 3)
    # > 0: keep only sentences made of the corpus's `vocab_words` most frequent words (a
    # closed-vocabulary task); 0: open
    vocab_words: int = 0
    train_sentences: int = 400  # sentences synthesized for training (each by several voices, speeds and pitches)
    test_sentences: int = 40  # held-out sentences for the test utterances
    train_voices: tuple[str, ...] = ("en-us", "en-gb", "en-gb-scotland", "en-029")  # espeak-ng voices of training
    test_voices: tuple[str, ...] = ("en-gb-x-rp", "en-us-nyc")  # held out: never in training
    speeds_wpm: tuple[int, ...] = (140, 160, 180)  # espeak-ng speaking rates
    pitches: tuple[int, ...] = (35, 50, 65)  # espeak-ng pitches (0-99)
    num_units: int = 128  # k-means units (MoST: 500 mHuBERT units)
    unit_features: Literal["log-mel", "mfcc"] = "log-mel"  # features the k-means units are fitted on
    librivox: bool = True  # real LibriVox test clips (wer_librivox)
    variants: tuple[str, ...] = VARIANTS  # models trained: mamoe (the paper), moe, mamoe-noshared, dense
    stages: tuple[str, ...] = STAGES  # asr, tts: trained on and evaluated
    num_text_experts: int = 2  # routed experts of the text group per MoE layer
    num_speech_experts: int = 2  # routed experts of the speech group per MoE layer
    top_k: int = 1  # routed experts per token within the group (mamoe-noshared uses top_k + 1)
    moe_every: int = 2  # MoE in layers 1, 3, 5, ... (every other layer)
    upcycle_init: Literal["official", "equal"] = (
        "equal"  # official (y = sum w E + Shared) | equal (step 0 equals the dense model)
    )
    noise_std: float = 1e-3  # Gaussian noise on upcycled expert weights
    aux_alpha: float = 1e-3  # weight of the load-balancing loss
    steps: int = field(default=200, metadata={"sized": 10**6})  # optimizer steps per variant and stage
    batch_size: int = field(default=8, metadata={"sized": 4096})  # utterances per step
    lr: float = 1e-4  # AdamW learning rate
    text_lm_ratio: float = 0.2  # fraction of a batch that is plain text LM (keeps the text ability)
    modality_softmax: bool = (
        False  # training softmax of each target over its modality's ids only (units vs text; as greedy decoding)
    )
    train_all: bool = (
        False  # train every parameter (a model trained from scratch, e.g. tiny-random); else the notes' frozen plan
    )
    max_units: int = field(
        default=150, metadata={"sized": 10**5}
    )  # longest run-length unit sequence trained on (longer utterances are dropped)
    eval_utterances: int = field(
        default=40, metadata={"sized": 10**5}
    )  # ASR test utterances (held-out sentences x held-out voices)
    tts_eval_utterances: int = field(
        default=10, metadata={"sized": 10**5}
    )  # TTS test utterances (each decoded, vocoded and recognized)
    log_every: int = 10  # steps between step records
    tiny_hidden: int = field(default=64, metadata={"sized": 8192})  # tiny-random model: hidden size
    tiny_layers: int = field(default=2, metadata={"sized": 256})  # tiny-random model: layers

    def work(self) -> list[Work]:
        """Training tokens: steps x batch_size x (max_units + text) per variant and stage, against 1e10."""
        toks = float(self.steps) * self.batch_size * (self.max_units + 4 * self.max_words + 16)
        toks *= len(self.variants) * len(self.stages)
        return [
            Work(toks, 1e10, "training tokens", "steps, batch_size, max_units, variants or stages", verb="train on")
        ]

    def __post_init__(self):
        for v in self.variants:
            if v not in VARIANTS:
                raise ValueError(f"variants: {v!r} is not one of {', '.join(VARIANTS)}")
        if not self.variants:
            raise ValueError("variants: give at least one")
        for s in self.stages:
            if s not in STAGES:
                raise ValueError(f"stage {s!r} is not one of {', '.join(STAGES)}")
        if not self.stages:
            raise ValueError("stages: give at least one of asr, tts")
        if self.upcycle_init not in ("official", "equal"):
            raise ValueError(f"upcycle_init must be official or equal, got {self.upcycle_init!r}")
        if self.unit_features not in ("log-mel", "mfcc"):
            raise ValueError(f"unit_features must be log-mel or mfcc, got {self.unit_features!r}")
        if self.vocab_words < 0:
            raise ValueError(f"vocab_words must be >= 0, got {self.vocab_words}")
        if self.max_words < 3:
            raise ValueError(f"max_words must be >= 3, got {self.max_words}")
        for name in (
            "train_sentences",
            "test_sentences",
            "num_units",
            "steps",
            "batch_size",
            "num_text_experts",
            "num_speech_experts",
            "top_k",
            "moe_every",
            "max_units",
            "eval_utterances",
            "log_every",
            "tiny_hidden",
            "tiny_layers",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_units > 2048:
            raise ValueError(f"num_units must be <= 2048, got {self.num_units}")
        if self.top_k > min(self.num_text_experts, self.num_speech_experts):
            raise ValueError(f"top_k ({self.top_k}) must not exceed the smaller expert group")
        if self.train_sentences > 20000 or self.test_sentences > 5000:
            raise ValueError("train_sentences must be <= 20000 and test_sentences <= 5000")
        if not 0 <= self.text_lm_ratio < 1:
            raise ValueError(f"text_lm_ratio must be in [0, 1), got {self.text_lm_ratio}")
        if not (0 < self.lr < 1) or self.noise_std < 0 or self.aux_alpha < 0:
            raise ValueError("lr must be in (0, 1), noise_std and aux_alpha >= 0")
        if not self.train_voices or not self.test_voices or not self.speeds_wpm or not self.pitches:
            raise ValueError("train_voices, test_voices, speeds_wpm and pitches must not be empty")
        if set(self.train_voices) & set(self.test_voices):
            raise ValueError(
                f"test_voices must be held out: {sorted(set(self.train_voices) & set(self.test_voices))} "
                "are in train_voices"
            )
        if self.tts_eval_utterances < 0:
            raise ValueError("tts_eval_utterances must be >= 0")
