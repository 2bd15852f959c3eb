"""Public face of the hot kernels: validate inputs, then call the C++ extension
(``torch.ops.icml26.*``) or the pure ``_ref`` twin.

``KERNELS`` maps each kernel family to the module whose ``backend()`` loads it
(``icml26 env`` reports them)."""

KERNELS: dict[str, str] = {
    "bai": "icml26.ops.bai",
    "bai_fc": "icml26.ops.bai_fc",
    "mcts": "icml26.ops.mcts",
    "mcts_table": "icml26.ops.mcts_table",
    "kv": "icml26.ops.kv",
    "quant": "icml26.ops.quant",
    "quant_cuda": "icml26.ops.quant_cuda",
    "muse": "icml26.ops.muse",
    "splat": "icml26.ops.splat",
}
