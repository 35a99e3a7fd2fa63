"""bench's default --num-envs list measures what fits: `proxima bench CarRacing-v3` refused the whole
default list (1,4,64,1024,4096) because 4,096 envs did not fit, measuring nothing, and 1,024 Python
CarRacing envs held 10 GB and were still being built after 150 s. A typed size keeps the refusal; the
refusal's advice names what needs the memory (the rollout buffers), not a minibatch count that needs
"more memory" than the smaller ones."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from cli_helpers import error_line, run_main
from proxima import bench, sizing
from proxima.config import ConfigError, PPOConfig

GiB = 2**30


class Pixels(gym.Env):
    """CarRacing's observation (96x96x3 uint8) without its Box2D world: cheap to build."""

    observation_space = gym.spaces.Box(0, 255, (96, 96, 3), np.uint8)
    action_space = gym.spaces.Discrete(5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((96, 96, 3), np.uint8), {}

    def step(self, action):
        return np.zeros((96, 96, 3), np.uint8), 0.0, True, False, {}


gym.register("Sizes40Pixels-v0", entry_point=Pixels)


@pytest.fixture
def measured(monkeypatch):
    """bench_lines replaced by a recorder (no Trainer is built): the sizes bench went on to measure."""
    sizes = []

    def fake_lines(args, backends, n):
        sizes.append(n)
        return [(bench.Line(b, n, samples={"train": [100.0]}), bench.bench_config(args, b, n), torch.device("cpu"))
                for b in backends]

    monkeypatch.setattr(bench, "bench_lines", fake_lines)
    return sizes


def cartpole_need(num_envs: int) -> int:
    """What check_fits counts for bench's native CartPole line at ``num_envs`` (its buffers and networks)."""
    args = bench_args("CartPole-v1")
    cfg = bench.bench_config(args, "native", num_envs)
    sizes = sizing.env_probe(cfg)()
    return (sizing.estimate_bytes(cfg, *sizes, sizes.layout, torch.device("cpu"))
            + sizing.network_bytes(cfg, sizes[0], sizes[1], sizes.layout))


def bench_args(env_id: str, *flags: str):
    from proxima.cli import build_parser

    return build_parser().parse_args(["bench", env_id, *flags])


def test_the_default_list_leaves_out_the_sizes_that_do_not_fit_and_measures_the_rest(monkeypatch, capsys, measured):
    free = (cartpole_need(1024) + cartpole_need(4096)) // 2  # 1,024 fits, 4,096 does not
    monkeypatch.setattr(sizing, "free_memory", lambda device: free)
    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--json"], capsys)
    assert code == 0, err
    assert measured == [1, 4, 64, 1024]
    assert [json.loads(row)["num_envs"] for row in out.splitlines()] == [1, 4, 64, 1024]
    (note,) = [row for row in err.splitlines() if "note:" in row]
    assert note.startswith("proxima bench: note: the default --num-envs leaves out 4,096 envs, which do not fit in "
                           "memory (at 4,096: one minibatch (--num-envs 4096 x --num-steps ")
    assert note.endswith(f"{sizing.human_bytes(free)} free; raise --num-minibatches, or lower --num-envs or --num-steps "
                         "(bench takes num_minibatches and hidden_sizes from the preset: choose another --preset))")


def test_a_typed_size_that_does_not_fit_is_refused_before_any_is_measured(monkeypatch, capsys, measured):
    free = (cartpole_need(1024) + cartpole_need(4096)) // 2
    monkeypatch.setattr(sizing, "free_memory", lambda device: free)
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "1,4096"], capsys)
    error_line(code, err, "one minibatch (--num-envs 4096 x --num-steps ", f"{sizing.human_bytes(free)} free; ")
    assert measured == []


def test_a_default_list_with_no_size_that_fits_is_refused_with_the_smallest(monkeypatch, capsys, measured):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 1000)
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native"], capsys)
    error_line(code, err, "proxima bench: error: --hidden-sizes 64,64: the actor and critic need ~", " 1000 B free; ")
    assert measured == []


def test_the_default_list_stops_at_64_for_a_gymnasium_image_env(monkeypatch, capsys, measured):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 10**15)  # memory is not what stops it
    code, out, err = run_main(["bench", "Sizes40Pixels-v0", "--json"], capsys)
    assert code == 0, err
    assert measured == [1, 4, 64]
    assert [row for row in err.splitlines() if "note:" in row] == [
        "proxima bench: note: the default --num-envs stops Gymnasium at 64 envs for Sizes40Pixels-v0, an env with image "
        "observations (each Gymnasium env a Python object rendering its own frames, built one by one): 1,024, 4,096 "
        "envs not measured for Gymnasium; type --num-envs to measure them"]
    # typed, a size above it is measured as asked
    measured.clear()
    code, out, err = run_main(["bench", "Sizes40Pixels-v0", "--num-envs", "1024", "--json"], capsys)
    assert code == 0, err
    assert measured == [1024] and "note:" not in err


def test_the_recorded_command_names_the_sizes_measured(monkeypatch, capsys, measured, tmp_path):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 10**15)
    code, _, err = run_main(["bench", "Sizes40Pixels-v0", "--out", str(tmp_path / "r.md")], capsys)
    assert code == 0, err
    assert "proxima bench Sizes40Pixels-v0 --num-envs 1,4,64 " in (tmp_path / "r.md").read_text()


def test_carracing_sized_refusal_names_the_rollout_buffers_not_a_minibatch_count(monkeypatch):
    """The review's line ended "even --num-minibatches 262144 (the most the batch allows) needs ~28.0 GB":
    more memory for smaller minibatches, read literally. What needs it is the rollout buffers."""
    from proxima.envs.spaces import obs_layout

    monkeypatch.setattr(sizing, "free_memory", lambda device: int(21.4 * GiB))
    layout = obs_layout(Pixels.observation_space, "CarRacing-v3")
    cfg = PPOConfig(env_id="CarRacing-v3", num_envs=4096, num_steps=128, total_timesteps=10**9)
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, torch.device("cpu"), lambda: sizing.EnvSizes(96 * 96 * 3, 1, False, layout))
    assert str(e.value).endswith("21.4 GiB free; lower --num-envs or --num-steps: the rollout buffers alone need "
                                 "~27.0 GiB (at any --num-minibatches)")
    # 4,096 x 128 rows of obs and final_obs at a byte a pixel are most of it
    assert sizing.rollout_bytes(cfg, 96 * 96 * 3, 1, layout) > 4096 * 128 * 2 * 96 * 96 * 3


def test_an_empty_num_envs_is_refused_not_taken_for_the_default_list(capsys, measured):
    """`--num-envs "$N"` with N unset measured the whole default list (up to 4,096 envs): only a
    --num-envs not given at all is the default list."""
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", ""], capsys)
    assert error_line(code, err) == ("proxima bench: error: --num-envs '': expected a comma-separated list of positive "
                                     "integers, e.g. 1,4,64")
    assert measured == []
    assert bench.arguments_problem(bench_args("CartPole-v1", "--num-envs", "")).startswith("--num-envs '': expected ")


def test_the_image_cap_leaves_the_other_backends_lines_at_every_default_size(monkeypatch, capsys, tmp_path):
    """--backend both on an EnvPool Atari game is envpool,gymnasium: the 64-env cap of a Gymnasium image
    env dropped 1,024 and 4,096 from the shared list, so EnvPool lost them too (envpool is not installed
    here: its lines are checked and measured by fakes)."""
    checked, ran = [], []
    monkeypatch.setattr(bench, "check_line", lambda args, backend, n: checked.append((backend, n)))

    def fake_lines(args, backends, n):
        ran.append((n, list(backends)))
        return [(bench.Line(b, n, samples={"train": [100.0]}), bench.bench_config(args, b, n), torch.device("cpu"))
                for b in backends]

    monkeypatch.setattr(bench, "bench_lines", fake_lines)
    args = bench_args("Sizes40Pixels-v0", "--backend", "envpool,gymnasium")
    problem, sizes, notes, gym_max = bench.plan(args)
    assert (problem, sizes, gym_max) == ("", [1, 4, 64, 1024, 4096], 64)
    assert [n for b, n in checked if b == "gymnasium"] == [1, 4, 64]  # Gymnasium's lines over 64 are not checked either
    assert [n for b, n in checked if b == "envpool"] == [1, 4, 64, 1024, 4096]
    code, out, err = run_main(["bench", "Sizes40Pixels-v0", "--backend", "envpool,gymnasium", "--json",
                               "--out", str(tmp_path / "r.md")], capsys)
    assert code == 0, err
    assert ran == [(1, ["envpool", "gymnasium"]), (4, ["envpool", "gymnasium"]), (64, ["envpool", "gymnasium"]),
                   (1024, ["envpool"]), (4096, ["envpool"])]
    rows = [json.loads(row) for row in out.splitlines()]
    assert [(r["backend"], r["num_envs"], r["skipped"]) for r in rows if r["num_envs"] > 64] == [
        ("envpool", 1024, None), ("gymnasium", 1024, "> 64: the default --num-envs for a Gymnasium image env"),
        ("envpool", 4096, None), ("gymnasium", 4096, "> 64: the default --num-envs for a Gymnasium image env")]
    assert [row for row in err.splitlines() if "note:" in row] == [
        "proxima bench: note: the default --num-envs stops Gymnasium at 64 envs for Sizes40Pixels-v0, an env with image "
        "observations (each Gymnasium env a Python object rendering its own frames, built one by one): 1,024, 4,096 "
        "envs not measured for Gymnasium; type --num-envs to measure them"]
    # the recorded command reruns the same lines: every size, Gymnasium capped as it ran
    assert "--num-envs 1,4,64,1024,4096 " in (tmp_path / "r.md").read_text()
    assert "--max-gym-envs 64" in (tmp_path / "r.md").read_text()
    # Gymnasium alone: the sizes with no line left are dropped, not shown as skipped lines
    checked.clear()
    assert bench.plan(bench_args("Sizes40Pixels-v0", "--backend", "gymnasium"))[1:] == ([1, 4, 64], notes, 64)


def test_the_default_list_measures_every_size_for_a_gymnasium_env_without_images(monkeypatch, capsys, measured):
    """Only an image env's Gymnasium lines stop at 64: CartPole's go up to --max-gym-envs (4,096), with no note."""
    monkeypatch.setattr(sizing, "free_memory", lambda device: 10**15)
    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "gymnasium", "--json"], capsys)
    assert code == 0, err
    assert measured == [1, 4, 64, 1024, 4096]
    assert [(json.loads(row)["backend"], json.loads(row)["num_envs"]) for row in out.splitlines()] == [
        ("gymnasium", n) for n in (1, 4, 64, 1024, 4096)]
    assert "note:" not in err and "stops" not in err


def test_the_default_list_builds_no_gymnasium_env_for_the_image_check_without_a_gymnasium_line(monkeypatch, capsys,
                                                                                                 measured):
    def no_gymnasium(args):
        raise AssertionError("a Gymnasium env was built to read its observations for a native-only bench")

    monkeypatch.setattr(bench, "gym_images", no_gymnasium)
    monkeypatch.setattr(sizing, "free_memory", lambda device: 10**15)
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--json"], capsys)
    assert code == 0, err
    assert measured == [1, 4, 64, 1024, 4096]


def test_a_refusal_other_than_memory_at_one_default_size_refuses_the_list(capsys, measured):
    """--num-steps 2 makes 1 env x 2 steps a batch too small for the preset's minibatches: a refusal that is
    not about memory is not left out of the default list as if it did not fit (the others measured)."""
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-steps", "2"], capsys)
    line = error_line(code, err, "proxima bench: error: --num-envs 1 x --num-steps 2 = 2: must be a multiple of the "
                                 "preset's num_minibatches (")
    assert "do not fit" not in err and "note:" not in err, line
    assert measured == []


def test_the_note_names_every_size_left_out_and_quotes_the_smallest(monkeypatch, capsys, measured):
    free = (cartpole_need(64) + cartpole_need(1024)) // 2  # 64 fits, 1,024 does not
    monkeypatch.setattr(sizing, "free_memory", lambda device: free)
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--json"], capsys)
    assert code == 0, err
    assert measured == [1, 4, 64]
    (note,) = [row for row in err.splitlines() if "note:" in row]
    assert note.startswith("proxima bench: note: the default --num-envs leaves out 1,024, 4,096 envs, which do not fit "
                           "in memory (at 1,024: one minibatch (--num-envs 1024 x --num-steps "), note
    assert "4096 x" not in note, note


def test_an_options_problem_is_reported_before_the_sizes_are_checked(monkeypatch, capsys, measured):
    """--repeats 0 with no size that fits: the --repeats line, not the memory's."""
    monkeypatch.setattr(sizing, "free_memory", lambda device: 1000)
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--repeats", "0"], capsys)
    assert error_line(code, err) == "proxima bench: error: --repeats 0: must be at least 1"
    assert measured == []


def test_a_missing_package_while_checking_a_line_is_one_error_line(monkeypatch, capsys, measured):
    def missing(args, backend, n):
        raise ImportError("No module named 'ale_py'")

    monkeypatch.setattr(bench, "check_line", missing)
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native"], capsys)
    assert error_line(code, err) == "proxima bench: error: No module named 'ale_py'"
    assert measured == []
