"""`proxima rlhf`: every RLHFConfig field as a flag, --config FILE.yaml, --demo.

Precedence: defaults (the demo's for --demo) < the YAML file < flags. Bad input is one line
`proxima rlhf: error: ...` on stderr and exit status 2, with nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from .config import FIELDS, ConfigError, RLHFConfig, from_dict
from ..terminal import printable

PROG = "proxima rlhf"
#: the modules of the rlhf extra (pyproject.toml): one missing is one line with its install command, not a traceback
RLHF_MODULES = ("transformers", "peft", "safetensors")


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "rlhf", help="fine-tune a causal LM with PPO against a reward model or function",
        description="RLHF with PPO. Every config field is a flag; --config FILE.yaml sets many at once; "
                    "--demo runs a self-contained offline demo.",
    )
    p.add_argument("--config", metavar="FILE.yaml", default=None, help="YAML file of config fields (flags override it).")
    p.add_argument("--demo", action="store_true", help="Offline demo: build and pretrain a tiny GPT-2, then PPO against a "
                   "keyword-sentiment reward (or --reward module:function); writes curve.png.")
    p.add_argument("--demo-pretrain-steps", type=int, default=None, metavar="N",
                   help="--demo only: next-token pretraining steps before PPO (default: 200).")
    from ..config import int_arg

    p.add_argument("--nproc", type=int_arg, default=None, metavar="K",
                   help="Start K processes on this machine with torchrun (data-parallel, each with its own prompts and "
                        "--batch-size responses; with --fsdp, sharded), as proxima train --nproc does; K >= 1. Several "
                        "machines: torchrun on each (docs/rlhf.md).")
    p.add_argument("--trust-run", action="store_true",
                   help="Trust the --config file: import the module:function or file.py:function rewards it names and "
                        "search the folders of its reward_import_path (otherwise give them as --reward and "
                        "--reward-import-path).")
    from ..cli import _OneNameOnly, other_names_text
    from .config import ALIASES
    from .demo import demo_config

    plain, demo = RLHFConfig(), demo_config()
    for name, f in FIELDS.items():
        flag = "--" + name.replace("_", "-")
        doc = f.metadata["help"] + other_names_text(name, ALIASES)
        if f.metadata["choices"]:
            doc += f" One of: {', '.join(f.metadata['choices'])}."
        doc += _defaults_text(doc, getattr(plain, name), getattr(demo, name))
        if f.metadata["kind"] is bool:
            p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=doc)
        elif f.metadata["repeat"]:
            p.add_argument(flag, dest=name, action="append", default=argparse.SUPPRESS, metavar=name.upper(), help=doc)
        else:
            # --lr with --learning-rate: refused as `proxima train` refuses them (argparse keeps the last one)
            action = _OneNameOnly if name in ALIASES.values() else "store"
            p.add_argument(flag, dest=name, default=argparse.SUPPRESS, metavar=name.upper(), help=doc, action=action)

    for alias, name in ALIASES.items():  # hidden other names (--learning-rate), as `proxima train` takes them
        p.add_argument("--" + alias.replace("_", "-"), dest=name, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                       action=_OneNameOnly)
    p.error = one_line_error  # argparse's own errors, in the same one-line form
    p.set_defaults(func=run)
    return p


def _shown(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _defaults_text(doc: str, default, demo_default) -> str:
    """`` (default: 100; --demo: 150)`` for --help: the field's default, unless its help says it already
    or it has none (a required path), and the demo's own value where --demo starts from another."""
    parts = []
    if "default" not in doc.lower() and default not in ("", [], None):
        parts.append(f"default: {_shown(default)}")
    if demo_default != default:
        parts.append(f"--demo: {_shown(demo_default)}")
    return f" ({'; '.join(parts)})" if parts else ""


def one_line_error(message: str):
    """argparse's error(), without the usage block: one line on stderr, exit status 2."""
    print(f"{PROG}: error: {printable(str(message))}", file=sys.stderr)
    raise SystemExit(2)


#: next-token pretraining steps of --demo's tiny GPT-2 before PPO
DEMO_PRETRAIN_STEPS = 200


def flag_values(args: argparse.Namespace) -> dict:
    """The config fields given on the command line (argparse.SUPPRESS leaves the others out)."""
    return {name: getattr(args, name) for name in FIELDS if hasattr(args, name)}


def load_yaml(path: str) -> dict:
    """``--config FILE.yaml`` for rlhf: the same reader and errors as ``proxima train --config`` (a FIFO or
    device is refused, not waited on; the size is capped, as for a run's files)."""
    from ..config import load_config_file

    return load_config_file(path)


def is_run_config(path: str, values: dict) -> bool:
    """Whether ``--config FILE`` is a run's recorded config.yaml: its folder holds a meta.json, or the
    run_dir it records is its own folder (such a file always records reward_import_path: the folder
    that run started in, not a choice of the user's)."""
    from pathlib import Path

    try:
        folder = Path(path).resolve().parent
        if (folder / "meta.json").is_file():
            return True
        run_dir = values.get("run_dir")
        return isinstance(run_dir, str) and bool(run_dir) and Path(run_dir).resolve() == folder
    except (OSError, RuntimeError, ValueError):
        return False


def build_config(args: argparse.Namespace, base: RLHFConfig = None) -> RLHFConfig:
    """defaults (``base``) < ``--config FILE`` < flags. FILE is data, whoever wrote it (a run's
    config.yaml downloaded alone, a file pasted from elsewhere), as PPO's ``train --config`` treats a
    module env id: a reward it names that would import code (``module:function``, ``file.py:function``)
    is refused unless ``--reward`` names the rewards on the command line or ``--trust-run`` trusts the
    file; the folders of its reward_import_path are searched for such a reward only with
    ``--reward-import-path`` or ``--trust-run`` (a run's own config.yaml: left out, as that run's start
    folder; any other file: refused)."""
    cfg = base or RLHFConfig()
    typed = flag_values(args)
    if getattr(args, "trust_run", False) and not args.config:  # a flag this run would ignore
        raise ConfigError("--trust-run: trusts the rewards of a --config file; give --config FILE, or drop --trust-run "
                          "(a --reward on the command line is yours already)")
    if args.config:
        values = load_yaml(args.config)
        _note_rewards_replaced(args.config, values, typed, cfg)
        if not getattr(args, "trust_run", False):
            values = _untrusted_file(args.config, values, typed, cfg)
        values = _without_own_run_dir(args.config, values, typed)
        cfg = from_dict(values, cfg, source=args.config)
        _check_file_paths(args.config, values, typed)
    return from_dict(typed, cfg, source="command line")


def _note_rewards_replaced(path: str, values: dict, typed: dict, base: RLHFConfig) -> None:
    """A note naming the rewards of --config ``path`` that a command-line --reward list leaves out: the
    flags replace the file's list (as any flag replaces its key), which trains on fewer rewards unsaid."""
    from .config import reward_specs

    key = next((k for k in values if str(k).replace("-", "_") == "reward"), None)
    if key is None or "reward" not in typed or os.environ.get("RANK", "0") != "0":
        return
    try:
        recorded = reward_specs(from_dict({key: values[key]}, base, source=path))
    except ConfigError:  # refused, with its line, as the file is read
        return
    def same(spec) -> str:  # a folder or file.py:function by its absolute path: rm and ./rm are one reward
        file, sep, func = str(spec).rpartition(":")
        if sep and file.endswith(".py"):
            return os.path.abspath(file) + sep + func
        return os.path.abspath(str(spec)) if os.path.isdir(str(spec)) else str(spec)

    given = {same(s) for s in typed["reward"] or []}
    dropped = [str(s) for s in recorded if same(s) not in given]
    if dropped:
        print(f"{PROG}: note: --reward replaces the rewards of --config {printable(path)}; not used: "
              f"{printable(' '.join(shlex.quote(s) for s in dropped))} (repeat --reward for each reward to keep)",
              file=sys.stderr)


def in_file_words(e: ConfigError, args: argparse.Namespace) -> ConfigError:
    """A refusal of a field's value (validate's: ConfigError.field) that ``--config FILE`` set, no flag
    overriding it, in the file's words, as ``proxima train --config`` says it (cli._name_config_file):
    ``FILE: micro_batch_size 3: must divide ...``, not ``--micro-batch-size 3``, a flag never typed; the
    advice's flags of the file's fields are its keys. Any other error is returned as it is."""
    from ..cli import _file_advice

    name = getattr(e, "field", None)
    flag = "--" + str(name).replace("_", "-")
    line = getattr(e, "field_line", str(e))  # a line that starts elsewhere (--prompts FILE:2) has one that starts so
    keys = _file_keys(args) if name is not None and line.startswith(flag + " ") else {}
    if name not in keys:
        return e
    said = keys[name] if keys[name].replace("-", "_") == name else f"{keys[name]} ({name}'s other name)"
    return ConfigError(f"{args.config}: {said} {_file_advice(line[len(flag) + 1:], [(n, args.config) for n in keys])}")


def _file_keys(args: argparse.Namespace) -> dict:
    """{field: its key as written} of the values ``--config FILE`` gives that no flag overrides."""
    from .config import ALIASES

    try:
        values = load_yaml(args.config) if getattr(args, "config", None) else {}
    except (ConfigError, OSError):
        return {}
    typed = flag_values(args)
    keys = {}
    for key in values if isinstance(values, dict) else ():
        name = str(key).replace("-", "_")
        name = ALIASES.get(name, name)
        if name in FIELDS and name not in typed:
            keys[name] = str(key)
    return keys


#: the fields that name a file or folder: a relative one in a --config file is read from the working directory
PATH_FIELDS = ("policy", "tokenizer", "prompts", "reward")


def _check_file_paths(path: str, values: dict, typed: dict) -> None:
    """ConfigError naming --config ``path`` and its key for a relative path there that the working directory
    does not hold: read as a flag's is (as ``proxima train --config`` reads init_from), it would be blamed on
    a flag never typed (``--prompts 'p.txt': no such file``), while the user looks beside the YAML file."""
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name not in PATH_FIELDS or name in typed:
            continue
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, str) or not item:
                continue
            file = item
            if name == "reward":  # a file.py:function; a module:function or a model folder is looked up as usual
                file = item.rpartition(":")[0]
                if not file.endswith(".py"):
                    continue
            if os.path.isabs(file) or os.path.lexists(file):
                continue
            beside = os.path.join(os.path.dirname(path), file)
            hint = ""
            if os.path.dirname(path) and os.path.lexists(beside):
                hint = f"; the file's folder has one: give {name}: {printable(beside + item[len(file):])}"
            raise ConfigError(f"{path}: {name} {printable(file)!r}: no such file or directory (relative paths in a "
                              f"--config file are read from the working directory, {os.getcwd()}){hint}")


def _without_own_run_dir(path: str, values: dict, typed: dict) -> dict:
    """``values`` of --config ``path`` without the run_dir of a run's own config.yaml, as ``proxima train
    --config RUN/config.yaml`` does: that directory holds that run (a new run there is refused), and an
    older run recorded it relative to the folder it started in, which from elsewhere names another place.
    A new run gets a new default directory, with a note; a YAML file of the user's keeps its run_dir."""
    from ..cli import _own_run_dir  # PPO's one definition of a run's own config.yaml

    key = next((k for k in values if str(k).replace("-", "_") == "run_dir"), None)
    if key is None or not _own_run_dir(path, values[key]):
        return values
    if values[key] and "run_dir" not in typed and os.environ.get("RANK", "0") == "0":
        print(f"{PROG}: note: --config {printable(path)}: run_dir {printable(str(values[key]))} is that run's own "
              "directory; this run gets a new one (choose it with --run-dir DIR)", file=sys.stderr)
    return {k: v for k, v in values.items() if k != key}


def _device_left_default(args: argparse.Namespace) -> bool:
    """Whether the run's device is the default cpu because nobody chose one: neither --device nor the
    --config file names it."""
    if "device" in flag_values(args):
        return False
    return not (args.config and any(str(k).replace("-", "_") == "device" for k in load_yaml(args.config)))


def _untrusted_file(path: str, values: dict, typed: dict, base: RLHFConfig) -> dict:
    """``values`` of --config ``path`` without what would run code the command line did not name."""
    from .config import reward_specs
    from .rewards import imports_code, refuse_recorded_rewards

    if "reward" not in typed:
        recorded = reward_specs(from_dict(values, base, source=path))
        # every recorded reward: a command-line --reward list replaces the file's, so naming the one refused
        # alone would train on it without the others
        flags = " ".join(f"--reward {shlex.quote(str(s))}" for s in recorded)
        how = (f"give {'every recorded reward' if len(recorded) > 1 else 'it'} on the command line ({flags}), "
               "or pass --trust-run").replace("{", "{{").replace("}", "}}")
        refuse_recorded_rewards(recorded, path, how, origin="a --config file")
    key = next((k for k in values if str(k).replace("-", "_") == "reward_import_path"), None)
    if key is None or "reward_import_path" in typed:
        return values
    folders = from_dict({key: values[key]}, base, source=path).reward_import_path
    rewards = reward_specs(from_dict(typed, from_dict(values, base, source=path), source="command line"))
    if folders and any(imports_code(r) for r in rewards) and not is_run_config(path, values):
        shown = printable(",".join(folders))[:200]
        raise ConfigError(f"{path}: reward_import_path {shown} would be searched first to import the reward's module; "
                          "not done for folders read from a --config file: give them on the command line "
                          f"(--reward-import-path {shown}), or pass --trust-run, if you trust them")
    return {k: v for k, v in values.items() if k != key}


def _demo_config(args: argparse.Namespace):
    """(config, pretraining steps) of ``--demo``; ConfigError for a flag the demo would ignore."""
    from .demo import demo_config

    own = [name for name in ("policy", "tokenizer", "prompts")
           if name in flag_values(args) or (args.config and name in load_yaml(args.config))]
    if own:  # the demo builds its own: a flag it would ignore is refused
        flag = "--" + own[0]
        raise ConfigError(f"{flag}: --demo builds its own model and prompts; drop {flag}, or drop --demo to train on yours")
    cfg = build_config(args, demo_config())
    steps = DEMO_PRETRAIN_STEPS if args.demo_pretrain_steps is None else args.demo_pretrain_steps
    if steps < 0:
        raise ConfigError(f"--demo-pretrain-steps {steps}: must be 0 or more")
    return cfg, steps


def _run_config(args: argparse.Namespace) -> RLHFConfig:
    """The config of a run without --demo; ConfigError for --demo-pretrain-steps, which it would ignore."""
    if args.demo_pretrain_steps is not None:  # a flag this run would ignore, as --demo refuses --policy
        raise ConfigError("--demo-pretrain-steps: applies to --demo only (its tiny model's pretraining); drop it")
    return build_config(args)


def launch_argv(argv: list = None) -> list:
    """The words after the program that start this command as ``proxima rlhf ...`` (the --nproc launcher's
    argv, launch.launch_torchrun): ``python -m proxima.rlhf`` takes its flags without the word ``rlhf``."""
    from ..launch import _main_module

    argv = list(sys.argv if argv is None else argv)
    return (["rlhf"] if _main_module(argv[0]) == "proxima.rlhf" else []) + argv[1:]


def check_launch(nproc: int, argv: list):
    """What every one of the ``nproc`` processes of ``proxima rlhf ... --nproc K`` would refuse alike, said
    once, in one line, before torchrun starts any (launch._check; ``argv`` without --nproc): the count, the
    flags and --config file, the prompts' share per process, the kl horizon over all processes, the run
    directory, CUDA devices for one GPU each. Returns the torch.device the processes train on (--device resolved)."""
    from ..cli import _attach_negative_numbers, build_parser
    from ..device import resolve_device
    from ..distributed import dist_timeout
    from ..launch import check_nproc
    from .config import check_kl_horizon, validate
    from .dist import prompt_share_refusal
    from .rundir import check_new_run_dir

    check_nproc(nproc)
    dist_timeout()  # read by every rank as it joins the process group
    parser = build_parser()
    args = parser.parse_args(_attach_negative_numbers(parser, list(argv)))
    if args.demo:  # its model and prompts are rank 0's to build
        cfg, _ = _demo_config(args)
        check_kl_horizon(cfg, nproc)
    else:
        cfg = _run_config(args)
        validate(cfg)
        check_kl_horizon(cfg, nproc)  # as the trainer checks it once it knows the process count
        if isinstance(cfg.prompts, str):
            from .data import load_prompts

            count = len(load_prompts(cfg.prompts))
            if count < nproc:
                raise ConfigError(prompt_share_refusal(cfg.prompts, count, nproc))
    if cfg.run_dir:
        from pathlib import Path

        check_new_run_dir(Path(cfg.run_dir), None if args.demo else cfg)
    device = resolve_device(cfg.device)  # --device cuda without CUDA: one line
    if device.type == "cuda":
        import torch

        if nproc > torch.cuda.device_count():
            raise ConfigError(f"--nproc {nproc}: one GPU per process (--device {cfg.device}), and this machine has "
                              f"{torch.cuda.device_count()} CUDA device(s); give --nproc {torch.cuda.device_count()} or fewer")
    return device


def run(args: argparse.Namespace) -> int:
    # here, not at the top: ..checkpoint imports torch, which `proxima rlhf --help` does not need
    from ..checkpoint import CheckpointError
    from ..diskspace import StorageError
    from ..signals import TrainingInterrupted, say_stopped
    from .models import quiet_transformers

    try:
        quiet_transformers()  # in the try: without the rlhf extra, one line naming its install command
        nproc = getattr(args, "nproc", None)
        if nproc is not None and nproc < 1:
            raise ConfigError(f"--nproc {nproc}: must be at least 1")
        if nproc is not None and nproc > 1:  # the launcher checks the run once (check_launch), then the ranks train it
            from ..cli import _launch_torchrun

            return _launch_torchrun(nproc, launch_argv())
        if args.demo:
            from .demo import run_demo

            cfg, steps = _demo_config(args)
            run_dir = run_demo(cfg, pretrain_steps=steps)
        else:
            from .api import DEVICE_LEFT_DEFAULT, train_rlhf
            from .rewards import REWARD_CALLER

            cfg = _run_config(args)
            if isinstance(cfg.prompts, str):  # every rank, before any joins the process group (check_prompt_share)
                from .dist import check_prompt_share

                check_prompt_share(cfg.prompts)
            left = DEVICE_LEFT_DEFAULT.set(_device_left_default(args))
            caller = REWARD_CALLER.set("cli")  # a refusal names the reward as --reward, the flag typed
            try:
                run_dir = train_rlhf(cfg)
            finally:
                REWARD_CALLER.reset(caller)
                DEVICE_LEFT_DEFAULT.reset(left)
    except (ConfigError, StorageError, CheckpointError) as e:  # a full disk: one line naming the file
        if isinstance(e, ConfigError):
            e = in_file_words(e, args)
        print(f"{PROG}: error: {printable(str(e))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        missing = (e.name or "").partition(".")[0]
        if missing not in RLHF_MODULES:
            raise
        import importlib.util

        from ..config import install_hint

        try:  # transformers there but one of its modules not (a partial install, versions that do not match)
            there = e.name != missing and importlib.util.find_spec(missing) is not None
        except (ImportError, ValueError):
            there = False
        what = (f"{missing} is installed but does not import ({printable(str(e))})" if there
                else f"{missing} is not installed")
        print(f"{PROG}: error: {what}, and proxima rlhf needs it: {install_hint('rlhf')}", file=sys.stderr)
        return 2
    except TrainingInterrupted as e:  # SIGINT/SIGTERM: the step finished and checkpointed (exit 128 + signum)
        say_stopped(e)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    say_done(run_dir)
    return 0


def say_done(run_dir) -> None:
    """The closing line of a finished RLHF run (proxima rlhf, and proxima resume of one), from its
    summary.json; rank 0 only."""
    from ..rundir import TEXT_MAX_BYTES, read_run_text

    if os.environ.get("RANK", "0") != "0":
        return
    try:  # a resume's summary.json may be an older, hand-edited one: no line then, never a traceback
        s = json.loads(read_run_text(os.path.join(run_dir, "summary.json"), TEXT_MAX_BYTES))
        # summary.json's reward_first, reward_last and kl_last are means over a window, not one step's values
        line = (f"done: {s['steps']} steps in {s['seconds']:.1f} s; score {s['reward_first']:+.3f} (first 10% of steps) "
                f"-> {s['reward_last']:+.3f} (last 10%), KL {s['kl_last']:.3f} (last 10%); run directory {run_dir}")
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        return
    print(line)
