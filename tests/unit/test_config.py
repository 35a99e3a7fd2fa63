"""Config and CLI property tests: any value either passes validation or raises ConfigError / exits 2
with one line, never another exception or a traceback."""

from __future__ import annotations

import contextlib
import io
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxima import cli
from proxima.config import FIELDS, ConfigError, PPOConfig, coerce, from_dict, validate

# PROXIMA_HYPOTHESIS_EXAMPLES=1000 for a deeper search; 60 keeps the fast tier fast
SETTINGS = settings(max_examples=int(os.environ.get("PROXIMA_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "none", "null", "true", "off", "1e3", "1e400", "-0", "nan", "inf", "-inf", "64,64", "1_000",
                     "0.5", "2.5e-4", "cpu", "cuda", "meta", "tanh", "relu", "sync", "auto", "native", " 8 ", "1e-400"]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(max_size=3), scalars, max_size=2))
config_dicts = st.dictionaries(st.sampled_from(sorted(FIELDS)), values, max_size=6)


@SETTINGS
@given(config_dicts)
def test_from_dict_then_validate_accepts_or_raises_config_error(values):
    try:
        cfg = from_dict(values)
        validate(cfg)
    except ConfigError as e:
        message = str(e)
        assert message and "\n" not in message
        return
    # accepted: every value has its field's type and the invariants hold
    assert isinstance(cfg.num_envs, int) and cfg.num_envs >= 1
    assert isinstance(cfg.lr, float) and math.isfinite(cfg.lr) and cfg.lr > 0
    assert 0 < cfg.gamma <= 1 and 0 <= cfg.gae_lambda <= 1
    assert (cfg.num_envs * cfg.num_steps) % cfg.num_minibatches == 0
    assert cfg.total_timesteps >= cfg.num_envs * cfg.num_steps
    assert all(isinstance(h, int) and h >= 1 for h in cfg.hidden_sizes)


@SETTINGS
@given(st.dictionaries(st.one_of(st.text(max_size=10), st.integers(), st.none(), st.booleans()), scalars, min_size=1, max_size=3))
def test_unknown_keys_raise_config_error(values):
    values = {k: v for k, v in values.items() if k not in FIELDS}
    if not values:
        return
    with pytest.raises(ConfigError, match="unknown field"):
        from_dict(values)


def test_unknown_key_suggests_the_close_field():
    with pytest.raises(ConfigError, match=r"unknown field 'num_env' \(did you mean 'num_envs'\?\)"):
        from_dict({"num_env": 8})


@pytest.mark.parametrize("name, value, expected", [
    ("num_envs", "8", 8), ("num_envs", "1_024", 1024), ("total_timesteps", "1e5", 100_000), ("total_timesteps", 2.0e4, 20_000),
    ("lr", "3e-4", 3e-4), ("anneal_lr", "off", False), ("norm_obs", "yes", True), ("hidden_sizes", "32, 16", [32, 16]),
    ("target_kl", "none", None), ("target_kl", "0.02", 0.02), ("run_dir", None, None),
])
def test_coerce_converts_cli_and_yaml_spellings(name, value, expected):
    assert coerce(name, value) == expected


@pytest.mark.parametrize("name, value", [
    ("num_envs", "8.5"), ("num_envs", True), ("num_envs", "1e400"), ("num_envs", math.inf), ("lr", True), ("lr", "fast"),
    ("anneal_lr", "maybe"), ("hidden_sizes", "64,x"), ("hidden_sizes", [math.nan]), ("env_id", 3), ("target_kl", "big"),
])
def test_coerce_rejects_with_config_error_naming_the_field(name, value):
    with pytest.raises(ConfigError, match=f"field '{name}'"):
        coerce(name, value)


@pytest.mark.parametrize("changes, flag", [
    (dict(gamma=0.0), "--gamma"), (dict(gamma=1.5), "--gamma"), (dict(gae_lambda=-0.1), "--gae-lambda"),
    (dict(gae_lambda=1.1), "--gae-lambda"), (dict(lr=0.0), "--lr"), (dict(lr=-1.0), "--lr"), (dict(lr=math.nan), "--lr"),
    (dict(clip_coef=0.0), "--clip-coef"), (dict(num_minibatches=3), "--num-minibatches"),
    (dict(num_envs=1, num_steps=4, num_minibatches=4, total_timesteps=4), "--num-minibatches"),
    (dict(hidden_sizes=[]), "--hidden-sizes"),
    (dict(activation="gelu"), "--activation"), (dict(target_kl=0.0), "--target-kl"), (dict(env_id=""), "env_id"),  # no --env-id flag: ENV_ID
])
def test_validate_rejects_with_the_flag_name(changes, flag):
    with pytest.raises(ConfigError, match=f"^{flag} "):
        validate(PPOConfig(**changes))


def test_defaults_are_valid():
    validate(PPOConfig())


def test_a_batch_larger_than_total_timesteps_names_the_flags_to_change():
    """Not '--total-timesteps 500000: is smaller than one batch' after `--num-envs 1000000000`: the
    batch's own flags with their values, and what to lower or raise."""
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(num_envs=1_000_000_000, num_steps=128, total_timesteps=500_000))
    assert str(e.value) == ("one batch (--num-envs 1000000000 x --num-steps 128 = 128,000,000,000 steps) is larger than "
                            "--total-timesteps 500000: lower --num-envs or --num-steps, or raise --total-timesteps")
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(num_envs=4, num_steps=128, total_timesteps=1000), world_size=2)
    assert str(e.value) == ("one batch (--num-envs 4 x --num-steps 128 x 2 processes = 1,024 steps) is larger than "
                            "--total-timesteps 1000: lower --num-envs or --num-steps, or raise --total-timesteps")


@pytest.mark.parametrize("cfg, line", [
    (PPOConfig(num_envs=10**6, num_steps=1, num_minibatches=1),
     "one minibatch (--num-envs 1000000 x --num-steps 1 / --num-minibatches 1 = 1,000,000 rows) needs ~976.6 MiB of activations "
     "on cpu (~1.1 GiB in all), 953.7 MiB free; raise --num-minibatches, or lower --num-envs"),
    (PPOConfig(num_envs=250_000, num_steps=4, num_minibatches=1),
     "one minibatch (--num-envs 250000 x --num-steps 4 / --num-minibatches 1 = 1,000,000 rows) needs ~976.6 MiB of activations "
     "on cpu (~1.1 GiB in all), 953.7 MiB free; raise --num-minibatches, or lower --num-envs or --num-steps"),
    (PPOConfig(num_envs=4, num_steps=128, hidden_sizes=[10_000, 10_000]),
     "--hidden-sizes 10000,10000: the actor and critic need ~3.0 GiB on cpu (weights, gradients, Adam state, activations), "
     "953.7 MiB free; lower --hidden-sizes"),
], ids=["minibatch rows", "minibatch rows over steps", "weights"])
def test_a_network_that_does_not_fit_names_its_larger_part(monkeypatch, cfg, line):
    """The minibatch's activations (rows = num_envs x num_steps / num_minibatches) or the weights:
    the line names the flags of the part that does not fit, not --hidden-sizes for both."""
    import torch

    from proxima import sizing

    monkeypatch.setattr(sizing, "free_memory", lambda device: 10**9)
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, torch.device("cpu"), lambda: (4, 1, True))  # CartPole's sizes, a native env
    assert str(e.value) == line


@pytest.mark.parametrize("key", ["learning-rate", "learningrate", "leaning_rate", "Learning_Rate"])
def test_an_alias_or_near_miss_of_a_field_in_yaml_suggests_the_field(key):
    """learning_rate itself is lr's other name in a file too (tests/unit/test_migrate42.py); its near misses
    are suggested the field."""
    with pytest.raises(ConfigError) as e:
        from_dict({key: 0.001}, source="c.yaml")
    assert str(e.value) == f"c.yaml: unknown field '{key}' (did you mean 'lr'?)"


# ------------------------------------------------------------------------------------------ CLI
FLAGS = ["--" + name.replace("_", "-") for name in FIELDS if name != "env_id"]
BOOL_FLAGS = [f for f in FLAGS if isinstance(FIELDS[f[2:].replace("-", "_")].default, bool)]
cli_values = st.one_of(
    st.integers(min_value=-10, max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=8),  # no newlines or NULs: one arg, one line
    st.sampled_from(["0", "1", "-1", "64,64", "none", "nan", "inf", "1e400", "cpu", "meta", "cuda:7", "tanh", "true", ""]),
)
flag_with_value = st.tuples(st.sampled_from(FLAGS), cli_values).map(list)
bool_flag = st.sampled_from(BOOL_FLAGS + ["--no-" + f[2:] for f in BOOL_FLAGS]).map(lambda f: [f])
cli_args = st.tuples(
    st.sampled_from(["CartPole-v1", "Acrobot-v1", "Pendulum-v1"]),
    st.lists(st.one_of(flag_with_value, bool_flag, st.just(["--preset", "fast"]), st.just(["--preset", "nope"])), max_size=5),
)


def run_main(argv: list) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse errors and --help
            code = e.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def no_training(monkeypatch, tmp_path):
    """`proxima train` runs up to the trainer, which only checks the device and records the config."""
    import proxima.device
    import proxima.trainer

    seen = []

    def fake_train(cfg, **kwargs):
        proxima.device.resolve_device(cfg.device)  # the one check Trainer does before building anything
        seen.append(cfg)
        return tmp_path / "run", None

    monkeypatch.setattr(proxima.trainer, "train", fake_train)
    monkeypatch.chdir(tmp_path)
    return seen


@SETTINGS
@given(cli_args)
def test_train_cli_exits_0_or_2_with_one_line_and_no_traceback(no_training, args):
    env_id, flag_lists = args
    argv = ["train", env_id, *[x for flags in flag_lists for x in flags]]
    before = len(no_training)
    code, out, err = run_main(argv)
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err
    if code == 2:
        lines = err.rstrip("\n").split("\n")
        assert len(lines) == 1 and lines[0].startswith("proxima train: error: "), (argv, err)
        assert len(no_training) == before
    else:
        validate(no_training[-1])  # what reached the trainer is a valid config
        assert no_training[-1].env_id == env_id


def test_train_cli_flags_reach_the_config(no_training):
    code, _, err = run_main(["train", "Acrobot-v1", "--num-envs", "8", "--hidden-sizes", "32,32",
                             "--no-anneal-lr", "--target-kl", "0.05", "--learning-rate", "2e-3"])  # --lr too: refused
    assert code == 0, err
    cfg = no_training[-1]
    assert (cfg.env_id, cfg.num_envs, cfg.lr, cfg.hidden_sizes, cfg.anneal_lr, cfg.target_kl) == ("Acrobot-v1", 8, 2e-3, [32, 32], False, 0.05)


def test_preset_then_flags_override():
    from proxima import presets

    cfg = presets.resolve("CartPole-v1", "fast", PPOConfig())
    given = presets.presets_for("CartPole-v1")["fast"]["config"]  # the preset's own values, whatever a retune sets
    assert (cfg.num_envs, cfg.num_steps, cfg.backend) == (given["num_envs"], given["num_steps"], "native")
    assert cfg.num_envs != PPOConfig().num_envs  # the preset applied, not the default
    validate(cfg)


@pytest.mark.parametrize("value", [5, 1.5, True])
def test_a_yaml_number_or_boolean_as_init_from_is_refused_with_quote_it(value):
    # its str() may not be what was typed (1.10 reads 1.1): refused, not taken as a path '5' that may exist
    with pytest.raises(ConfigError, match=r"^f\.yaml: field 'init_from' got .*, not text.*; quote it as you wrote it "
                                          r"\(init_from: '\.\.\.'\)$"):
        from_dict({"init_from": value}, source="f.yaml")
