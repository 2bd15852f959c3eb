"""Pure exploration: VarDE (ICML 2026, arXiv 2608.21995) for best-arm identification,
MCTS and best-policy identification, beside the standard baselines of each problem."""
