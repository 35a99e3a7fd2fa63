"""A CLI fuzz review's findings (round 28): a bad PROXIMA_DIST_TIMEOUT is one line before torchrun starts
(and in a rank of a torchrun started by hand); `report ''`, `plot ''` and `--env ''` are refused; a
population is sized before its members are built; bench --repeats/--seconds and check-env --steps have
upper bounds; --env-kwargs null and repeated keys are refused; --trust-run without --resume is noted;
`resume --nproc` points to `train --resume --nproc`; a FIFO given as --prompts is called one; a batch larger
than --total-timesteps is named before --num-minibatches; --run-dir with a control character is refused.
Each refusal: exit 2, one line on stderr, no file written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli_helpers import one_error_line, run_main

SMALL = ["--total-timesteps", "512", "--num-envs", "2", "--threads", "1"]


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """An empty working directory; the test checks it is still empty (no partial files)."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def refused(argv: list, capsys, prog: str = "proxima train") -> str:
    code, _, err = run_main(argv, capsys)
    assert code == 2, err
    return one_error_line(err, prog)


# ------------------------------------------------------------------------------- 1. PROXIMA_DIST_TIMEOUT
TIMEOUT_LINE = "PROXIMA_DIST_TIMEOUT={!r}: must be a number of seconds from 0.001 to 604,800 (a week); unset it for the default, 300"


@pytest.mark.parametrize("value", ["abc", "nan", "0", "inf", "-5", "1e9"])
def test_a_bad_dist_timeout_is_one_line_before_torchrun_starts(value, cwd, capsys, monkeypatch):
    from proxima import launch

    def no_torchrun(*args, **kwargs):
        raise AssertionError("torchrun was started")

    monkeypatch.setattr(launch, "torchrun_command", no_torchrun)  # called once _check has passed
    monkeypatch.setenv("PROXIMA_DIST_TIMEOUT", value)
    argv = ["train", "CartPole-v1", "--nproc", "2", *SMALL, "--run-dir", "rd", "--quiet"]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])  # what the launcher passes on
    assert refused(argv, capsys) == TIMEOUT_LINE.format(value)
    assert refused([*argv, "--dry-run"], capsys) == TIMEOUT_LINE.format(value)  # as the launch would refuse it
    assert list(cwd.iterdir()) == []


def test_dist_timeout_reads_seconds_in_range_and_refuses_the_rest(monkeypatch):
    from proxima.config import ConfigError
    from proxima.distributed import dist_timeout

    for text, seconds in (("", 300.0), ("1", 1.0), (" 2.5 ", 2.5), ("604800", 604800.0)):
        monkeypatch.setenv("PROXIMA_DIST_TIMEOUT", text)
        assert dist_timeout() == seconds
    monkeypatch.delenv("PROXIMA_DIST_TIMEOUT")
    assert dist_timeout() == 300.0
    for text in ("abc", "nan", "0", "0.0001", "inf", "604801"):
        monkeypatch.setenv("PROXIMA_DIST_TIMEOUT", text)
        with pytest.raises(ConfigError) as e:
            dist_timeout()
        assert str(e.value) == TIMEOUT_LINE.format(text)


def test_a_rank_of_a_torchrun_started_by_hand_says_a_bad_dist_timeout_in_one_line(cwd):
    """As torchrun starts rank 0 (its env); it refuses the value before it joins the process group."""
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29513", "PROXIMA_DIST_TIMEOUT": "abc", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "proxima", "train", "CartPole-v1", *SMALL, "--run-dir", "rd", "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc.stderr, "proxima train") == TIMEOUT_LINE.format("abc")
    assert list(cwd.iterdir()) == []


# ------------------------------------------------------------------------------- 2, 3. empty values
@pytest.mark.parametrize("argv", [["report", ""], ["report", "x", ""], ["plot", ""], ["plot", "x", ""]])
def test_an_empty_run_dir_of_report_or_plot_is_refused(argv, cwd, capsys):
    assert refused(argv, capsys, f"proxima {argv[0]}") == "RUN_DIR '': empty; give a path (an unset shell variable?)"
    assert list(cwd.iterdir()) == []  # `report ''` wrote report.md and report_curve.png here


@pytest.mark.parametrize("argv", [["eval", "run", "--env", "", "--episodes", "1"], ["resume", "run", "--env", ""]])
def test_an_empty_env_is_refused_not_ignored(argv, cwd, capsys):
    assert refused(argv, capsys, f"proxima {argv[0]}") == ("--env '': empty (an unset shell variable?); name the env, "
                                                           "or leave --env out for the run's own")


# ------------------------------------------------------------------------------- 4. sizes
def test_a_population_is_sized_before_its_members_are_built(cwd, capsys, monkeypatch):
    """10,000 CartPole members: 2.2 GB by the old estimate, which took them as fitting in 4 GB free, then
    validated and built them one by one (100,001 members: minutes with no output)."""
    from proxima import population, population_run, sizing

    def built(*args, **kwargs):
        raise AssertionError("the members were built before the population was sized")

    monkeypatch.setattr(sizing, "free_memory", lambda device: 4 * 1024**3)
    monkeypatch.setattr(population_run, "check_members", built)
    monkeypatch.setattr(population_run, "Population", built)
    for extra in (["--dry-run"], []):
        line = refused(["train", "CartPole-v1", "--seeds", "0-9999", *SMALL, "--run-dir", "rs", "--quiet", *extra], capsys)
        assert line.startswith("--seeds/--sweep: 10,000 members x 2 envs x 128 steps needs ~"), line
        assert line.endswith("on cpu, 4.0 GiB free; train fewer members at once or lower --num-envs/--num-steps"), line
        need = float(line.split("needs ~")[1].split(" GiB")[0])
        assert need >= 10_000 * population.MEMBER_HOST_BYTES / 1024**3
    assert list(cwd.iterdir()) == []


def test_a_populations_host_state_is_sized_on_a_gpu_too(monkeypatch):
    """On a GPU the members' own state (MEMBER_HOST_BYTES each) is in the host's memory, not the device's."""
    import torch

    from proxima import sizing
    from proxima.config import ConfigError, PPOConfig
    from proxima.population import check_population_fits

    monkeypatch.setattr(sizing, "free_memory", lambda device: (1 if device.type == "cpu" else 80) * 1024**3)
    cfg = PPOConfig(num_envs=2, total_timesteps=512)
    with pytest.raises(ConfigError) as e:
        check_population_fits(cfg, 10_000, torch.device("cuda"), lambda: (4, 1, True))
    assert str(e.value) == ("--seeds/--sweep: 10,000 members need ~4.9 GiB of host memory (each member's own state, logs "
                            "and checkpoint pieces), 1.0 GiB free; train fewer members at once")
    check_population_fits(cfg, 1_000, torch.device("cuda"), lambda: (4, 1, True))  # ~0.5 GB: fits


@pytest.mark.parametrize("flag, value, line", [
    ("--repeats", "99999999999999999999999", "--repeats 99999999999999999999999: must be at most 100 (timed repeats of each measurement)"),
    ("--seconds", "1e23", "--seconds 1e+23: must be at most 600 (the target of one timed repeat, 10 minutes)"),
])
def test_bench_refuses_repeats_and_seconds_past_their_bounds(flag, value, line, cwd, capsys, monkeypatch):
    from proxima import bench

    def measured(*args, **kwargs):
        raise AssertionError("measured (it ran until killed)")

    monkeypatch.setattr(bench, "measure", measured)
    argv = ["bench", "CartPole-v1", "--num-envs", "2", "--num-steps", "8", "--repeats", "1", "--seconds", "0.2", "--threads", "1"]
    argv[argv.index(flag) + 1] = value
    assert refused(argv, capsys, "proxima bench") == line
    assert list(cwd.iterdir()) == []


def test_check_env_refuses_steps_past_its_bound(cwd, capsys, monkeypatch):
    from proxima.envs import checker

    def checked(*args, **kwargs):
        raise AssertionError("checked (it ran until killed)")

    monkeypatch.setattr(checker, "check_env", checked)
    assert refused(["check-env", "CartPole-v1", "--steps", "99999999999999999999999"], capsys, "proxima check-env") == (
        "--steps 99999999999999999999999: must be at most 1,000,000 (random steps of the check)")


# ------------------------------------------------------------------------------- 5a, 5b. --env-kwargs
@pytest.mark.parametrize("command", [["train", "CartPole-v1", *SMALL, "--dry-run"], ["check-env", "CartPole-v1"]])
def test_env_kwargs_null_is_refused_as_other_non_objects_are(command, cwd, capsys):
    assert refused([*command, "--env-kwargs", "null"], capsys, f"proxima {command[0]}") == (
        "--env-kwargs 'null': give a JSON object, {} for none")


@pytest.mark.parametrize("text, key", [('{"sutton_barto_reward": true, "sutton_barto_reward": false}', "sutton_barto_reward"),
                                       ('{"a": {"b": 1, "b": 2}}', "b")])
def test_a_key_given_twice_in_env_kwargs_is_refused_naming_it(text, key, cwd, capsys):
    line = refused(["train", "CartPole-v1", *SMALL, "--env-kwargs", text, "--dry-run"], capsys)
    assert line == f"--env-kwargs {text!r}: key {key!r} given twice; give each key once"


# ------------------------------------------------------------------------------- 5c. --trust-run
def test_trust_run_without_resume_is_noted(cwd, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *SMALL, "--trust-run", "--dry-run"], capsys)
    assert code == 0, err
    assert err.splitlines() == ["proxima train: note: --trust-run does nothing without --resume (it lets a resume import "
                                "the module:Class env its checkpoint records); a new run imports only the ENV_ID you name"]
    code, out, err = run_main(["train", "CartPole-v1", *SMALL, "--trust-run", "--dry-run", "--quiet"], capsys)
    assert code == 0 and err == "", err  # an advisory note: --quiet drops it
    assert refused(["train", "CartPole-v1", *SMALL, "--trust-run", "--lr", "-1", "--dry-run"], capsys) == (
        "--lr -1.0: must be positive")  # a refusal stays its one line
    assert list(cwd.iterdir()) == []


# ------------------------------------------------------------------------------- 5d. resume --nproc
@pytest.mark.parametrize("argv, run", [(["run", "--nproc", "1"], "run"), (["--nproc=2", "my run"], "'my run'"),
                                       (["--nproc", "2", "run"], "RUN_DIR")])
def test_resume_nproc_points_to_train_resume_nproc_as_resume_help_does(argv, run, capsys):
    line = refused(["resume", *argv], capsys, "proxima resume")
    assert line == ("--nproc: proxima resume starts as many processes as the run was trained with (up to this machine's "
                    f"CPUs); to give the count yourself: proxima train --resume {run} --nproc K, K the run's process count "
                    "(see proxima resume --help)")
    code, out, _ = run_main(["resume", "--help"], capsys)
    words = " ".join(out.split())
    assert "beyond that, continue it with proxima train --resume RUN_DIR --nproc K" in words


def test_resume_nproc_0_is_refused_as_train_refuses_it(capsys):
    # a count below 1 is refused first, as train refuses it (session 50: it got advice naming --nproc 0 again)
    assert refused(["resume", "run", "--nproc", "0"], capsys, "proxima resume") == "--nproc 0: must be at least 1"


# ------------------------------------------------------------------------------- 5e. --prompts FIFO
def test_rlhf_prompts_that_are_a_fifo_are_called_one(tmp_path, cwd, capsys):
    from rlhf_assets import save_gpt2

    save_gpt2(tmp_path / "model")
    os.mkfifo(tmp_path / "prompts")
    capsys.readouterr()  # transformers' progress bar of the save
    argv = ["rlhf", "--policy", str(tmp_path / "model"), "--prompts", str(tmp_path / "prompts"), "--reward",
            "proxima.rlhf.demo:keyword_sentiment", "--steps", "1", "--device", "cpu", "--threads", "1", "--run-dir", "r",
            "--batch-size", "4", "--max-new-tokens", "4"]
    assert refused(argv, capsys, "proxima rlhf") == (f"--prompts {str(tmp_path / 'prompts')!r}: is not a regular file "
                                                     "(a FIFO, device or socket); give the prompts file itself")
    assert list(cwd.iterdir()) == []


# ------------------------------------------------------------------------------- 5f. the batch first
@pytest.mark.parametrize("flag", ["--num-steps", "--num-envs"])
def test_a_batch_larger_than_the_total_is_named_before_num_minibatches(flag, cwd, capsys):
    argv = ["train", "CartPole-v1", *SMALL, flag, "99999999999999999999999", "--dry-run"]
    line = refused(argv, capsys)
    # the --num-steps the user did not type is the preset's, and the line says so
    preset = " (num_steps 128 from preset CartPole-v1/default; flags override it)" if flag == "--num-envs" else ""
    assert line.startswith("one batch (--num-envs ") and line.endswith(
        "is larger than --total-timesteps 512: lower --num-envs or --num-steps, or raise --total-timesteps" + preset), line


# ------------------------------------------------------------------------------- 5g. --run-dir control characters
@pytest.mark.parametrize("name", ["a\nb", "a\tb", "run\x1b[31m"])
def test_a_run_dir_with_a_control_character_is_refused(name, cwd, capsys):
    line = refused(["train", "CartPole-v1", *SMALL, "--run-dir", name, "--quiet"], capsys)
    assert line == f"--run-dir {name!r}: holds a control character (a newline, tab or escape); give a directory name without one"
    assert list(cwd.iterdir()) == []
