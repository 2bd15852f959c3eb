"""Latent flow matching and its stability (ICML 2026, arXiv 2605.08398).

flow     FM path/loss, Euler/Heun/adaptive samplers, coarse-to-fine two-model velocity
nets     VAE, DiT-style velocity networks (small/medium/large), feature network
reduce   data-reduction scorers (random, k-center, balanced/proportional cluster, loss, grad)
metrics  Frechet distance, precision/recall, same-seed similarity in the trained feature space
train    ``icml26 train-lfm``;  sample  ``icml26 sample-lfm``
"""
