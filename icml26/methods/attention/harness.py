"""``icml26 muse`` harness: isolated-attention bench, drop-in perplexity, small-model pretraining.

Protocol (docs/muse.md, "Protocol and data"; the paper's tables are not public):
  bench  post-RoPE q/k/v of one layer of SmolLM2-135M (layers before it run exactly) on a window
         of real test text; every method's causal attention over all heads is timed (median of
         ``repeats``, ``threads`` torch threads for every method) and compared with SDPA:
         rel_squared_error = ||O - O_exact||^2 / ||O_exact||^2, sparsity as in ``muse.sparsity``.
  eval   perplexity of SmolLM2-135M (or a local LLaMA-architecture folder) with
         ``attn_implementation="muse"`` on ``windows`` non-overlapping windows of test text.
  train  a small LLaMA-style model (byte tokens, vocabulary 256) pretrained from scratch per
         method with the same seed, data order and steps; val loss on validation windows.
Text: python3.11-doc reST sources then GCIDE, split by ``split_of``; ``--text FILE`` is read whole
by bench / eval (``eval_split`` auto = all; a ``data`` record says which tokens) and split by the
rule for train. ``split_of``: documents (section-sized chunks, corpus order) in runs of 16; run g goes to
test if g % 20 == 19, to validation if g % 20 == 18, else to train; disjoint by construction.
RECON: the choice of layer, window counts, model sizes and the split rule are this project's.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

from icml26.core.errors import InputError
from icml26.methods.attention import muse as M

METHODS = ("sdpa", "muse", "muse-v1", "muse-noretrieval", "block")
SPLITS = ("train", "val", "test")
RUN = 16  # documents per run of the split rule
PERIOD = 20  # runs per period: 18 train, 1 validation, 1 test


@dataclass(frozen=True)
class Config:
    """Settings of every ``icml26 muse`` subcommand (a recipe's ``config:`` / ``--set``)."""

    methods: tuple[str, ...] = METHODS
    context_tokens: tuple[int, ...] = (4096,)
    # MuSe (per head, per block)
    block_tokens: int = field(default=256, metadata={"sized": 2**20})  # MuSe block size (keys per block)
    query_clusters: int = 8
    key_clusters: int = 8
    lloyd_iters: int = 3
    retrieved_clusters: int = 16
    detach_query_centroids: bool = True
    # data
    text: str | None = None  # a UTF-8 file instead of the built-in corpora
    model: str = "llama"  # bench / eval: SmolLM2-135M, or a local HF folder / .gguf
    # bench
    layer: int = 2  # q/k/v of this decoder layer (0-based)
    repeats: int = 3
    threads: int = 1
    # eval
    windows: int = 2
    # eval / bench windows: "auto" = "all" of your --text file (it is evaluation text), else the built-in
    # corpus' "test" split; "val" to choose settings without the test windows; "test" / "all" explicitly
    eval_split: str = "auto"
    # train
    train_steps: int = 200
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    lr: float = 3e-3
    warmup_steps: int = 20
    val_windows: int = 4
    checkpoint_every: int = 25
    log_every: int = 5

    def __post_init__(self):
        for mth in self.methods:
            if mth not in METHODS:
                raise ValueError(f"methods: unknown method {mth!r}; valid: {', '.join(METHODS)}")
        if not self.methods:
            raise ValueError("methods must not be empty")
        if not self.context_tokens:
            raise ValueError("context_tokens must not be empty")
        for n in self.context_tokens:
            if not isinstance(n, int) or n < 2:
                raise ValueError(f"context_tokens must be integers >= 2, got {n!r}")
        self.settings()  # the attention settings' own checks (ValueError)
        for name in (
            "repeats",
            "threads",
            "windows",
            "train_steps",
            "d_model",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "val_windows",
            "checkpoint_every",
            "log_every",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.layer < 0:
            raise ValueError(f"layer must be >= 0, got {self.layer}")
        if self.eval_split not in ("auto", "test", "val", "all"):
            raise ValueError(f"eval_split must be 'auto', 'test', 'val' or 'all', got {self.eval_split!r}")
        if self.eval_split == "all" and self.text is None:
            raise ValueError("eval_split=all needs --text (the built-in corpus keeps its train/val/test split)")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size, "
                f"and n_heads into n_kv_heads={self.n_kv_heads} groups"
            )
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive finite number, got {self.lr}")

    @property
    def split(self) -> str:
        """The split bench / eval read: eval_split, with "auto" resolved ("all" of --text, else "test")."""
        if self.eval_split == "auto":
            return "all" if self.text is not None else "test"
        return self.eval_split

    def settings(self, variant: str = "muse") -> M.MuseSettings:
        return M.MuseSettings(
            block_tokens=self.block_tokens,
            query_clusters=self.query_clusters,
            key_clusters=self.key_clusters,
            lloyd_iters=self.lloyd_iters,
            retrieved_clusters=self.retrieved_clusters,
            variant="muse" if variant == "sdpa" else variant,
            detach_query_centroids=self.detach_query_centroids,
        )


# ----------------------------------------------------------------------------- text
def split_of(index: int) -> str:
    """The split of document ``index`` (corpus order): see the module doc."""
    g = (index // RUN) % PERIOD
    return "test" if g == PERIOD - 1 else "val" if g == PERIOD - 2 else "train"


def _documents(text: str | None):
    """The documents of each source in turn (read lazily: GCIDE only when python-docs ran out)."""
    from icml26.core.data import text as T

    if text is not None:
        yield T._chunks(T.read_text_file(text), 4000)
        return
    yield T.load_corpus("python-docs")
    yield T.load_corpus("gcide")


def require_text(cfg: Config) -> None:
    """Data checks before the config record: the user's file, or the two Debian corpora."""
    from icml26.core.data import text as T

    if cfg.text is not None:
        T.read_text_file(cfg.text)
    else:
        T.require_corpus("python-docs")
        T.require_corpus("gcide")


def split_text(split: str, chars: int, text: str | None = None) -> str:
    """About ``chars`` characters of ``split`` (train / val / test), documents joined by blank lines;
    ``all``: the whole of the user's file ``text``."""
    if split == "all":
        from icml26.core.data import text as T

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


# ----------------------------------------------------------------------------- bench
class _Captured(Exception):
    pass


def capture_qkv(model, ids, layer: int):
    """Post-RoPE (q, k, v) of decoder layer ``layer`` on token ids (1, T): the layers before it
    run with exact SDPA, the forward stops there. Returns (q (1, H, T, D), k, v (1, Hkv, T, D), scaling)."""
    import torch
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    got = {}

    def fn(module, query, key, value, attention_mask, **kw):
        if module.layer_idx == layer:
            got.update(
                q=query.detach().clone(), k=key.detach().clone(), v=value.detach().clone(), scale=kw.get("scaling")
            )
            raise _Captured
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kw)

    AttentionInterface.register("icml26_capture", fn)
    old = model.config._attn_implementation
    model.set_attn_implementation("icml26_capture")
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    except _Captured:
        pass
    finally:
        model.set_attn_implementation(old)
    if not got:
        raise InputError(f"layer {layer} was not reached (the model has {model.config.num_hidden_layers} layers)")
    return got["q"], got["k"], got["v"], got["scale"]


def _timed(fn, repeats: int, cpu: list | None = None):
    """(output, median wall seconds); with ``cpu``, the median CPU seconds of this process is appended
    to it (on a shared machine wall time includes other jobs' time slices, CPU time does not)."""
    times, cpus, out = [], [], None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    if cpu is not None:
        cpu.append(statistics.median(cpus))
    return out, statistics.median(times)


def bench_tensors(cfg: Config, q, k, v, scale, n: int, *, methods=None) -> Iterator[dict]:
    """One result per method on given q (1, H, N, D), k, v (1, Hkv, N, D). sdpa runs first."""
    import torch

    from icml26.methods.attention import kernel

    methods = list(methods or cfg.methods)
    kernel.backend()  # load (or build) the C++ kernel before anything is timed
    with torch.no_grad():
        c_sdpa: list = []
        exact, t_sdpa = _timed(lambda: M.sdpa(q, k, v, scale=scale), cfg.repeats, c_sdpa)
        ref = exact.double()
        den = (ref**2).sum().item()
        for mth in methods:
            if mth == "sdpa":
                out, sec, sp, cpu = exact, t_sdpa, 0.0, c_sdpa
            else:
                s = cfg.settings(mth)
                cpu: list = []
                out, sec = _timed(lambda: kernel.attention(q, k, v, s, scale=scale), cfg.repeats, cpu)
                sp = M.sparsity(n, kernel.exact_pairs(q, k, s))
            err = ((out.double() - ref) ** 2).sum().item() / den
            yield {
                "kind": "result",
                "method": mth,
                "context_tokens": n,
                "seconds": sec,
                "speedup_vs_sdpa": t_sdpa / sec,
                "cpu_seconds": cpu[0],  # this process's CPU time (one thread): immune to other jobs' load
                "speedup_vs_sdpa_cpu": c_sdpa[0] / cpu[0],
                "rel_squared_error": err,
                "sparsity": sp,
                "backend": "torch" if mth == "sdpa" else kernel.backend_for(q, s),
                "threads": cfg.threads,
            }


def run_bench(cfg: Config, *, seed: int = 0, device: str = "cpu") -> Iterator[dict]:
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.seed import seed_everything

    seed_everything(seed)
    torch.set_num_threads(cfg.threads)
    from icml26.core.progress import progress
    from icml26.methods.attention import hf

    model, tok = load_causal_lm(cfg.model)
    feats = hf.check_model(model.config, max(cfg.context_tokens))
    if feats:
        raise InputError(
            f"muse bench: layer {cfg.layer}'s attention has {feats['attention_features']}, which MuSe does not "
            "compute: its error and speed-up would not be those of this model's attention"
        )
    results = []
    with progress(len(cfg.context_tokens) * len(cfg.methods), "muse bench") as bar:
        for n in cfg.context_tokens:
            wins, data = eval_windows(tok, replace(cfg, windows=1), n)
            yield data
            q, k, v, scale = capture_qkv(model, wins[0], cfg.layer)
            for rec in bench_tensors(cfg, q, k, v, scale, n):
                results.append(rec)
                bar.advance(
                    1, tokens=n, method=rec["method"], speedup=rec["speedup_vs_sdpa"], rse=rec["rel_squared_error"]
                )
                yield rec
    yield bench_summary(results, cfg)


def bench_summary(results: list[dict], cfg: Config) -> dict:
    by = {(r["method"], r["context_tokens"]): r for r in results}
    out = {"kind": "summary", "model": cfg.model, "layer": cfg.layer, "threads": cfg.threads}
    for n in cfg.context_tokens:
        if ("muse", n) in by:
            out[f"muse_speedup_{n}"] = by[("muse", n)]["speedup_vs_sdpa"]
            out[f"muse_rse_{n}"] = by[("muse", n)]["rel_squared_error"]
            if ("block", n) in by:
                out[f"muse_beats_block_{n}"] = (
                    by[("muse", n)]["rel_squared_error"] < by[("block", n)]["rel_squared_error"]
                )
    return out


MAX_CONTEXT_TOKENS = 262144


def preflight(cfg: Config, command: str) -> None:
    """Every input check of a subcommand before its config record."""
    from icml26.core.data.lm import model_path

    require_text(cfg)
    too_long = [n for n in (cfg.context_tokens or ()) if n > MAX_CONTEXT_TOKENS]
    if too_long:
        raise InputError(
            f"context_tokens {too_long[0]} is beyond {MAX_CONTEXT_TOKENS:,} (the built-in test split holds "
            f"~750k tokens and exact attention at that length would not finish on a CPU); use at most {MAX_CONTEXT_TOKENS}"
        )
    if command in ("bench", "eval"):
        model_path(cfg.model)
        try:
            n_layers = json.loads((model_path(cfg.model) / "config.json").read_text()).get("num_hidden_layers")
        except (OSError, ValueError):
            n_layers = None
        if command == "bench" and n_layers is not None and cfg.layer >= n_layers:
            raise InputError(f"layer {cfg.layer} is out of range: the model has {n_layers} layers")
    if command == "eval" and "sdpa" not in cfg.methods:
        pass  # sdpa is always run as the reference of perplexity_ratio


# ----------------------------------------------------------------------------- eval
def run_eval(cfg: Config, *, seed: int = 0, device: str = "cpu", reference: dict | None = None) -> Iterator[dict]:
    """Perplexity per (method, context_tokens) on ``windows`` windows of the ``eval_split`` split (test by
    default; "val" to choose settings without touching the test windows); sdpa is the reference.
    ``reference``: {context_tokens: sdpa perplexity} measured before on the same windows (sdpa
    is then not run again at that length, and no sdpa record is yielded for it)."""
    import torch

    from icml26.core.data.lm import model_path
    from icml26.core.seed import seed_everything
    from icml26.methods.attention import hf

    seed_everything(seed)
    torch.set_num_threads(cfg.threads)
    hf.register(cfg.settings())
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_path(cfg.model)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = (
        AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch.float32, local_files_only=True, attn_implementation="muse"
        )
        .eval()
        .to(device)
    )
    from icml26.core.progress import progress

    methods = ["sdpa"] + [m_ for m_ in cfg.methods if m_ != "sdpa"]
    results = []
    for n in cfg.context_tokens:
        wins, data = eval_windows(tok, cfg, n)
        feats = hf.check_model(model.config, n)  # one warning line before the run when MuSe cannot cover it
        data.update(feats)
        yield data
        if feats and feats["muse_layers"] == 0 and any(m_ != "sdpa" for m_ in methods):
            raise InputError(
                f"muse eval: every layer of this model has {feats['attention_features']} at {n} tokens, which MuSe "
                "does not compute: no MuSe figure can be reported (use --method sdpa, or a shorter context)"
            )
        ref_ppl = (reference or {}).get(n)
        for mth in methods:
            if mth == "sdpa" and ref_ppl is not None:
                continue
            nll, count, sec = 0.0, 0, 0.0
            c0 = hf.counters()
            with (
                hf.settings(cfg.settings(mth), method=mth),
                torch.no_grad(),
                progress(len(wins), f"muse eval {mth} n={n}") as bar,
            ):
                for w in wins:
                    ids = torch.tensor([w], device=device)
                    t0 = time.perf_counter()
                    logits = model(ids).logits
                    sec += time.perf_counter() - t0
                    for r0 in range(0, n - 1, 1024):  # rows in chunks: float64 log-softmax without 8k x vocab x 8 B
                        r1 = min(n - 1, r0 + 1024)
                        lp = torch.log_softmax(logits[0, r0:r1].double(), -1)
                        nll += -lp.gather(-1, ids[0, r0 + 1 : r1 + 1, None]).sum().item()
                    del logits
                    count += n - 1
                    bar.advance(1, ppl=math.exp(nll / count))
            c1 = hf.counters()
            ppl = math.exp(nll / count)
            ref_ppl = ppl if mth == "sdpa" else ref_ppl
            rec = {
                "kind": "result",
                "method": mth,
                "context_tokens": n,
                "perplexity": ppl,
                "perplexity_ratio": ppl / ref_ppl,
                "seconds": sec,
                "windows": len(wins),
                "split": data["split"],
            }
            if mth != "sdpa":
                from icml26.methods.attention import kernel

                rec["sparsity"] = M.sparsity(n, kernel.exact_pairs_shape(n, cfg.settings(mth)))
                rec["muse_calls"] = c1["calls"] - c0["calls"]  # attention calls MuSe computed
                rec["exact_calls"] = c1["fallbacks"] - c0["fallbacks"]  # and those exact attention computed
                if feats:
                    rec["attention_features"], rec["fallback"] = feats["attention_features"], feats["fallback"]
            results.append(rec)
            yield rec
    summ = {"kind": "summary", "model": cfg.model, "windows": cfg.windows}
    for r in results:
        if r["method"] == "muse":
            summ[f"muse_perplexity_ratio_{r['context_tokens']}"] = r["perplexity_ratio"]
    yield summ


# ----------------------------------------------------------------------------- train
def _tiny_llama(cfg: Config, n: int, attn: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    lc = LlamaConfig(
        vocab_size=256,
        hidden_size=cfg.d_model,
        intermediate_size=4 * cfg.d_model,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=n,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    return LlamaForCausalLM._from_config(lc, attn_implementation=attn)


def _loss(model, ids):
    import torch.nn.functional as F

    logits = model(ids[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


def _dist():
    """(rank, world) under torchrun (gloo process group, initialised once), else (0, 1)."""
    from icml26.core.dist import setup

    d = setup()
    return d.rank, d.world


def run_train(
    cfg: Config, *, seed: int = 0, device: str = "cpu", out: str | None = None, previous: list[dict] | None = None
) -> Iterator[dict]:
    """Pretrain one small model per method (same init seed, data order, steps); resumable from
    ``out/ckpt-<method>/`` (model.safetensors, optimizer.pt, state.json). Under torchrun every
    rank trains on its own windows and gradients are averaged (DDP on gloo); rank 0 writes."""
    import torch
    from safetensors.torch import load_model, save_model

    from icml26.core import diverge
    from icml26.core.output import atomic_path, atomic_write_text, previous_results
    from icml26.core.progress import progress
    from icml26.methods.attention import hf, kernel

    rank, world = _dist()
    torch.set_num_threads(cfg.threads)
    hf.register(cfg.settings())
    n = cfg.context_tokens[0]
    train_ids = torch.tensor(sum(token_windows(None, "train", n + 1, max(64, world * 4), cfg.text), []))
    val = [torch.tensor([w]) for w in token_windows(None, "val", n + 1, cfg.val_windows, cfg.text)]
    done = previous_results(previous, "method")
    prev_steps: dict[str, list[dict]] = {}
    for r in previous or ():
        if r.get("kind") == "step":
            prev_steps.setdefault(r.get("method"), []).append(r)
    results = []
    for mth in cfg.methods:
        if (mth,) in done:
            yield from prev_steps.get(mth, [])
            results.append(done[(mth,)])
            yield done[(mth,)]
            continue
        torch.manual_seed(seed)
        model = _tiny_llama(cfg, n + 1, "sdpa" if mth == "sdpa" else "muse").to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / max(1, cfg.warmup_steps)))
        ddp = model
        if world > 1:
            ddp = torch.nn.parallel.DistributedDataParallel(model)
        ck = Path(out) / f"ckpt-{mth}" if out else None
        start, wall = 0, 0.0
        losses: list[float] = []
        if ck is not None and previous is not None and (ck / "state.json").is_file():
            st = json.loads((ck / "state.json").read_text())
            load_model(model, str(ck / "model.safetensors"))
            opt.load_state_dict(torch.load(ck / "optimizer.pt", weights_only=True))
            sched.load_state_dict(st["scheduler"])
            start, wall, losses = st["step"], st["wall_s"], st["losses"]
            for r in prev_steps.get(mth, []):
                if r["step"] <= start:
                    yield r
        g = torch.Generator().manual_seed(seed)
        offsets = torch.randint(0, train_ids.numel() - n - 1, (cfg.train_steps, world), generator=g)
        # which attention path trains (and, on first use, the C++ kernel's build) is settled before the clock starts
        path = "sdpa" if mth == "sdpa" else kernel.backend_for(torch.zeros(1, 1, 2, 1), cfg.settings(mth))
        diverged = None
        with (
            hf.settings(cfg.settings(mth), method=mth),
            progress(cfg.train_steps - start, f"muse train {mth}") as bar,
        ):
            model.train()
            for step in range(start + 1, cfg.train_steps + 1):
                t0 = time.perf_counter()
                o = int(offsets[step - 1, rank])
                ids = train_ids[o : o + n + 1].unsqueeze(0).to(device)
                loss = _loss(ddp, ids)
                try:
                    diverge.check(step, loss=loss.detach())
                except diverge.Diverged as e:
                    diverged = e
                    diverge.warn(e, f"muse train {mth}")
                    break
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                lv = loss.detach()
                if world > 1:
                    import torch.distributed as dist

                    dist.all_reduce(lv)
                    lv /= world
                dt = time.perf_counter() - t0
                wall += dt
                losses.append(float(lv))
                bar.advance(1, loss=float(lv), tok_s=n * world / dt)
                if step % cfg.log_every == 0 or step == cfg.train_steps:
                    yield {
                        "kind": "step",
                        "method": mth,
                        "step": step,
                        "loss": float(lv),
                        "tokens_per_s": n * world / dt,
                        "wall_s": wall,
                    }
                if ck is not None and rank == 0 and (step % cfg.checkpoint_every == 0 or step == cfg.train_steps):
                    ck.mkdir(parents=True, exist_ok=True)
                    with atomic_path(ck / "model.safetensors") as p:
                        save_model(model, str(p))
                    with atomic_path(ck / "optimizer.pt") as p:
                        torch.save(opt.state_dict(), p)
                    atomic_write_text(
                        ck / "state.json",
                        json.dumps({"step": step, "wall_s": wall, "losses": losses, "scheduler": sched.state_dict()}),
                    )
            model.eval()
            if diverged is None:
                with torch.no_grad():
                    vl = statistics.fmean(float(_loss(model, w.to(device))) for w in val)
        if diverged is not None:
            rec = {
                "kind": "result",
                "method": mth,
                "context_tokens": n,
                "final_loss": None,
                "val_loss": None,
                "wall_s": wall,
                "steps": len(losses),
                "world_size": world,
                "attention_path": path,
                **diverge.diverged_fields(diverged),
            }
            results.append(rec)
            yield rec
            continue
        tail = losses[-max(1, len(losses) // 10) :]
        rec = {
            "kind": "result",
            "method": mth,
            "context_tokens": n,
            "final_loss": statistics.fmean(tail),
            "val_loss": vl,
            "wall_s": wall,
            "steps": cfg.train_steps,
            "world_size": world,
            "attention_path": path,
            **diverge.diverged_fields(None),
        }
        results.append(rec)
        yield rec
    summ = {"kind": "summary", "context_tokens": n, "steps": cfg.train_steps}
    by = {r["method"]: r for r in results if not r.get("diverged")}
    if "sdpa" in by and "muse" in by:
        summ["val_loss_ratio_muse_vs_sdpa"] = by["muse"]["val_loss"] / by["sdpa"]["val_loss"]
        summ["wall_ratio_muse_vs_sdpa"] = by["muse"]["wall_s"] / by["sdpa"]["wall_s"]
    yield summ
