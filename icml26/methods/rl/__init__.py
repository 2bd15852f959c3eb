"""Continuous-control RL: the SAC-family learner (SAC, DSAC-T, DSAC-AID; ``sac``), batched
networks (``nets``), gymnasium MuJoCo / dm_control environments (``envs``), the ``icml26
dsac-aid`` harness (``dsac_aid``) and D4RL/Minari-layout datasets (``d4rl``)."""
