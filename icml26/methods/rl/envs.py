"""Environments by id for the continuous-control learners: gymnasium MuJoCo and dm_control.

- ``Hopper-v5``, ``Walker2d-v5``, ``HalfCheetah-v5``, ``Ant-v5``, ``Humanoid-v5``, ... and any
  registered gymnasium id with a bounded ``Box`` action space (``Pendulum-v1``, ...).
- ``dmc:domain-task`` (``dmc:cheetah-run``, ``dmc:walker-walk``): dm_control's suite through
  :class:`DMCEnv`, a small gymnasium wrapper (observations flattened in the spec's key order,
  float32; 1000-step episodes end as ``truncated``, a zero discount as ``terminated``).

Every environment is wrapped in :class:`SeededEnv`, which gives each episode its own seed
(``base_seed``, episode number), records the actions since the last reset and can replay them
after a reset: a checkpoint stores (episode number, actions) per environment, and ``--resume``
rebuilds the exact simulator state by replaying them (MuJoCo is deterministic for a given
build), instead of copying simulator internals (warm-starts) that ``set_state`` does not restore.
The same wrapper injects the heteroscedastic reward noise of the controlled impulse test
(RECON: our test, in neither the paper nor GOPS): r + noise * (0.5 + mean(a^2)) * N(0, 1),
from a generator seeded per episode, so a replay draws the same noise.

Pins: gymnasium[mujoco]==1.4.0, mujoco==3.17.0, dm_control==1.0.50 (the versions tested; mujoco 4
breaks dm_control). Nothing is downloaded.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from icml26.core.errors import InputError, MissingDataError

INSTALL = (
    "pip install 'gymnasium[mujoco]==1.4.0' 'mujoco==3.17.0' 'dm_control==1.0.50' (or `pip install -e '.[mujoco]'`)"
)


def _episode_seed(base: int, episode: int) -> int:
    return int(np.random.SeedSequence([int(base) % (2**63), int(episode)]).generate_state(1, np.uint32)[0])


class DMCEnv:
    """dm_control suite task as a gymnasium ``Env`` (observation: concatenated flat float32)."""

    metadata = {"render_modes": []}

    def __init__(self, domain: str, task: str):
        import gymnasium as gym

        os.environ.setdefault("MUJOCO_GL", "disable")  # no rendering: no GL context is created
        from dm_control import suite

        self._env = suite.load(domain, task, task_kwargs={"random": 0})
        spec = self._env.action_spec()
        obs_dim = sum(int(np.prod(v.shape)) for v in self._env.observation_spec().values())
        self.action_space = gym.spaces.Box(
            spec.minimum.astype(np.float32), spec.maximum.astype(np.float32), dtype=np.float32
        )
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), dtype=np.float32)
        self.spec = None
        self.render_mode = None
        self.np_random = np.random.default_rng(0)
        self.unwrapped = self

    @staticmethod
    def _flat(ts) -> np.ndarray:
        return np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in ts.observation.values()])

    def reset(self, *, seed: int | None = None, options=None):
        if seed is not None:  # the task draws its initial state from this generator
            self._env.task._random = np.random.RandomState(seed % (2**32))
        return self._flat(self._env.reset()), {}

    def step(self, action):
        ts = self._env.step(np.asarray(action, dtype=np.float64))
        terminated = bool(ts.last() and ts.discount == 0.0)
        truncated = bool(ts.last() and not terminated)
        return self._flat(ts), float(ts.reward or 0.0), terminated, truncated, {}

    def close(self):
        self._env.close()


def _gym():
    try:
        import gymnasium as gym
    except ImportError:
        raise MissingDataError(f"gymnasium is not installed: {INSTALL}") from None
    return gym


_MUJOCO_WARNED: set[str] = set()


def _mujoco_warning(msg: str) -> None:
    if msg not in _MUJOCO_WARNED:
        _MUJOCO_WARNED.add(msg)
        warnings.warn(f"MuJoCo: {msg}", RuntimeWarning, stacklevel=2)


def quiet_mujoco_log() -> None:
    """Route MuJoCo's own warnings (e.g. HalfCheetah-v5's deprecated ``settotalmass``) to Python's
    ``warnings``, once per message, instead of the ``MUJOCO_LOG.TXT`` that MuJoCo otherwise
    appends to in the user's working directory. Leaves a handler someone else set alone."""
    try:
        import mujoco
    except ImportError:
        return
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def make_base(env_id: str):
    """A fresh environment for ``env_id`` (InputError for an unknown id or a discrete action
    space; MissingDataError when MuJoCo / dm_control are not installed)."""
    gym = _gym()
    if env_id.startswith("dmc:"):
        name = env_id[4:]
        domain, _, task = name.partition("-")
        os.environ.setdefault("MUJOCO_GL", "disable")  # no rendering: no GL context is created
        try:
            from dm_control import suite
        except ImportError:
            raise MissingDataError(f"dm_control is not installed: {INSTALL}") from None
        if (domain, task) not in suite.ALL_TASKS:
            known = ", ".join(f"dmc:{d}-{t}" for d, t in suite.ALL_TASKS[:8])
            raise InputError(f"--env {env_id!r}: no such dm_control task; give dmc:domain-task, e.g. {known}, ...")
        return DMCEnv(domain, task)
    if env_id not in gym.registry:
        close = [k for k in gym.registry if k.split("-")[0].lower() == env_id.split("-")[0].lower()]
        hint = (
            f" (did you mean {', '.join(sorted(close)[:4])}?)"
            if close
            else " (e.g. Hopper-v5, Walker2d-v5, HalfCheetah-v5, Ant-v5, Humanoid-v5, dmc:cheetah-run)"
        )
        raise InputError(f"--env {env_id!r}: not a registered gymnasium environment{hint}")
    quiet_mujoco_log()
    try:
        env = gym.make(env_id)
    except (ImportError, gym.error.DependencyNotInstalled) as e:
        raise MissingDataError(f"--env {env_id!r} needs MuJoCo ({' '.join(str(e).split())[:120]}): {INSTALL}") from None
    if (
        not isinstance(env.action_space, gym.spaces.Box)
        or not np.all(np.isfinite(env.action_space.low))
        or not np.all(np.isfinite(env.action_space.high))
    ):
        env.close()
        raise InputError(f"--env {env_id!r}: needs a bounded continuous (Box) action space, got {env.action_space}")
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        env.close()
        raise InputError(f"--env {env_id!r}: needs a flat Box observation space, got {env.observation_space}")
    return env


def env_dims(env_id: str) -> tuple[int, int]:
    """(observation dim, action dim) of ``env_id`` (validates it: see ``make_base``)."""
    env = make_base(env_id)
    try:
        return int(env.observation_space.shape[0]), int(env.action_space.shape[0])
    finally:
        env.close()


class SeededEnv:
    """gymnasium wrapper: per-episode seeds, action log for exact replay, reward noise, actions
    in [-1, 1] mapped to the env's bounds. Observations float32."""

    def __init__(self, env_id: str, base_seed: int, reward_noise: float = 0.0):
        import gymnasium as gym

        self.env = make_base(env_id)
        self.base_seed, self.reward_noise = int(base_seed), float(reward_noise)
        self.low = self.env.action_space.low.astype(np.float64)
        self.high = self.env.action_space.high.astype(np.float64)
        n = self.env.action_space.shape[0]
        self.action_space = gym.spaces.Box(-1.0, 1.0, (n,), dtype=np.float32)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, self.env.observation_space.shape, dtype=np.float32)
        self.metadata = getattr(self.env, "metadata", {})
        self.render_mode = None
        self.spec = None
        self.episode = -1  # number of the current episode
        self.actions: list[np.ndarray] = []  # since the last reset
        self.pending_replay: tuple[int, np.ndarray] | None = None  # (episode, actions) for the next reset
        self._noise = np.random.default_rng(0)

    @property
    def unwrapped(self):
        return self

    def _scale(self, a) -> np.ndarray:
        a = np.clip(np.asarray(a, dtype=np.float64), -1.0, 1.0)
        return self.low + (a + 1.0) * 0.5 * (self.high - self.low)

    def _start(self, episode: int):
        self.episode = episode
        s = _episode_seed(self.base_seed, episode)
        self._noise = np.random.default_rng(s + 1)
        self.actions = []
        obs, info = self.env.reset(seed=s)
        return np.asarray(obs, dtype=np.float32), info

    def reset(self, *, seed=None, options=None):
        if self.pending_replay is not None:
            episode, actions = self.pending_replay
            self.pending_replay = None
            obs, info = self._start(int(episode))
            for a in np.asarray(actions, dtype=np.float32).reshape(-1, self.action_space.shape[0]):
                obs, _, term, trunc, info = self.step(a)
                if term or trunc:
                    raise RuntimeError(
                        "replayed actions end the episode: the checkpoint does not match this environment"
                    )
            return obs, info
        return self._start(self.episode + 1)

    def step(self, action):
        a = np.asarray(action, dtype=np.float32)
        self.actions.append(a.copy())
        obs, r, term, trunc, info = self.env.step(self._scale(a))
        r = float(r)
        if self.reward_noise > 0:
            r += (
                self.reward_noise
                * (0.5 + float(np.mean(a.astype(np.float64) ** 2)))
                * float(self._noise.standard_normal())
            )
        return np.asarray(obs, dtype=np.float32), r, bool(term), bool(trunc), info

    def replay_state(self) -> tuple[int, np.ndarray]:
        """(episode number, actions since its reset (T, act_dim) float32)."""
        n = self.action_space.shape[0]
        return self.episode, (np.stack(self.actions) if self.actions else np.zeros((0, n), np.float32))

    def close(self):
        self.env.close()


def _as_gym_env(env_id: str, base_seed: int, reward_noise: float):
    import gymnasium as gym

    class _Env(gym.Env):  # a real gymnasium.Env around SeededEnv (vector envs check the type)
        def __init__(self):
            self.inner = SeededEnv(env_id, base_seed, reward_noise)
            self.action_space = self.inner.action_space
            self.observation_space = self.inner.observation_space

        def reset(self, *, seed=None, options=None):
            super().reset(seed=None)
            return self.inner.reset()

        def step(self, action):
            return self.inner.step(action)

        @property
        def pending_replay(self):
            return self.inner.pending_replay

        @pending_replay.setter
        def pending_replay(self, state):
            self.inner.pending_replay = state

        def get_replay(self):
            return self.inner.replay_state()

        def close(self):
            self.inner.close()

    return _Env()


def make_vector(env_id: str, seeds: list[int], *, kind: str = "sync", reward_noise: float = 0.0):
    """One gymnasium vector env (``SyncVectorEnv`` / ``AsyncVectorEnv``, same-step autoreset)
    with one sub-env per entry of ``seeds`` (each the base seed of a :class:`SeededEnv`)."""
    gym = _gym()
    from gymnasium.vector import AutoresetMode

    fns = [(lambda s=s: _as_gym_env(env_id, s, reward_noise)) for s in seeds]
    if kind == "async":
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
    if kind == "sync":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    raise ValueError(f"vector_env must be 'sync' or 'async', got {kind!r}")
