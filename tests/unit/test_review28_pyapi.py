"""The Python API review (round 28): a Path run_dir recorded, tuples of widths, field names in Python's
refusals, RLHFConfig's strings for numbers, train_rlhf/resume leaving the caller's process as it was and
resume raising, make_env's checks, presets.resolve's precedence said, a population's caller state."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from proxima.config import ConfigError, PPOConfig, validate  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _draws():
    return random.random(), float(np.random.rand()), torch.rand(1).item()


@pytest.fixture
def two_threads():
    """The caller runs torch on 2 threads (a run's default is 1)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


# --- finding 2: run_dir as a pathlib.Path ------------------------------------------------------------------
def test_a_path_run_dir_trains_and_config_yaml_records_it_as_text(small_config, tmp_path):
    from proxima.trainer import train

    run = tmp_path / "run"
    cfg = small_config(run_dir=run)  # a Path, as a notebook builds it
    out, _ = train(cfg, quiet=True)  # was: yaml RepresenterError after the env was built
    assert Path(out) == run
    assert yaml.safe_load((run / "config.yaml").read_text())["run_dir"] == str(run)
    assert cfg.run_dir == run  # the caller's config as given (train works on a copy)


# --- finding 8: tuples of widths, field names from Python ------------------------------------------------
def test_hidden_sizes_take_a_tuple_as_from_dict_does_and_record_a_list():
    cfg = PPOConfig(hidden_sizes=(32, 32))
    validate(cfg)  # was: "PPOConfig.hidden_sizes = (32, 32): expected a comma-separated list of integers"
    assert cfg.hidden_sizes == [32, 32] and type(cfg.hidden_sizes) is list
    with pytest.raises(ConfigError, match=r"^PPOConfig.hidden_sizes = \('32', 32\): expected a list of ints"):
        validate(PPOConfig(hidden_sizes=("32", 32)))  # a string is still no width, in a tuple too


def test_a_range_error_names_the_field_from_python_and_the_flag_from_the_command_line():
    with pytest.raises(ConfigError) as python:
        validate(PPOConfig(gamma=1.5), python=True)
    assert str(python.value) == "PPOConfig.gamma = 1.5: must be in (0, 1]"
    with pytest.raises(ConfigError) as flag:
        validate(PPOConfig(gamma=1.5))
    assert str(flag.value) == "--gamma 1.5: must be in (0, 1]"  # the CLI's line, as before
    with pytest.raises(ConfigError) as batch:
        validate(PPOConfig(num_envs=4, num_steps=128, total_timesteps=100), python=True)
    assert str(batch.value) == ("one batch (num_envs=4 x num_steps=128 = 512 steps) is larger than total_timesteps=100: "
                                "lower num_envs or num_steps, or raise total_timesteps")
    assert batch.value.fields == ("num_envs", "num_steps", "total_timesteps")
    with pytest.raises(ConfigError) as switch:
        validate(PPOConfig(num_envs=1, num_steps=2, num_minibatches=2), python=True)
    assert str(switch.value) == ("PPOConfig.num_minibatches = 2: gives minibatches of 1 sample; advantage normalization "
                                 "needs at least 2 (lower num_minibatches, or add norm_adv=False)")


# --- finding 9: make_env's num_envs and device ------------------------------------------------------------
@pytest.mark.parametrize("backend", ["native", "gymnasium"])
@pytest.mark.parametrize("num_envs", [0, -1, "3", True, 2.0])
def test_make_env_refuses_a_count_that_is_no_positive_integer_in_one_line(backend, num_envs):
    from proxima import make_env

    with pytest.raises(ConfigError) as e:
        make_env("CartPole-v1", num_envs, backend=backend)
    assert str(e.value) == f"make_env(num_envs={num_envs!r}): must be an integer of 1 or more (the number of envs to build)"


def test_make_env_takes_devices_as_load_does():
    from proxima import make_env

    env = make_env("CartPole-v1", np.int64(2), device="auto")  # numpy's integer too
    try:
        assert env.num_envs == 2 and env.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    finally:
        env.close()
    with pytest.raises(ConfigError, match=r"^device='gpu': not a torch device \(cpu, cuda, cuda:1, auto\)$"):
        make_env("CartPole-v1", 2, device="gpu")
    if not torch.cuda.is_available():  # was: torch's "Cannot get CUDA generator without ATen_cuda library"
        with pytest.raises(ConfigError, match=r"^device='cuda': CUDA is not usable here"):
            make_env("CartPole-v1", 2, device="cuda")


# --- finding 10: presets.resolve's precedence ---------------------------------------------------------------
def test_resolve_says_that_the_preset_wins_over_base():
    from proxima import presets

    fast_lr = presets.all_presets()["CartPole-v1"]["fast"]["config"]["lr"]
    assert presets.resolve("CartPole-v1", "fast", PPOConfig(lr=1e-2)).lr == fast_lr != 1e-2
    doc = " ".join(presets.resolve.__doc__.split())
    assert "The preset wins: every field the preset sets replaces ``base``'s" in doc
    readme = " ".join((REPO / "docs" / "python_api.md").read_text().split())  # the README's Python API
    assert "in which the preset's fields replace `base`'s (the preset wins" in readme
    cfg = presets.resolve("CartPole-v1", "fast")  # the way the docs give to set your own value
    cfg.lr = 1e-2
    validate(cfg)
    assert cfg.lr == 1e-2


# --- finding 11: a population puts back threads, flush-denormal and the random streams ---------------------
def test_train_population_leaves_the_callers_threads_and_random_streams(small_config, tmp_path, two_threads):
    from proxima.population_run import train_population

    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    expected = _draws()
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    members = [small_config(seed=s, threads=1) for s in (1, 2)]
    train_population(members, [1, 2], {}, run_dir=tmp_path / "pop", quiet=True, evaluate_at_end=False)
    assert torch.get_num_threads() == 2
    assert _draws() == expected


# --- RLHF: findings 4, 6, 8 ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rlhf_assets(tmp_path_factory):
    from rlhf_assets import save_gpt2

    from proxima.rlhf.demo import prompts_list

    folder = tmp_path_factory.mktemp("review28_rlhf")
    save_gpt2(folder / "model")
    (folder / "prompts.txt").write_text("\n".join(prompts_list()) + "\n")
    return folder


def _rlhf_cfg(assets, **overrides):
    from proxima.rlhf import RLHFConfig

    values = dict(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                  reward="proxima.rlhf.demo:keyword_sentiment", batch_size=4, num_minibatches=1, update_epochs=1,
                  max_new_tokens=4, steps=1, print_every=0, sample_every=0, checkpoint_every=1, plot=False)
    values.update(overrides)
    return RLHFConfig(**values)


@pytest.mark.parametrize("field, value, expected", [("steps", "2", "an integer"), ("lr", "1e-6", "a number"),
                                                    ("value_lr", "1e-6", "a number or None"),
                                                    ("bf16", "false", "true or false"),
                                                    ("reward_weights", ["1.0"], "a comma-separated list of numbers")])
def test_rlhf_config_from_python_refuses_a_string_for_a_number_as_ppo_config_does(rlhf_assets, tmp_path, field, value,
                                                                                   expected):
    from proxima.rlhf import train_rlhf

    run = tmp_path / "run"
    with pytest.raises(ConfigError) as e:
        train_rlhf(_rlhf_cfg(rlhf_assets, run_dir=str(run), **{field: value}))
    assert str(e.value) == f"RLHFConfig.{field} = {value!r}: expected {expected}, not a string"
    assert not run.exists()


def test_rlhf_from_dict_still_reads_text_as_the_cli_gives_it():
    from proxima.rlhf.config import from_dict

    cfg = from_dict({"steps": "2", "lr": "1e-6", "bf16": "false"}, source="command line")
    assert (cfg.steps, cfg.lr, cfg.bf16) == (2, 1e-6, False)


def test_rlhf_resume_raises_for_bad_input_and_the_cli_still_says_it_in_one_line(tmp_path, capsys):
    from proxima.cli import main as proxima_main
    from proxima.rlhf import resume

    (tmp_path / "nothing").mkdir()
    with pytest.raises(ConfigError, match=r"nothing: not a run directory \(cannot read meta.json"):
        resume(tmp_path / "nothing")  # was: printed "proxima resume: error: ..." and returned 2
    capsys.readouterr()
    (tmp_path / "nothing" / "meta.json").write_text('{"kind": "rlhf"}')
    assert proxima_main(["resume", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proxima resume: error: ") and err.count("\n") == 1


def test_rlhf_resume_of_a_code_reward_names_trust_run_for_python(rlhf_assets, tmp_path, monkeypatch, capsys):
    from proxima.cli import main as proxima_main
    from proxima.rlhf import resume, train_rlhf

    (tmp_path / "review28_reward.py").write_text("def score(prompts, responses):\n    return [0.5] * len(responses)\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    run = train_rlhf(_rlhf_cfg(rlhf_assets, reward="review28_reward:score", reward_import_path=[str(tmp_path)],
                               run_dir=str(tmp_path / "run")))
    with pytest.raises(ConfigError) as e:
        resume(run, steps=2)
    assert str(e.value).endswith(f"pass --trust-run to `proxima resume` if you trust that code "
                                 f"(`resume({str(run)!r}, trust_run=True)` in Python)")
    capsys.readouterr()
    assert proxima_main(["resume", str(run), "--steps", "2"]) == 2  # the command line's line names its flag first
    assert "pass --trust-run to `proxima resume` if you trust that code" in capsys.readouterr().err
    assert resume(run, steps=2, trust_run=True) == 0
    sys.modules.pop("review28_reward", None)


CALLER = textwrap.dedent("""
    import random, sys, warnings
    import numpy as np, torch
    from proxima.rlhf import RLHFConfig, resume, train_rlhf

    torch.set_num_threads(2)
    filters = list(warnings.filters)
    gym_imported = "gymnasium" in sys.modules

    def draws():
        return (random.random(), float(np.random.rand()), torch.rand(1).item())

    def check(what):
        assert torch.get_num_threads() == 2, (what, "threads", torch.get_num_threads())
        assert list(warnings.filters) == filters, (what, "filters", [f for f in warnings.filters if f not in filters])

    assets, run = sys.argv[1], sys.argv[2]
    cfg = RLHFConfig(policy=assets + "/model", prompts=assets + "/prompts.txt", reward="proxima.rlhf.demo:keyword_sentiment",
                     batch_size=4, num_minibatches=1, update_epochs=1, max_new_tokens=4, steps=1, print_every=0,
                     sample_every=0, plot=False, run_dir=run)
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    expected = draws()
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    train_rlhf(cfg)
    assert draws() == expected, "train_rlhf: random streams"
    check("train_rlhf")
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    assert resume(run, steps=2, quiet=True) == 0
    assert draws() == expected, "resume: random streams"
    check("resume")
    print("gymnasium imported before:", gym_imported)
""")


def test_train_rlhf_and_resume_leave_threads_random_streams_and_warning_filters(rlhf_assets, tmp_path):
    """A fresh interpreter: gymnasium's own filter is added when it is first imported, which the test
    process did long ago."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", CALLER, str(rlhf_assets), str(tmp_path / "run")], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "gymnasium imported before: False" in out.stdout  # so the run's own import of it was under test
