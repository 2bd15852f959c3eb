"""Learner names of ``icml26 dsac-aid`` and dsac-aid's sigma loss forms. Torch-free; shared by
``dsac_config`` (the Config and its checks) and ``sac`` (the learners), so neither imports the
other's module at load time.
"""

from __future__ import annotations

ALGOS = ("sac", "dsac-t", "dsac-aid", "dsac-aid-epi")  # the learners of ``sac.Learner``
SIGMA_LOSSES = ("gradient", "variance")  # dsac-aid's Huber sigma loss forms (GOPS 1ea49ca, 640e85a)
