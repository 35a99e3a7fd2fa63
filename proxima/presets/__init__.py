"""Presets: tuned hyperparameters per env id, as YAML files in this folder.

Format (one file per env family)::

    CartPole-v1:                 # env id
      default:                   # preset name; "default" is used when --preset is not given
        description: one line shown by `proxima presets`
        config:                  # any PPOConfig fields; CLI flags override them
          num_envs: 4
          total_timesteps: 500000
        note: optional; one line a run of the preset prints at its start (what it is not known to do)

A YAML alias (``*name``) in a preset file is refused, naming the file and its line, as in a --config
file: write each preset's config out.

Resolution: PPOConfig defaults <- the env's preset (``default`` unless ``--preset NAME``; ``--preset none``:
no preset) <- flags.
Gymnasium's Atari ids (``ALE/Pong-v5``) take the presets of EnvPool's (``Pong-v5``); an Atari game
without an entry of its own (``SpaceInvaders-v5``, ``ALE/Seaquest-v5``) takes the Atari family's,
listed under ``<Game>-v5`` (atari.yaml).
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

from ..config import ConfigError, PPOConfig, as_given, from_dict

_DIR = Path(__file__).parent


@lru_cache(maxsize=1)
def all_presets() -> dict:
    """env id -> preset name -> {"description": str, "config": dict, "file": str}; ConfigError naming the
    file and line of one that is not valid YAML or not shaped as the module's docstring shows."""
    out: dict = {}
    for path in sorted(_DIR.glob("*.yaml")):
        text, data = _read(path)
        for env_id, presets in data.items():
            if not isinstance(presets, dict):  # `CartPole-v1: 3` (or nothing under it)
                raise _not_a_mapping(path, text, [env_id], f"the entry of {env_id}", presets,
                                     "preset name -> {description, config}")
            for name, body in presets.items():
                if not isinstance(body, dict):  # `default: fast`: a preset is its description and config
                    raise _not_a_mapping(path, text, [env_id, name], f"preset {env_id}/{name}", body,
                                         "description: and config:")
                config = body.get("config")
                if config is not None and not isinstance(config, dict):
                    raise _not_a_mapping(path, text, [env_id, name, "config"], f"the config of preset {env_id}/{name}",
                                         config, "PPOConfig field -> value")
                out.setdefault(env_id, {})[name] = {"description": body.get("description", ""), "config": config or {}, "file": path.name}
                if body.get("note"):  # a run's start says it (trainer._note_preset): MountainCar-v0's default never solves
                    out[env_id][name]["note"] = str(body["note"])
    return out


def _read(path: Path) -> tuple:
    """The text and YAML (a mapping) of preset file ``path``, or ConfigError naming it and the line: every
    train reads all the presets (to find its env's), so a raw yaml traceback stopped runs of envs with no preset."""
    text = path.read_text()
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except _AliasError as e:
        raise ConfigError(f"preset file {path}: {e}; write the value out, or restore the file (every proxima train "
                          "reads it)") from None
    except RecursionError:  # PyYAML composes nested collections recursively (thousands of '[')
        raise ConfigError(f"preset file {path}: not valid YAML (nested too deeply); restore the file (every proxima "
                          "train reads it)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        why = " ".join(str(getattr(e, "problem", None) or e).split())
        raise ConfigError(f"preset file {path}: not valid YAML{where} ({why}); fix that line or restore the file "
                          "(every proxima train reads it)") from None
    if data is None:  # an empty file (or only comments): no presets
        return text, {}
    if not isinstance(data, dict):
        raise _not_a_mapping(path, text, [], "the top level", data, "env id -> presets")
    return text, data


class _AliasError(yaml.YAMLError):
    """A YAML alias (``*name``) in a preset file."""


class _NoAliasLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases, as config.load_yaml does for --config: nested aliases make a
    few hundred bytes stand for billions of values (a 407-byte preset file took 5.5 GB to describe). Numbers
    and a key given twice are read as safe_load reads them (_line_of finds the line of the value it kept)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise _AliasError(f"holds a YAML alias (*{event.anchor}, line {event.start_mark.line + 1}), which preset "
                              "files may not")
        return super().compose_node(parent, index)


def _not_a_mapping(path: Path, text: str, keys: list, what: str, value, wanted: str) -> ConfigError:
    """The one line for a part of preset file ``path`` (the value under ``keys``) that is not a mapping:
    its line, what it holds instead, and the shape wanted (as the module's docstring shows)."""
    line = _line_of(text, keys)
    where = f" at line {line}" if line is not None else ""
    kind = type(value).__name__
    held = "empty" if value is None else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({_short(value)})"
    return ConfigError(f"preset file {path}{where}: {what} is {held}, not a mapping of {wanted}; fix it as the format "
                       "in proxima/presets/__init__.py shows, or restore the file (every proxima train reads it)")


def _short(value) -> str:
    """``value``'s repr (its whitespace runs made one space), cut to 40 characters: built piece by piece
    (_repr_pieces) and stopped once past them, so a long or widely shared value costs no more than its start."""
    text = ""
    for piece in _repr_pieces(value):
        text += piece
        if len(text) > 200:  # enough for 40 once whitespace runs are made one space
            break
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:37] + "..."


def _repr_pieces(value):
    """repr(value) in pieces, for the kinds safe_load builds (a list, a mapping, a set, !!pairs' tuples, a
    scalar); a long string's only as far as its first 60 characters, which is all _short keeps."""
    if isinstance(value, (list, tuple, set)) and (type(value) is not set or value):
        opening, closing = {list: "[]", tuple: "()", set: "{}"}[type(value)]
        yield opening
        for i, item in enumerate(value):
            yield ", " if i else ""
            yield from _repr_pieces(item)
        yield "," + closing if type(value) is tuple and len(value) == 1 else closing
    elif isinstance(value, dict):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _repr_pieces(key)
            yield ": "
            yield from _repr_pieces(item)
        yield "}"
    elif isinstance(value, (str, bytes)):
        yield repr(value[:60])
    else:
        yield repr(value)


def _line_of(text: str, keys: list):
    """The 1-based line of the value under ``keys`` (the top level for []) in YAML ``text``, from the nodes
    yaml.compose gives: a key is matched by the value safe_load reads it as (``on:`` is True, ``0x10:`` 16),
    and a key given twice at its last occurrence, the one safe_load keeps. None when not found."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    reader = yaml.SafeLoader("")
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        found = None
        for k, v in node.value:
            try:
                same = isinstance(k, yaml.ScalarNode) and reader.construct_object(k) == key
            except yaml.YAMLError:
                same = False
            if same:
                found = v  # the last wins, as in the mapping safe_load builds
        if found is None:
            return None
        node = found
    return node.start_mark.line + 1


#: the entry of atari.yaml for every Atari game without one of its own (CleanRL's settings are one set for all games)
ATARI_FAMILY = "<Game>-v5"


#: the --preset that applies none (not even the env's default): a zoo or CleanRL translation given by
#: --config then trains on PPOConfig's defaults, not on the default preset's backend or minibatching
NO_PRESET = "none"


def preset_env_id(env_id: str) -> str:
    """The env id whose presets apply to ``env_id``: Gymnasium's ``ALE/<Game>-v5`` takes ``<Game>-v5``'s
    (EnvPool's name for the same game, under which atari.yaml lists it); an Atari game without an
    entry takes the Atari family's (ATARI_FAMILY), not the classic-control defaults."""
    if env_id.startswith("ALE/") and env_id.endswith("-v5"):
        env_id = env_id[len("ALE/"):]
    if env_id not in all_presets() and _is_atari_game(env_id):
        return ATARI_FAMILY
    return env_id


def _is_atari_game(env_id: str) -> bool:
    """Whether ``<Game>-v5`` names an Atari game as envs/atari.py recognises one (a game it knows, or
    one of EnvPool's or ALE's lists when installed). Other ids are not looked up (no import); an id
    no installed package knows is none (building it says why, with the install hint)."""
    if not env_id.endswith("-v5"):
        return False
    from ..envs import EnvError
    from ..envs.atari import game_name

    try:
        return game_name(env_id) is not None
    except EnvError:
        return False


def presets_for(env_id: str) -> dict:
    """preset name -> preset of ``env_id`` (``ALE/Pong-v5``: Pong-v5's); {} when it has none."""
    return all_presets().get(preset_env_id(env_id), {})


def other_versions(env_id: str) -> list:
    """The other versions of ``env_id`` that have presets (``HalfCheetah-v4``: ['HalfCheetah-v5']) when
    ``env_id`` itself has none; [] otherwise (a module:Class id has no versions)."""
    if presets_for(env_id) or ":" in env_id:
        return []
    base, sep, _ = env_id.rpartition("-v")
    if not sep or not base:
        return []
    return sorted(e for e in all_presets() if e.rpartition("-v")[0] == base and e != env_id)


def _other_versions_text(others: list, name: str | None = None) -> str:
    """'CartPole-v1 has presets (default, fast, gpu): `proxima presets CartPole-v1 NAME` prints one's
    settings (proxima/presets/classic.yaml)': each preset by name (CartPole-v1's three are not "one"),
    and the command that prints the values, not only their names (``name``, when the first version has
    a preset of that name, instead of NAME)."""
    def named(other: str) -> str:
        names = sorted(all_presets()[other])
        return f"{other} has {'presets' if len(names) > 1 else 'a preset'} ({', '.join(names)})"

    names = sorted(all_presets()[others[0]])
    first = all_presets()[others[0]][names[0]]["file"]
    which, whose = (names[0], "its") if len(others) == 1 and len(names) == 1 else ("NAME", "one's")
    if name in names:  # --preset fast of CartPole-v0: CartPole-v1's fast is the one meant
        which, whose = name, "its"
    return (f"{' and '.join(named(o) for o in others)}: `proxima presets {others[0]} {which}` prints {whose} settings "
            f"(proxima/presets/{first})")


def other_version_note(env_id: str) -> str | None:
    """A note when ``env_id`` has no preset but another version of the same env has
    (``HalfCheetah-v4``: the MuJoCo presets are for ``-v5``), else None: without it such a run trains
    PPOConfig's classic-control defaults (4 envs x 128 steps, no normalization) without a word."""
    others = other_versions(env_id)
    if not others:
        return None
    one = len(others) == 1 and len(all_presets()[others[0]]) == 1
    return (f"no preset for {env_id}: PPOConfig's defaults (4 envs x 128 steps, no normalization) and your flags; "
            f"{_other_versions_text(others)}; give {'them' if one else 'the settings'} as flags or in --config FILE.yaml")


def unknown_preset(env_id: str, name: str, python: bool = False) -> str:
    """The one line for a preset ``name`` that ``env_id`` does not have: its presets, the close one meant
    (``fsat``: fast), and for an env without presets the other version that has them (other_versions).
    ``python``: named as resolve's argument (``preset='fsat'``), not the flag (``--preset 'fsat'``)."""
    import difflib

    presets = presets_for(env_id)
    given = as_given("preset", name, python, quote=True)
    if presets:
        line = f"{given}: no such preset for {env_id} (available: {', '.join(sorted(presets))}; see `proxima presets`)"
    else:  # 'available: none' read as the preset named none
        cased = [e for e in all_presets() if e.lower() == str(env_id).lower()]
        if cased:  # cartpole-v1: the env id is the mistake, not the preset (said first, as building the env would)
            return (f"unknown env id '{env_id}'; did you mean {cased[0]}? ({given} is looked up under the env id as "
                    f"given: `proxima presets {cased[0]}` lists {cased[0]}'s)")
        line = f"{given}: no such preset: {env_id} has no presets (see `proxima presets`)"
    close = difflib.get_close_matches(str(name), sorted(presets), n=1)
    if close:
        return f"{line}; did you mean {as_given('preset', close[0], python)}?"
    others = other_versions(env_id)
    if others:
        return f"{line}; {_other_versions_text(others, name)}"
    return line


def preset_config(env_id: str, name: str) -> dict:
    """The fields preset ``name`` of ``env_id`` sets, as its YAML file gives them (a copy); ConfigError
    (unknown_preset's line) when there is no such preset."""
    presets = presets_for(env_id)
    if name not in presets:
        raise ConfigError(unknown_preset(env_id, name))
    return copy.deepcopy(presets[name]["config"])


def preset_names(env_id: str) -> list[str]:
    return sorted(presets_for(env_id))


def resolve(env_id: str, preset: str | None = None, base: PPOConfig | None = None, *, python: bool = True) -> PPOConfig:
    """The config for ``env_id`` with its preset applied (``default`` when preset is None) on top of
    ``base`` (PPOConfig's defaults when None), which is left as it was.

    The preset wins: every field the preset sets replaces ``base``'s, whatever ``base`` holds
    (``resolve("CartPole-v1", "fast", PPOConfig(lr=1e-2)).lr`` is the preset's 0.008), as the CLI's
    order is defaults < preset < flags. Set your own values on the result:
    ``cfg = resolve(env_id, "fast"); cfg.lr = 1e-2``. (A field of ``base`` cannot tell a value
    you set from a default, so ``base`` does not decide which fields the preset may change.)
    ``preset="none"`` applies no preset, not even the env's default: ``base`` (or PPOConfig's defaults).
    ``preset="default"`` of an env without presets is None's: no preset.

    An unknown preset is a ConfigError naming this call's argument (``preset='fsat': no such preset
    ...``); ``python=False`` names the ``--preset`` flag instead, for a command line's callers."""
    # copy.copy keeps which source set each field (from_dict's _sources), which dataclasses.replace drops
    cfg = copy.copy(base) if base is not None else PPOConfig()
    cfg.env_id = env_id  # as given: ALE/Pong-v5 stays Gymnasium's id, with Pong-v5's presets
    key = preset_env_id(env_id)
    presets = presets_for(env_id)
    if preset is None:
        if "default" in presets:
            cfg = from_dict(presets["default"]["config"], cfg, source=f"preset {key}/default")
        return cfg
    if preset == NO_PRESET and preset not in presets:  # the env's default off: PPOConfig's values (or base's) as they are
        cfg._preset = NO_PRESET  # asked for: train() does not note the default preset it leaves out (unapplied_note)
        return cfg
    if preset == "default" and not presets:  # what None means for an env without presets: its default is none
        return cfg
    if preset not in presets:
        raise ConfigError(unknown_preset(env_id, preset, python))
    return from_dict(presets[preset]["config"], cfg, source=f"preset {key}/{preset}")


def unapplied_note(cfg: PPOConfig) -> str | None:
    """The note for a Python caller's ``train(PPOConfig(env_id=...))`` of an env with a ``default`` preset that
    the config was not built from (resolve applies presets; the CLI does, train() does not): the preset's
    fields where the config still holds PPOConfig's default, and the call that applies it. None when
    resolve built the config (any preset, ``"none"`` included), or no such field differs (CartPole-v1's
    default is PPOConfig's own values; the total, and a field whose default ``auto`` picks as the preset
    does, aside): the config already trains as the preset would, or the caller chose its values."""
    sources = getattr(cfg, "_sources", None) or {}
    if getattr(cfg, "_preset", None) is not None or any(str(s).startswith("preset ") for s, _ in sources.values()):
        return None
    preset = presets_for(cfg.env_id).get("default")
    if preset is None:
        return None
    default = PPOConfig()
    differ = {name: value for name, value in preset["config"].items()
              if name != "total_timesteps" and getattr(default, name, None) != "auto"
              and getattr(cfg, name, None) == getattr(default, name, None) and getattr(default, name, None) != value}
    if not differ:
        return None
    sets = ", ".join(f"{name}={value!r}" for name, value in differ.items())
    call, least = f"cfg = proxima.presets.resolve({cfg.env_id!r})", ""
    own_total = "total_timesteps" in sources or cfg.total_timesteps != default.total_timesteps  # PPOConfig's 500,000 is no one's choice
    if own_total and cfg.total_timesteps != preset["config"].get("total_timesteps"):  # the caller's own total, set after: the preset's would win
        tuned = resolve(cfg.env_id)
        batch = tuned.num_envs * tuned.num_steps
        if cfg.total_timesteps < batch:  # the caller's total is refused under the preset's batch: the call must train
            least = f" (at least its batch, {tuned.num_envs} envs x {tuned.num_steps} steps)"
        call += f"; cfg.total_timesteps = {max(cfg.total_timesteps, batch)}"
    return (f"{cfg.env_id} has a tuned preset (default) that PPOConfig(...) does not apply: it sets {sets}, where this run "
            f"keeps PPOConfig's defaults; `{call}`{least} applies it as `proxima train {cfg.env_id}` "
            "does (your own fields set on cfg after it)")
