"""Round trip of ``icml26 quantize --out``'s compressed-tensors export through transformers alone.

Writes the evaluation chunks icml26 scored (the default config's: python-docs evaluation documents,
``eval_tokens`` tokens in chunks of ``seq_len``), then evaluates the exported folder in a separate
process that imports only torch and transformers (``AutoModelForCausalLM.from_pretrained``) and
prints its perplexity beside the one icml26 recorded at export time.

Usage: .venv/bin/python benchmarks/quantize_roundtrip.py OUT/model [--set eval_tokens=2048 ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, math, sys, time, torch
from transformers import AutoModelForCausalLM
assert not any(k.startswith("icml26") for k in sys.modules)
t = time.time()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], local_files_only=True).eval()
nll = n = 0.0
with torch.no_grad():
    for c in json.load(open(sys.argv[2])):
        ids = torch.tensor([c])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        nll -= logp.gather(-1, ids[0, 1:, None]).sum().item()
        n += len(c) - 1
qc = model.config.quantization_config
qm = qc["quant_method"] if isinstance(qc, dict) else qc.quant_method
print(json.dumps({"perplexity": math.exp(nll / n), "tokens": int(n), "quant_method": str(qm), "s": time.time() - t}))
"""


def main() -> None:
    from transformers import AutoTokenizer

    from icml26.core.recipe import parse_sets
    from icml26.methods.quantization import export as X
    from icml26.methods.quantization.config import Config
    from icml26.methods.quantization.textdata import load_text

    folder = sys.argv[1]
    cfg = Config(**parse_sets([a for a in sys.argv[2:] if a != "--set"]))
    _, evalc, _, src = load_text(cfg, AutoTokenizer.from_pretrained(folder))
    rec = X.read_icml26(folder)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "chunks.json").write_text(json.dumps([c[0].tolist() for c in evalc]))
        (Path(d) / "child.py").write_text(CHILD)
        p = subprocess.run(
            [sys.executable, str(Path(d) / "child.py"), folder, str(Path(d) / "chunks.json")],
            capture_output=True,
            text=True,
        )
    if p.returncode:
        sys.exit(p.stderr[-3000:])
    got = json.loads(p.stdout.strip().splitlines()[-1])
    rel = abs(got["perplexity"] - rec["perplexity"]) / rec["perplexity"]
    print(
        json.dumps(
            {
                "folder": folder,
                "text": src,
                "method": rec["method"],
                "setting": f"W{rec['wbits']}A{rec['abits']}",
                "icml26_perplexity": rec["perplexity"],
                "transformers_perplexity": got["perplexity"],
                "relative_difference": rel,
                "quant_method": got["quant_method"],
                "tokens": got["tokens"],
            }
        )
    )


if __name__ == "__main__":
    main()
