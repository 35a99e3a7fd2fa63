"""Docs check: every `proxima ...` command shown in the README and docs parses against the real CLI,
and the cheap ones run (exit 0) in a scratch directory. Expensive ones (long training, the RLHF
demo, benchmarks, torchrun launches) are parse-checked only; `proxima train` examples run with
--dry-run (config resolved and env built, nothing trained)."""

from __future__ import annotations

import glob
import re
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from proxima.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docker" / "README.md", ROOT / "benchmarks" / "README.md"]
PARSE_ONLY = {"bench", "rlhf"}  # minutes of work or a download-free but long demo: parse-checked


def doc_commands() -> list[tuple[str, list[str]]]:
    """(where, argv after 'proxima') for every proxima command in a fenced code block."""
    out = []
    for path in DOC_FILES:
        if not path.exists():
            continue
        for block in shell_blocks(path.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if line.startswith("#"):
                    continue
                line = re.split(r"\s+#", line, maxsplit=1)[0].strip()
                try:
                    words = shlex.split(line)
                except ValueError:
                    continue
                if words and words[-1] == "&":  # started in the background (a job script): the command before it
                    words = words[:-1]
                argv = _proxima_argv(words)
                if argv is not None:
                    out.append((f"{path.relative_to(ROOT)}: {line}", argv))
    return out


def shell_blocks(text: str) -> list[str]:
    """Contents of the fenced code blocks tagged bash/sh/shell/console or untagged."""
    blocks, current, lang = [], None, None
    for line in text.splitlines():
        fence = line.strip()
        if fence.startswith("```"):
            if current is None:
                current, lang = [], fence[3:].strip()
            else:
                if lang in ("", "bash", "sh", "shell", "console"):
                    blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _proxima_argv(words: list[str]):
    """argv after the program for a proxima command line: ``proxima ...``, ``.venv/bin/proxima ...``,
    either after ``NAME=VALUE`` environment settings (``OMP_NUM_THREADS=1 .venv/bin/proxima ...``), and
    ``... -m proxima ...``; None for any other line."""
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
        words = words[1:]
    if words[:1] and (words[0] == "proxima" or words[0].endswith("/bin/proxima")):
        return words[1:]
    for i in range(len(words) - 1):  # torchrun ... -m proxima[.rlhf] ARGS / python -m proxima ARGS
        if words[i] == "-m" and words[i + 1] in ("proxima", "proxima.rlhf"):
            return (["rlhf"] if words[i + 1] == "proxima.rlhf" else []) + words[i + 2:]
    return None


COMMANDS = doc_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 20, COMMANDS
    shown = {argv[0] for _, argv in COMMANDS if argv}
    assert {"train", "eval", "resume", "presets", "check-env", "bench", "doctor", "plot", "report", "rlhf"} <= shown


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_documented_command_parses(where, argv):
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"{where}: the CLI rejects it (exit {e.code})")
    assert getattr(args, "func", None) is not None, where


USER_ENV = textwrap.dedent("""
    import gymnasium as gym
    import numpy as np

    class MyEnv(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

        def step(self, action):
            self.t += 1
            obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
            return obs, float(action), self.t >= 10, False, {}

    if "MyEnv-v0" not in gym.registry:  # docs/cli.md's module:EnvId example
        gym.register(id="MyEnv-v0", entry_point=MyEnv)
""")


def _atari(argv: list[str]) -> bool:
    """An Atari command (an id like Pong-v5, or a run directory named after one)."""
    from proxima.envs import atari

    return any(atari.game_name(w.rstrip("/").split("/")[-1].split("__")[0]) for w in argv[1:])


def _runnable(argv: list[str]) -> bool:
    if not argv or argv[0] in PARSE_ONLY or "--nproc" in argv or "--resume" in argv:
        return False
    if _atari(argv):  # needs proxima[atari]; evaluating one needs a trained Atari run: parse-checked
        from proxima.envs import atari

        return argv[0] in ("train", "check-env") and atari.has_envpool() and atari.has_ale()
    if argv[0] == "train" and "--config" in argv:
        return False
    if argv[0] == "resume" and "--total-timesteps" in argv:  # extends the run: real training, parse-checked
        return False
    return True


def test_documented_commands_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mymodule.py").write_text(USER_ENV)
    # the run the README's eval/resume/report/plot examples point at, kept tiny: one evaluation (its last
    # iteration's, for `eval --best`) of 2 episodes, each 500 steps long (an untrained Acrobot policy)
    assert main(["train", "Acrobot-v1", "--total-timesteps", "4096", "--num-envs", "8", "--num-steps", "128",
                 "--run-dir", "runs/acro", "--no-progress", "--eval-episodes", "2", "--eval-every", "4096"]) == 0
    # the population docs/populations.md's report/plot/eval examples point at, kept tiny
    assert main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64",
                 "--run-dir", "runs/pop", "--quiet", "--eval-episodes", "1"]) == 0
    # the second population README's `report runs/pop runs/pop2` compares with the first
    assert main(["train", "CartPole-v1", "--seeds", "3-4", "--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64",
                 "--run-dir", "runs/pop2", "--quiet", "--eval-episodes", "1"]) == 0
    ran = []
    for where, argv in COMMANDS:
        # multi-process launches (all of docs/distributed.md's, resume of a K-process run too): parse-checked
        if "torchrun" in where or where.startswith("docs/distributed.md") or not _runnable(argv):
            continue
        if argv[0] == "train":
            if "--run-dir" in argv and argv[argv.index("--run-dir") + 1] in ("runs/acro", "runs/pop", "runs/pop2"):
                continue  # the tiny run above stands in for it
            argv = argv + ["--dry-run"]
        if argv[0] == "eval" and "--video" in argv:
            continue
        argv = [a for w in argv for a in (sorted(glob.glob(w)) if any(c in w for c in "*?[") else [w])]
        code = main(argv)
        out = capsys.readouterr()
        assert code == 0, f"{where}: exit {code}\n{out.err[-2000:]}"
        ran.append(argv[0])
    assert {"train", "eval", "resume", "presets", "check-env", "doctor", "plot", "report"} <= set(ran), ran


def test_reliability_md_lists_every_flag_a_resume_may_change():
    from proxima.config import RESUME_SAFE

    text = " ".join((ROOT / "docs" / "reliability.md").read_text().split())
    bullet = text[text.index("Flags given to a resume may change only"):]
    bullet = bullet[:bullet.index("refused")]
    missing = [name for name in RESUME_SAFE if f"`--{name.replace('_', '-')}`" not in bullet]
    assert not missing, f"docs/reliability.md's resume list misses {missing}"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_setup_refuses_a_python_older_than_3_11_before_pip(tmp_path):
    fake = tmp_path / "python3.9"  # answers the Makefile's two questions as Python 3.9.2 would
    fake.write_text('#!/bin/sh\ncase "$2" in *">="*) echo False;; *) echo 3.9.2;; esac\n')
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "setup", f"PYTHON={fake}", f"VENV={venv}"],
                         capture_output=True, text=True, timeout=60)
    line = next(i for i, text in enumerate((ROOT / "Makefile").read_text().splitlines(), 1) if text.startswith("\t") and "$(error" in text)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"Makefile:{line}: *** {fake} is Python 3.9.2; Proxima needs Python 3.11 or newer (requirements.lock pins numpy "
        "2.4.x); choose one with PYTHON: make setup PYTHON=python3.11.  Stop."]
    assert not venv.exists()


def test_the_docs_send_no_reader_to_files_a_clone_does_not_have():
    """DESIGN.md, PPO_NOTES.md and ../shared/ are the team's notes, not in this repository."""
    missing = ("DESIGN.md", "PPO_NOTES", "../shared/")
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
    found = [(str(path.relative_to(ROOT)), word) for path in files for word in missing if word in path.read_text()]
    assert found == []


def test_the_readme_claims_the_command_check_for_the_files_it_checks():
    """README says every proxima command shown in its files (the Docs list: docs/*.md, docker/README.md,
    benchmarks/README.md) is parsed: each of those files is in DOC_FILES, and benchmarks/README.md's
    `OMP_NUM_THREADS=1 .venv/bin/proxima ...` lines are among the commands checked."""
    readme = (ROOT / "README.md").read_text()
    assert "Every `proxima` command shown in these files is parsed against the real CLI" in readme
    listed = set(re.findall(r"^- `([^`]+\.md)`", readme, flags=re.M))
    assert {"docs/reliability.md", "docker/README.md", "benchmarks/README.md"} <= listed
    assert {ROOT / name for name in listed} <= set(DOC_FILES)
    bench = [argv for where, argv in COMMANDS if where.startswith("benchmarks/README.md: OMP_NUM_THREADS=1 .venv/bin/proxima")]
    assert len(bench) >= 2 and all(argv[0] == "bench" for argv in bench)
    assert any(where.startswith("benchmarks/README.md: .venv/bin/proxima bench CartPole-v1 --device cuda")
               for where, _ in COMMANDS)


@pytest.mark.parametrize("line, argv", [
    ("proxima train CartPole-v1", ["train", "CartPole-v1"]),
    (".venv/bin/proxima bench CartPole-v1", ["bench", "CartPole-v1"]),
    ("OMP_NUM_THREADS=1 .venv/bin/proxima bench Pong-v5 --repeats 3", ["bench", "Pong-v5", "--repeats", "3"]),
    ("A=1 B= proxima doctor", ["doctor"]),
    ("torchrun --nproc-per-node 2 -m proxima train CartPole-v1", ["train", "CartPole-v1"]),
    ("OMP_NUM_THREADS=1 python benchmarks/learning.py --envs CartPole-v1", None),
    ("pip install -e .", None),
])
def test_proxima_command_lines_are_recognized_with_env_settings_and_a_venv_path(line, argv):
    assert _proxima_argv(line.split()) == argv


def test_the_code_cites_only_docs_a_clone_has():
    """Comments and preset files cited PPO_NOTES.md, the team's notes outside the repository; the notes a
    user can read are docs/ppo_notes.md. Every docs/NAME.md the package names exists."""
    package = ROOT / "proxima"
    texts = {path: path.read_text() for path in sorted(package.rglob("*")) if path.suffix in (".py", ".yaml")}
    assert [str(p.relative_to(ROOT)) for p, text in texts.items() if "PPO_NOTES" in text] == []
    cited = {name for text in texts.values() for name in re.findall(r"docs/([\w.-]+\.md)", text)}
    assert "ppo_notes.md" in cited
    assert sorted(name for name in cited if not (ROOT / "docs" / name).is_file()) == []
