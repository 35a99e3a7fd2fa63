"""Command line: ``proxima train | eval | resume | presets | bench | check-env | doctor | plot | report | rlhf``.

Thin by design: parse, build a config, call the library. Errors a user can act on print one line
``proxima <cmd>: error: ...`` and exit 2; an interrupted run exits 130 (SIGINT), 143 (SIGTERM), 129
(SIGHUP) or 138/140 (SIGUSR1/SIGUSR2) after writing its checkpoint (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Optional

from .config import (ALIASES, EVAL_SEED_OFFSET, FIELDS, FOREIGN_ADVICE, FOREIGN_NOTE_TEMPLATES, FOREIGN_OFF_ADVICE,
                     MAX_EVAL_STEPS, MAX_SEED, ConfigError, coerce, foreign_note, int_arg)
from .signals import BeforeTraining, TrainingInterrupted, ignore_stops, resumes, retire_before_training, say_stopped

EXIT_USAGE = 2


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped at spaces only: its textwrap breaks at hyphens too, and a flag named in a
    help text came out cut in two ("--eval-" at a line's end, "episodes" on the next), which neither
    reads as the flag nor can be found by searching the help for it."""

    def _split_lines(self, text, width):
        import textwrap

        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)

    def _fill_text(self, text, width, indent):  # a description or epilog, likewise
        import textwrap

        return textwrap.fill(self._whitespace_matcher.sub(" ", text).strip(), width, initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False)


class ArgParser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump), exit status 2, no prefix matching of flags
    (a typo like --learning-rat must be an error, not silently another flag) and help wrapped at
    spaces only (HelpFormatter): every subcommand's parser is one of these (build_parser)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        from .terminal import printable

        sys.stderr.write(f"{self.prog}: error: {printable(message)} (see {self.prog} --help)\n")
        sys.exit(EXIT_USAGE)


def _user_errors():
    from .checkpoint import CheckpointError
    from .diskspace import StorageError
    from .envs import EnvError
    from .population_report import PopulationError
    from .trainer import NonFiniteError
    from .video import VideoError

    return (ConfigError, EnvError, CheckpointError, NonFiniteError, StorageError, VideoError, PopulationError)


def fail(prog: str, message: str) -> int:
    from .terminal import printable

    sys.stderr.write(f"{prog}: error: {printable(str(message))}\n")
    return EXIT_USAGE


# ------------------------------------------------------------------------------------ train
def add_config_flags(p: argparse.ArgumentParser, recorded: bool = False, help_overrides: Optional[dict] = None) -> None:
    """One flag per PPOConfig field, help from the field's docstring; default=SUPPRESS so only
    the flags a user typed override the preset. ``recorded``: the command takes the run's recorded
    values (resume): --help says "default: the run's".
    ``help_overrides``: {field: help text} for fields whose meaning differs in this command."""
    from .config import RESUME_SAFE

    if recorded:  # --help tells the few flags a resume may change from the many it only checks
        changes = p.add_argument_group("what a resume may change", "these flags change the run from here on")
        checked = p.add_argument_group("the run's settings", "a flag here must give the run's own value (checked: "
                                       "another is refused, docs/reliability.md); the run continues as it trained")
    for name, f in FIELDS.items():
        if name == "env_id":
            continue
        group = p if not recorded else changes if name in RESUME_SAFE else checked
        flag = "--" + name.replace("_", "-")
        default = f.default if f.default is not f.default_factory else None
        help_text = f.metadata["help"] + other_names_text(name, ALIASES)
        if name in (help_overrides or {}):  # the whole text, default included
            group.add_argument(flag, dest=name, default=argparse.SUPPRESS, metavar=f.metadata.get("metavar", name.upper()),
                           help=help_overrides[name] + other_names_text(name, ALIASES))
            continue
        shown = f.default_factory() if callable(f.default_factory) else f.default
        if isinstance(shown, list):
            shown = ",".join(map(str, shown))
        if recorded:
            shown = "the run's"
        elif shown is None:
            shown = "none"  # the word the flag takes, which its help explains (none = never); argparse's None is no input
        # a help that names its own default (run_dir's runs/<env>__...) gets no second, contradicting one
        shown_help = help_text if "(default " in help_text else f"{help_text} (default: {shown})"
        if isinstance(default, bool):
            group.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=shown_help)
        else:
            choices = f.metadata.get("choices")
            metavar = "{" + ",".join(choices) + "}" if choices else f.metadata.get("metavar", name.upper())
            action = _OneNameOnly if name in ALIASES.values() else "store"
            group.add_argument(flag, dest=name, default=argparse.SUPPRESS, metavar=metavar, help=shown_help, action=action)
    for alias, name in ALIASES.items():  # hidden other names (--learning-rate), the ones a YAML key may use too
        p.add_argument("--" + alias.replace("_", "-"), dest=name, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                       action=_OneNameOnly)


def other_names_text(name: str, aliases: dict) -> str:
    """`` Also --learning-rate (Stable-Baselines3's name; not with --lr).`` for the --help of a field with
    another name (``aliases``: {alias: field}): the other flag is kept out of --help's list, where it
    would read as a second setting, yet a user reading --help should find the name they type."""
    others = ["--" + alias.replace("_", "-") for alias, field in aliases.items() if field == name]
    if not others:
        return ""
    return f" Also {', '.join(others)} (Stable-Baselines3's name; not with --{name.replace('_', '-')})."


class _OneNameOnly(argparse._StoreAction):
    """The flag of a field that has another name (--lr, --learning-rate: ALIASES): a command line giving
    both is refused, as a file giving both is; argparse would keep the last one typed, silently."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault("_names_typed", {})  # dest -> the first of its flags typed
        first = given.setdefault(self.dest, self.option_strings[0])
        if first != self.option_strings[0]:
            alias = next("--" + a.replace("_", "-") for a, name in ALIASES.items() if name == self.dest)
            field = "--" + self.dest.replace("_", "-")
            parser.error(f"both {alias} and {field} given ({alias} is {field}'s other name); keep one")
        super().__call__(parser, namespace, values, option_string)


DEFAULT_ENV = "CartPole-v1"


def typed_fields(args: argparse.Namespace) -> list:
    """The config fields whose flags a user typed, in the order typed: the flags default to SUPPRESS,
    so argparse sets only those, as it reads them."""
    return [name for name in vars(args) if name in FIELDS and name != "env_id"]


def typed_flags(args: argparse.Namespace) -> dict:
    """{field: value} of the config flags a user typed, in the order typed."""
    return {name: coerce_flag(args, name) for name in typed_fields(args)}


def coerce_flag(args: argparse.Namespace, name: str):
    """Field ``name``'s typed value, checked (config.coerce); a value refused is named by the flag typed:
    ``--learning-rate 'lin_1e-3'``, not the ``--lr`` the user never wrote (_OneNameOnly records which)."""
    from .config import ConfigError

    try:
        return coerce(name, getattr(args, name), source="flag")
    except ConfigError as e:
        own, flag = "--" + name.replace("_", "-"), vars(args).get("_names_typed", {}).get(name)
        if flag and flag != own and str(e).startswith(own + " "):
            raise ConfigError(flag + str(e)[len(own):]) from None
        raise


def config_from_args(args: argparse.Namespace, prog: str, notes: bool = False):
    """The config of train's args: defaults < the env's preset < --config FILE < flags. ``notes``: print
    train's note on a typed ENV_ID that is not the file's (cmd_train's call; the --nproc launcher's
    checks read the config again, and would print it twice)."""
    from . import presets
    from .config import PPOConfig, from_dict, load_config_file
    from .envs.gym_adapter import imports_code, refuse_recorded_env

    from .rundir import expand_home

    file_values = load_config_file(args.config) if getattr(args, "config", None) else {}
    for name in ("run_dir", "init_from"):  # a file's ~/runs/cp is the home's, as train() expands it: the dry run's too
        if name in file_values:
            file_values[name] = expand_home(file_values[name])
    recorded = file_values.get("run_dir")
    # a run trained from Python (train(cfg, run_dir=X)) or in the default directory records none: its resume
    # (`train --config RUN/config.yaml --resume auto`, what a run stopped before its first checkpoint is told
    # to run) continues in the file's folder as well
    if (file_values and (recorded or (recorded is None and getattr(args, "resume", None) is not None))
            and _own_run_dir(args.config, recorded)):
        file_values = _own_config_run_dir(args, file_values, prog)
    if args.env_id is not None and not args.env_id.strip():  # "" is a mistake (an unset variable), not the default env
        raise ConfigError(f"ENV_ID {args.env_id!r}: empty; name an env (e.g. {DEFAULT_ENV}), or leave ENV_ID out for {DEFAULT_ENV}")
    env_id = args.env_id if args.env_id is not None else file_values.get("env_id")
    if notes:
        _note_env_id_over_file(args, file_values, prog)
    if getattr(args, "preset", None) is not None and env_id is None and _resumes_a_run(args, file_values):
        # a preset is an env's: resolving it for the default env would check another env's values against the run
        raise ConfigError(f"--preset {args.preset} with --resume: give the run's ENV_ID too (a preset's values are "
                          "its env's; `proxima presets ENV_ID` lists them)")
    env_id = DEFAULT_ENV if env_id is None else env_id  # none given (a null in the file: from_dict's line below)
    if args.env_id is None and imports_code(str(env_id)):
        refuse_recorded_env(str(env_id), args.config, "train")  # data from a file: the user names module envs
    # precedence: defaults < the env's preset < --config FILE < flags (as `proxima rlhf`)
    cfg = presets.resolve(str(env_id), getattr(args, "preset", None), PPOConfig(), python=False)
    cfg = from_dict(file_values, cfg, source=args.config) if file_values else cfg
    cfg.env_id = str(env_id)
    if args.env_id is not None:  # typed: a refusal of it names ENV_ID, not the file that also holds one
        (getattr(cfg, "_sources", None) or {}).pop("env_id", None)
    for name in FIELDS:
        if name != "env_id" and name in vars(args):
            setattr(cfg, name, coerce_flag(args, name))
            (getattr(cfg, "_sources", None) or {}).pop(name, None)  # typed: the flag's, even where it equals the file's
    cfg.run_dir = expand_home(cfg.run_dir)  # a quoted --run-dir '~/x' too: the directory train() would use
    if notes:
        _note_sb3_learning_rate(args, file_values, cfg, prog)
    return cfg


def _note_sb3_learning_rate(args, file_values: dict, cfg, prog: str) -> None:
    """A note when the --config file gives SB3's name learning_rate and nothing sets anneal_lr: the file is
    almost surely SB3's or a zoo's, whose rate is constant, while this run anneals it (PPOConfig's default)."""
    from .launch import COMMAND_ENV

    if ("learning_rate" not in file_values or "anneal_lr" in file_values or "anneal_lr" in vars(args)
            or not cfg.anneal_lr or getattr(args, "quiet", False) or os.environ.get("RANK", "0") != "0"
            or COMMAND_ENV in os.environ):
        return
    if "lr" in vars(args):  # a typed --lr / --learning-rate replaced the file's rate: the note would quote the flag's
        return
    print(f"{prog}: note: --config {args.config}: learning_rate {cfg.lr:g} is annealed linearly to 0 over the run "
          "(anneal_lr: true, Proxima's and CleanRL's default); SB3 keeps it constant: add anneal_lr: false to the file "
          f"to match{_sb3_defaults_left_out(args, file_values, cfg)}", file=sys.stderr)


#: SB3's defaults that differ from this run's where a file of SB3's names leaves them out (docs/migrating.md's
#: "SB3's defaults that differ"): (field, SB3's value here, why), each said when the run's value is not it
SB3_LOSS_DEFAULTS = (("clip_vloss", False, "SB3's clip_range_vf=None: no value clipping"),
                     ("vf_coef", 1.0, "SB3's 0.5 weighs the squared error, Proxima's half of it"),
                     ("ent_coef", 0.0, "SB3's default"))


def _sb3_defaults_left_out(args, file_values: dict, cfg) -> str:
    """``; for SB3's other defaults add clip_vloss: false (...)``: the loss settings of SB3 that neither the
    file nor a flag set and the run's value differs from (a preset's or PPOConfig's), for the learning_rate
    note; "" for none. Not the rollout's (n_steps, batch_size, n_epochs): a zoo entry gives those."""
    said = [f"{name}: {str(want).lower()} ({why})" for name, want, why in SB3_LOSS_DEFAULTS
            if name not in file_values and name not in vars(args) and getattr(cfg, name) != want]
    if not said:
        return ""
    listed = ", ".join(said[:-1]) + (" and " if len(said) > 1 else "") + said[-1]
    return f"; for SB3's other defaults the file leaves out, add {listed} (docs/migrating.md)"


def _note_env_id_over_file(args, file_values: dict, prog: str) -> None:
    """A note when the typed ENV_ID is not the --config file's env_id: the typed one trains (flags beat
    the file), which a user who kept a habitual CartPole-v1 on the command line did not mean. Once."""
    from .launch import COMMAND_ENV

    given = file_values.get("env_id")
    if (args.env_id is None or given is None or str(given) == args.env_id or getattr(args, "quiet", False)
            or os.environ.get("RANK", "0") != "0" or COMMAND_ENV in os.environ):
        return
    print(f"{prog}: note: ENV_ID {args.env_id} overrides --config {args.config}'s env_id {given} (typed values beat "
          "the file's); leave ENV_ID out to train the file's", file=sys.stderr)


def _preset_arg(text: str) -> str:
    """--preset's value: none in any case (``--preset None``, as --target-kl None) is NO_PRESET."""
    from .presets import NO_PRESET

    return NO_PRESET if text.strip().lower() == NO_PRESET else text


def _note_no_preset(args, cfg, prog: str) -> None:
    """A note for --preset none of an env that has a default preset: the run is PPOConfig's defaults (with
    --config FILE and the flags), not the preset's settings that a run of the env otherwise starts from;
    and for --preset default of an env without presets, which runs as that env always does."""
    from .launch import COMMAND_ENV
    from .presets import NO_PRESET, other_versions, presets_for

    presets = presets_for(cfg.env_id)
    if (getattr(args, "preset", None) == "default" and not presets and not args.quiet
            and os.environ.get("RANK", "0") == "0" and COMMAND_ENV not in os.environ
            and not (other_versions(cfg.env_id) and not getattr(args, "config", None))):  # the run's own note says it
        print(f"{prog}: note: --preset default: {cfg.env_id} has no presets; it trains on PPOConfig's defaults (with "
              "--config FILE and the flags), as without --preset", file=sys.stderr)
        return
    if (getattr(args, "preset", None) != NO_PRESET or NO_PRESET in presets or "default" not in presets or args.quiet
            or os.environ.get("RANK", "0") != "0" or COMMAND_ENV in os.environ):
        return
    print(f"{prog}: note: --preset none: {cfg.env_id}'s default preset is not applied (PPOConfig's defaults, then "
          "--config FILE and flags)", file=sys.stderr)


def _note_one_seed(args, prog: str) -> None:
    """A note for --seeds N (one number) without --sweep: a one-member population of seed N, where SB3 and
    rliable users read "N seeds"; a range, a list, or --sweep (one seed across its values) says what it means."""
    spec = str(args.seeds or "").strip()
    if not spec.isdigit() or args.sweep or args.quiet or args.resume is not None:
        return
    n = int(spec)
    hint = f"; for seeds 1 to {n} give --seeds 1-{n}" if n > 1 else ""
    print(f"{prog}: note: --seeds {n} is one member, seed {n}{hint}", file=sys.stderr)


def _resumes_a_run(args, file_values: dict) -> bool:
    """Whether the command continues a run: --resume PATH, or --resume auto with a checkpoint in its
    --run-dir (without one it starts a new run, which takes the default env as any new run does)."""
    resume = getattr(args, "resume", None)
    if resume != "auto":
        return resume is not None
    from . import checkpoint as ckpt

    run_dir = getattr(args, "run_dir", None) or file_values.get("run_dir")
    try:
        return isinstance(run_dir, (str, os.PathLike)) and bool(ckpt.list_checkpoints(run_dir))
    except OSError:  # unreadable: the resume names it
        return True


def _own_config_run_dir(args, file_values: dict, prog: str) -> dict:
    """``--config RUN/config.yaml``'s values with its run_dir (that run's own directory) taken care
    of: a new run gets a new directory, so it is dropped (with a note); a resume continues that run,
    so it names the file's folder, wherever the command runs (config.yaml records the path relative
    to the directory the run was started in, or none). A new run comes here only when the file
    records one, which the note names."""
    elsewhere = _resumes_elsewhere(args, file_values)
    if getattr(args, "resume", None) is not None and elsewhere is None:
        return {**file_values, "run_dir": str(Path(args.config).parent)}
    if elsewhere is not None:  # another run's config.yaml given to a resume: its values, not its directory
        if "run_dir" not in vars(args) and not getattr(args, "quiet", False) and os.environ.get("RANK", "0") == "0":
            print(f"{prog}: note: --config {args.config}: run_dir {file_values.get('run_dir') or Path(args.config).parent} "
                  f"is that run's own directory, not used: the resume continues {args.resume} in its own ({elsewhere})",
                  file=sys.stderr)
    elif "run_dir" not in vars(args) and not getattr(args, "quiet", False) and os.environ.get("RANK", "0") == "0":
        print(f"{prog}: note: --config {args.config}: run_dir {file_values['run_dir']} is that run's own directory; "
              "this run gets a new one (choose it with --run-dir DIR)", file=sys.stderr)
    return {k: v for k, v in file_values.items() if k != "run_dir"}


def _resumes_elsewhere(args, file_values: dict) -> Optional[Path]:
    """The run directory ``train --resume PATH`` continues when it is not the one whose config.yaml
    --config names (``--resume r7 --config r1/config.yaml``, r7 a copy of r1); None otherwise: no resume,
    --resume auto (which finds its run by that directory), a loose checkpoint, or a path the resume
    itself refuses with its own line."""
    resume = getattr(args, "resume", None)
    if resume is None or resume == "auto":
        return None
    from . import checkpoint as ckpt
    from .run_setup import resumed_run_dir

    try:
        _, target = resumed_run_dir(ckpt.source_path(resume))
        if target is None or Path(target).resolve() == Path(args.config).resolve().parent:
            return None
    except Exception:  # noqa: BLE001 - the resume names what is wrong with its path
        return None
    return Path(target)


def _own_run_dir(config_file: str, run_dir) -> bool:
    """Whether ``run_dir`` (from ``--config FILE``; None: the file records none) is FILE's own folder:
    the file is a run's config.yaml.

    Either run_dir resolves to FILE's folder, or FILE is config.yaml in a run directory
    (rundir.holds_a_run), whatever run_dir says: config.yaml records run_dir as given when the run
    started (often relative, runs/NAME, which from another working directory resolves elsewhere), and
    a copied or moved run directory (how a run is continued elsewhere) keeps the original's path, so
    neither the path nor its last name can be relied on. A run's config.yaml edited to send a new run
    elsewhere loses that run_dir, with the note that says to choose it with --run-dir."""
    if run_dir is not None and not isinstance(run_dir, str):
        return False
    try:
        folder = Path(config_file).resolve().parent
        if run_dir is not None and folder == Path(run_dir).resolve():
            return True
        from .rundir import holds_a_run  # the one definition of a run directory (not any folder with a checkpoints/)

        return Path(config_file).name == "config.yaml" and holds_a_run(folder)
    except (OSError, RuntimeError, ValueError):
        return False


def resume_overrides(args: argparse.Namespace, cfg) -> tuple[dict, dict]:
    """({field: value}, {field: where it came from}) that a resume is asked to change: a typed
    --preset's values, then --config FILE's, then the typed flags (a new run's precedence), so what
    a file or preset asks is checked as flags are (config.RESUME_SAFE fields change, any other must
    equal the run's), never silently dropped. The env's own default preset (no --preset typed) asks
    nothing: it is not the user's request. ``where`` ('--config FILE', '--preset NAME') is given for
    the values not typed, for a refusal to name (_name_resume_source).

    ``cfg``: config_from_args's config, which keeps each value's source (config.source_of)."""
    from .config import source_of

    overrides, sources = {}, {}
    for name in FIELDS:
        source = source_of(cfg, name)
        if source is not None and source == getattr(args, "config", None):
            overrides[name], sources[name] = getattr(cfg, name), f"--config {args.config}"
        elif source is not None and source.startswith("preset ") and getattr(args, "preset", None) is not None:
            overrides[name], sources[name] = getattr(cfg, name), f"--preset {args.preset}"
    typed = typed_flags(args)
    overrides.update(typed)
    return overrides, {name: where for name, where in sources.items() if name not in typed}


def _name_resume_source(e: Exception, sources: dict, run: Optional[str] = None) -> Exception:
    """A resume's refusal names a field as its flag (``--lr 0.01: cannot change when resuming``); when
    the value came from --config FILE or --preset NAME (``sources``), not typed, the line names that
    instead (``--config ext.yaml: lr 0.01: ...``): the user never typed the flag. A line about
    several fields (ConfigError.fields: one batch larger than --total-timesteps) is prefixed with
    the source and those of its fields that came from it. A preset's value that is not the run's
    (the preset changed since the run trained with it) ends in the command that continues the run
    with its own config (``run``: what the resume names, proxima resume's argument)."""
    message = str(e)
    for name, where in sources.items():
        flag = f"--{name.replace('_', '-')} "
        for value in (True, False):  # a switch the file set, refused as typed (--no-anneal-lr): as the file spells it
            if message.startswith(f"--{'' if value else 'no-'}{flag[2:-1]}: "):
                message = f"{flag}{'true' if value else 'false'}:" + message.partition(":")[2]
        if isinstance(e, ConfigError) and message.startswith(flag):
            if where.startswith("--preset ") and "cannot change when resuming" in message and run is not None:
                message = message.split("; safe to change on resume: ")[0]
                return ConfigError(f"{where}: {name} {message[len(flag):]}; the preset's value differs from the run's (the "
                                   f"preset changed since the run trained, or the run set {name} itself): `proxima resume "
                                   f"{shlex.quote(run)}` continues the run with its own config")
            return ConfigError(f"{where}: {name} {message[len(flag):]}")
    named = [name for name in getattr(e, "fields", ()) if name in sources]
    if named:
        return ConfigError(f"{sources[named[0]]}: {', '.join(named)}: {message}")
    return e


POPULATION_NPROC = "--nproc: a population trains in one process; drop --nproc"


def _is_population_path(path) -> bool:
    """Whether ``path`` is a population's run directory, its checkpoints/ folder or one of its own
    checkpoints/step_N.pt."""
    return _population_of(path) is not None


def _population_of(path) -> Optional[Path]:
    """The population directory ``path`` names: the directory itself, its checkpoints/ folder (as RUN/checkpoints
    names RUN: checkpoint.source_path) or one of its checkpoints/step_N.pt; None for any other path."""
    from .population_run import is_population_dir

    path = Path(path)
    named = path if path.name else path.absolute()  # "." typed inside P/checkpoints: its name is the folder's
    if is_population_dir(path):
        return path
    if path.is_file() and path.parent.name == "checkpoints" and is_population_dir(path.parent.parent):
        return path.parent.parent
    if path.is_dir() and named.name == "checkpoints" and is_population_dir(named.parent):
        return named.parent
    return None


def _resume_target(args, cfg) -> Optional[str]:
    """What ``proxima resume`` takes to continue the run a ``train --resume`` names: the path given, or
    for --resume auto the --run-dir; None when the command resumes nothing."""
    resume = getattr(args, "resume", None)
    if resume != "auto":
        return resume
    run_dir = getattr(args, "run_dir", None) or (cfg.run_dir if cfg is not None else None)
    return str(run_dir) if run_dir is not None else None


def cmd_train(args) -> int:
    from .trainer import TrainingInterrupted, train

    prog = "proxima train"
    sources = {}  # a resume's fields that --config FILE or --preset NAME set: a refusal names them (_name_resume_source)
    cfg = None  # a new run's: a refusal of a value from --config FILE names the file (_name_config_file)
    try:
        if args.nproc is not None and args.nproc < 1:
            raise ConfigError(f"--nproc {args.nproc}: must be at least 1")
        if args.nproc and args.nproc > 1:
            if args.seeds is not None or args.sweep:  # before torchrun starts processes that would each train it
                raise ConfigError(POPULATION_NPROC)
            # the config here too: a refusal of the launcher's checks names the --config file, as below
            cfg = config_from_args(args, prog, notes=True)
            resume = _resume_target(args, cfg)
            if resume is not None and _is_population_path(resume):
                # each rank would refuse the population's checkpoint and point at `proxima resume POP`, whose
                # --nproc pointed back here: the one line that ends the circle
                raise ConfigError(POPULATION_NPROC)
            _check_combination(args, cfg, prog)
            _note_preset_unused(args, cfg, prog)
            _note_no_preset(args, cfg, prog)
            overrides, sources = resume_overrides(args, cfg) if args.resume is not None else (typed_flags(args), {})
            if args.dry_run:  # once, here: no processes to start for a run that trains nothing
                from .distributed import dist_timeout
                from .launch import check_nproc

                check_nproc(args.nproc)  # as the launcher refuses it
                dist_timeout()  # and PROXIMA_DIST_TIMEOUT, which the ranks would read
                return _dry_run_train(args, cfg, overrides, args.nproc, sources)
            return _launch_torchrun(args.nproc, sys.argv[1:])
        cfg = config_from_args(args, prog, notes=True)
        _check_combination(args, cfg, prog)
        _note_preset_unused(args, cfg, prog)
        _note_no_preset(args, cfg, prog)
        overrides, sources = resume_overrides(args, cfg) if args.resume is not None else (typed_flags(args), {})
        if args.seeds is not None or args.sweep:  # a population: one batched program (population_run.py)
            from .population_run import cmd_train_population
            from .run_setup import check_population_log_std_init

            # a --sweep of log_std_init, before the population's own sweep check: this line names --log-std-init V
            check_population_log_std_init(cfg, [str(s).partition("=")[0].strip().lstrip("-").replace("-", "_")
                                                for s in args.sweep or ()])
            _note_one_seed(args, prog)

            return cmd_train_population(args, cfg)  # TrainingInterrupted: handled below, as for one run
        if args.dry_run:  # under a torchrun started by hand: the job's numbers, printed once (as --nproc --dry-run)
            world = _torchrun_world()
            if world > 1 and os.environ.get("RANK", "0") != "0":
                return 0
            return _dry_run_train(args, cfg, overrides, world, sources=sources)
        if args.resume is None:  # a resumed run's config is the checkpoint's (checked by train)
            _validate_new(cfg)
        run_dir, policy = train(cfg, resume=args.resume, argv=recorded_argv(), quiet=args.quiet, overwrite=args.overwrite,
                                env_id=args.env_id, trust_run=args.trust_run, overrides=overrides, sources=sources)
        if os.environ.get("RANK", "0") == "0":  # under torchrun, one closing for the job
            say_run_trained(run_dir, policy, args.quiet)
        return 0
    except TrainingInterrupted as e:
        return say_run_stopped(e)
    except _user_errors() as e:
        if cfg is not None and args.resume is None:  # preflight's and train's own checks (the device, memory, the env)
            e = _name_default(_name_config_file(e, cfg, exclude=_member_fields(args)), args, cfg)
        return fail(prog, str(_name_typed_alias(_name_resume_source(e, sources, _resume_target(args, cfg)), args)))


def say_trained(run_dir, env_id, step, total, quiet: bool, population: bool = False) -> None:
    """How train and resume end, for one run or a population: the commands that go on from it (not under
    --quiet), then 'run directory: D', stdout's last line whatever came before (a script's ``| tail -1``)."""
    if not quiet:
        for line in next_commands(run_dir, env_id, step, total, population):
            print(line)
    print(f"run directory: {run_dir}")


def say_run_stopped(e: TrainingInterrupted, typed: Optional[Path] = None) -> int:
    """How train and resume end on a stop signal: the stop's line on stderr, then, when the stop left a
    checkpoint, 'run directory: D' on stdout as say_trained ends (a batch script's ``RUN=$(... | tail -1)``
    requeues with it); once for a torchrun job (rank 0). ``typed``: the directory as a resume named it,
    printed so (_as_typed). Returns the exit code, 128 + signum."""
    from .signals import stopped_run_dir

    say_stopped(e)
    run_dir = stopped_run_dir(e)
    if run_dir is not None and os.environ.get("RANK", "0") == "0":
        print(f"run directory: {_as_typed(run_dir, typed)}", flush=True)
    return e.exit_code


def say_run_trained(run_dir, policy, quiet: bool) -> None:
    """say_trained for one run, from the policy train() returned: its env, step and the total it trains, whole
    iterations of the batch (a total of 20,000 over 4,096-step batches trains 16,384: the run is complete there)."""
    config = getattr(policy, "config", None) or {}
    total = config.get("total_timesteps")
    # under torchrun (rank 0 says it) an iteration is every process's batch
    per = [config.get("num_envs"), config.get("num_steps"), int(os.environ.get("WORLD_SIZE", "1") or 1)]
    if isinstance(total, int) and all(isinstance(n, int) and n > 0 for n in per):
        total -= total % (per[0] * per[1] * per[2])
    say_trained(run_dir, getattr(policy, "env_id", None), getattr(policy, "global_step", None), total, quiet)


def next_commands(run_dir, env_id, step, total, population: bool = False) -> list:
    """The lines above 'run directory:': the commands that evaluate the run (a population: every member)
    and train it on, in the user's words for ``run_dir``, shell-quoted; a population's report too. A
    ``module:Class`` env is named with --env: eval and resume refuse to import a module named only by the
    run's files (report's own --env evaluates members without eval.json: left out when every member has one). No train-on line for a run that
    ended before its total (--stop-return: the line that said so is above). The train-on command is the
    stop line's (signals.continue_advice): for a run of more processes than this machine's CPUs,
    `proxima train --resume RUN --nproc K`, which `proxima resume` names when it refuses that run."""
    from .signals import continue_advice

    env = f"--env {shlex.quote(env_id)} " if isinstance(env_id, str) and ":" in env_id else ""
    run = shlex.quote(str(run_dir))
    lines = [f"evaluate: proxima eval {env}{run}"]
    if population:  # its --env evaluates the members without an eval.json of their last step: none left, no --env
        lines.append(f"report: proxima report {env if env and not _members_evaluated(run_dir) else ''}{run}")
    if isinstance(step, int) and isinstance(total, int) and step >= total > 0:
        command, how = continue_advice(Path(run_dir))
        lines.append(f"train on: {command} --total-timesteps {2 * step}{how}")
    return lines


def _members_evaluated(run_dir) -> bool:
    """Whether every member of the population ``run_dir`` has the eval.json of its last step that `proxima report`
    takes as it is (population_report.member_final_return): its --env would evaluate nothing, and say so."""
    from .population_report import PopulationError, member_final_return, read_settings

    try:
        members = [d for setting in read_settings(run_dir) for _, d in setting.members]
        return bool(members) and all(member_final_return(d, episodes=0)[1] == "eval" for d in members)
    except (PopulationError, OSError):
        return False


def _check_combination(args, cfg, prog: str) -> None:
    """Flags that would do nothing together: refused when the user asked for an effect the run would
    not have (--overwrite of a run --resume continues in place), noted when only a setting goes unused."""
    if args.overwrite and _resumes_a_run(args, {"run_dir": cfg.run_dir}):
        raise ConfigError(f"--overwrite with --resume {args.resume}: the resume continues the run in place and moves "
                          "nothing aside; drop --overwrite, or drop --resume to start a new run there")
    from .launch import COMMAND_ENV

    # once: by the --nproc launcher (whose ranks have COMMAND_ENV) or by rank 0 of a torchrun started by hand;
    # and not before validate's refusal, which stays its one line
    if (args.trust_run and args.resume is None and not args.quiet and os.environ.get("RANK", "0") == "0"
            and COMMAND_ENV not in os.environ and _validates(cfg, args.nproc or 1)):
        print(f"{prog}: note: --trust-run does nothing without --resume (it lets a resume import the module:Class env "
              "its checkpoint records); a new run imports only the ENV_ID you name", file=sys.stderr)
    # only a value validate() accepts: a bad one gets validate's error line alone, not a note before it. A
    # resume notes it itself, by the run's own backend (run_setup.apply_resume_overrides)
    if ("vector" in vars(args) and not args.quiet and os.environ.get("RANK", "0") == "0"
            and not _resumes_a_run(args, {"run_dir": cfg.run_dir})
            and cfg.vector in FIELDS["vector"].metadata.get("choices", ())):
        from .envs import auto_backend

        # a new run's id, typed or in its --config file: the run imports its module anyway, and a module:Class
        # not yet imported would otherwise read as gymnasium
        backend = (auto_backend(cfg.env_id, cfg.env_kwargs, imported_only=False) if cfg.backend == "auto" and cfg.env_id
                   else cfg.backend)
        from .trainer import vector_note  # proxima bench's words too

        note = vector_note(cfg.vector, cfg.backend, [backend])
        if note:
            print(f"{prog}: note: {note}", file=sys.stderr)
    from .config import one_sample_minibatch_note

    # SB3's batch_size copied as --num-minibatches with --no-norm-adv: legal, trains 1-sample minibatches; a new run's
    # note, once, and not before validate's refusal
    note = one_sample_minibatch_note(cfg) if args.resume is None and not args.quiet else None
    if note and os.environ.get("RANK", "0") == "0" and COMMAND_ENV not in os.environ and _validates(cfg, args.nproc or 1):
        print(f"{prog}: note: {note}", file=sys.stderr)


def _note_preset_unused(args, cfg, prog: str) -> None:
    """A note when a typed --preset changes nothing: --config FILE (with the typed flags) sets every
    field the preset sets, so the run is the file's whatever the preset says. Once (the --nproc
    launcher's ranks and torchrun's other ranks skip it), not under --quiet, and not before
    validate's refusal, which stays its one line."""
    from .launch import COMMAND_ENV

    if (getattr(args, "preset", None) is None or not getattr(args, "config", None) or args.quiet
            or os.environ.get("RANK", "0") != "0" or COMMAND_ENV in os.environ):
        return
    from .config import source_of
    from .presets import presets_for

    preset = presets_for(cfg.env_id).get(args.preset)
    fields = [name for name in (preset or {}).get("config", {}) if name in FIELDS]
    typed = set(typed_fields(args))
    from_file = [name for name in fields if name not in typed and source_of(cfg, name) == args.config]
    if not fields or not from_file or any(name not in typed and source_of(cfg, name) != args.config for name in fields):
        return
    if not _validates(cfg, args.nproc or 1):
        return
    by = f"--config {args.config}" + (" and the flags" if len(from_file) < len(fields) else "")
    print(f"{prog}: note: --preset {args.preset} changes nothing: {by} set{'' if by.endswith('flags') else 's'} every "
          f"field it sets ({', '.join(fields)})", file=sys.stderr)


def _validates(cfg, world_size: int) -> bool:
    from .config import validate

    try:
        validate(cfg, world_size)
    except ConfigError:
        return False
    return True


def _validate_new(cfg, world_size: int = 1) -> None:
    """validate a new run's config, a value from --config FILE named with its file (_name_config_file); an
    env whose extra is not installed (box2d, mujoco) first: the flags fixed for validate would not train it."""
    from .config import validate
    from .envs.gym_adapter import check_extra_installed

    check_extra_installed(cfg.env_id, cfg.backend)  # as train() and the populations check it (review 49)
    try:
        validate(cfg, world_size)
    except ConfigError as e:
        raise _name_config_file(e, cfg) from None


def _torchrun_world() -> int:
    """The process count of the torchrun job this process is a rank of (WORLD_SIZE), 1 outside one; a WORLD_SIZE
    that no torchrun set is refused (distributed.check_world_size). The run's own test (distributed.joins_group):
    a WORLD_SIZE without RANK trains as one process, so its dry run is one process too."""
    from .distributed import check_world_size, joins_group

    if not joins_group():
        return 1
    check_world_size()
    return int(os.environ["WORLD_SIZE"])


def _dry_run_train(args, cfg, overrides: dict, world_size: int = 1, sources: Optional[dict] = None) -> int:
    """``train --dry-run``: a new run's config; with --resume, the config the resume would continue
    with, read from the checkpoint without locking or writing anything (run_setup.dry_run_resume),
    the overrides checked as the resume checks them. ``--resume auto`` without a checkpoint in
    --run-dir starts a new run, so it dry-runs one."""
    from .config import validate
    from .run_setup import dry_run_resume
    from .terminal import machine_stdout

    # stdout is the YAML alone, for a program to read: an env that prints as the checks build it writes to stderr
    with machine_stdout() as out:
        if args.resume is not None:  # a checkpoint of another process count: refused as the resume refuses it
            resumed = dry_run_resume(cfg, args.resume, args.env_id, args.trust_run, overrides, world_size, sources, args.quiet)
            if resumed is not None:
                state = _dry_run_state(cfg, args.resume)
                cfg, world_size = resumed
                validate(cfg, world_size, resume=True)  # as train validates a resumed config
                return _dry_run(cfg, world_size, overrides, resumed=True, state=state, sources=sources, quiet=args.quiet,
                                out=out)
        _validate_new(cfg, world_size)
        if cfg.run_dir is not None:  # none: the run makes a new default directory, which needs no check
            from .run_setup import check_new_run_dir

            check_new_run_dir(cfg.run_dir, overwrite=args.overwrite, restart=args.resume == "auto")
        return _dry_run(cfg, world_size, overrides, notes=not args.quiet, quiet=args.quiet, out=out)


def _dry_run_state(cfg, resume) -> Optional[dict]:
    """The checkpoint ``train --resume RESUME --dry-run`` continues from, read again as dry_run_resume
    read it (which returns the config alone): the resume's notes on the total and --eval-every depend on
    its step and recorded config. Nothing written or set aside; None when it cannot be read again."""
    from . import checkpoint as ckpt
    from .run_setup import auto_resume_target

    target = auto_resume_target(cfg) if resume == "auto" else Path(resume)
    if target is None:
        return None
    try:
        if not target.is_dir():
            return ckpt.load_checkpoint(target)
        for candidate in reversed(ckpt.list_checkpoints(target)):
            try:
                return ckpt.load_sound(candidate)
            except ckpt.CheckpointError:
                continue  # a damaged newer one: dry_run_resume has named it already
    except (ckpt.CheckpointError, OSError):
        return None
    return None


def _member_fields(args) -> set:
    """The fields a population sets per member (--seeds: seed; --sweep FIELD=...): a refusal of one
    member's value is about the flag, whatever --config FILE said."""
    names = {"seed"} if getattr(args, "seeds", None) is not None else set()
    for item in getattr(args, "sweep", None) or ():
        name = str(item).partition("=")[0].strip().lstrip("-").replace("-", "_")
        names.add(ALIASES.get(name, name))  # --sweep learning_rate=... sets lr
    return names


#: make_env's advice for a native backend that cannot build the env (no native version, constructor kwargs)
_BACKEND_ADVICE = ("use --backend gymnasium or auto", "use --backend gymnasium (or auto)")


def _name_config_file(e: Exception, cfg, exclude=()) -> Exception:
    """A refusal names a field as its flag (``--seed ...``, ``--env-kwargs: ...``); when the value came
    from ``--config FILE`` (not typed), the line names the file and the field first, so the user knows
    where to fix it: validate's lines, and those of the checks that build the env and size the run
    (run_setup.preflight, train). A line about several fields (ConfigError.fields) names those of
    them that came from the file; ``env_id ''`` (no flag: ENV_ID or the file's env_id) the file.
    ``exclude``: fields set after the file (a population's per-member seed and swept fields)."""
    from .config import source_of

    message = str(e)
    about = list(getattr(e, "fields", ()))
    if not about:
        about = [name for name in FIELDS if name != "env_id" and any(
            message.startswith(f"--{name.replace('_', '-')}{end}") for end in (" ", ":"))]
    from_file = [(name, source_of(cfg, name)) for name in about if name not in exclude]
    from_file = [(name, source) for name, source in from_file if source and not source.startswith("preset ")]
    backend_file = source_of(cfg, "backend") if "backend" not in exclude else None
    backend_file = backend_file if backend_file and not backend_file.startswith("preset ") else None
    if backend_file:  # "use --backend gymnasium": a flag the user never typed; the file's line is to edit
        for advice in _BACKEND_ADVICE:
            message = message.replace(advice, f"edit backend in {backend_file} (gymnasium or auto)")
    if from_file and not getattr(e, "fields", ()):
        name, source = from_file[0]
        # the value is the file's line `lr: inf`, not a flag typed: `t.yaml: lr inf: ...`, as a resume's
        # refusal names a file's value (_name_resume_source) and the run_dir line does (_name_file_run_dir)
        flag = f"--{name.replace('_', '-')}"
        if name == "env_kwargs":  # gym_adapter's advice for a keyword the env does not take
            message = message.replace("drop it from --env-kwargs", f"drop it from env_kwargs in {source}")
        said = _name_in_file(cfg, name)
        if message.startswith(f"{flag} "):
            return ConfigError(f"{source}: {said} {_file_advice(message[len(flag) + 1:], from_file)}")
        if message.startswith(f"{flag}:"):
            return ConfigError(f"{source}: {said}{_file_advice(message[len(flag):], from_file)}")
    if from_file:
        return ConfigError(f"{from_file[0][1]}: {', '.join(name for name, _ in from_file)}: {_file_advice(message, from_file)}")
    # a preset's value named as a flag is one the user never typed: the line names the preset, and the
    # flag that overrides it (flags come after presets, so the advice's flags stay right)
    from_preset = [(name, source_of(cfg, name)) for name in about if name not in exclude]
    from_preset = [(name, source) for name, source in from_preset if source and source.startswith("preset ")]
    if from_preset and message == str(e):
        name, source = from_preset[0]
        flag = f"--{name.replace('_', '-')}"
        if not getattr(e, "fields", ()) and message.startswith(f"{flag} "):
            return ConfigError(f"{source}: {name} {message[len(flag) + 1:]}; pass {flag} to override the preset's value")
        values = ", ".join(f"{name} {getattr(cfg, name)!r}" for name, _ in from_preset)
        return ConfigError(f"{message} ({values} from {source}; flags override it)")
    if message != str(e):  # no native env for 'CartPole-v0', which the file's backend asked for
        return type(e)(f"{backend_file}: backend {cfg.backend}: {message}")
    source = source_of(cfg, "env_id")
    if message.startswith("env_id ") and source and not source.startswith("preset "):
        return ConfigError(f"{source}: {message}")
    if message.startswith("unknown env id ") and source and not source.startswith("preset "):
        return type(e)(f"{source}: env_id: {message}")  # EnvError: the id is the file's, not an ENV_ID typed
    return _name_file_run_dir(e, cfg)


def _name_in_file(cfg, name: str) -> str:
    """Field ``name`` as its --config file spelt it: ``learning_rate (lr's other name)`` for a file's
    learning_rate (ALIASES; from_dict records the key, ``_names_in_file``), else ``name``."""
    key = (getattr(cfg, "_names_in_file", None) or {}).get(name)
    return f"{key} ({name}'s other name)" if key else name


def _name_typed_alias(e: Exception, args) -> Exception:
    """A refusal that names --lr where the user typed --learning-rate (its other name, which _OneNameOnly
    records): the line names the flag typed, as coerce_flag's does for a value that is no number."""
    message = str(e)
    for name, flag in vars(args).get("_names_typed", {}).items():
        own = "--" + name.replace("_", "-")
        if flag != own:
            message = re.sub(rf"{re.escape(own)}(?![\w-])", flag, message)
    if message == str(e) or not isinstance(e, ConfigError):
        return e
    renamed = ConfigError(message)
    renamed.fields = getattr(e, "fields", ())
    return renamed


def _name_default(e: Exception, args, cfg) -> Exception:
    """A refusal that names a field as its flag (``--num-minibatches 4: must divide the batch ...``) when
    no flag, preset or file gave that value: it is PPOConfig's default, which the line says
    (``num_minibatches 4 (the default): ...``), with the values that would do for a minibatch count."""
    from .config import field_default, nearest_minibatches, source_of

    message = str(e)
    for name in FIELDS:
        flag = f"--{name.replace('_', '-')} "
        if (name == "num_minibatches" and name in vars(args) and message.startswith(flag)
                and message.endswith("must divide the batch num_envs x num_steps = " + str(cfg.num_envs * cfg.num_steps))):
            # typed, yet the default's value (validate cannot tell it from the unset default): the nearest counts too
            return type(e)(message + nearest_minibatches(cfg)) if isinstance(e, ConfigError) else e
        if not message.startswith(flag) or name in vars(args) or name in _member_fields(args):
            continue
        value = getattr(cfg, name)
        if source_of(cfg, name) is not None or value != field_default(name) or not message.startswith(f"{flag}{value!r}:"):
            return e
        message = f"{name} {value!r} (the default){message[len(flag) + len(repr(value)):]}"
        if name == "num_minibatches" and "must divide the batch" in message:
            message += f"; give {flag}{_minibatch_counts(cfg)}"
        return type(e)(message) if isinstance(e, ConfigError) else e
    return e


def _minibatch_counts(cfg) -> str:
    """The --num-minibatches values nearest ``cfg``'s that validate takes: divisors of the batch, with
    minibatches of 2 samples or more under advantage normalization (``1 or 5`` for a batch of 25)."""
    from .config import minibatch_counts

    counts = sorted(sorted(minibatch_counts(cfg), key=lambda d: abs(d - cfg.num_minibatches))[:6])
    return ", ".join(map(str, counts[:-1])) + (" or " if len(counts) > 1 else "") + str(counts[-1])


def _file_advice(message: str, from_file: list) -> str:
    """``message`` with its flags of the fields ``from_file`` ([(field, file)]) worded for the file the
    values came from: ``use --device cpu`` is ``edit device in c.yaml (cpu)``, ``--total-timesteps 10``
    (the file's value) is ``total_timesteps 10``, and ``raise --total-timesteps`` is ``raise total_timesteps
    in c.yaml``; the flags of the other fields (typed, or defaults a flag changes) stay flags."""
    for name, source in from_file:
        flag = re.escape("--" + name.replace("_", "-"))
        message = re.sub(rf"\buse {flag} ([^\s;,)]+) or (more|less|fewer)\b",  # not 'edit N in F (13) or more'
                         lambda m: f"set {name} to {m.group(1)} or {m.group(2)} in {source}", message)
        message = re.sub(rf"\buse {flag} ([^\s;,)]+)", lambda m: f"edit {name} in {source} ({m.group(1)})", message)
        message = re.sub(rf"{flag}(?= [-\d'\"\[{{])", name, message)  # followed by a value: the file's
        message = re.sub(rf"{flag}(?![\w-])", f"{name} in {source}", message)  # advice to change it
    return message


def _name_file_run_dir(e: Exception, cfg) -> Exception:
    """A refusal of a new run's directory that came from --config FILE's run_dir (a copied config.yaml
    names its own run's): the line starts ``FILE: run_dir DIR:``, and one that finds the directory not
    empty says to choose another --run-dir or edit the file, rather than to resume or --overwrite
    the run there, which is not the one the user meant to train."""
    from .config import source_of
    from .rundir import RunDirError, not_empty_message

    source = source_of(cfg, "run_dir")
    if not isinstance(e, RunDirError) or cfg.run_dir is None or not source or source.startswith("preset "):
        return e
    message, run_dir = str(e), Path(cfg.run_dir)
    try:
        plain = not_empty_message(run_dir)
        if message.startswith(plain):  # the launcher may add a line's end of its own: kept
            return RunDirError(not_empty_message(run_dir, from_file=source) + message[len(plain):])
    except OSError:  # gone or unreadable since: the line as it was, named below
        pass
    if message.startswith(f"{run_dir} "):
        return RunDirError(f"{source}: run_dir {message}")
    return e


def recorded_argv() -> list:
    """The command line meta.json records: the one the user typed (launch.typed_command: ``--nproc K``
    included, ``python -m proxima`` and a hand-typed torchrun's words rebuilt)."""
    from .launch import typed_command

    return typed_command()


def _dry_run(cfg, world_size: int = 1, overrides: Optional[dict] = None, notes: bool = False, resumed: bool = False,
             state: Optional[dict] = None, sources: Optional[dict] = None, quiet: bool = False, out=None) -> int:
    """Check what train would refuse (run_setup.preflight), print the resolved config as YAML (encoder
    auto and --init-from as the run would record them), train nothing, write nothing. ``overrides``: the typed flags
    (a resume's, or a new run's), for train's notes on them; ``notes``: a new run's, not --quiet: the
    advisory notes the run would print (--compile-mode without --compile, another version's preset, a
    Box action range, pixels read as a vector). ``resumed``: a resume's dry run, of the checkpoint
    ``state`` (None: not read again), ``sources`` its overrides' --config/--preset: the notes on a total
    that is not whole iterations and on an --eval-every beyond the run (under --quiet too) are then
    the resume's. ``quiet``: --quiet, which drops the line that sizes a multi-process run's iteration. ``out``:
    where the YAML goes (None: sys.stdout)."""
    import copy

    from .config import dump_yaml
    from .envs.gym_adapter import action_spaces_built
    from .nets import encoders_resolved
    from .run_setup import preflight, resume_trains
    from .trainer import _note_eval_every, _note_given_total, _note_lr_schedule, _pending_eval, note_run

    # the env preflight builds, and the encoder it chooses for it: none built only for the notes
    with action_spaces_built() as spaces, encoders_resolved() as encoders:
        # a refusal of a value from --config FILE names the file: cmd_train's handler
        _, checkpoint = preflight(cfg, world_size, resumed=resumed)
    if world_size > 1 and not quiet:  # the YAML is one process's config: the job's iteration is K of its batches
        _note_processes(cfg, world_size, state if resumed else None)
    # the YAML shows the total given (typed or from --config FILE); the note, what would train
    _note_given_total(cfg, world_size, resumed, state, overrides or {}, sources or {}, python=False)
    if not resumed:
        _note_eval_every(cfg, world_size, python=False)
    elif state is None or resume_trains(cfg, state):  # a resume that trains nothing: its own note says so
        if state is not None:
            _note_lr_schedule(cfg, world_size, state)
        pending = _pending_eval(state) if state is not None and cfg.eval_every else None
        _note_eval_every(cfg, world_size, python=False, resumed=True, run_dir=cfg.run_dir,
                         pending_step=pending["global_step"] if pending else None)
    if notes:  # as train prints them, --quiet's advisory notes included
        note_run(cfg, overrides or {}, False, *built_for_notes(spaces, encoders))
    cfg = copy.copy(cfg)  # copy.copy keeps _sources, as train's own copy does
    if encoders and cfg.encoder != encoders[0][0]:  # auto: config.yaml records the encoder the Trainer built
        cfg.encoder = encoders[0][0]
    if checkpoint is not None:  # config.yaml records the file loaded, not the path typed (a run directory, relative)
        cfg.init_from = checkpoint
    print(dump_yaml(cfg.to_dict()), end="", file=out)
    print(sizes_comment(cfg, world_size), file=out)
    return 0


def sizes_comment(cfg, world_size: int = 1) -> str:
    """``# batch 4,096 (num_envs 32 x num_steps 128), minibatch 256, 73 iterations = 299,008 steps``: what
    the YAML's fields make of a run, from config.py's batch_size and num_iterations (the trainer's own, so
    the line cannot disagree with what trains). A YAML comment: stdout stays the config a program reads."""
    from .config import batch_size, num_iterations

    per = batch_size(cfg)
    batch = per * world_size
    procs = f"{world_size} processes x " if world_size > 1 else ""
    iterations = num_iterations(cfg, world_size)
    minibatch = per // cfg.num_minibatches
    return (f"# batch {batch:,} ({procs}num_envs {cfg.num_envs:,} x num_steps {cfg.num_steps:,}), minibatch {minibatch:,}"
            f"{' per process' if world_size > 1 else ''}, {iterations:,} iterations = {iterations * batch:,} steps")


def _note_processes(cfg, world_size: int, state: Optional[dict]) -> None:
    """``proxima: 2 processes x 4 envs x 32 steps = 256 steps per iteration, 8 iterations`` on stderr
    (stdout's YAML stays parseable): what --nproc K makes of the per-process num_envs and num_steps.
    ``state``: a resume's checkpoint, whose iterations done are said too."""
    from .config import batch_size, num_iterations

    per = batch_size(cfg) * world_size
    done = (state or {}).get("iteration")
    done = f" in all ({done:,} done)" if isinstance(done, int) and not isinstance(done, bool) else ""
    print(f"proxima: {world_size} processes x {cfg.num_envs:,} envs x {cfg.num_steps:,} steps = {per:,} steps per "
          f"iteration, {num_iterations(cfg, world_size):,} iterations{done}", file=sys.stderr)


def built_for_notes(spaces: list, encoders: list) -> tuple:
    """(obs layout, action space, encoder) for trainer.note_run from what a dry run's checks built
    (gym_adapter.action_spaces_built, nets.encoders_resolved); None for what none was built of."""
    layout, encoder = (encoders[0][1], encoders[0][0]) if encoders else (None, None)
    return layout, spaces[0] if spaces else None, encoder


def cmd_resume(args) -> int:
    from .run_setup import resumes_rlhf
    from .trainer import TrainingInterrupted, train

    prog = "proxima resume"
    path = Path(args.path)
    meta = path / "meta.json"
    try:
        from .checkpoint import source_path

        if source_path(path) != path and resumes_rlhf(source_path(path)):  # an RLHF run's checkpoints/ is its run, as a PPO run's
            path = source_path(path)
        typed_nproc = _resume_nproc(args, path)
        if resumes_rlhf(path):  # a damaged meta.json of a PPO run: its resume goes on, as train --resume's does
            from .rlhf import resume as rlhf_resume

            ppo_flag = _ppo_flag_typed(args)
            if ppo_flag:  # nothing of PPOConfig applies to an RLHF run: refused, never silently ignored
                from .rlhf.config import rlhf_resume_flag_line

                return fail(prog, rlhf_resume_flag_line(ppo_flag, path))
            from .rlhf.api import resume_processes

            world = resume_processes(path)
            if world > 1:  # its checkpoints need as many processes as it trains with (rlhf.loop.load_checkpoint)
                return _launch_torchrun(world, sys.argv[1:], announce=(
                    f"{prog}: {path} is an RLHF run of {world} processes: resuming with {world} processes on this "
                    "machine (torchrun; a multi-node run resumes under its own torchrun command, docs/rlhf.md)"))
            code = rlhf_resume(path, steps=args.steps, trust_run=args.trust_run, quiet=args.quiet)
            if code == 0:  # the closing line, with the run directory: under --quiet too (as PPO's 'run directory:')
                from .rlhf.cli import say_done

                say_done(path)
            return code
        # a population's run directory, or one of its own checkpoints/step_N.pt (from that one; newer ones set aside)
        if _is_population_path(path):  # continue every member (population_run.py)
            from .population_run import resume_population

            if args.steps is not None:
                return fail(prog, f"--steps: {path} is a PPO population; --steps extends RLHF runs only (use --total-timesteps)")
            run_dir, checkpoint = _population_of(path), path if path.is_file() else None  # P/checkpoints: P
            run_dir = resume_population(run_dir, overrides=typed_flags(args), quiet=args.quiet, env_id=args.env,
                                        trust_run=args.trust_run, checkpoint=checkpoint, argv=recorded_argv())
            from .population_run import say_population_trained

            say_population_trained(run_dir, args.quiet)
            return 0
        if args.steps is not None:
            from . import checkpoint as ckpt
            from .rundir import expand_home

            # a missing path or a folder with no checkpoint is no PPO run: the line it gets without --steps
            ckpt.resolve_checkpoint(expand_home(path))
            if expand_home(path).is_file():  # a checkpoint (RLHF's too) or any file: an RLHF run is extended by its directory
                run = ckpt._rlhf_run_named(expand_home(path))
                if run is not None:  # its run's resume, pasteable (the directory as the file was named)
                    return fail(prog, f"--steps: {path} is a checkpoint of the RLHF run {run}; --steps extends the run from "
                                f"its directory: proxima resume {shlex.quote(str(run))} --steps {args.steps}")
                return fail(prog, f"--steps: {path} is a file, not a run directory; --steps extends an RLHF run: give "
                            "its directory (proxima resume RUN_DIR --steps N)")
            return fail(prog, f"--steps: {path} is a PPO run; --steps extends RLHF runs only (use --total-timesteps)")
        world = _written_by(path, typed_nproc, getattr(args, "typed_words", None))
        if world > 1:  # the checkpoint needs as many processes as wrote it (train_state.load): start them
            return _launch_torchrun(world, sys.argv[1:], announce=(
                f"{prog}: {path} was written by {world} processes: resuming with {world} processes on this machine "
                "(torchrun; a multi-node run resumes under its own torchrun command, docs/distributed.md)"))
        # the config comes from the checkpoint; typed flags may change only config.RESUME_SAFE fields
        # under the torchrun that launch_torchrun started above, the command the user typed, not the rank's own
        run_dir, policy = train(None, resume=path, argv=recorded_argv(), quiet=args.quiet, env_id=args.env,
                                trust_run=args.trust_run, overrides=typed_flags(args))
        if os.environ.get("RANK", "0") == "0":  # under torchrun, one closing for the job
            from .evaluate import run_dir_named

            say_run_trained(_as_typed(run_dir, run_dir_named(path)), policy, args.quiet)
        return 0
    except TrainingInterrupted as e:
        from .evaluate import run_dir_named

        return say_run_stopped(e, run_dir_named(path))
    except json.JSONDecodeError:
        return fail(prog, f"{meta}: not valid JSON")
    except _user_errors() as e:
        return fail(prog, str(_name_typed_alias(e, args)))


def _launch_torchrun(nproc: int, argv: list, announce: Optional[str] = None) -> int:
    """launch.launch_torchrun, which says a stop before training itself and puts entry's
    signals.BeforeTraining back as it ends: a stop after the job is no stop before training."""
    from .launch import launch_torchrun

    try:
        return launch_torchrun(nproc, argv, announce=announce)
    finally:
        retire_before_training()


def _ppo_flag_typed(args) -> Optional[str]:
    """The first PPO flag the user typed to `proxima resume` (a PPOConfig field, or --env), else None.
    Its value is not read (typed_fields, not typed_flags): a flag that does not apply is refused as
    such, whatever value it was given."""
    typed = typed_fields(args)
    if typed:
        return "--" + typed[0].replace("_", "-")
    return "--env" if args.env is not None else None


def _resume_nproc(args, path: Path) -> Optional[int]:
    """The --nproc K typed to `proxima resume PATH` (_read takes it out of the flags), None when none was:
    K when it is the run's own process count, which resume starts anyway; ConfigError naming the run's
    count for another K, and pointing to `proxima train --resume RUN --nproc K` where that count is not
    known (no checkpoint loads: train's line says why)."""
    typed = getattr(args, "resume_nproc", None)
    if typed is None:
        return None
    value, run = typed
    from .config import parse_int
    from .launch import under_torchrun

    try:
        count = parse_int(value) if value is not None else None
    except ValueError:
        count = None
    if count is not None and count < 1:  # as train --nproc 0 is refused (launch._check), before any advice naming it
        raise ConfigError(f"--nproc {value}: must be at least 1")
    if under_torchrun():  # as the launcher refuses train --nproc there
        from .distributed import under_launcher_line

        raise ConfigError(under_launcher_line())
    from .run_setup import resumes_rlhf

    if resumes_rlhf(path):
        from .rlhf.api import resume_processes

        world = resume_processes(path)
    else:
        world = _checkpoint_processes(path)
    if world is None or count is None:
        raise ConfigError(f"--nproc: proxima resume starts as many processes as the run was trained with (up to this "
                          f"machine's CPUs); to give the count yourself: proxima train --resume {run} --nproc K, K the "
                          "run's process count (see proxima resume --help)")
    if count != world:
        from .evaluate import run_dir_named
        from .launch import other_count_advice

        other = other_count_advice(run, nproc=count, run_dir=run_dir_named(path))
        raise ConfigError(f"--nproc {value}: {path} was written by {world} process(es), and its resume needs as many; "
                          f"give --nproc {world}, or drop --nproc (proxima resume reads the count from the checkpoint); {other}")
    return count


def _checkpoint_processes(path: Path) -> Optional[int]:
    """How many processes wrote the checkpoint ``proxima resume PATH`` would load (its world_size, 1
    when it records none or nonsense); None when there is none that loads (train says why).

    Only reads: nothing is renamed or set aside here (that happens once the run's lock is held), so
    a read-only or damaged run directory is train's one line, never a traceback from here. The
    notes about a damaged newest checkpoint are train's to print, once."""
    import contextlib
    import io

    from . import checkpoint as ckpt

    path = ckpt.source_path(path)  # RUN/checkpoints resumes RUN: its newest tells how many processes wrote it
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            if path.is_dir():
                files = ckpt.list_checkpoints(path)
                if not files:
                    return None
                _, state = ckpt.newest_that_loads(files, ckpt.load_checkpoint, ckpt.CheckpointError, set_aside=False)
            else:
                state = ckpt.load_checkpoint(path)
        world = state.get("world_size", 1) if isinstance(state, dict) else 1
    except (ckpt.CheckpointError, OSError):
        return None
    return world if isinstance(world, int) and not isinstance(world, bool) and world > 1 else 1


def _written_by(path: Path, typed: Optional[int] = None, argv: Optional[list] = None) -> int:
    """How many processes wrote the checkpoint ``proxima resume PATH`` would load (_checkpoint_processes);
    1 under torchrun (the ranks are started already) or when there is none that loads (train says why).
    ``typed``: the --nproc K typed to resume, the run's own count (_resume_nproc): a count the user
    gives starts processes beyond the CPUs as `train --resume RUN --nproc K` does. ``argv``: the resume's
    words after ``proxima`` (sys.argv[1:]), which the refusal names again with ``--nproc K`` added."""
    from .launch import under_torchrun

    if under_torchrun():
        return 1
    world = _checkpoint_processes(path) or 1
    if world <= 1:
        return 1
    from . import checkpoint as ckpt
    from .cpuinfo import cpus_text, usable_cpus
    from .evaluate import run_dir_named
    from .launch import with_nproc
    from .signals import module_env, resume_advice, resume_route

    path = ckpt.source_path(path)
    cpus = cpus_text(usable_cpus())
    # the decision of every suggested command too (signals.resume_route), so the command they name works
    route = resume_route(run_dir_named(path), world)
    # a recorded count is data: never start more processes than the CPUs it may use; a typed one is the
    # user's, as proxima resume RUN --nproc K (the command the refusal names) takes it
    if route != "resume" and not (route == "nproc" and typed == world):

        # the stop line's builder: the path quoted, a module env named, so the command pasted resumes this run
        command, _ = resume_advice(run_dir_named(path), world, path=path)
        # a hand-started torchrun job, or more processes than --nproc may start here (several machines' worth)
        if route == "torchrun":
            raise ConfigError(f"{path}: written by {world} processes, more than {cpus}; resume it under "
                              f"the torchrun command that ran it (torchrun ... -m {command}, "
                              "docs/distributed.md)")
        # a run started by `train --nproc K` ran K processes on one machine: the user's own command, every
        # flag kept, with the count typed (a typed count is taken above the CPUs)
        run = run_dir_named(path)
        raise ConfigError(f"{path}: written by {world} processes, more than {cpus} (proxima resume "
                          f"starts no more); to run {world} here anyway: "
                          f"{with_nproc(argv, world, module_env(run) if run else None) if argv else command}")
    return world


def _as_typed(run_dir, typed: Optional[Path]):
    """``run_dir`` as the user typed it (relative, as train and a population resume print it) when
    ``typed`` is that same directory; else as it is."""
    try:
        return typed if typed is not None and os.path.samefile(run_dir, typed) else run_dir
    except OSError:
        return run_dir


# ------------------------------------------------------------------------------------ eval
def cmd_eval(args) -> int:
    from .evaluate import command_line

    from .terminal import machine_stdout

    # --json's object is for a program: an env that prints as it is built or reset writes to stderr
    with command_line("eval"), machine_stdout(args.json) as out:  # a recorded module:Class env is refused naming --env / --trust-run
        return _cmd_eval(args, out)


def _cmd_eval(args, out) -> int:
    from .evaluate import evaluate, format_result, json_numbers, load_run_policy, run_dir_named

    prog = "proxima eval"
    if args.episodes is not None and args.episodes < 1:
        return fail(prog, f"--episodes {args.episodes}: must be at least 1")
    if args.max_steps < 1:
        return fail(prog, f"--max-steps {args.max_steps}: must be at least 1")
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED + EVAL_SEED_OFFSET:
        return fail(prog, f"--seed {args.seed}: must be an integer from 0 to {MAX_SEED + EVAL_SEED_OFFSET:,} (train's "
                    f"largest seed, {MAX_SEED:,}, plus the {EVAL_SEED_OFFSET:,} an eval adds to a run's seed)")
    episodes_from = None  # the run's file the episode count came from, when none was typed
    try:
        from .device import resolve_device

        # train's parsing and checks of the JSON (one line naming --env-kwargs)
        env_kwargs = coerce("env_kwargs", args.env_kwargs, source="flag") if args.env_kwargs is not None else None
        path = args.path
        from .rundir import recorded_kind, rlhf_run_line

        run_dir = run_dir_named(path)
        if run_dir is not None and recorded_kind(run_dir / "meta.json") == "rlhf":  # not a run that stopped before a checkpoint
            return fail(prog, rlhf_run_line(run_dir))
        from .rundir import hf_model_line

        model_line = hf_model_line(path) if Path(path).is_dir() else None
        if model_line:  # RUN/policy/ of an RLHF run: "not a Proxima run directory" left its user guessing
            return fail(prog, model_line)
        from .population_run import is_population_dir

        if is_population_dir(path):  # every member, then statistics per setting
            from .population_eval import cmd_eval_population

            return cmd_eval_population(args, resolve_device(args.device), env_kwargs, out=out)
        if args.best:
            from .checkpoint import CheckpointError, best_checkpoint_path, source_path

            run = source_path(Path(args.path))  # RUN/checkpoints --best: RUN's best.pt, not checkpoints/checkpoints/
            if not run.is_dir():
                raise CheckpointError(f"{args.path}: --best needs a run directory (it evaluates RUN/checkpoints/best.pt); "
                                      f"to evaluate this file, drop --best")
            path = best_checkpoint_path(run)
            if not path.is_file():
                from .trainer import no_best_line

                raise CheckpointError(no_best_line(run))  # why, where the run records --eval-every
        from .checkpoint import check_registered

        # a run directory whose newest checkpoint is damaged: refused, naming its newest sound one
        policy = load_run_policy(path, device=resolve_device(args.device),  # one-line error for a bad --device
                                 env_id=args.env, trust_env=args.trust_run, env_kwargs=env_kwargs)
        check_registered(policy)
        if getattr(policy, "version_note", None):  # other code than trained it: its numbers may differ in the last bits
            from .terminal import printable

            print(printable(f"proxima: note: {policy.version_note}"), file=sys.stderr)
        from .run_setup import check_eval_backend

        check_eval_backend(policy, args.backend)  # before make_env, whose line would blame a --backend not typed here
        from .report import run_eval_episodes_from

        # seed None: evaluate's default, the run's seed + 1,000,000 (the end-of-training eval's); no --episodes:
        # the run's own count, so eval gives the number its eval.json and its report give
        episodes, episodes_from = (args.episodes, None) if args.episodes is not None else run_eval_episodes_from(
            run_dir, policy.config)
        episodes_from = policy.path if episodes_from == "checkpoint" else episodes_from
        result = evaluate(policy, episodes=episodes, deterministic=not args.stochastic, seed=args.seed,
                          backend=args.backend or policy.config.get("backend", "auto"), video=args.video, max_steps=args.max_steps)
    except _user_errors() as e:
        if args.json and getattr(e, "result", None) is not None:
            # the episodes ran before the video failed: --json readers still get them, placed as below
            print(json.dumps(json_numbers({**e.result, **_evaluated(policy)}), allow_nan=False), file=out)
        return fail(prog, _name_recorded_episodes(str(e), episodes_from))
    from .evaluate import diverged_note, member_diverged

    # a frozen member's score would otherwise read as a trained one's (a checkpoint from before it diverged is one)
    diverged = member_diverged(policy.path, getattr(policy, "global_step", None))
    if diverged:
        result["diverged"] = diverged
    if args.json:
        # strict JSON: a non-finite number is null
        print(json.dumps(json_numbers({**result, **_evaluated(policy)}), allow_nan=False), file=out)
    else:
        print(format_result(result, step=getattr(policy, "global_step", None)))
        if diverged:
            print(diverged_note(diverged))
        if result.get("video"):
            print(f"video: {result['video']}")
    return 0


def _name_recorded_episodes(message: str, source) -> str:
    """An eval refusal of ``--episodes N`` when N is the run's recorded eval_episodes (``source``: its
    config.yaml or checkpoint; None when typed): named as that file's field, with the flag to pass
    instead, since the user typed no --episodes (as _name_config_file names a --config file's value)."""
    if source is None or not message.startswith("--episodes "):
        return message
    message = message.removeprefix("--episodes ").replace("; lower --episodes", "")
    return f"{source}: eval_episodes {message}; pass --episodes N"


def _evaluated(policy) -> dict:
    """What places an eval's numbers on the run's curve: the global step of the checkpoint evaluated
    (as eval.json records it; null for a file that records none) and that file (a run directory's
    newest, or best.pt), so a run still training is not read as evaluated at its end."""
    return {"global_step": getattr(policy, "global_step", None), "checkpoint": str(policy.path)}


# ------------------------------------------------------------------------------------ presets
def cmd_presets(args) -> int:
    from .config import dump_yaml
    from .presets import ATARI_FAMILY, all_presets, other_versions, preset_env_id, preset_config

    prog = "proxima presets"
    if args.env_id is not None and not args.env_id.strip():  # an unset variable: not "every env", as train refuses it
        return fail(prog, f"ENV_ID {args.env_id!r}: empty; name an env (e.g. {DEFAULT_ENV}), or leave "
                    "ENV_ID out for every env's presets")
    rows = []
    try:  # a broken preset file (any of them): its file and line, as train says it
        known = all_presets()
    except ConfigError as e:
        return fail(prog, str(e))
    wanted = preset_env_id(args.env_id) if args.env_id else None  # ALE/Pong-v5: Pong-v5's presets
    if wanted and wanted not in known:
        others = other_versions(args.env_id)
        if others:  # HalfCheetah-v4: the one env meant, not the list of every env
            return fail(prog, f"no presets for '{args.env_id}'; {' and '.join(others)} "
                        f"{'has' if len(others) == 1 else 'have'} presets: `proxima presets {others[0]}` lists them")
        return fail(prog, f"no presets for '{args.env_id}'; envs with presets: {', '.join(sorted(known))} "
                    "(any other env trains with the defaults of PPOConfig)")
    if args.name is not None:
        choices = sorted(known[wanted])
        if args.name not in choices:
            close = _close_word(args.name, choices)
            return fail(prog, f"NAME {args.name!r}: no such preset for {args.env_id} (choices: {', '.join(choices)})"
                        + (f"; did you mean {close!r}?" if close else ""))
        values = preset_config(args.env_id, args.name)
        if not args.json:
            # the fields the preset sets, no others: with the defaults mixed in (train --dry-run) a file
            # could not tell what the preset chose; a --config file as it is (dump_yaml reads back alike)
            # env_id in the file: a --config FILE.yaml given another ENV_ID says so (its note), not trains these
            # settings silently on that env; the Atari family's file names no game (ENV_ID names it)
            family = wanted == ATARI_FAMILY
            example = "ALE/SpaceInvaders-v5" if family else args.env_id
            print(f"# preset {wanted}/{args.name} (proxima/presets/{known[wanted][args.name]['file']}): "
                  f"`proxima train {example} --config FILE.yaml` trains with these settings"
                  + (" (any Atari game's ENV_ID)" if family else ""))
            values = values if family else {"env_id": args.env_id, **values}
            sys.stdout.write(dump_yaml(values) if values else "{}\n")
            return 0
    for env_id, presets in sorted(known.items()):
        for name, body in sorted(presets.items()):
            if (wanted and env_id != wanted) or (args.name is not None and name != args.name):
                continue
            steps = int(body["config"].get("total_timesteps", FIELDS["total_timesteps"].default))
            rows.append((env_id, name, steps, body["description"], body["config"]))
    if args.json:  # steps as a number; config: the fields the preset sets, as `proxima presets ENV NAME` prints them
        print(json.dumps([dict(zip(("env_id", "preset", "steps", "description", "config"), r)) for r in rows]))
        return 0
    def shown(steps: int, config: dict) -> str:  # a run trains whole batches (config.num_iterations): both, where they differ
        batch = int(config.get("num_envs", FIELDS["num_envs"].default)) * int(config.get("num_steps", FIELDS["num_steps"].default))
        trained = steps // batch * batch
        return f"{steps:,}" + (f" ({trained:,} trained)" if trained != steps else "")

    rows = [(e, n, shown(steps, config), d) for e, n, steps, d, config in rows]
    widths = [max(len(r[i]) for r in rows + [("env id", "preset", "steps", "")]) for i in range(3)]
    lines = [f"{'env id':<{widths[0]}}  {'preset':<{widths[1]}}  {'steps':>{widths[2]}}  description"]
    lines += [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}" for r in rows]
    # one write: under PYTHONUNBUFFERED (set in many containers) each print is a write of its own, and
    # `proxima presets | head -1` could find head gone at the second line (exit 141) rather than exit 0
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _close_word(word: str, choices) -> Optional[str]:
    import difflib

    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return close[0] if close else None


def add_trust_flags(p: argparse.ArgumentParser, command: str, env_help: str = "") -> None:
    """--env / --trust-run: the two ways a user allows a recorded module:Class env id to be imported."""
    p.add_argument("--env", default=None, metavar="ENV_ID", help="the env to build, named by you: needed when the run's "
                   "env is module:Class (a run directory is data; its recorded env id is never imported on its own), or "
                   "an id the training code registered itself (MODULE:ID: the module whose import registers ID)" + env_help)
    p.add_argument("--trust-run", action="store_true", help=f"trust this run's files: let {command} import the module:Class env they record")


# ------------------------------------------------------------------------------------ parser
#: modules that add their own subcommand with register(subparsers)
#: (none imports torch or gymnasium: `proxima --help` and a mistyped flag answer without them; a command
#: imports what it needs when it runs)
PLUGINS = ("proxima.bench", "proxima.check_env_cli", "proxima.doctor", "proxima.plot", "proxima.report", "proxima.rlhf.cli")


#: --quiet of train and resume: what it leaves out, and the lines a user still needs (trainer.train, finish_run)
QUIET_HELP = ("no progress bar or summary lines (final eval, resuming/stopped at step N) and no advisory notes (action "
              "scale, pixels, settings that do not apply); errors, notes of what the run does otherwise than asked (a "
              "directory moved aside, steps rounded to whole iterations) and the 'run directory:' line still print")


def build_parser() -> ArgParser:
    from . import __version__

    parser = ArgParser(prog="proxima", description="PPO on PyTorch: train, evaluate, resume, benchmark, RLHF.")
    parser.add_argument("--version", action="version", version=f"proxima {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgParser)

    p = sub.add_parser("train", help="train PPO on an env", description="Train PPO. Settings come from the defaults, then the env's preset (or --preset), then --config FILE, "
                       "then flags: each overrides the ones before it. A flag's (default: ...) below is PPOConfig's, which the env's preset "
                       "may replace (the shipped presets set num_envs, num_steps and total_timesteps, most also lr, the "
                       "minibatching, ent_coef, gamma and the backend): `proxima presets ENV_ID default` lists what a preset "
                       "sets, and `proxima train ENV_ID --dry-run` prints every value the run would use.")
    p.add_argument("env_id", nargs="?", default=None, metavar="ENV_ID", help="Gymnasium id or module:ClassName (default CartPole-v1)")
    p.add_argument("--preset", default=None, type=_preset_arg, help="named preset for the env (see `proxima presets`; default: "
                   "the env's 'default', for an env without presets none; none (or None): no preset, PPOConfig's defaults, "
                   "e.g. under a --config FILE translated from rl-zoo or CleanRL); "
                   "with --resume, a preset given (with the run's ENV_ID) is checked as flags are (the env's default preset is not applied)")
    p.add_argument("--config", default=None, metavar="FILE.yaml", help="YAML file of PPOConfig fields (e.g. a run's config.yaml "
                   "in its run directory: its run_dir, that run's own directory, is not reused; the new run gets a new one or "
                   "--run-dir's; a copy elsewhere is a file like any other, and a new run trains in the run_dir it names, "
                   "refused when that directory holds files); numbers are read as YAML 1.2 reads them (010 is 10; quote a "
                   "name that looks like a number: run_dir: '1.10'); precedence: defaults < preset < this file < flags; a "
                   "module:Class env_id in it must be given as ENV_ID too; with --resume, its values are checked as flags are")
    p.add_argument("--resume", default=None, metavar="auto|PATH", help="continue a run: a checkpoint or run directory, or auto (the --run-dir's latest checkpoint, if any); only the fields "
                   "listed in docs/reliability.md may change, by flag, --config FILE or --preset NAME; any other must equal the run's")
    p.add_argument("--overwrite", action="store_true", help="start a new run in a --run-dir that holds files: the old directory is moved aside (DIR.old-TIME); "
                   "refused with a --resume that continues a checkpoint")
    p.add_argument("--trust-run", action="store_true", help="with --resume: import the module:Class env recorded in the checkpoint (otherwise name it as ENV_ID)")
    p.add_argument("--nproc", type=int_arg, default=None, metavar="K", help="launch K processes with torchrun (data-parallel, one policy; K >= 1)")
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    p.add_argument("--dry-run", action="store_true", help="print the resolved config (defaults < preset < --config FILE < flags), "
                   "check the env builds and the run fits, train nothing, write nothing; with --resume, the config the resume "
                   "would continue with, read from its checkpoint (nothing locked or moved); with --seeds/--sweep, one JSON line: members, "
                   "seeds, sweep and the config they share")
    p.add_argument("--seeds", default=None, metavar="SEEDS", help="train a population: one agent per seed in one batched "
                   "process, e.g. 1-16 or 1,5,9 (docs/populations.md); a single number N is one member, seed N (a note says so "
                   "unless --sweep is given)")
    p.add_argument("--sweep", action="append", default=None, metavar="FIELD=V1,V2", help="a population over values of a "
                   "per-member field (lr, ent_coef, clip_coef, vf_clip_coef, vf_coef, gamma, gae_lambda, max_grad_norm, target_kl; the "
                   "switches norm_adv, anneal_lr, clip_vloss take true,false), crossed with --seeds; repeat to cross several fields")
    add_config_flags(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="evaluate a run, checkpoint or population",
                       description="Evaluate a run's newest checkpoint (or a checkpoint file). Given a population directory "
                       "(train --seeds/--sweep), evaluate every member and sum up each setting: mean and IQM over members "
                       "with 95% bootstrap CIs (docs/populations.md).")  # a description is printed as written: no %% escape
    p.add_argument("path", help="run directory, checkpoint file or population directory")
    p.add_argument("--episodes", type=int_arg, default=None, help="episodes to run (default: the run's --eval-episodes, "
                   "as its eval.json and `proxima report` measure it; 10 where that is 0; a population: each member's); deterministic "
                   "episodes are a prefix, on native envs as on Gymnasium's: --episodes 3 plays the first 3 of --episodes 10 "
                   "(their returns equal but for float rounding in the last digits)")
    # SB3's and CleanRL's users pass the default explicitly; both at once asks for two policies
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--deterministic", action="store_true", help="act with the policy's mode (the default)")
    mode.add_argument("--stochastic", action="store_true", help="sample actions instead of the deterministic mode (one sample stream for all episodes: episode i's return depends on --episodes)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--seed", type=int_arg, default=None, help="seed of the envs and of --stochastic's action samples, 0 to "
                   f"{MAX_SEED + EVAL_SEED_OFFSET:,} (default: the run's seed + {EVAL_SEED_OFFSET:,}, as in the end-of-training eval)")
    p.add_argument("--max-steps", type=int_arg, default=MAX_EVAL_STEPS, metavar="N",
                   help=f"steps per episode at most (the episodes run side by side, one env each; default {MAX_EVAL_STEPS:,}); episodes still "
                   "running then count with their return so far and are named as cut")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu, whatever the run trained on; eval.json was "
                   "measured on the run's device: give --device cuda to repeat a CUDA run's numbers)")
    p.add_argument("--backend", default=None, choices=("auto", "native", "gymnasium", "envpool"), help="env backend (default: the run's)")
    p.add_argument("--video", default=None, metavar="FILE", help="record env 0's first episode to FILE at the env's "
                   "render_fps (its metadata's; 30 if it names none; Atari 15) (.mp4, .mov, .mkv, .webm or .gif; no "
                   "suffix, or one that is no file type as in run.seed1: .mp4 appended; an existing FILE is replaced)")
    p.add_argument("--best", action="store_true", help="evaluate the run's best checkpoint (checkpoints/best.pt, kept by --eval-every) instead of its latest")
    add_trust_flags(p, "eval", env_help=" (another env id than the run's, or than MODULE:ID of the run's ID, is built "
                    "without the run's --env-kwargs; give its own with --env-kwargs)")
    p.add_argument("--env-kwargs", default=None, metavar="JSON", help="keyword arguments of the env's constructor as JSON, "
                   "e.g. '{\"continuous\": true}', instead of those recorded in the checkpoint (as in the run's config.yaml) ('{}': none)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("resume", help="continue a stopped run in its directory",
                       description="Continue a stopped run in its directory from its newest usable checkpoint. Flags change "
                       "only what is safe to change (docs/reliability.md): --total-timesteps extends the run, others such as "
                       "--checkpoint-every or --eval-episodes; any other flag that differs from the run's config is refused. A run of "
                       "K processes (--nproc K) resumes with K processes on this machine (started through torchrun) when K is at most "
                       "its CPUs; beyond that, continue it with proxima train --resume RUN_DIR --nproc K (a run torchrun started by "
                       "hand, or one of more processes than --nproc allows here: under its own torchrun command). --nproc K is taken when K is "
                       "the run's own count (beyond the CPUs too, as that train --resume command takes it); another K is refused. An RLHF "
                       "run (proxima rlhf) takes only --steps, --trust-run and --quiet; any other flag is refused.")
    p.add_argument("path", metavar="RUN_DIR|CHECKPOINT", help="run directory (continued from its newest usable checkpoint), "
                   "or a checkpoint file: one in RUN/checkpoints/ continues RUN from it, a loose one needs --run-dir DIR")
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    p.add_argument("--steps", type=int_arg, default=None, metavar="N", help="RLHF runs: continue until step N (extends the run)")
    add_trust_flags(p, "resume")
    # a run resumes in its own directory (RUN_DIR); a different --run-dir is refused
    add_config_flags(p, recorded=True, help_overrides={"run_dir": "a loose checkpoint file only (one not in a run's "
                     "checkpoints/ folder): the run directory to continue it in, new or empty; a run directory resumes in "
                     "itself, and another --run-dir is refused"})
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("presets", help="list the tuned presets, or print one's settings", description="List the tuned "
                       "presets: env id, name, steps, description (any other env trains with the defaults of PPOConfig). "
                       "With ENV_ID NAME: print the fields that preset sets, and only those, as YAML that --config "
                       "FILE.yaml takes (`proxima presets CartPole-v1 fast > fast.yaml`).")
    p.add_argument("env_id", nargs="?", default=None, metavar="ENV_ID", help="list only this env's presets (default: every "
                   "env's; ALE/<Game>-v5 has <Game>-v5's)")
    p.add_argument("name", nargs="?", default=None, metavar="NAME", help="print this preset's settings (its config: block) "
                   "as YAML, a --config file")
    p.add_argument("--json", action="store_true", help="print one JSON list of {env_id, preset, steps, description, config} "
                   "(steps as a number; config: the fields the preset sets)")
    p.set_defaults(func=cmd_presets)

    for name in PLUGINS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and name.startswith(e.name):
                continue  # optional part not installed in this build
            raise
        module.register(sub)
    return parser


#: Stable-Baselines3's and CleanRL's flags as flags here, where config.FOREIGN_NAMES' field alone is not
#: what to type: the value comes too (--cuda is --device cuda) or the flag is the negated one
FOREIGN_FLAGS = {"cuda": "--device cuda", "no_cuda": "--device cpu", "policy": "--encoder"}
#: FOREIGN_FLAGS given a false value (CleanRL's --cuda False): the flag's other half, not the flag
FOREIGN_FLAGS_OFF = {"cuda": "--device cpu"}

#: config.FOREIGN_NOTE_TEMPLATES in flag words (config.FOREIGN_NOTES has them in field words), with
#: the notes of flags that only the command line has
FOREIGN_FLAG_NOTES = {
    **{name: foreign_note(text, flags=True) for name, text in FOREIGN_NOTE_TEMPLATES.items()},
    "cuda": "",  # FOREIGN_FLAGS' --device cuda says it
    "policy": "MlpPolicy is --encoder mlp, CnnPolicy --encoder cnn",
}


def _foreign_hint(key: str, value: Optional[str], command: Optional[str], target: argparse.ArgumentParser,
                  known: list) -> Optional[tuple]:
    """What an unknown flag of SB3 or CleanRL (``key``: its name, dashes as underscores) is on this
    command: ("flag", the flag to type, a note or "") or ("advice", a clause), None for another flag.
    difflib alone sends --clip-range to --clip-reward and --batch-size to --hidden-sizes."""
    from .config import FOREIGN_NAMES, FOREIGN_UNSUPPORTED

    if command in ("rlhf", "resume"):  # TRL's names (rlhf.config.TRL_NAMES); rlhf's settings, which no resume takes
        from .rlhf.config import flag_hint

        rlhf_hint = flag_hint(key, command, known, value)
        if rlhf_hint is not None:
            return rlhf_hint
    if key in FOREIGN_UNSUPPORTED:  # no flag stands for it: difflib sent --use-sde to --seed
        if command in ("train", "resume"):
            return ("advice", f"--{key.replace('_', '-')}: {FOREIGN_UNSUPPORTED[key]}")
        return ("advice", f"--{key.replace('_', '-')} is a training setting of SB3 or its zoo, not a flag of proxima {command}")
    if key == "algo":  # rl-zoo's train.py and enjoy.py
        algo = f"--algo {value}" if value else "--algo"
        other = f" ({value} is not available here)" if value and value.lower() != "ppo" else ""
        return ("advice", f"{algo}: proxima trains PPO only{other}; drop it")
    if key == "hyperparams" and command in ("train", "resume"):
        return ("advice", _zoo_hyperparams(value or []))
    negated = key.startswith("no_") and key not in FOREIGN_FLAGS and key[3:] in FOREIGN_NAMES  # tyro's --no-cuda form
    name = key[3:] if negated else key
    if not negated and isinstance(value, str) and BOOL_WORDS.get(value.lower()) is False:  # --cuda False: the other half
        field = FOREIGN_NAMES.get(name)
        off = FOREIGN_FLAGS_OFF.get(name) or (
            "--no-" + field.replace("_", "-") if field in FIELDS and isinstance(FIELDS[field].default, bool) else None)
        if off and off.split(" ")[0] in known:
            return ("flag", off, "")
        if name in FOREIGN_OFF_ADVICE and command in ("train", "resume"):
            return ("advice", f"--{key.replace('_', '-')} {value}: {FOREIGN_OFF_ADVICE[name]}; drop it")
    flag = FOREIGN_FLAGS.get(name) or ("--" + FOREIGN_NAMES[name].replace("_", "-") if name in FOREIGN_NAMES else None)
    if flag and negated:
        flag = "--no-" + flag[2:]  # a boolean's other half; a flag of a value has none, so is not known below
    if flag and flag.split(" ")[0] in known:
        return ("flag", flag, "" if negated else FOREIGN_FLAG_NOTES.get(name, ""))
    if name in ("env_id", "env", "gym_id"):  # gym_id: CleanRL's older --gym-id
        if "--env" in known:  # eval's and resume's name for it
            return ("flag", "--env", "")
        if any(a.dest == "env_id" and not a.option_strings for a in target._actions):  # train's, bench's positional
            shown = shlex.quote(value) if value else "ENV_ID"
            return ("advice", f"the env is the positional ENV_ID, no flag: proxima {command} {shown}")
    if name == "capture_video" and "--video" in known:
        return ("flag", "--video", "")
    if name in FOREIGN_ADVICE and command in ("train", "resume"):
        return ("advice", FOREIGN_ADVICE[name])
    return None


#: flags only CleanRL's ppo.py has: a command line with one is CleanRL's, whose --batch-size is derived
_CLEANRL_FLAGS = ("--exp-name", "--torch-deterministic", "--num-iterations", "--num-updates", "--minibatch-size",
                  "--wandb-project-name", "--capture-video", "--gym-id")


def _cleanrl_derived_hint(key: str, value: Optional[str], words: list, known: list) -> Optional[tuple]:
    """CleanRL's settings it computes at startup (args.batch_size = num_envs x num_steps, minibatch_size,
    num_iterations), typed as flags: ("advice", drop it) or ("flag", --num-minibatches, the count), for
    _did_you_mean; None for another flag, or --batch-size typed as SB3's minibatch size (its note stands)."""
    from .config import DERIVED_NOTE_TEMPLATES

    if "--num-steps" not in known:  # train's (resume's) and bench's settings only
        return None
    flag = "--" + key.replace("_", "-")
    if key in DERIVED_NOTE_TEMPLATES:
        return ("advice", f"{flag}: {foreign_note(DERIVED_NOTE_TEMPLATES[key], flags=True)}")
    if key not in ("batch_size", "minibatch_size"):
        return None
    if "--num-minibatches" not in known:  # bench: no minibatch flag, but train's hint for the SB3/CleanRL word all the same
        return ("advice", f"{flag}: proxima train's --num-minibatches stands for it ({FOREIGN_FLAG_NOTES[key]}); bench "
                          "trains with its preset's minibatches: --preset NAME picks another (`proxima presets ENV_ID` lists them)")
    typed = {}
    for i, word in enumerate(words):  # --num-envs 8 and --num-envs=8
        name, eq, given = word.partition("=")
        given = given if eq else (words[i + 1] if i + 1 < len(words) else "")
        if name in ("--num-envs", "--num-steps", "--batch-size") and given.isdigit() and int(given) > 0:
            typed[name] = int(given)
    size = int(value) if value is not None and value.isdigit() and int(value) > 0 else None
    batch = typed["--num-envs"] * typed["--num-steps"] if {"--num-envs", "--num-steps"} <= set(typed) else None
    # --minibatch-size is SB3's batch_size spelt otherwise too: beside --batch-size it says nothing of whose
    cleanrl = any(w.partition("=")[0] in _CLEANRL_FLAGS and w.partition("=")[0] not in (flag, "--minibatch-size")
                  for w in words) or (key == "batch_size" and batch is not None and size == batch)
    if key == "batch_size":
        return ("advice", f"{flag}: derived (--num-envs x --num-steps): drop it") if cleanrl else None
    if batch is None and cleanrl:  # CleanRL's --batch-size typed beside it: the batch it derived
        batch = typed.get("--batch-size")
    count = batch // size if batch and size and batch % size == 0 else None
    if not (cleanrl or count):
        return None
    here = f" (= {count} here)" if count else ""
    return ("flag", "--num-minibatches", f"CleanRL derives --minibatch-size: --num-minibatches = --num-envs x --num-steps / "
            f"--minibatch-size{here}")


def _train_setting(key: str, parser: argparse.ArgumentParser) -> Optional[tuple]:
    """(field, proxima train's flag for it, whether another library's name) for an unknown flag ``key`` that names
    a PPO or model setting a preset sets (``lr``, ``no_anneal_lr``; SB3's ``n_epochs`` as --update-epochs) or
    total_timesteps; None for any other."""
    from .config import FOREIGN_NAMES

    negated = key.startswith("no_") and key[3:] in FIELDS and isinstance(FIELDS[key[3:]].default, bool)
    field = key[3:] if negated else ALIASES.get(key, key)
    foreign = field not in FIELDS and key in FOREIGN_NAMES
    field = FOREIGN_NAMES[key] if foreign else field
    train = _subcommand(parser, "train")
    names = list(FIELDS)  # PPO's and the model's settings, which a preset sets (num_steps .. clip_reward)
    if field not in names[names.index("num_steps"):names.index("clip_reward") + 1] + ["total_timesteps"] or train is None:
        return None
    train_flag = ("--no-" if negated else "--") + field.replace("_", "-")
    return (field, train_flag, foreign) if train_flag in _options(train) else None


def _subcommand(parser: argparse.ArgumentParser, name: str) -> Optional[argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subs[0].choices.get(name) if subs else None


def _options(parser: argparse.ArgumentParser) -> set:
    return {o for a in parser._actions for o in a.option_strings}


def _bench_train_flag_hint(key: str, parser: argparse.ArgumentParser, known: list) -> Optional[tuple]:
    """bench trains its preset's settings: a train flag it has no such flag for (``--lr``, ``--update-epochs``;
    SB3's ``--n-epochs`` as train's ``--update-epochs``) is ("advice", that bench takes no such flag, that
    --preset NAME picks another preset and which flag of proxima train sets it), not difflib's --help or
    --num-steps; ``--seed`` that bench measures speed, which no seed changes (not difflib's --seconds); None
    for a flag that names no PPOConfig field, or one bench has."""
    flag = "--" + key.replace("_", "-")
    if key == "seed" and flag not in known:
        return ("advice", f"{flag}: bench takes no {flag}: it measures steps per second, which the seed does not "
                          f"change (every line trains with its preset's seed); proxima train takes it")
    setting = _train_setting(key, parser)
    if setting is None or setting[1] in known:
        return None
    field, train_flag, foreign = setting
    if field == "total_timesteps":
        return ("advice", f"{flag}: bench measures each size for --seconds S, not a number of steps; proxima train "
                          f"takes {'it' if train_flag == flag else train_flag}")
    presets = "--preset NAME picks another preset (`proxima presets ENV_ID` lists them)"
    if foreign:
        return ("advice", f"{flag}: proxima train's {train_flag} stands for it; bench trains its preset's settings and "
                          f"takes no {train_flag}: {presets}")
    train_takes = "it" if train_flag == flag else train_flag
    return ("advice", f"{flag}: bench trains its preset's settings and takes no {flag}: {presets}; proxima train "
                      f"takes {train_takes}")


def _eval_train_flag_hint(key: str, parser: argparse.ArgumentParser, known: list) -> Optional[tuple]:
    """eval runs the trained policy: a training setting (``--lr``, ``--update-epochs``; SB3's ``--n-epochs``) is
    ("advice", that eval takes no such flag, which flag of proxima train sets it and, where a resume may change
    it (config.RESUME_SAFE), that proxima resume continues the run with it), not difflib's --help or --max-steps; None for a flag
    that names no training setting, or one eval has."""
    from .config import RESUME_SAFE

    setting = _train_setting(key, parser)
    if setting is None or setting[1] in known:
        return None
    field, train_flag, foreign = setting
    flag = "--" + key.replace("_", "-")
    named = f"proxima train's {train_flag} stands for it; " if foreign else ""
    train_takes = "it" if train_flag == flag else train_flag
    resume = _subcommand(parser, "resume")  # a resume changes only the safe fields (--total-timesteps of these)
    resumes = (f", and proxima resume RUN {train_flag} N continues the run with it"
               if field in RESUME_SAFE and resume is not None and train_flag in _options(resume) else "")
    return ("advice", f"{flag}: {named}a training setting: eval runs the trained policy as its checkpoint holds it and "
                      f"takes no {train_flag}; proxima train takes {train_takes}{resumes}")


def _zoo_hyperparams(pairs: list) -> str:
    """What rl-zoo's ``--hyperparams learning_rate:0.001 n_envs:8`` is here: each setting as its flag
    (``--lr 0.001 --num-envs 8``), the zoo's names translated as a --config file's refusal names them
    (config.ALIASES, FOREIGN_NAMES with their notes), or the settings no flag stands for, to drop."""
    from .config import ALIASES, FOREIGN_NAMES, FOREIGN_UNSUPPORTED, _foreign_value_hint

    flags, drop = [], []
    for pair in pairs:
        key, sep, value = pair.partition(":")
        name = key.strip().replace("-", "_")
        field = ALIASES.get(name) or (name if name in FIELDS else FOREIGN_NAMES.get(name))
        if name in FOREIGN_UNSUPPORTED or name == "policy" or field not in FIELDS:
            drop.append(name or pair)
            continue
        flag = "--" + field.replace("_", "-")
        if not sep:  # a setting named without its value (zoo's key:value): its flag, the value to give
            flags.append(f"{flag} VALUE")
            continue
        note = FOREIGN_FLAG_NOTES.get(name) if field != name and ALIASES.get(name) != field else None
        word = value.strip().lower()
        # a switch takes no value: the word typed says which form (--norm-obs X would be refused, and a
        # zoo's false would read as turning it on)
        switch = (flag if BOOL_WORDS[word] else "--no-" + flag[2:]) if (
            isinstance(FIELDS[field].default, bool) and word in BOOL_WORDS) else None
        if note:
            flags.append(f"{switch or flag + ' X'} ({note})")
        elif switch:
            flags.append(switch)
        elif word.startswith("lin_"):  # a schedule, which the flag refuses: its number, and what here stands for it
            flags.append(f"{flag} {shlex.quote(value.strip()[4:])}{_foreign_value_hint(field, value.strip())}")
        else:
            flags.append(f"{flag} {shlex.quote(value.strip())}")
    given = f"give them as flags: {' '.join(flags)}" if flags else "give each setting as its flag (--lr 0.001)"
    dropped = f"; drop {', '.join(drop)} (no flag here)" if drop else ""
    return f"--hyperparams is rl-zoo's: {given}, or put them in a --config FILE.yaml under these names{dropped}"


RESUME_DRY_RUN = ("a resume's dry run is `proxima train --resume RUN --dry-run`: it checks the resume and prints the "
                  "config it would continue with, writing nothing")


def _resume_dry_run(argv: list) -> str:
    """RESUME_DRY_RUN, for ``proxima resume POP --dry-run`` of a population (or one of its checkpoints) the
    command that dry-runs its resume, with its env, seeds and sweep (checkpoint.population_dry_run): a
    population's checkpoint is refused by a single run's ``train --resume RUN --dry-run``."""
    from .checkpoint import population_dry_run

    words = list(argv)
    at = words.index("resume") if "resume" in words else -1
    run = next((w for w in words[at + 1:] if not w.startswith("-")), None) if at >= 0 else None
    if run is None or not _is_population_path(run):
        return RESUME_DRY_RUN
    population = _population_of(run)
    dry = population_dry_run(population, run if Path(run).is_file() else str(population))
    return (f"a population's resume is dry-run with its env, seeds and sweep: `{dry}`: it checks the resume and prints "
            "what it would continue, writing nothing" if dry else RESUME_DRY_RUN)


def _resume_config(argv: list, value: Optional[str]) -> str:
    """Where ``proxima resume RUN --config FILE`` goes: train's --resume, which reads a file's values and
    checks them as flags (``proxima resume`` takes flags only)."""
    words = list(argv)
    at = words.index("resume") if "resume" in words else -1
    after = words[at + 1] if 0 <= at < len(words) - 1 else ""
    run = shlex.quote(after) if after and not after.startswith("-") and after != value else "RUN"
    from .run_setup import resumes_rlhf

    try:  # an RLHF run's resume is not train's: its settings are its config.yaml
        rlhf = run != "RUN" and resumes_rlhf(after)
    except Exception:  # a damaged meta.json: resume itself says what is wrong
        rlhf = False
    if rlhf:
        from .rlhf.config import RESUME_TAKES

        return (f"proxima resume takes no --config: {RESUME_TAKES}; a new run with the file's values: `proxima rlhf "
                f"--config {shlex.quote(value) if value else 'FILE'}`")
    return (f"proxima resume takes no --config: `proxima train --resume {run} --config {shlex.quote(value) if value else 'FILE'}` "
            "resumes with the file's values, checked as flags are")

#: the flag meant by a first word that starts several: --clip is PPO's clip (CleanRL's --clip-coef,
#: SB3's clip_range), not the observation or reward clipping
PREFIX_MEANT = {"--clip": "--clip-coef"}


def _did_you_mean(parser: argparse.ArgumentParser, command: Optional[str], extra: list, argv: Optional[list] = None) -> str:
    """``; did you mean --num-envs?`` for unknown flags: another library's flag its counterpart here
    (_foreign_hint), any other the command's closest flag (difflib). ``argv``: the whole command line,
    where a flag's value is when argparse took it for a positional (``train --env-id CartPole-v1``)."""
    import difflib
    import itertools

    target = parser
    if command:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        target = subs[0].choices.get(command, parser) if subs else parser
    known = [o for a in target._actions for o in a.option_strings if o.startswith("--") and a.help is not argparse.SUPPRESS]
    # --trust-run lets a run's module be imported: a flag to choose knowingly, never a spelling fix
    guessable = [k for k in known if k != "--trust-run"]
    close, advice = [], []
    words = list(argv if argv is not None else extra)
    for word in extra:
        flag, eq, value = word.partition("=")
        at = words.index(word) if word in words else -1
        if flag == "-n" and "--total-timesteps" in known:  # rl-zoo's short --n-timesteps
            after = value if eq else (words[at + 1] if 0 <= at < len(words) - 1 else "")
            steps = after if after and not after.startswith("-") else "N"
            close += [m for m in [f"--total-timesteps {steps} (rl-zoo's -n)"] if m not in close]
            continue
        if not flag.startswith("--"):
            continue
        if not eq:  # the word after it, unless that is a flag
            after = words[at + 1] if 0 <= at < len(words) - 1 else None
            value = after if after is not None and not after.startswith("-") else None
        key = flag[2:].replace("-", "_").lower()
        if key == "hyperparams":  # rl-zoo's: every word after it, up to the next flag
            rest = ([value] if eq else []) + list(itertools.takewhile(
                lambda w: not w.startswith("-"), words[at + 1:] if at >= 0 and not eq else []))
            value = rest
        hint = _cleanrl_derived_hint(key, value or None, words, known) or (
            _bench_train_flag_hint(key, parser, known) if command == "bench" else
            _eval_train_flag_hint(key, parser, known) if command == "eval" else None) or _foreign_hint(
            key, value or None, command, target, known)
        if hint is None:
            # a flag's first word (--ent, --clip) is the flag meant, which difflib misses: --ent went to --quiet
            longer = [k for k in guessable if k.startswith(flag.lower() + "-")]
            if PREFIX_MEANT.get(flag.lower()) in longer:
                longer = [PREFIX_MEANT[flag.lower()]]
            meant = difflib.get_close_matches(flag, longer, n=1, cutoff=0) if longer else \
                difflib.get_close_matches(flag, guessable, n=1)
            if flag == "--dry-run" and command == "resume":  # train's: the same checks of the resume, nothing written
                hint = _resume_dry_run(words)
                meant, advice = [], advice + ([hint] if hint not in advice else [])
            if flag == "--config" and command == "resume":  # train --resume's: difflib said nothing
                meant, advice = [], advice + [_resume_config(words, value)]
            if flag == "--preset" and command == "resume":  # not --progress: a preset is chosen when the run starts
                meant, advice = [], advice + ["a resume keeps the run's settings; a preset is chosen when a run starts: "
                                              "`proxima train ENV_ID --preset NAME --run-dir NEW`"]
            close += [m for m in meant if m not in close]
        elif hint[0] == "advice":
            advice += [hint[1]] if hint[1] not in advice else []  # --track --wandb-entity E: one answer
        else:
            close += [m for m in [hint[1] + (f" ({hint[2]})" if hint[2] else "")] if m not in close]
    return (f"; did you mean {' or '.join(close)}?" if close else "") + "".join(f"; {a}" for a in advice)


#: words a user may write after a boolean flag as its value; config.coerce reads them in YAML files
BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def _bool_flag_value(parser: argparse.ArgumentParser, argv: list) -> Optional[tuple]:
    """(command, message) when a boolean flag is given a value (``--anneal-lr no``, ``--anneal-lr=false``):
    argparse would read the word as ENV_ID ("unknown env id 'no'") or as an unrecognized argument,
    neither of which says the fix: write --no-anneal-lr (or --anneal-lr alone). None otherwise."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    command = next((w for w in argv if not w.startswith("-")), None)
    target = subs[0].choices.get(command) if subs and command else None
    if target is None:
        return None
    flags = {o: a for a in target._actions if isinstance(a, argparse.BooleanOptionalAction) for o in a.option_strings}
    for i, word in enumerate(argv):
        if word == "--":
            break
        flag, eq, value = word.partition("=")
        value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if flag in flags and value.lower() in BOOL_WORDS:
            on = BOOL_WORDS[value.lower()] != flag.startswith("--no-")  # --no-anneal-lr false: on
            positive = flags[flag].option_strings[0]
            want = positive if on else "--no-" + positive[2:]
            return command, f"{flag} takes no value (got {value!r}); write {'just ' if want == flag else ''}{want}"
    return None


#: a negative number argparse reads as an unknown flag (its own matcher takes only -5 and -0.5)
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity)$", re.IGNORECASE)


def _attach_negative_numbers(parser: argparse.ArgumentParser, argv: list) -> list:
    """argv with ``--stop-return -1e3`` written ``--stop-return=-1e3``: argparse takes a word starting
    with '-' for a flag unless it looks like ``-5`` or ``-0.5``, so a value in scientific notation
    (or ``-inf``) after a flag that takes one was "expected one argument"."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    command = next((w for w in argv if not w.startswith("-")), None)
    target = subs[0].choices.get(command) if subs and command else None
    if target is None:
        return argv
    takes_value = {o for a in target._actions if a.option_strings and a.nargs in (None, 1) and not isinstance(
        a, argparse.BooleanOptionalAction) and not isinstance(a, (argparse._StoreConstAction, argparse._HelpAction))
        for o in a.option_strings}
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return out + argv[i:]
        if word in takes_value and i + 1 < len(argv) and _NEGATIVE_NUMBER.match(argv[i + 1]):
            out.append(f"{word}={argv[i + 1]}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


#: a word that continues a list flag's value (``--hidden-sizes 64 64``): a number or numbers with commas
#: (``64,``, ``-1``, ``1e3``); a word that starts otherwise (an ENV_ID, a flag) ends the list
_LIST_WORD = re.compile(r"^-?[0-9][0-9_.eE+-]*(?:,+-?[0-9][0-9_.eE+-]*)*,*$")


def _join_list_values(parser: argparse.ArgumentParser, argv: list) -> list:
    """argv with a list field's widths given as several words (``--hidden-sizes 64 64``, as its help
    says: "separated by commas or spaces") joined into the flag's one value, ``--hidden-sizes=64 64``:
    argparse took the first and read the second as ENV_ID ("unknown env id '64'"). An argument of
    nargs="+" would take a following ENV_ID as a width too (``--hidden-sizes 32 CartPole-v1``), so only
    words that are numbers are joined, and for resume none that names a path (its RUN_DIR ``7``)."""
    target = _subparser(parser, argv)
    command = target.prog.split()[-1] if target is not None else None
    if command not in ("train", "resume"):
        return argv
    lists = {name for name, f in FIELDS.items() if callable(f.default_factory) and isinstance(f.default_factory(), list)}
    flags = {o for a in target._actions if a.dest in lists for o in a.option_strings}
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return out + argv[i:]
        flag, eq, value = word.partition("=")
        if flag in flags and (eq or i + 1 < len(argv)):
            values, j = [value] if eq else [argv[i + 1]], i + 1 if eq else i + 2
            # resume's RUN_DIR may be a number (a run named by its seed): a word that names a path is that
            while j < len(argv) and _LIST_WORD.match(argv[j]) and not (command == "resume" and os.path.exists(argv[j])):
                values.append(argv[j])
                j += 1
            if len(values) > 1:
                out.append(f"{flag}={' '.join(values)}")
                i = j
                continue
        out.append(word)
        i += 1
    return out


def _subparser(parser: argparse.ArgumentParser, argv: list) -> Optional[argparse.ArgumentParser]:
    """The parser of the command ``argv`` names, None when it names none."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    command = next((w for w in argv if not w.startswith("-")), None)
    return subs[0].choices.get(command) if subs and command else None


#: flags whose second use would silently replace the first (argparse keeps the last)
ONCE_FLAGS = ("--config",)


def _repeated_flag(parser: argparse.ArgumentParser, argv: list) -> Optional[str]:
    """A line refusing a flag of ONCE_FLAGS given twice (``--config a.yaml --config b.yaml``): the
    earlier file would be dropped without a word, though the user meant both. None otherwise."""
    target = _subparser(parser, argv)
    if target is None:
        return None
    options = {o for a in target._actions for o in a.option_strings}
    for flag in ONCE_FLAGS:
        if flag not in options:
            continue
        values = []
        for i, word in enumerate(argv):
            if word == "--":
                break
            if word == flag:
                values.append(argv[i + 1] if i + 1 < len(argv) else "")
            elif word.startswith(flag + "="):
                values.append(word[len(flag) + 1:])
        if len(values) > 1:
            return f"{flag} given {len(values)} times ({', '.join(values)}); merge them into one file"
    return None


#: options and positionals whose empty value ('': an unset shell variable) would be read as "none"
#: or as the current directory (report and plot's RUN_DIR... list: `proxima report ''` wrote report.md
#: into it); refused instead, naming the flag; {dest: what the line says after "empty"}
_A_PATH = "; give a path (an unset shell variable?)"
NOT_EMPTY = {"out": _A_PATH, "resume": _A_PATH, "config": _A_PATH, "path": _A_PATH, "run_dirs": _A_PATH,
             "env": " (an unset shell variable?); name the env, or leave --env out for the run's own"}


def _empty_value(parser: argparse.ArgumentParser, argv: list, args: argparse.Namespace) -> Optional[str]:
    target = _subparser(parser, argv)
    for action in target._actions if target is not None else ():
        value = getattr(args, action.dest, None)
        if action.dest in NOT_EMPTY and (value == "" or (isinstance(value, list) and "" in value)):
            name = action.option_strings[0] if action.option_strings else (action.metavar or action.dest)
            return f"{name} '': empty{NOT_EMPTY[action.dest]}"
    return None


#: what every command but doctor needs to import (checked once the command line is read: help needs neither)
REQUIRED_IMPORTS = ("numpy", "torch", "gymnasium")
#: the other core dependencies (pyproject.toml), module -> distribution: only looked up (their imports are slow); a
#: train without tensorboard failed with a traceback after making its run directory, plot without matplotlib too
REQUIRED_FOUND = {"tensorboard": "tensorboard", "matplotlib": "matplotlib", "yaml": "pyyaml", "tqdm": "tqdm"}


@functools.lru_cache(maxsize=None)
def broken_import() -> Optional[str]:
    """One line naming the first of REQUIRED_IMPORTS that does not import (a CUDA wheel missing
    libcudnn, a package half-removed), else None. Asked once per process: a module that failed
    to import is tried again on each import, and may fail differently the second time."""
    for name in REQUIRED_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception as e:  # a broken wheel raises ImportError, OSError, or whatever its own code raises
            why = str(e).strip().splitlines()[0] if str(e).strip() else ""
            return f"{name} does not import ({type(e).__name__}: {why}); run proxima doctor for what to fix"
    from .doctor import module_found

    for module, dist in REQUIRED_FOUND.items():
        if not module_found(module):
            from .config import install_hint

            return f"{dist} is not installed, and every proxima command but doctor needs it: {install_hint('')}"
    return None


def _doctor(argv: list) -> int:
    """``proxima doctor``, parsed apart from build_parser (whose plugins import what the other
    commands' parsers need): doctor must run to report any package that does not import."""
    from . import doctor

    parser = ArgParser(prog="proxima doctor", description=doctor.__doc__.splitlines()[0])
    doctor.add_arguments(parser)
    args, extra = parser.parse_known_args(argv)
    if extra:
        hint = _did_you_mean(parser, None, extra)
        return fail(parser.prog, f"unrecognized arguments: {' '.join(extra)}{hint} (see {parser.prog} --help)")
    try:
        return int(doctor.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `proxima doctor | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


def main(argv: Optional[list] = None) -> int:
    try:
        args = _read(argv)
    except KeyboardInterrupt:  # Ctrl-C while the flags are read: a stop, no traceback
        return 130
    return args if isinstance(args, int) else _command(args)


def _read(argv: Optional[list]):
    """Read the command line: an exit status when there is nothing more to run (a usage error, help;
    doctor, which runs here; --help and --version exit), else the command's parsed arguments, for
    _command to run. Nothing here imports torch or gymnasium."""
    argv = sys.argv[1:] if argv is None else list(argv)
    typed_words = list(argv)  # as typed: a resume's refusal names the command again (_written_by)
    if argv[:1] == ["doctor"]:
        return _doctor(argv[1:])
    try:
        parser = build_parser()
    except Exception:  # a plugin's import failed (numpy broken or missing): the one line a command would give
        broken = broken_import()
        if broken:
            command = next((w for w in argv if not w.startswith("-")), None)
            return fail(f"proxima {command}" if command else "proxima", broken)
        raise
    argv = _join_list_values(parser, _attach_negative_numbers(parser, argv))
    bool_value = _bool_flag_value(parser, argv)
    if bool_value:
        command, message = bool_value
        return fail(f"{parser.prog} {command}", f"{message} (see {parser.prog} {command} --help)")
    args, extra = parser.parse_known_args(argv)
    resume_nproc = None
    if getattr(args, "command", None) == "resume" and any(w == "--nproc" or w.startswith("--nproc=") for w in extra):
        # resume --help speaks of --nproc K at length: "unrecognized; did you mean --plot?" contradicted it
        at = next(i for i, w in enumerate(argv) if w == "--nproc" or w.startswith("--nproc="))
        # `resume --nproc 2 RUN` read 2 as the run: then the path is not known
        run = "RUN_DIR" if argv[at] == "--nproc" and argv[at + 1:at + 2] == [args.path] else shlex.quote(args.path)
        if any(_is_population_path(w) for w in [args.path, *extra] if not w.startswith("-")):
            # the train --resume this would suggest refuses a population's checkpoint and names this command
            return fail(f"{parser.prog} resume", POPULATION_NPROC)
        # taken out and read again: cmd_resume compares K with the run's own count (_resume_nproc), which
        # needs the checkpoint (torch) that nothing here imports
        value = argv[at].partition("=")[2] if argv[at] != "--nproc" else (argv[at + 1] if at + 1 < len(argv) else None)
        if argv[at] == "--nproc" and value is not None and value.startswith("--"):  # `--nproc --total-timesteps N`: none given
            value = None
        argv = argv[:at] + argv[at + (2 if argv[at] == "--nproc" and value is not None else 1):]
        args, extra = parser.parse_known_args(argv)
        resume_nproc = (value, run)
    if extra:  # named by the command they were given to: `proxima train: error: unrecognized arguments: ...`
        command = getattr(args, "command", None)
        prog = f"{parser.prog} {command}" if command else parser.prog
        hint = _did_you_mean(parser, command, extra, argv)
        return fail(prog, f"unrecognized arguments: {' '.join(extra)}{hint} (see {prog} --help)")
    refused = _repeated_flag(parser, argv) or _empty_value(parser, argv, args)
    if refused:
        return fail(f"{parser.prog} {args.command}", refused)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    if resume_nproc is not None:
        args.resume_nproc = resume_nproc
    if getattr(args, "command", None) == "resume":
        args.typed_words = typed_words
    return args


class _StdoutWatch:
    """sys.stdout while a command runs: the stream itself in every respect, but a write or flush
    that fails (a full disk under ``proxima report > out.md``) is remembered, so that _command can
    tell stdout's OSError from any other. Flushing again cannot tell: the failed print has already
    emptied the buffer."""

    def __init__(self, stream):
        self._stream = stream
        self.failed: Optional[OSError] = None

    def _watch(self, name, *a):
        try:
            return getattr(self._stream, name)(*a)
        except BrokenPipeError:  # the reader left: _command's exit 141, as before
            raise
        except OSError as e:
            self.failed = self.failed or e
            raise

    def write(self, text):
        return self._watch("write", text)

    def writelines(self, lines):
        return self._watch("writelines", lines)

    def flush(self):
        return self._watch("flush")

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _command(args: argparse.Namespace) -> int:
    """Run the command read by _read: first that torch and gymnasium import (one line naming the one
    that does not, exit 2; doctor diagnoses that rather than needing them), then the environment's
    settings. Output that stdout does not take (a full disk) is one line naming the file, exit 2,
    also when the command swallowed the error: what it printed is lost."""
    prog = f"proxima {args.command}"
    stdout = sys.stdout
    watch = sys.stdout = _StdoutWatch(stdout) if stdout is not None else None
    from .signals import hold_python_caller

    release_caller = hold_python_caller(False)  # its lines name flags: make_env's too (hold_python_unless_held)
    try:
        code = _run_command(args, prog)
        if watch is not None and watch.failed is None:
            sys.stdout.flush()  # a full disk shows here, not as a traceback at exit
        if watch is not None and watch.failed is not None:
            raise watch.failed
        return code
    except OSError as e:
        if watch is None or watch.failed is None or isinstance(e, BrokenPipeError) \
                or watch.failed not in (e, e.__cause__, e.__context__):
            raise
        from .diskspace import stdout_problem

        return fail(prog, stdout_problem(watch.failed))
    finally:
        release_caller()
        if sys.stdout is watch:
            sys.stdout = stdout


def _run_command(args: argparse.Namespace, prog: str) -> int:
    try:
        if args.command != "doctor":  # doctor diagnoses the environment's settings rather than refusing to run
            broken = broken_import()
            if broken:
                return fail(prog, broken)
            try:  # the environment's settings first: a bad PROXIMA_CPU_TANH is one line, exit 2
                from . import tanh_cpu  # noqa: F401
            except ConfigError as e:
                return fail(prog, str(e))
        return int(args.func(args) or 0)
    except KeyboardInterrupt as e:  # Ctrl-C anywhere, while torch imports too: a stop, no traceback
        from .signals import TrainingInterrupted, say_stopped

        # a run's stop (a KeyboardInterrupt too) that its command left unsaid: its line and its 128+signum
        # (143 for SIGTERM), never a bare Ctrl-C's 130
        if isinstance(e, TrainingInterrupted):
            say_stopped(e)
            return e.exit_code
        return 130
    except BrokenPipeError:  # `proxima presets | head`: the reader left; no traceback, and none at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # as a shell reports SIGPIPE


def entry(words: Optional[list] = None) -> None:
    """The ``proxima`` console script, ``python -m proxima`` and ``python -m proxima.rlhf`` (``words``: the
    words after ``proxima``, sys.argv[1:] when None; rlhf's gives ``rlhf`` first): the command line is read first
    (help, --version and usage errors import neither torch nor gymnasium), then a command that runs
    is ended by exit_process (a torchrun rank skips interpreter finalization; see
    proxima.distributed.exit_process). Doctor, and any command when torch or gymnasium does not
    import, end the ordinary way: exit_process's module imports torch, and neither is a rank's work.

    A stop signal while `train`, `resume` or `rlhf` starts (seconds of imports before the run's own handling,
    signals.OutsideLoop, takes over) ends it with one line, "stopped by SIGTERM; before training
    started; nothing was kept", and 128 + signum (signals.BeforeTraining); nothing is on disk yet."""
    import signal

    from . import _startup

    words = sys.argv[1:] if words is None else list(words)
    early = BeforeTraining("the run is as its last checkpoint left it" if resumes(words) else "nothing was kept")
    # decided as _startup._handle decides: a stopped report or plot never says "before training started"
    trains = words[:1] != [] and words[0] in _startup.TRAINING_COMMANDS
    try:
        if trains:
            early.__enter__()  # a stop as it installs its handlers is raised here, once they are all in place
        args = _read(words)
        if isinstance(args, int):  # nothing more to run: a usage error, help, doctor
            raise SystemExit(args)
        if not trains:  # _startup's handling so far (SIGTERM's default action, a Ctrl-C's 130); from here, what was before it
            for sig in _startup.stop_signals():
                if signal.getsignal(sig) is _startup._handle:
                    signal.signal(sig, _startup.original(sig))
        elif args.command not in _startup.TRAINING_COMMANDS:  # they train nothing: a signal as before
            early.__exit__()
        # importing torch takes seconds: a Ctrl-C then is a stop (130), not a traceback
        early.holding = True  # a stop is raised after torch's import, not in it (signals.BeforeTraining)
        try:
            if args.command == "doctor" or broken_import():
                exit_process = None
            else:
                from .distributed import exit_process
        finally:
            early.holding = False
        early.check()
    except TrainingInterrupted as e:
        say_stopped(e)
        raise SystemExit(e.exit_code) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    if exit_process is None:
        code = _command(args)
        ignore_stops(code)  # the command is done: a signal as the interpreter shuts down changes no status (exit_process)
        raise SystemExit(code)
    exit_process(functools.partial(_command, args))
