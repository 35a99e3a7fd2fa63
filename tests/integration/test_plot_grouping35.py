"""`proxima plot` / `report` group only repeats of one setting: the number of processes (meta.json's
world_size) and, under the default lr annealing, --total-timesteps are part of the setting, and
``backend: auto`` counts as the backend the run built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxima.cli import main
from proxima.config import PPOConfig
from proxima.plot import collect_panels, group_runs
from proxima.report import build_report
from tests.cli_helpers import TINY_RUN, fake_run_dir

pytest.importorskip("matplotlib")


def _run(root: Path, name: str, meta: dict | None = None, **fields) -> Path:
    """A run directory with a whole config.yaml as `proxima train` writes it (every field, backend auto,
    anneal_lr on) and, when given, a meta.json: what group_runs reads, without training."""
    cfg = {**PPOConfig(env_id="CartPole-v1", total_timesteps=8192).to_dict(), **fields}
    d = fake_run_dir(root, name, **cfg)
    if meta is not None:
        (d / "meta.json").write_text(json.dumps({"kind": "ppo", **meta}))
    return d


def _eval(run: Path, mean: float) -> Path:
    (run / "eval.json").write_text(json.dumps({"episodes": 2, "mean_return": mean, "std_return": 0.0,
                                               "returns": [mean, mean], "lengths": [5, 5], "deterministic": True}))
    return run


# ------------------------------------------------------------------------------------ 1. processes
def test_a_two_process_run_is_another_setting_than_one_process_in_plot_and_report(tmp_path):
    one = _eval(_run(tmp_path, "k1", {"world_size": 1, "env_backend": "native"}), 100.0)
    two = _eval(_run(tmp_path, "k2", {"world_size": 2, "env_backend": "native"}), 300.0)
    assert group_runs([one, two]) == {"CartPole-v1 (processes=1)": [one], "CartPole-v1 (processes=2)": [two]}
    panels = collect_panels([one, two], panels="per-setting")
    assert [title for title, *_ in panels] == ["CartPole-v1 (processes=1)", "CartPole-v1 (processes=2)"]
    assert all(len(curves) == 1 and "runs" not in curves[0].label for _, _, curves in panels)  # no "mean of 2 runs"
    text = build_report([one, two], out=tmp_path / "r.md", episodes=0).read_text()
    assert "over 2 runs" not in text  # the two evaluations are not averaged as repeats


def test_runs_of_one_process_group_whether_or_not_meta_json_records_it(tmp_path):
    recorded = _run(tmp_path, "a", {"world_size": 1, "env_backend": "native"})
    bare = _run(tmp_path, "b", seed=2)  # no meta.json: one process, its backend resolved from the config
    assert group_runs([recorded, bare]) == {"CartPole-v1": [recorded, bare]}


# ------------------------------------------------------------------------------------ 2. total_timesteps
def test_totals_differ_under_lr_annealing_is_two_settings(tmp_path):
    short = _run(tmp_path, "short", total_timesteps=8192)
    short2 = _run(tmp_path, "short2", total_timesteps=8192, seed=2)
    long = _run(tmp_path, "long", total_timesteps=16384)  # also a resume that extended the total: its config says so
    assert group_runs([short, long, short2]) == {"CartPole-v1 (total_timesteps=8192)": [short, short2],
                                                 "CartPole-v1 (total_timesteps=16384)": [long]}


def test_totals_differ_without_lr_annealing_is_one_setting(tmp_path):
    short = _run(tmp_path, "short", total_timesteps=8192, anneal_lr=False)
    long = _run(tmp_path, "long", total_timesteps=16384, anneal_lr=False, seed=2)
    assert group_runs([short, long]) == {"CartPole-v1": [short, long]}


# ------------------------------------------------------------------------------------ 3. backend auto
def test_auto_groups_with_the_backend_it_built_and_not_with_another(tmp_path):
    auto = _run(tmp_path, "auto", {"world_size": 1, "env_backend": "native"}, backend="auto")
    native = _run(tmp_path, "native", {"world_size": 1, "env_backend": "native"}, backend="native", seed=2)
    old = _run(tmp_path, "old", backend="auto", seed=3)  # no meta.json: CartPole without env_kwargs resolves to native
    gym = _run(tmp_path, "gym", {"world_size": 1, "env_backend": "gymnasium"}, backend="gymnasium")
    assert group_runs([auto, native, old, gym]) == {"CartPole-v1 (backend=native)": [auto, native, old],
                                                    "CartPole-v1 (backend=gymnasium)": [gym]}


def test_an_atari_auto_is_the_backend_meta_json_records_never_what_is_installed_here(tmp_path):
    # EnvPool is not installed here (auto would now pick Gymnasium's ALE): the run's record decides
    atari = dict(env_id="Pong-v5", num_envs=8)
    auto = _run(tmp_path, "auto", {"world_size": 1, "env_backend": "envpool"}, backend="auto", **atari)
    envpool = _run(tmp_path, "envpool", {"world_size": 1, "env_backend": "envpool"}, backend="envpool", seed=2, **atari)
    unknown = _run(tmp_path, "unknown", backend="auto", seed=3, **atari)  # unrecorded: not guessed from this machine
    gym = _run(tmp_path, "gym", {"world_size": 1, "env_backend": "gymnasium"}, backend="gymnasium", seed=4, **atari)
    assert group_runs([auto, envpool, unknown, gym]) == {"Pong-v5 (backend=envpool)": [auto, envpool],
                                                         "Pong-v5 (backend=auto)": [unknown],
                                                         "Pong-v5 (backend=gymnasium)": [gym]}


def test_trained_runs_with_and_without_backend_native_are_one_group_and_another_total_is_not(tmp_path):
    runs = tmp_path / "runs"
    for name, extra in (("auto", []), ("native", ["--backend", "native", "--seed", "2"]), ("longer", ["--seed", "3"])):
        total = "256" if name == "longer" else "128"
        assert main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", total, "--run-dir", str(runs / name),
                     "--quiet", *extra]) == 0
    auto, native, longer = (runs / n for n in ("auto", "native", "longer"))
    assert group_runs([auto, native, longer]) == {"CartPole-v1 (total_timesteps=128)": [auto, native],
                                                  "CartPole-v1 (total_timesteps=256)": [longer]}


def test_an_old_config_without_anneal_lr_anneals_so_its_totals_are_two_settings(tmp_path):
    import yaml

    def without_anneal_key(run: Path) -> Path:  # written before the field existed: the default (annealing on) applied
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        del cfg["anneal_lr"]
        (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        return run

    short = without_anneal_key(_run(tmp_path, "short", total_timesteps=8192))
    long = without_anneal_key(_run(tmp_path, "long", total_timesteps=16384, seed=2))
    assert group_runs([short, long]) == {"CartPole-v1 (total_timesteps=8192)": [short],
                                         "CartPole-v1 (total_timesteps=16384)": [long]}


def test_an_old_atari_id_that_auto_no_longer_takes_is_grouped_as_recorded_not_a_crash(tmp_path):
    # backend auto, no meta.json: envs refuse a v4 Atari id today, which is no reason for plot or report to fail
    old = _run(tmp_path, "old", env_id="PongNoFrameskip-v4", backend="auto")
    again = _run(tmp_path, "again", env_id="PongNoFrameskip-v4", backend="auto", seed=2)
    assert group_runs([old, again]) == {"PongNoFrameskip-v4": [old, again]}
    assert [title for title, *_ in collect_panels([old, again])] == ["PongNoFrameskip-v4"]


# ------------------------------------------------------------------------------------ 4. fields an older config lacks
def test_an_old_config_without_the_newer_fields_groups_with_todays_run_and_a_fine_tuned_run_is_its_own(tmp_path):
    import yaml

    from proxima.config import ABSENT_MEANS

    today = _run(tmp_path, "today", encoder="mlp")  # as train records it: the encoder auto built
    old = _run(tmp_path, "old", encoder="mlp", seed=2)
    cfg = yaml.safe_load((old / "config.yaml").read_text())
    for name in ABSENT_MEANS:  # written before these fields: init_from, encoder, env_kwargs, eval_every ...
        del cfg[name]
    (old / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    source = str(tmp_path / "src" / "checkpoints" / "step_000000008192.pt")  # as a fine-tuned run records it
    tuned = _run(tmp_path, "tuned", encoder="mlp", init_from=source, seed=3)
    assert group_runs([today, old, tuned]) == {"CartPole-v1 (init_from=none)": [today, old],
                                               f"CartPole-v1 (init_from={source})": [tuned]}
