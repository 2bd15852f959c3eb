"""Gaussian splatting for HDR novel-view synthesis: Expo-GS (ICML 2026, PMLR 306) and an
HDR-GS-style baseline on the rasterizer of :mod:`icml26.ops.splat` (docs/hdr-gs.md).

Modules: ``model`` (tone mapper, reliability, pseudo-SDF), ``hdr_gs`` (Config, training,
density control, evaluation, checkpoints), ``metrics`` (the HDR-NeRF protocol), ``scenes``
(POV-Ray multi-exposure scenes)."""
