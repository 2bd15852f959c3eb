"""Continuous-control RL: the SAC-family learner (SAC, DSAC-T, DSAC-AID; ``sac``), batched
networks (``nets``), gymnasium MuJoCo / dm_control environments (``envs``), the ``icml26
dsac-aid`` harness (``dsac_aid``) and D4RL/Minari-layout datasets (``d4rl``)."""


def check_algos(algo, known) -> None:
    """ValueError (the recipe layer turns it into exit 2) for an empty algo list, a name not in
    ``known`` or a name given twice; shared by the ``dsac-aid`` and ``bfq`` configs."""
    if not algo:
        raise ValueError("algo is empty; give one or more of " + ", ".join(known))
    bad = [a for a in algo if a not in known]
    if bad:
        raise ValueError(f"algo {bad[0]!r} is not one of {', '.join(known)}")
    if len(set(algo)) != len(algo):
        raise ValueError(f"algo lists a method twice: {list(algo)}")
