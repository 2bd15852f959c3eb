"""Multimodal learning: stochastic modality pairing (DML, ICML 2026) beside fixed pairing, SAM,
label smoothing and SWA, with flatness / robustness measurements (Lee & Yoon, ICML 2026;
code johnjaejunlee95/multimodal-flatness-perspective).

Modules: ``pairing`` (the StochasticPairing Dataset wrapper and collate), ``models`` (encoders and
fusion), ``flatness`` (Hessian power iteration, Hutchinson, loss curves, PGD, 2-D landscape),
``train`` (Config and run).
"""
