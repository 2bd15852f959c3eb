"""Evaluation judges: feature networks made by the project, independent of the networks a method
trains, for FID / precision / recall of generated images (Inception weights are not reachable
offline). A judge is chosen by a replaceable name (or a path to a judge file) and cached as
safetensors under ``$ICML26_CACHE/judges/<name>.safetensors``.

  fmnist-cnn-bn  a CNN with batch norm (conv 32-64-128, each BN + ReLU, 2 max-pools, a 256-d
                 linear + BN embedding, a linear head), trained with Adam on all 60k Fashion-MNIST
                 training images (2 epochs, batch 128, seed 0); features: the 256-d embedding
                 before its ReLU. It never sees the 10k test images that serve as references.

Build once: ``python -m icml26.core.data.judges fmnist-cnn-bn`` (a few CPU minutes); the file
records its test accuracy. ``load_judge`` raises MissingDataError naming that command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from icml26.core.data import cache_root
from icml26.core.errors import InputError, MissingDataError

JUDGES = {"fmnist-cnn-bn": {"dataset": "fashion-mnist", "epochs": 2, "batch": 128, "lr": 2e-3}}
DEFAULT_FOR = {"fashion-mnist": "fmnist-cnn-bn"}  # data set -> the judge used when none is named


def judge_file(name: str) -> Path:
    return cache_root() / "judges" / f"{name}.safetensors"


def _net(in_channels: int, num_classes: int, image_size: int):
    from torch import nn

    class JudgeNet(nn.Module):
        def __init__(self):
            super().__init__()

            def block(i, o):
                return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]

            s = image_size // 4
            self.body = nn.Sequential(
                *block(in_channels, 32),
                nn.MaxPool2d(2),
                *block(32, 64),
                nn.MaxPool2d(2),
                *block(64, 128),
                nn.Flatten(),
                nn.Linear(128 * s * s, 256, bias=False),
                nn.BatchNorm1d(256),
            )
            self.head = nn.Sequential(nn.ReLU(), nn.Linear(256, num_classes))
            self.feature_dim = 256

        def features(self, x):
            return self.body(x * 2.0 - 1.0)

        def forward(self, x):
            return self.head(self.features(x))

    return JudgeNet()


def load_judge(name_or_path: str):
    """(network in eval mode with ``features(x)`` for x in [0, 1] (N, C, H, W), metadata dict).
    A registered name is read from the cache (MissingDataError naming the build command when
    absent); any other value is a judge file path (InputError when it is not one)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    if name_or_path in JUDGES:
        f = judge_file(name_or_path)
        if not f.is_file():
            raise MissingDataError(
                f"judge {name_or_path!r} is not built: run `python -m icml26.core.data.judges {name_or_path}` "
                f"(writes {f})"
            )
    else:
        f = Path(name_or_path).expanduser()
        if not f.is_file():
            raise InputError(f"judge {name_or_path!r}: not a registered judge ({', '.join(JUDGES)}) nor a file")
    try:
        with safe_open(str(f), "pt") as h:
            meta = json.loads((h.metadata() or {}).get("judge", "{}"))
        tensors = load_file(str(f))
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input error
        raise InputError(f"judge file {str(f)!r}: not a judge safetensors file ({e})") from None
    if meta.get("kind") != "icml26-judge":
        raise InputError(f"judge file {str(f)!r}: not an icml26 judge (no judge metadata)")
    net = _net(int(meta["in_channels"]), int(meta["num_classes"]), int(meta["image_size"]))
    net.load_state_dict(tensors)
    net.eval()
    return net, meta


def build_judge(name: str, *, steps: int | None = None, out: Path | None = None, seed: int = 0) -> Path:
    """Train the registered judge ``name`` and write it (safetensors, metadata ``judge``) to
    ``out`` or its cache file. ``steps`` caps the training steps (tests)."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from icml26.core.data.images import load_images
    from icml26.core.progress import progress

    spec = JUDGES[name]
    tr, te = load_images(spec["dataset"], "train"), load_images(spec["dataset"], "test")
    x, y = tr.as_float(), torch.from_numpy(tr.labels)
    C, H = x.shape[1], x.shape[2]
    torch.manual_seed(seed)
    net = _net(C, tr.num_classes, H)
    opt = torch.optim.Adam(net.parameters(), lr=spec["lr"])
    per_epoch = len(x) // spec["batch"]
    total = steps if steps is not None else spec["epochs"] * per_epoch
    g = torch.Generator().manual_seed(seed)
    net.train()
    with progress(total, f"judge {name}") as bar:
        done = 0
        while done < total:
            perm = torch.randperm(len(x), generator=g)
            for i in range(per_epoch):
                if done >= total:
                    break
                j = perm[i * spec["batch"] : (i + 1) * spec["batch"]]
                loss = torch.nn.functional.cross_entropy(net(x[j]), y[j])
                opt.zero_grad()
                loss.backward()
                opt.step()
                done += 1
                bar.advance(1, loss=loss.item())
    net.eval()
    with torch.no_grad():
        xt = te.as_float()
        pred = torch.cat([net(xt[s : s + 1000]).argmax(1) for s in range(0, len(xt), 1000)])
    acc = float((pred.numpy() == te.labels).mean())
    meta = {
        "kind": "icml26-judge",
        "name": name,
        "dataset": spec["dataset"],
        "train_images": int(len(x)),
        "steps": int(total),
        "seed": seed,
        "in_channels": int(C),
        "image_size": int(H),
        "num_classes": int(tr.num_classes),
        "feature_dim": 256,
        "test_accuracy": acc,
    }
    f = Path(out) if out is not None else judge_file(name)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp), {"judge": json.dumps(meta)})
    tmp.replace(f)
    print(f"judge {name}: test accuracy {acc:.4f} ({int(np.sum(pred.numpy() == te.labels))}/{len(te)}) -> {f}")
    return f


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in JUDGES:
        print(f"usage: python -m icml26.core.data.judges {{{','.join(JUDGES)}}}", file=sys.stderr)
        return 2
    build_judge(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
