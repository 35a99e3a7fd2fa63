"""bench, sizing, doctor, plot and help texts at the edges a review found wrong: advice bench did not
accept, a results file that misstated how it measured, a note --quiet and --dry-run dropped, the
memory check that never looked at image size, a population's evaluation envs, a damaged
metrics.csv without its path, and help strings that said what is not so."""

from __future__ import annotations

import re
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from cli_helpers import error_line, run_main
from proxima import sizing
from proxima.config import ConfigError, PPOConfig

TINY_BENCH = ["--seconds", "0.01", "--repeats", "1"]


class Frames(gym.Env):
    """A constant uint8 image of ``shape`` (an Atari frame stack by default): cheap to build and step."""

    def __init__(self, shape=(4, 84, 84)):
        self.observation_space = gym.spaces.Box(0, 255, tuple(shape), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._frame = np.zeros(tuple(shape), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._frame, {}

    def step(self, action):
        return self._frame, 0.0, True, False, {}


gym.register("EdgeFrameStack-v0", entry_point=Frames)
gym.register("EdgeBigImage-v0", entry_point=Frames, kwargs={"shape": (3, 2048, 2048)})


def help_entry(text: str, flag: str) -> str:
    """The help of ``flag`` in a --help text, on one line, up to the next flag."""
    text = " ".join(text.split())
    entry = text[text.index(f"{flag} {flag[2:].upper().replace('-', '_')} "):]
    return re.split(r" --[a-z]", entry[len(flag):], maxsplit=1)[0]


# ------------------------------------------------------------------------------- 1. bench --backend auto
def test_bench_takes_the_backend_its_errors_advise(capsys):
    """make_env's lines (shared with train and eval) say "use --backend auto": bench accepts it, as
    the backend train builds by default, and names that backend in its results."""
    code, _, err = run_main(["bench", "CartPole-v1", "--num-envs", "4", "--backend", "envpool", *TINY_BENCH], capsys)
    error_line(code, err, "--backend envpool runs Atari games", "; use --backend auto")
    assert "envpool x 4 envs" not in err  # refused with every line's check, before any line is measured
    code, out, err = run_main(["bench", "CartPole-v1", "--num-envs", "4", "--backend", "auto", "--train-only", "--json",
                               *TINY_BENCH], capsys)
    assert code == 0, err
    (line,) = [row for row in out.splitlines() if row.strip()]
    assert '"backend": "native"' in line and '"train_sps": ' in line


def test_bench_auto_is_the_backend_train_builds():
    from proxima.bench import backends_for

    assert backends_for("CartPole-v1", "auto") == ["native"]
    assert backends_for("EdgeFrameStack-v0", "auto") == ["gymnasium"]  # no native twin: the advice "gymnasium or auto"
    assert backends_for("CartPole-v1", "auto,gymnasium") == ["native", "gymnasium"]


# ------------------------------------------------------------------------------- 2. bench --out
def test_bench_out_records_the_threads_the_trainer_set(tmp_path, capsys):
    """--threads 2 on a discrete-action MLP: actor and critic on a thread each, one intra-op thread each,
    for batches of 2,048+ rows; at 4 envs no batch reaches that, and the record says so (review 31)."""
    for envs, text in (("4", "- torch intra-op threads: 1 (--threads 2: not paired, every batch below 2,048 rows: the "
                             "same as --threads 1); OMP_NUM_THREADS="),
                       ("2048", "- torch intra-op threads: 1 each on two threads, actor and critic side by side for "
                                "batches of 2,048+ rows (--threads 2); OMP_NUM_THREADS=")):
        out = tmp_path / f"bench{envs}.md"
        code, _, err = run_main(["bench", "CartPole-v1", "--num-envs", envs, "--backend", "native", "--threads", "2",
                                 "--train-only", "--num-steps", "2" if envs == "4" else "1", *TINY_BENCH, "--out", str(out)], capsys)
        assert code == 0, err
        assert text in out.read_text(), envs


def test_bench_out_reports_how_long_a_repeat_really_took(tmp_path, capsys):
    """--seconds is a target: a repeat is at least one call, and one train call (a whole iteration of
    4 envs x 128 steps, 4 epochs) takes longer than the 1 ms asked here."""
    out = tmp_path / "bench.md"
    code, _, err = run_main(["bench", "CartPole-v1", "--num-envs", "4", "--backend", "native", "--train-only", "--seconds",
                             "0.001", "--repeats", "2", "--out", str(out)], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "about 0.001 s" not in text
    took = re.search(r"median \(min-max\) of 2 repeats of ([0-9.]+)(?:-([0-9.]+))? s each \(measured; --seconds 0.001 "
                     r"asks for about that much, but a repeat is at least one call, and one train call is one whole iteration\)",
                     text)
    assert took is not None, text
    assert float(took.group(2) or took.group(1)) > 0.001


# ------------------------------------------------------------------------------- 3. whole iterations
def test_quiet_still_warns_that_the_total_is_not_whole_iterations(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "150", "--num-envs", "4", "--num-steps", "16",
                             "--eval-episodes", "0", "--threads", "1", "--quiet", "--run-dir", "R"], capsys)
    assert code == 0, err
    assert ("proxima: note: --total-timesteps 150 is not a multiple of the batch (64 steps = num_envs x num_steps): "
            "training 128 steps (2 iterations)") in err


def test_dry_run_notes_what_a_total_of_partial_iterations_trains(capsys):
    code, out, err = run_main(["train", "CartPole-v1", "--total-timesteps", "3000", "--dry-run"], capsys)
    assert code == 0, err
    assert "total_timesteps: 3000" in out  # the config as typed, on stdout
    assert ("proxima: note: --total-timesteps 3,000 is not a multiple of the batch (512 steps = num_envs x num_steps): "
            "training 2,560 steps (5 iterations)") in err
    code, out, err = run_main(["train", "CartPole-v1", "--total-timesteps", "3072", "--dry-run"], capsys)
    assert code == 0 and "note" not in err  # whole iterations: nothing to say
    code, out, err = run_main(["train", "CartPole-v1", "--dry-run"], capsys)
    assert code == 0 and "note" not in err  # the preset's total, not typed: train says nothing of it either


# ------------------------------------------------------------------------------- 4. --threads help
def test_threads_help_gives_its_default_once(capsys):
    code, out, _ = run_main(["train", "--help"], capsys)
    entry = help_entry(out, "--threads")
    assert code == 0 and "(default 1)" not in entry and entry.count("(default: 1)") == 1
    code, out, _ = run_main(["resume", "--help"], capsys)
    entry = help_entry(out, "--threads")
    assert code == 0 and "(default 1)" not in entry and entry.endswith("(default: the run's)")


# ------------------------------------------------------------------------------- 5. bench's own flags
def test_bench_names_its_own_flags_when_the_presets_minibatches_do_not_divide(capsys):
    code, _, err = run_main(["bench", "MountainCarContinuous-v0", "--num-envs", "1", "--num-steps", "16", *TINY_BENCH], capsys)
    line = error_line(code, err, "proxima bench: error: --num-envs 1 x --num-steps 16 = 16: must be a multiple of the "
                                 "preset's num_minibatches (32) and at least 64 (2 rows per minibatch); choose other "
                                 "--num-envs or --num-steps, or another --preset")
    assert "--num-minibatches" not in line


def test_bench_says_the_network_flags_of_a_memory_refusal_come_from_the_preset():
    from proxima.bench import in_bench_flags

    cfg = PPOConfig(num_envs=4, num_steps=8)
    e = in_bench_flags(ConfigError("--hidden-sizes 64,64: the actor and critic need ~3.0 GiB on cpu (...), 1.0 GiB free; "
                                   "lower --hidden-sizes"), cfg)
    assert str(e).endswith("; lower --hidden-sizes (bench takes num_minibatches and hidden_sizes from the preset: "
                           "choose another --preset)")
    other = ConfigError("--num-steps 0: must be at least 1")
    assert in_bench_flags(other, cfg) is other


# ------------------------------------------------------------------------------- 6. a damaged metrics.csv
@pytest.mark.parametrize("command", ["plot", "report"])
def test_an_unknown_metric_of_a_damaged_metrics_csv_names_the_file(command, tmp_path, capsys):
    run = tmp_path / "RUN"
    run.mkdir()
    # a row with a step (a row without one is skipped as hand-edited: test_plot_grouping), no metric columns
    (run / "metrics.csv").write_text("iteration,global_step\n1,128\n")
    code, _, err = run_main([command, str(run), "--out", str(tmp_path / ("d.png" if command == "plot" else "d.md"))], capsys)
    error_line(code, err, f"proxima {command}: error: unknown metric 'charts/episodic_return_100' in {run / 'metrics.csv'}; "
                          "available: iteration, global_step")


# ------------------------------------------------------------------------------- 7. doctor's CPU vendor
def test_doctor_reads_the_cpu_vendor_under_a_bad_tanh_setting(monkeypatch):
    """PROXIMA_CPU_TANH=x makes importing tanh_cpu raise; the vendor does not depend on it."""
    from proxima import doctor, tanh_cpu

    vendor = tanh_cpu.cpu_vendor()
    if not vendor:
        pytest.skip("the OS does not say this CPU's vendor")
    monkeypatch.setenv("PROXIMA_CPU_TANH", "x")
    monkeypatch.delitem(sys.modules, "proxima.tanh_cpu")  # imported afresh: the import raises on the setting
    info = doctor.collect()
    assert info["cpu_vendor"] == vendor and info["cpu_tanh"] is None
    assert any("PROXIMA_CPU_TANH='x'" in hint for hint in info["hints"])


# ------------------------------------------------------------------------------- 8. images in the memory check
def test_a_frame_stack_run_that_cannot_fit_is_refused(monkeypatch):
    """(4, 84, 84) uint8 frames, 2,048 envs x 128 steps: ~26 GB with the frames (~56 KB a sample), ~215 MB
    costed as one value a sample, under 1% of 22 GB free: it was let through, to end in an allocation error."""
    monkeypatch.setattr(sizing, "free_memory", lambda device: 22 * 1024**3)
    cfg = PPOConfig(env_id="EdgeFrameStack-v0", backend="gymnasium", num_envs=2048, num_steps=128, encoder="cnn")
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, torch.device("cpu"), sizing.env_probe(cfg))
    assert re.fullmatch(r"--num-envs 2048 x --num-steps 128: needs ~2\d\.\d GiB on cpu, 22\.0 GiB free; lower --num-envs or --num-steps",
                        str(e.value)), str(e.value)
    cfg = PPOConfig(env_id="EdgeFrameStack-v0", backend="gymnasium", num_envs=1024, num_steps=128, encoder="cnn")
    sizing.check_fits(cfg, torch.device("cpu"), sizing.env_probe(cfg))  # ~13 GB: fits


@pytest.mark.parametrize("num_envs, num_steps, num_minibatches", [(8, 128, 4), (1, 8, 1)])
def test_a_cnn_that_cannot_fit_names_the_image_size_not_hidden_sizes(monkeypatch, num_envs, num_steps, num_minibatches):
    """(3, 2048, 2048) images: the Nature CNN's linear layer alone holds 2 billion weights (~31 GB with
    gradients and Adam state); --hidden-sizes is not used by a single image's CNN."""
    monkeypatch.setattr(sizing, "free_memory", lambda device: 20 * 1024**3)
    cfg = PPOConfig(env_id="EdgeBigImage-v0", backend="gymnasium", num_envs=num_envs, num_steps=num_steps,
                    num_minibatches=num_minibatches)
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, torch.device("cpu"), sizing.env_probe(cfg))
    assert str(e.value).startswith("(3, 2048, 2048) images through the Nature CNN: the actor and critic need ~")
    assert str(e.value).endswith("(~31.0 GiB of weights, gradients and Adam state, which grow with the image size), 20.0 GiB "
                                 "free; downscale the env's images (the Nature CNN was made for 84x84)")
    assert "--hidden-sizes" not in str(e.value)


def test_a_cnn_whose_weights_fit_may_also_lower_the_rows(monkeypatch):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 40 * 1024**3)  # the 31 GB of weights fit, not the rest
    cfg = PPOConfig(env_id="EdgeBigImage-v0", backend="gymnasium", num_envs=8, num_steps=128, num_minibatches=4)
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, torch.device("cpu"), sizing.env_probe(cfg))
    assert str(e.value).endswith("; downscale the env's images (the Nature CNN was made for 84x84), or lower --num-envs or --num-steps")


# ------------------------------------------------------------------------------- 9. a population's evaluation
def test_a_populations_evaluation_envs_are_sized_once(monkeypatch):
    """--eval-episodes builds one env per episode at the end of the run, while the population is held;
    members are evaluated one at a time (or batched in one native env of P x E rows): E envs, once."""
    from proxima.population import check_population_fits

    gym_sizes = lambda: (4, 1, False)  # noqa: E731  CartPole's sizes through Gymnasium: 20 KB an env
    cfg = PPOConfig(num_envs=4, num_steps=8, num_minibatches=1, eval_episodes=100_000)  # ~2.0 GB of eval envs
    monkeypatch.setattr(sizing, "free_memory", lambda device: 1024**3)
    with pytest.raises(ConfigError) as e:
        check_population_fits(cfg, 2, torch.device("cpu"), gym_sizes)
    assert re.fullmatch(r"--eval-episodes 100,000: the evaluation builds one env per episode, ~1\.9 GiB on cpu "
                        r"\(~1\.9 GiB in all\), 1\.0 GiB free; lower --eval-episodes", str(e.value)), str(e.value)
    monkeypatch.setattr(sizing, "free_memory", lambda device: 3 * 1024**3)
    check_population_fits(cfg, 64, torch.device("cpu"), gym_sizes)  # once, not 64 times (~120 GB)


def test_a_population_dry_run_refuses_evaluation_envs_that_cannot_fit(monkeypatch, capsys):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 64 * 1024**2)  # CartPole's native envs: 128 B each
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", "--eval-episodes", "1000000", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: --eval-episodes 1,000,000: the evaluation builds one env per episode, ~122.1 MiB",
               "64.0 MiB free; lower --eval-episodes")


# ------------------------------------------------------------------------------- 10. RLHF's --checkpoint-every
def test_rlhf_checkpoint_every_help_says_when_0_still_writes_one(capsys):
    code, out, _ = run_main(["rlhf", "--help"], capsys)
    entry = help_entry(out, "--checkpoint-every")
    assert code == 0 and "only at the end" not in entry
    assert ("(0: none by step count; the end of the run, a stop by SIGINT or SIGTERM, and a reward function that fails in "
            "a run of one process still write one)") in entry


def test_train_sizes_the_env_it_built_and_builds_none_only_to_size_it(tmp_path, monkeypatch, capsys):
    """A run checks its memory with its own env, before the agent and buffers: no extra env is built
    (a simulator or licence-bound env costs one build each), and frames too large are still refused."""
    def no_extra_env(cfg):
        raise AssertionError("a run built an env only to size it")

    monkeypatch.setattr(sizing, "env_probe", no_extra_env)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "512", "--run-dir", str(tmp_path / "ok"),
                             "--threads", "1", "--quiet"], capsys)
    assert code == 0, err
    code, _, err = run_main(["train", "CartPole-v1", "--dry-run"], capsys)  # one env, built and sized once
    assert code == 0, err
    # 64 envs x 128 steps of (4, 84, 84) uint8 frames hold ~231 MB: refused with 100 MB free, no run left
    monkeypatch.setattr(sizing, "free_memory", lambda device: 100 * 1024**2)
    run = tmp_path / "frames"
    code, _, err = run_main(["train", "EdgeFrameStack-v0", "--backend", "gymnasium", "--num-envs", "64", "--num-steps", "128",
                             "--encoder", "cnn", "--run-dir", str(run), "--threads", "1", "--quiet"], capsys)
    error_line(code, err, "--num-envs 64 x --num-steps 128: needs ~")
    assert not run.exists()
