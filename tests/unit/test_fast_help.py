"""`proxima --help`, a command's --help, --version and usage errors answer without importing torch or
gymnasium (seconds of start-up); a command that runs still checks that both import first.

The processes here are plain fresh interpreters (subprocess with sys.executable), never
warm_python's, whose processes have torch imported already."""

import json
import os
import subprocess
import sys

import pytest

COMMANDS = ("train", "eval", "resume", "presets", "bench", "check-env", "doctor", "plot", "report", "rlhf")

#: (argv, exit status, first line of stderr or None for any): what answers without running a command
NOTHING_TO_RUN = [(["--help"], 0, None), (["--version"], 0, None), ([], 2, None)] + [
    ([command, "--help"], 0, None) for command in COMMANDS] + [
    (["trian"], 2, "proxima: error: argument COMMAND: invalid choice: 'trian' (choose from 'train', 'eval', 'resume', "
                   "'presets', 'bench', 'check-env', 'doctor', 'plot', 'report', 'rlhf') (see proxima --help)"),
    (["--bogus"], 2, "proxima: error: unrecognized arguments: --bogus (see proxima --help)"),
    (["train", "--num-env", "4"], 2, "proxima train: error: unrecognized arguments: --num-env; did you mean --num-envs? "
                                     "(see proxima train --help)"),
    (["train", "--anneal-lr", "no"], 2, "proxima train: error: --anneal-lr takes no value (got 'no'); write --no-anneal-lr "
                                        "(see proxima train --help)"),
    (["rlhf", "--bogus"], 2, "proxima rlhf: error: unrecognized arguments: --bogus (see proxima rlhf --help)"),
    (["check-env"], 2, None),
]

#: runs each command line through the console script's entry() in this one fresh interpreter and
#: prints, per line, its status, its stderr's first line and whether torch / gymnasium were imported
#: by then (modules only accumulate: the first line that imports one is the one named)
BATTERY = r"""
import contextlib, io, json, sys
from proxima import cli

rows = []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["proxima", *argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.entry()
            code = None
        except SystemExit as e:
            code = e.code
    rows.append([code, (err.getvalue().splitlines() or [""])[0], len(out.getvalue()),
                 "torch" in sys.modules, "gymnasium" in sys.modules])
print(json.dumps(rows))
"""


def _fresh(*argv, env=None, cwd=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize("world", [None, "2"], ids=["one-process", "torchrun-rank"])
def test_help_version_and_usage_errors_import_neither_torch_nor_gymnasium(world, tmp_path):
    proc = _fresh("-c", BATTERY, json.dumps([argv for argv, _, _ in NOTHING_TO_RUN]), env={"WORLD_SIZE": world or "1"},
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    for (argv, code, line), (got_code, got_line, out_chars, torch_in, gym_in) in zip(NOTHING_TO_RUN, rows):
        shown = "proxima " + " ".join(argv)
        assert not torch_in and not gym_in, f"{shown} imported {'torch' if torch_in else 'gymnasium'}"
        assert got_code == code, (shown, got_code, got_line)
        if line is not None:
            assert got_line == line, shown
        if code == 0 or not argv:  # help, the version, the usage of `proxima` alone: on stdout
            assert out_chars > 0 and got_line == "", shown


def _broken(package: str, tmp_path) -> dict:
    """PYTHONPATH with a stand-in ``package`` first whose import raises ImportError (as test_doctor.py)."""
    fake = tmp_path / "fake"
    (fake / package).mkdir(parents=True, exist_ok=True)
    (fake / package / "__init__.py").write_text("raise ImportError('libcudnn.so.9: cannot open shared object file')\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(fake), os.environ.get("PYTHONPATH", "")) if p)}


@pytest.mark.parametrize("package", ["torch", "gymnasium"])
def test_help_shows_with_a_package_that_does_not_import_and_a_command_still_names_it(package, tmp_path):
    env = _broken(package, tmp_path)
    for argv in (["--help"], ["train", "--help"], ["--version"]):
        proc = _fresh("-m", "proxima", *argv, env=env, cwd=tmp_path)
        assert proc.returncode == 0 and proc.stderr == "", (argv, proc.stderr)
        assert proc.stdout.startswith("usage: proxima" if argv[-1] == "--help" else "proxima "), argv
    proc = _fresh("-m", "proxima", "presets", env=env, cwd=tmp_path)  # a command that runs: the one line, exit 2
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"proxima presets: error: {package} does not import (ImportError: libcudnn.so.9: "
                                        "cannot open shared object file); run proxima doctor for what to fix"]


def test_entry_ends_a_command_through_exit_process_and_nothing_else(monkeypatch, capsys):
    """A torchrun rank ends through distributed.exit_process (no interpreter finalization) once a command
    runs; help and usage errors, which import no torch, end the ordinary way before it is chosen."""
    from proxima import cli, distributed

    ended = []

    def exit_process(main):
        ended.append(main)
        raise SystemExit(main())

    monkeypatch.setattr(distributed, "exit_process", exit_process)
    for argv, code in ((["trian"], 2), (["--bogus"], 2), (["train", "--help"], 0), (["--version"], 0), ([], 2)):
        monkeypatch.setattr(sys, "argv", ["proxima", *argv])
        with pytest.raises(SystemExit) as e:
            cli.entry()
        assert e.value.code == code and ended == [], argv
    monkeypatch.setattr(sys, "argv", ["proxima", "presets", "--json"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli.entry()
    assert e.value.code == 0 and len(ended) == 1
    assert any(row["env_id"] == "CartPole-v1" for row in json.loads(capsys.readouterr().out))


def test_the_rlhf_package_and_its_cli_import_no_torch_until_used(tmp_path):
    proc = _fresh("-c", "import sys\n"
                  "import proxima.rlhf, proxima.rlhf.cli, proxima.rlhf.demo\n"
                  "proxima.rlhf.demo.demo_config()\n"
                  "print('torch' in sys.modules, 'gymnasium' in sys.modules)\n"
                  "from proxima.rlhf import ConfigError, RLHFConfig, resume, train_rlhf\n"
                  "from proxima.rlhf import api\n"
                  "assert train_rlhf is api.train_rlhf and resume is api.resume\n"
                  "assert ConfigError is proxima.rlhf.config.ConfigError and RLHFConfig is proxima.rlhf.config.RLHFConfig\n"
                  "print('torch' in sys.modules)\n", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "True"]


def test_the_check_env_parser_is_defined_once():
    from proxima.envs import checker

    assert not hasattr(checker, "register")  # proxima/check_env_cli.py holds it (imported without torch)


def test_a_numpy_that_does_not_import_is_one_line_even_for_help(tmp_path):
    """The parser's plugins (plot, report) import numpy: reading the command line before the import check
    turned a broken numpy into a traceback and exit 1 for every command, --help included."""
    env = _broken("numpy", tmp_path)
    why = "numpy does not import (ImportError: libcudnn.so.9: cannot open shared object file); run proxima doctor for what to fix"
    for argv, prog in ((["--help"], "proxima"), (["presets"], "proxima presets"), (["train", "CartPole-v1"], "proxima train")):
        proc = _fresh("-m", "proxima", *argv, env=env, cwd=tmp_path)
        assert (proc.returncode, proc.stderr.splitlines()) == (2, [f"{prog}: error: {why}"]), (argv, proc.stderr[-2000:])


def test_python_m_proxima_rlhf_help_imports_no_torch(tmp_path):
    """torchrun's -m target answers --help without torch too (its __main__ imported exit_process first)."""
    code = ("import runpy, sys\nsys.argv = ['proxima.rlhf', '--help']\n"
            "try:\n    runpy.run_module('proxima.rlhf', run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
            "print('RESULT', code, 'torch' in sys.modules)\n")
    proc = _fresh("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "RESULT 0 False" and "usage: proxima rlhf" in proc.stdout
