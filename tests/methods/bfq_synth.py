"""Small offline-RL datasets made in the tests: D4RL fields by episode, and a Minari folder."""

import json

import numpy as np


def episodes_data(rng, lens, o=3, a=2, terminal_last=(True, False)):
    """Random D4RL fields for episodes of ``lens`` steps; each ends with a terminal or a timeout."""
    rows = {k: [] for k in ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")}
    for T, term in zip(lens, terminal_last):
        obs = rng.normal(size=(T + 1, o)).astype(np.float32)
        rows["observations"].append(obs[:-1]), rows["next_observations"].append(obs[1:])
        rows["actions"].append(rng.uniform(-1, 1, size=(T, a)).astype(np.float32))
        rows["rewards"].append(rng.normal(size=T).astype(np.float32))
        te = np.zeros(T, bool)
        to = np.zeros(T, bool)
        (te if term else to)[-1] = True
        rows["terminals"].append(te), rows["timeouts"].append(to)
    return {k: np.concatenate(v) for k, v in rows.items()}


def write_minari(folder, data, lens, env_id="Hopper-v5"):
    """A Minari 0.5 dataset folder (data/main_data.hdf5 + data/metadata.json) holding ``data``."""
    import h5py

    (folder / "data").mkdir(parents=True)
    with h5py.File(folder / "data" / "main_data.hdf5", "w") as f:
        s = 0
        for i, T in enumerate(lens):
            g = f.create_group(f"episode_{i}")
            g.create_dataset(
                "observations",
                data=np.concatenate([data["observations"][s : s + T], data["next_observations"][s + T - 1 : s + T]]),
            )
            g.create_dataset("actions", data=data["actions"][s : s + T])
            g.create_dataset("rewards", data=data["rewards"][s : s + T])
            g.create_dataset("terminations", data=data["terminals"][s : s + T])
            g.create_dataset("truncations", data=data["timeouts"][s : s + T])
            g.attrs["id"] = i
            s += T
    (folder / "data" / "metadata.json").write_text(
        json.dumps({"dataset_id": "test/hopper-v0", "env_spec": json.dumps({"id": env_id})})
    )


def write_d4rl_file(path, lens, ends, *, o=11, a=3, timeouts=True, seed=0, env="Hopper-v5"):
    """A file as D4RL ships one and users make them with h5py: float64 observations / actions /
    rewards, bool terminals (and timeouts unless ``timeouts`` is False), ``infos/`` and
    ``metadata/`` groups, NO next_observations. ``ends``: per episode 'terminal', 'timeout' or
    'cut' (neither flag: the file stops there). Returns the arrays written."""
    import h5py

    rng = np.random.default_rng(seed)
    n = sum(lens)
    d = {
        "observations": rng.normal(size=(n, o)),
        "actions": rng.uniform(-1, 1, size=(n, a)),
        "rewards": rng.uniform(0, 3, size=n),
        "terminals": np.zeros(n, bool),
        "timeouts": np.zeros(n, bool),
    }
    s = 0
    for T, end in zip(lens, ends):
        if end == "terminal":
            d["terminals"][s + T - 1] = True
        elif end == "timeout":
            d["timeouts"][s + T - 1] = True
        s += T
    with h5py.File(path, "w") as f:
        for k, v in d.items():
            if k != "timeouts" or timeouts:
                f.create_dataset(k, data=v)
        f.create_dataset("infos/qpos", data=rng.normal(size=(n, o + 1)))
        f.create_dataset("infos/action_log_probs", data=rng.normal(size=n))
        f.create_dataset("metadata/algorithm", data=np.bytes_("SAC"))
        f.create_dataset("metadata/policy/fc0/weight", data=rng.normal(size=(4, o)))
        if env:
            f.attrs["env"] = env
    return d
