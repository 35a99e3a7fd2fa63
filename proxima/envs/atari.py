"""Atari (ids like ``Pong-v5``) with CleanRL's ``ppo_atari`` settings, through EnvPool or Gymnasium's ALE.

Both backends apply the same rules (CleanRL's ``ppo_atari`` scripts'; Machado et al. 2018 instead
recommend sticky actions of 0.25, which ``--env-kwargs`` sets: :data:`ATARI_KWARGS`): frame skip 4
with a max over the last two frames, 84x84 grayscale, a stack of the last 4 frames as (4, 84, 84)
uint8 (an image: the Nature CNN reads it), up to 30 no-op frames at a new game's reset, FIRE at reset
in games that need it, no sticky actions, the minimal action set, 27,000 agent steps (108,000
frames) at most per game. Their
resets differ, each as CleanRL's script for that backend has it (ppo_atari_envpool.py,
ppo_atari.py): EnvPool's reset, after a lost life too, is 1-30 no-op frames (0-29 and one FIRE
frame in FIRE games), and after a lost life it keeps the stack (the next episode's first
observation holds 3 frames of the lost life); Gymnasium's ALE continues a game after a lost life
with one no-op step, then FIRE and action 2 (RIGHT in Breakout) as two steps in FIRE games, and
restarts the stack (4 copies of one frame), as at a new game. docs/atari.md lists the differences.
While training (``training=True``) a lost life ends the episode (``terminated``: no bootstrap)
and rewards are clipped to their sign; the episode statistics (``info["episode_return"]``,
``["episode_length"]``) count **full games** with unclipped rewards, their lengths in agent steps
(not the FIRE presses the wrappers add), so curves and tables compare with published Atari scores;
the rows of a step that ends an episode but no game are 0, and the trainer counts no episode
there (rollout.Rollout.add_episode_stats). Evaluation (``training=False``) plays full games, rewards unclipped:
an episode is a game, and after a lost life the game goes on with FIRE pressed for it (as after a
life lost in training), so a policy that never presses FIRE cannot stall a game until the time limit.

* ``EnvPoolAtari``: EnvPool's C++ batched ALE (``--backend envpool``). EnvPool resets a finished
  env on the *next* step; the adapter sends that reset-step to the finished envs at once (EnvPool
  steps a subset of envs by id), so the contract's same-step autoreset and ``final_obs`` hold. Every
  reset() starts new games (EnvPool 1.2.5's reset restarts a game in progress; a seeded one also
  builds the pool anew) and clears the games' statistics; a game that ends inside EnvPool's reset
  no-ops is counted with the next (docs/atari.md). EnvPool takes int32 seeds only: every seed it is
  given is folded into 0..2**31-1 (:func:`envpool_seed`), so the run's offsets (evaluation's
  +1,000,000, a resume's +iteration) work with any --seed the config accepts.
* ``AleAtari``: Gymnasium's ``ALE/<Game>-v5`` with AtariPreprocessing and the wrappers below in a
  Sync/AsyncVectorEnv (``--backend gymnasium``): the fallback when EnvPool is not installed.

``.venv/bin/pip install -c requirements.lock -e '.[atari]'`` (from the repository root) installs both (envpool, ale-py with its ROMs, opencv-python-headless).
"""

from __future__ import annotations

import difflib
import importlib.util
import numbers
import re
from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from ..config import install_hint
from .base import BatchedEnv, EnvError
from .gym_adapter import GymnasiumEnv, count_episodes, from_ale_py, suggestable_ids

INSTALL = install_hint("atari")
#: Atari v5 ids: 'Pong-v5' (EnvPool's naming) or 'ALE/Pong-v5' (Gymnasium's); the game in any case ('pong-v5')
_ATARI_ID = re.compile(r"^(ALE/)?([A-Za-z][A-Za-z0-9]*)-v5$")
#: the older ids of a game (ale-py registers Pong-v0/-v4 and PongNoFrameskip-v0/-v4; old Gym also
#: PongDeterministic-v0/-v4), which Proxima does not train: game_name refuses them with one line
_OLDER_ATARI_ID = re.compile(r"^([A-Z][A-Za-z0-9]*?)(?:NoFrameskip|Deterministic)?-v[04]$")
#: games the error message can name without either package installed
KNOWN_GAMES = ("Pong", "Breakout", "SpaceInvaders", "Seaquest", "BeamRider", "Qbert", "Enduro", "MsPacman",
               "Asteroids", "Freeway", "Boxing", "Alien", "Amidar", "Assault", "Asterix", "Atlantis", "Gopher")
STACK, SIZE, FRAME_SKIP, NOOP_MAX, MAX_STEPS = 4, 84, 4, 30, 27_000
#: frames a second of a video of agent steps (evaluate's --video): the ALE runs at 60 Hz and an agent step
#: is FRAME_SKIP of its frames, so a step's frame at 60 / FRAME_SKIP plays the game at its own speed
RENDER_FPS = 60 / FRAME_SKIP


def has_envpool() -> bool:
    return importlib.util.find_spec("envpool") is not None


def has_ale() -> bool:
    return importlib.util.find_spec("ale_py") is not None and importlib.util.find_spec("cv2") is not None


def game_name(env_id: str) -> Optional[str]:
    """'Pong' for 'Pong-v5' / 'ALE/Pong-v5' when it names an Atari game, else None. Game names match
    without regard to case (``pong-v5``, ``BreakOut-v5``). With neither EnvPool nor ale-py installed
    to ask, a ``<Name>-v5`` outside KNOWN_GAMES that Gymnasium does not register either
    (``Tennis-v5``) is an EnvError: :func:`unknown_v5_id`. So is an older id of a game (``Pong-v4``,
    ``PongNoFrameskip-v4``, ale-py's own): :func:`older_atari_id_line`; and, with either installed,
    an ``ALE/<Name>-v5`` whose game neither has (:func:`unknown_game_line`), before any build."""
    older = _OLDER_ATARI_ID.match(env_id)
    if older is not None and not _registered_elsewhere(env_id):
        game = older.group(1)
        if game in KNOWN_GAMES or _listed_game(game):
            raise EnvError(older_atari_id_line(env_id, game))
        return None
    m = _ATARI_ID.match(env_id)
    if m is None:
        return None
    prefixed, game = bool(m.group(1)), m.group(2)
    if not prefixed and _registered_elsewhere(env_id):  # someone's own 'pong-v5' is theirs, not the game
        return None
    known = {g.lower(): g for g in KNOWN_GAMES}.get(game.lower())
    if known is not None:
        return known
    listed = _listed_game(game)
    if listed:
        return game
    if listed is False:
        if prefixed:  # ALE/ says it is meant as a game: a typo is told here, not by the backend's build
            raise EnvError(unknown_game_line(env_id, game))
        return None  # the adapter's unknown-id line, whose near misses include the games (suggestable_ids)
    if prefixed:
        return game  # nothing installed to ask: make_atari says what to install
    if game[0].islower() or env_id in gym.registry:  # lower case: no more a game than any other unknown id
        return None
    raise unknown_v5_id(env_id)


def _listed_game(game: str) -> Optional[bool]:
    """Whether EnvPool's Atari list (when installed) or else ale-py's has ``game`` (in any case: the
    two spell TicTacToe3D differently); None with neither installed."""
    # EnvPool also has 'HalfCheetah-v5' & co: only its Atari list counts
    if has_envpool():
        return game.lower() in _envpool_games()
    if importlib.util.find_spec("ale_py") is not None:
        return game.lower() in _ale_games()
    return None


def known_games() -> dict:
    """{lower-case name: name} of every game an id may name here: KNOWN_GAMES, and ale-py's and EnvPool's
    lists where installed (the near misses of a typo)."""
    games = {g.lower(): g for g in KNOWN_GAMES}
    # a broken install (its import fails) must not turn a "did you mean" into a traceback: building says why
    for installed, listed in ((importlib.util.find_spec("ale_py") is not None, _ale_games), (has_envpool(), _envpool_games)):
        if installed:
            try:
                games.update(listed())
            except Exception:  # noqa: BLE001 - any import-time failure of a third-party package
                pass
    return games


def game_ids() -> set:
    """``<Game>-v5`` and ``ALE/<Game>-v5`` of every game of :func:`known_games` (suggestable_ids' Atari ids)."""
    return {f"{p}{g}-v5" for g in known_games().values() for p in ("", "ALE/")}


def near_games(env_id: str) -> list:
    """Up to 3 Atari ids close to ``env_id`` (compared in lower case, as games are matched), in the
    form given (``ALE/`` or not)."""
    m = _ATARI_ID.match(env_id)
    if m is None:
        return []
    prefix, games = m.group(1) or "", known_games()
    # the names alone: the ids' shared 'ALE/' and '-v5' would make any two games look alike
    close = difflib.get_close_matches(m.group(2).lower(), sorted(games), n=3, cutoff=0.8)
    return [f"{prefix}{games[c]}-v5" for c in close]


def unknown_game_line(env_id: str, game: str) -> str:
    """The line for ``ALE/<Name>-v5`` where neither installed backend has the game ``<Name>``."""
    close = near_games(env_id)
    where = "EnvPool's" if has_envpool() else "ale-py's"
    typo = f"; did you mean {', '.join(close)}?" if close else f"; {where} games: {_game_sample()}"
    return f"unknown env id '{env_id}': no Atari game '{game}' in {where} list{typo}"


def _game_sample() -> str:
    names = sorted(known_games().values())
    return ", ".join(names[:12]) + (f" ... ({len(names)} in all)" if len(names) > 12 else "")


def _envpool_games() -> dict:
    """{lower-case name: the name in EnvPool's task ids} of EnvPool's Atari games ('TicTacToe3d')."""
    from envpool.atari.registration import atari_game_list

    names = ("".join(w.capitalize() for w in g.split("_")) for g in atari_game_list)
    return {n.lower(): n for n in names}


def _ale_games() -> dict:
    """{lower-case name: the name in ale-py's ``ALE/<Name>-v5`` ids} of ale-py's games ('TicTacToe3D')."""
    _register_ale()
    return {k[4:-3].lower(): k[4:-3] for k in gym.registry if k.startswith("ALE/") and k.endswith("-v5")}


def envpool_game(game: str) -> str:
    """``game`` as EnvPool spells it in its ids: EnvPool writes TicTacToe3d where ale-py writes
    TicTacToe3D, and either id reaches either backend."""
    return _envpool_games().get(game.lower(), game)


def ale_game(game: str) -> str:
    """``game`` as ale-py spells it in its ``ALE/<Name>-v5`` ids (TicTacToe3d -> TicTacToe3D)."""
    return _ale_games().get(game.lower(), game)


#: EnvPool asserts that a seed is an int32; only 0..2**31-1 is used, as Proxima's seeds are not negative
ENVPOOL_SEEDS = 2**31


def envpool_seed(seed: int) -> int:
    """``seed`` folded into EnvPool's seed range (``seed % 2**31``): the run's offsets take a seed that
    validate accepts (up to 2**31 - 1) past it. Seeds below 2**31 are EnvPool's unchanged."""
    return int(seed) % ENVPOOL_SEEDS


def _registered_elsewhere(env_id: str) -> bool:
    """``env_id`` is in Gymnasium's registry, but not as one of ale-py's ids (``Ant-v4``: MuJoCo's)."""
    return env_id in gym.registry and not from_ale_py(gym.registry[env_id])


def older_atari_id_line(env_id: str, game: str) -> str:
    """The line for ``Pong-v4``, ``PongNoFrameskip-v4`` and the other v0/v4 ids of a game: Proxima
    trains ``Pong-v5`` with its own wrappers (make_atari: EnvPool or ALE/Pong-v5 with frameskip=1 and
    AtariPreprocessing), which the older ids' frame skips and sticky actions would contradict."""
    return (f"'{env_id}': Atari games are trained as {game}-v5 (or ALE/{game}-v5): Proxima applies CleanRL's Atari "
            f"wrappers itself (no frame skip in the id, {FRAME_SKIP} frames per step with a max over the last two, no sticky "
            f"actions, up to {NOOP_MAX} no-ops at reset, {SIZE}x{SIZE} grayscale, {STACK} frames stacked)")


def unknown_v5_id(env_id: str) -> EnvError:
    """The error for a ``<Name>-v5`` no installed package knows: a game outside KNOWN_GAMES
    (``Tennis-v5``), which needs the atari extra, or a typo of another id (``Halfcheetah-v5``),
    which Gymnasium's registry may name; the line offers both, since nothing here can tell them apart."""
    known = sorted(suggestable_ids() | {f"{g}-v5" for g in KNOWN_GAMES})
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.8)  # a typo's distance: Tennis is no Atlantis
    typo = f"did you mean {', '.join(close)}? " if close else ""
    return EnvError(f"unknown env id '{env_id}'; {typo}if this is an Atari game, it needs ale-py and opencv (or EnvPool), "
                    f"which are not installed: {INSTALL}")


#: the ALE settings ``--env-kwargs`` may change for an Atari id, under the names both EnvPool's make and
#: ale-py's gymnasium.make take: sticky actions (the probability that the emulator repeats the previous
#: action on a frame; Machado et al. 2018's protocol is 0.25), all 18 actions rather than the game's
#: minimal set, and the time limit in agent steps (ALE counts frames: it gets FRAME_SKIP times as many)
ATARI_KWARGS = ("repeat_action_probability", "full_action_space", "max_episode_steps")


def default_settings() -> dict:
    """ATARI_KWARGS' values in CleanRL's settings (read when called: MAX_STEPS is the module's)."""
    return {"repeat_action_probability": 0.0, "full_action_space": False, "max_episode_steps": MAX_STEPS}


#: the largest --env-kwargs max_episode_steps: int32's largest value counted in frames (4 a step)
MAX_STEPS_LIMIT = (2**31 - 1) // FRAME_SKIP


def atari_settings(env_id: str, env_kwargs: Optional[dict] = None) -> dict:
    """default_settings() updated with ``env_kwargs`` (``--env-kwargs``); EnvError naming the key for one
    outside ATARI_KWARGS or a value of the wrong type or range. Every other setting is Proxima's (the
    module's docstring): the CNN and the presets are built for its frame skip, image and stack."""
    from .gym_adapter import env_kwargs_words

    given = env_kwargs_words()  # --env-kwargs from a command, PPOConfig.env_kwargs or make_env's env_kwargs from Python
    settings = default_settings()
    for key, value in (env_kwargs or {}).items():
        if key not in ATARI_KWARGS:
            raise EnvError(f"{given}: the Atari id '{env_id}' takes only repeat_action_probability (sticky actions, "
                           f"0 to 1; Machado et al.'s protocol: 0.25), full_action_space (true/false) and "
                           f"max_episode_steps (agent steps, default {MAX_STEPS:,}), not '{key}': its other settings are "
                           "Proxima's (docs/atari.md)")
        # numbers.Real/Integral: a numpy number from Python (np.int64(100)) is a number; a bool is not
        if key == "repeat_action_probability":
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= value <= 1
            want, cast = "a number from 0 to 1", float
        elif key == "full_action_space":
            ok, want, cast = isinstance(value, bool), "true or false", bool
        else:
            # at most int32's largest in frames: EnvPool holds the limit as an int32, and ALE counts 4 frames a step
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and 1 <= value <= MAX_STEPS_LIMIT
            want, cast = f"an integer from 1 to {MAX_STEPS_LIMIT:,} (agent steps)", int
        if not ok:
            raise EnvError(f"{given}: {key} for the Atari id '{env_id}' must be {want}, got {value!r}")
        settings[key] = cast(value)
    return settings


def make_atari(env_id: str, num_envs: int, device, backend: str, vector: str = "sync", seed: Optional[int] = None,
               render_mode: Optional[str] = None, training: bool = True, env_kwargs: Optional[dict] = None) -> BatchedEnv:
    """N envs of the Atari game ``env_id`` on the chosen backend (auto: EnvPool when installed), with
    ``env_kwargs``' ALE settings (:func:`atari_settings`)."""
    game = game_name(env_id)
    settings = atari_settings(env_id, env_kwargs) if env_kwargs else None  # None: the defaults
    chosen = backend
    if backend == "auto":
        backend = "envpool" if has_envpool() else "gymnasium"
    if backend == "envpool":
        if not has_envpool():
            from .gym_adapter import backend_words

            # --backend envpool from a command, backend='envpool' from Python (make_env's argument, PPOConfig's field)
            raise EnvError(f"{backend_words('envpool')} needs EnvPool, which is not installed{_typo(env_id, game)}; {INSTALL}")
        return EnvPoolAtari(env_id, game, num_envs, device, seed, render_mode, training, settings)
    if not has_ale():
        # EnvPool is the alternative only where the backend was left to choose (auto), not under --backend gymnasium
        alternative = " (or EnvPool)" if chosen == "auto" else ""
        raise EnvError(f"env '{env_id}' needs ale-py and opencv{alternative}{_typo(env_id, game)}; {INSTALL}")
    return AleAtari(env_id, game, num_envs, device, vector, seed, render_mode, training, settings)


def _typo(env_id: str, game: str) -> str:
    """', unless it is a typo of ALE/Pong-v5' for a game outside KNOWN_GAMES close to one of them: with
    nothing installed to ask, a typo would otherwise cost the whole install to find out."""
    if game.lower() in {g.lower() for g in KNOWN_GAMES}:
        return ""
    close = near_games(env_id)
    return f", unless it is a typo of {' or '.join(close)}" if close else ""


# ------------------------------------------------------------------------------------ EnvPool
class EnvPoolAtari(BatchedEnv):
    """EnvPool's batched ALE as a BatchedEnv: (N, 4, 84, 84) uint8 observations on ``device``."""

    backend = "envpool"
    can_save_state = False
    render_fps = RENDER_FPS

    def __init__(self, env_id: str, game: str, num_envs: int, device, seed: Optional[int] = None,
                 render_mode: Optional[str] = None, training: bool = True, settings: Optional[dict] = None):
        import envpool

        self.env_id, self.num_envs, self.device = env_id, int(num_envs), torch.device(device)
        self.training = training
        self._seed = 0 if seed is None else int(seed)
        kw = dict(render_mode=render_mode) if render_mode else {}
        settings = dict(settings or default_settings())  # EnvPool's time limit counts agent steps, as the setting does
        if not settings["full_action_space"]:  # EnvPool's default: named only when asked for
            del settings["full_action_space"]
        kw.update(settings)
        # EnvPool's default is a thread per env; more threads than usable cores (affinity mask, cgroup quota) only contend
        from ..cpuinfo import usable_cpus

        threads = min(self.num_envs, usable_cpus())

        def make(seed: int):
            try:
                # episodic_life also in evaluation: EnvPool's reset after a lost life is what presses
                # FIRE; step() hides those ends there (training=False: an episode is a full game)
                return envpool.make(f"{envpool_game(game)}-v5", env_type="gymnasium", num_envs=self.num_envs,
                                    seed=envpool_seed(seed), num_threads=threads,
                                    episodic_life=True, reward_clip=training, stack_num=STACK, frame_skip=FRAME_SKIP,
                                    noop_max=NOOP_MAX, img_height=SIZE, img_width=SIZE, gray_scale=True, **kw)
            except Exception as e:
                raise EnvError(f"building {self.num_envs} x '{env_id}' with EnvPool raised {type(e).__name__}: {e}") from None

        self._make = make
        self.envs = make(self._seed)
        self.single_observation_space = gym.spaces.Box(0, 255, (STACK, SIZE, SIZE), np.uint8)
        self.single_action_space = gym.spaces.Discrete(int(self.envs.action_space.n))
        self._game_return = np.zeros(self.num_envs, dtype=np.float64)
        self._game_length = np.zeros(self.num_envs, dtype=np.int64)
        self._started = False

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        """New games in every env, their statistics from zero: EnvPool 1.2.5's reset restarts a game
        in progress (its force_reset), the envs' random streams going on. A seeded reset also builds
        the pool anew with that seed (reset(seed=s) twice gives the same obs, as on Gymnasium's ALE)."""
        if seed is not None and (self._started or int(seed) != self._seed):
            # EnvPool seeds its envs only when it builds them
            self.close()
            self.envs, self._seed = self._make(int(seed)), int(seed)
        self._started = True
        # the abandoned games' points and steps would otherwise open the next games' statistics
        self._game_return[:] = 0
        self._game_length[:] = 0
        obs, info = self.envs.reset()
        return torch.as_tensor(self._in_id_order(obs, info["env_id"]), device=self.device)

    def _in_id_order(self, x: np.ndarray, env_id: np.ndarray) -> np.ndarray:
        return x if np.array_equal(env_id, np.arange(len(env_id))) else x[np.argsort(env_id)]

    def step(self, action: torch.Tensor):
        a = action.detach().cpu().numpy().astype(np.int32).reshape(self.num_envs)
        obs, reward, terminated, truncated, info = self.envs.step(a)
        order = info["env_id"]
        obs, reward, terminated, truncated = (self._in_id_order(x, order) for x in (obs, reward, terminated, truncated))
        raw_reward, game_over = (self._in_id_order(np.asarray(info[k]), order) for k in ("reward", "terminated"))
        done = np.logical_or(terminated, truncated)
        final = obs
        if done.any():
            # EnvPool resets a finished env on its next step (the action is ignored); do that step now
            # for the finished envs only, so the returned obs starts their next episode (same-step)
            ids = np.flatnonzero(done).astype(np.int32)
            first, *_, rinfo = self.envs.step(np.zeros(len(ids), dtype=np.int32), ids)
            obs = obs.copy()
            obs[rinfo["env_id"]] = first
        game_over = np.logical_or(game_over.astype(bool), truncated)
        ep_ret, ep_len = self._full_games(raw_reward, game_over)
        if not self.training:  # evaluation: an episode is a game; a lost life is no end
            terminated = np.logical_and(terminated, game_over)
        dev = self.device
        info_out = {"final_obs": torch.as_tensor(final, device=dev),
                    "episode_return": torch.as_tensor(ep_ret, dtype=torch.float32, device=dev),
                    "episode_length": torch.as_tensor(ep_len, device=dev)}
        return (torch.as_tensor(obs, device=dev), torch.as_tensor(reward, dtype=torch.float32, device=dev),
                torch.as_tensor(terminated.astype(bool), device=dev), torch.as_tensor(truncated.astype(bool), device=dev), info_out)

    def _full_games(self, raw_reward: np.ndarray, game_over: np.ndarray):
        """Per-game return (unclipped) and length, non-zero only where a game just ended."""
        return count_episodes(self._game_return, self._game_length, raw_reward, game_over)

    def render(self, index: int = 0):
        """Env ``index``'s rgb_array frame; None when EnvPool has none to give (render not implemented),
        EnvError with its reason when rendering fails otherwise (as GymnasiumEnv.render)."""
        try:
            frame = self.envs.render(env_ids=[index])
        except NotImplementedError:
            return None
        except Exception as e:
            raise EnvError(f"env '{self.env_id}' cannot render: its render() raised {type(e).__name__}: {e}") from None
        return None if frame is None else np.asarray(frame)[0]

    def close(self) -> None:
        close = getattr(self.envs, "close", None)
        if close is not None:
            close()


# ------------------------------------------------------------------------------------ Gymnasium ALE
def _register_ale() -> None:
    import ale_py

    gym.register_envs(ale_py)


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (terminated) while training; reset() then continues the same
    game with a no-op step instead of a new game, unless the game is really over or the reset is
    seeded (a seeded reset is a new game: reset(seed=s) twice gives the same obs). The real end is
    ``info["game_over"]``. ``stats``: the GameStats inside, which counts the no-op's reward in the
    game's score but not the step in its length (not the agent's); a game that the no-op itself
    ends is reported in the reset's info (``game_return``, ``game_length``)."""

    def __init__(self, env: gym.Env, stats: Optional["GameStats"] = None):
        super().__init__(env)
        self.lives, self.game_over = 0, True
        self.stats = stats

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = self.env.unwrapped.ale.lives()
        terminated = bool(terminated or 0 < lives < self.lives)
        self.lives = lives
        return obs, reward, terminated, truncated, {**info, "game_over": self.game_over}

    def reset(self, **kwargs):
        if self.game_over or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
            self.game_over = False
        else:
            obs, _, terminated, truncated, info = _extra_step(self.env, self.stats, 0)
            if terminated or truncated:  # the no-op itself ended the game: its numbers go with the new game's reset
                obs, new_info = self.env.reset(**kwargs)
                info = {**new_info, **_game_numbers(info)}
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class GameStats(gym.Wrapper):
    """Full-game return (unclipped rewards) and length, put into the info of the step that ends the
    game (``game_return``, ``game_length``); with EpisodicLife outside, a game spans several episodes.

    The length counts the agent's steps, as EnvPool's (and the 27,000-step limit) do: the FIRE
    steps the wrappers outside take for the agent (FireReset, FireAfterLifeLoss: through
    :func:`_extra_step`) are not counted; their rewards are, as the game's score has them."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.ret, self.length = 0.0, 0
        self.counting = True  #: False during a step a wrapper takes for the agent (not one of its own)

    def reset(self, **kwargs):
        """A new game (EpisodicLife continues a game after a lost life with a step, not a reset): a
        game abandoned mid-way (a seeded reset, an evaluation's reset) leaves nothing in its numbers.
        AtariPreprocessing's no-ops are inside the reset, no agent's steps, as EnvPool's are."""
        obs, info = self.env.reset(**kwargs)
        self.ret, self.length = 0.0, 0
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.ret += float(reward)
        self.length += self.counting
        if terminated or truncated:  # the game's own end: the lives wrappers are outside
            info = {**info, "game_return": self.ret, "game_length": self.length}
            self.ret, self.length = 0.0, 0
        return obs, reward, terminated, truncated, info


def _game_numbers(info: dict) -> dict:
    """The ``game_return`` and ``game_length`` of ``info`` (a game GameStats saw end), else {}."""
    return {k: info[k] for k in ("game_return", "game_length") if k in info}


def _extra_step(env: gym.Env, stats: Optional[GameStats], action: int):
    """``env.step(action)`` for a step the agent did not choose (a FIRE press): not in ``stats``' length."""
    if stats is None:
        return env.step(action)
    before, stats.counting = stats.counting, False
    try:
        return env.step(action)
    finally:
        stats.counting = before


class FireReset(gym.Wrapper):
    """Press FIRE (then one more action) after a reset, for games that wait for it (Breakout); those
    steps are not the agent's (``stats``: the GameStats inside, which does not count them). A game
    that ends during the reset (a press, or EpisodicLife's no-op, loses its last life or meets the
    time limit) is reported in the reset's info (``game_return``, ``game_length``)."""

    def __init__(self, env: gym.Env, stats: Optional[GameStats] = None):
        super().__init__(env)
        self.stats = stats

    def reset(self, **kwargs):
        _, info = self.env.reset(**kwargs)
        # a game that ends in here (in EpisodicLife's no-op, on a press, by the time limit on a press)
        # is reported by nothing but this reset's info: the step that ended the episode carries it
        ended = _game_numbers(info)
        for action in (1, 2):
            obs, _, terminated, truncated, info = _extra_step(self.env, self.stats, action)
            if terminated or truncated:
                ended = _game_numbers(info) or ended
                obs, info = self.env.reset(**kwargs)
                # one info holds one game: two would have to end within these 3 env steps
                ended = _game_numbers(info) or ended
        return obs, {**info, **ended}


class FireAfterLifeLoss(gym.Wrapper):
    """Evaluation without EpisodicLife: after a lost life (game not over) press FIRE within the same
    step, as the reset after a lost life does in training; its reward is added to the step's, and
    the step counts once in the game's length (``stats``: the GameStats inside)."""

    def __init__(self, env: gym.Env, stats: Optional[GameStats] = None):
        super().__init__(env)
        self.lives = 0
        self.stats = stats

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        if not (terminated or truncated) and 0 < lives < self.lives:
            obs, fire_reward, terminated, truncated, info = _extra_step(self.env, self.stats, 1)
            reward = float(reward) + float(fire_reward)
        self.lives = lives
        return obs, reward, terminated, truncated, info


class ClipRewardSign(gym.RewardWrapper):
    """Reward -> its sign (-1, 0, 1), as the DQN/PPO Atari settings train on."""

    def reward(self, reward):
        return float(np.sign(reward))


def ale_env_fn(game: str, render_mode: Optional[str], training: bool, settings: Optional[dict] = None):
    """A factory for one ALE env with CleanRL's wrappers, outermost last; ``settings``: atari_settings'."""
    settings = dict(settings or default_settings())

    def make() -> gym.Env:
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        _register_ale()
        # ALE's limit counts emulator frames, the reset's no-ops among them: FRAME_SKIP per agent step
        env = gym.make(f"ALE/{ale_game(game)}-v5", frameskip=1,
                       repeat_action_probability=settings["repeat_action_probability"],
                       full_action_space=settings["full_action_space"],
                       max_episode_steps=settings["max_episode_steps"] * FRAME_SKIP, render_mode=render_mode)
        # no-ops at reset, skip 4 with a max over the last two frames, 84x84 grayscale
        env = AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=SIZE, grayscale_obs=True,
                                 terminal_on_life_loss=False, scale_obs=False)
        return FrameStackObservation(game_wrappers(env, training), STACK)

    return make


def game_wrappers(env: gym.Env, training: bool) -> gym.Env:
    """Lives, full-game statistics, FIRE and the reward clip around one (preprocessed) ALE env, as
    ale_env_fn stacks them; ``env.unwrapped`` has ALE's ``ale.lives()`` and ``get_action_meanings()``."""
    # inside EpisodicLife (it sees the no-op after a lost life too) and the reward clip: unclipped full games
    env = stats = GameStats(env)
    if training:
        env = EpisodicLife(env, stats)
    if "FIRE" in env.unwrapped.get_action_meanings():
        # their FIRE presses are not agent steps: GameStats' length leaves them out
        env = FireReset(env, stats) if training else FireReset(FireAfterLifeLoss(env, stats), stats)
    if training:
        env = ClipRewardSign(env)
    return env


class AleAtari(GymnasiumEnv):
    """Gymnasium's ALE with CleanRL's wrappers in a Sync/AsyncVectorEnv; full-game statistics."""

    backend = "gymnasium"
    render_fps = RENDER_FPS  # not the ALE env's metadata: its step here is FRAME_SKIP frames

    def __init__(self, env_id: str, game: str, num_envs: int, device, vector: str = "sync", seed: Optional[int] = None,
                 render_mode: Optional[str] = None, training: bool = True, settings: Optional[dict] = None):
        super().__init__(env_id, num_envs, device=device, vector=vector, seed=seed, render_mode=render_mode,
                         # three arguments for the defaults: the call ale_env_fn stand-ins take
                         env_fn=ale_env_fn(game, render_mode, training, *([settings] if settings else [])))

    def _episode_stats(self, reward: np.ndarray, done: np.ndarray, info: dict):
        """Full games from GameStats: they end on a step that also ends an episode, so their numbers
        are in the vector env's ``final_info``; or, rarely, in the reset after a lost life (EpisodicLife's
        no-op, FireReset's presses), then in that reset's info, on the row of the step that lost the life."""
        ep_ret, ep_len = np.zeros(self.num_envs), np.zeros(self.num_envs, dtype=np.int64)
        for where in (info, info.get("final_info", {})):  # at most one of them holds a row's game
            mask = np.asarray(where.get("_game_return", np.zeros(self.num_envs, dtype=bool)), dtype=bool) & done
            ep_ret = np.where(mask, np.asarray(where.get("game_return", ep_ret), dtype=np.float64), ep_ret)
            ep_len = np.where(mask, np.asarray(where.get("game_length", ep_len), dtype=np.int64), ep_len)
        return ep_ret, ep_len
