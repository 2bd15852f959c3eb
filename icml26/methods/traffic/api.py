"""What the traffic command calls in this package (commands/traffic.py): the forecasting run
and the pretrain / finetune / eval checkpoint flow.

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.traffic.checkpoints import (
    check_pretrain,
    eval_files,
    eval_plan,
    finetune_files,
    prepare_dataset,
    prepare_files,
    pretrain_files,
    pretrained_states,
)
from icml26.methods.traffic.harness import load_inputs, run

__all__ = [
    "check_pretrain",
    "eval_files",
    "eval_plan",
    "finetune_files",
    "load_inputs",
    "prepare_dataset",
    "prepare_files",
    "pretrain_files",
    "pretrained_states",
    "run",
]
