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
