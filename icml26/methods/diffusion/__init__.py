"""Diffusion-model representations: the Invariant Contamination Ratio (ICR, arXiv 2606.09718) as a
library function (``icr``), features of a diffusers ``UNet2DModel`` by forward hooks
(``features``), the noise-level sweep with a linear probe (``analyze``) and training with the ICR
monitor beside a memorization measure (``train``). Paper: arXiv 2606.09718."""

from icml26.methods.diffusion.estimator import ICRResult, covariances, icr, icr_two_view, spectrum

__all__ = ["ICRResult", "covariances", "icr", "icr_two_view", "spectrum"]
