"""Small fixes 48: a broken preset file is one line naming the file and its line (column too for invalid YAML),
exit 2, from `proxima presets` as from train, a preset file or entry that is not a mapping included; SB3's
batch_size copied as --num-minibatches with --no-norm-adv (1-sample minibatches, legal) is noted at start;
`proxima bench --batch-size` gets train's hint for SB3's word."""

from __future__ import annotations


import pytest

from proxima import presets
from tests.cli_helpers import error_line, run_main, without_spaces_line


# ------------------------------------------------------------------ 1. a broken preset file, on every path that reads it
# preset_dir: tests/conftest.py's (the shipped preset files in a folder of the test's own)


#: commands that read every preset file: the listing, one env's, one preset's settings, and a train of another env's
READERS = [["presets"], ["presets", "CartPole-v1"], ["presets", "CartPole-v1", "fast"],
           ["train", "CartPole-v1", "--preset", "fast", "--total-timesteps", "2048", "--dry-run"]]


@pytest.mark.parametrize("argv", READERS, ids=lambda a: " ".join(a[:3]))
def test_invalid_preset_yaml_is_one_line_with_file_line_and_column(preset_dir, argv, capsys):
    # the shipped files alone: the command works
    assert run_main(argv, capsys)[0] == 0
    broken = preset_dir / "zz_broken.yaml"
    broken.write_text("Broken-v0:\n  default:\n    config: {num_envs: 4\n")  # the flow mapping never closes
    presets.all_presets.cache_clear()
    code, out, err = run_main(argv, capsys)
    prog = "proxima presets" if argv[0] == "presets" else "proxima train"
    line = error_line(code, err, f"{prog}: error: preset file {broken}: not valid YAML at line 4 column 1 "
                                 "(expected ',' or '}', but got '<stream end>'); fix that line or restore the file")
    assert len(err.strip().splitlines()) == 1, err
    assert line and out == ""


#: (file text, line, what the line says it is): not the mappings the format wants, at each level
NOT_MAPPINGS = [
    ("- CartPole-v1\n- fast\n", 1, "the top level is a list (['CartPole-v1', 'fast']), not a mapping of env id -> presets"),
    ("Broken-v0: 3\n", 1, "the entry of Broken-v0 is an int (3), not a mapping of preset name -> {description, config}"),
    ("Broken-v0:\nOther-v0: {}\n", 1, "the entry of Broken-v0 is empty, not a mapping of preset name"),
    ("Broken-v0:\n  default: fast\n", 2, "preset Broken-v0/default is a str ('fast'), not a mapping of description: and config:"),
    ("Broken-v0:\n  default:\n    description: d\n    config: [num_envs, 4]\n", 4,
     "the config of preset Broken-v0/default is a list (['num_envs', 4]), not a mapping of PPOConfig field -> value"),
]


@pytest.mark.parametrize("argv", READERS, ids=lambda a: " ".join(a[:3]))
@pytest.mark.parametrize("text, lineno, says", NOT_MAPPINGS, ids=["top-list", "env-int", "env-empty", "preset-str", "config-list"])
def test_preset_file_not_shaped_as_mappings_is_one_line_naming_file_line_and_value(preset_dir, argv, text, lineno, says,
                                                                                   capsys):
    broken = preset_dir / "zz_broken.yaml"
    broken.write_text(text)
    code, _, err = run_main(argv, capsys)
    line = error_line(code, err, f"error: preset file {broken} at line {lineno}: {says}",
                      "fix it as the format in proxima/presets/__init__.py shows, or restore the file")
    assert "AttributeError" not in err and line


def test_preset_file_not_a_mapping_is_a_config_error_from_python(preset_dir):
    (preset_dir / "zz_broken.yaml").write_text("Broken-v0:\n  default: fast\n")
    with pytest.raises(presets.ConfigError, match=r"zz_broken\.yaml at line 2: preset Broken-v0/default is a str"):
        presets.resolve("CartPole-v1")


def test_a_preset_file_of_comments_only_has_no_presets(preset_dir, capsys):
    (preset_dir / "zz_empty.yaml").write_text("# nothing yet\n")
    code, out, _ = run_main(["presets", "CartPole-v1"], capsys)
    assert code == 0 and "CartPole-v1  fast" in out


# ------------------------------------------------------------------ 2. 1-sample minibatches under --no-norm-adv: noted
SB3_COPY = ["CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "64", "--no-norm-adv",
            "--total-timesteps", "128"]
ONE_SAMPLE_NOTE = ("proxima train: note: --num-minibatches 64 with --no-norm-adv: each minibatch is 1 sample (the batch is "
                   "num_envs 4 x num_steps 16 = 64), 64 gradient steps an epoch; SB3's batch_size copied as num_minibatches "
                   "does this: num_minibatches = num_envs x num_steps / batch_size (--num-minibatches 1 for SB3's "
                   "batch_size 64); keep it if 1-sample minibatches are meant")


def test_sb3_batch_size_as_num_minibatches_without_norm_adv_is_noted_not_refused(capsys):
    code, out, err = run_main(["train", *SB3_COPY, "--dry-run"], capsys)
    assert code == 0, err
    assert err.strip().splitlines() == [ONE_SAMPLE_NOTE]
    assert "num_minibatches: 64\n" in out and "minibatch 1," in out  # it trains as asked


def test_one_sample_minibatches_are_noted_at_the_start_of_a_real_run(tmp_path, capsys):
    code, _, err = run_main(["train", *SB3_COPY, "--run-dir", str(tmp_path / "r"), "--no-progress"], capsys)
    assert code == 0, err
    assert without_spaces_line(err).strip().splitlines()[0] == ONE_SAMPLE_NOTE
    assert err.count("each minibatch is 1 sample") == 1
    assert (tmp_path / "r" / "config.yaml").is_file()


@pytest.mark.parametrize("argv", [
    ["CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "32", "--no-norm-adv", "--total-timesteps", "128"],
    [*SB3_COPY, "--quiet"],
], ids=["2-sample", "quiet"])
def test_no_one_sample_note_for_2_sample_minibatches_or_under_quiet(argv, capsys):
    code, _, err = run_main(["train", *argv, "--dry-run"], capsys)
    assert code == 0 and "1 sample" not in err, err


# ------------------------------------------------------------------ 3. bench --batch-size: train's hint
def test_bench_batch_size_gets_trains_hint_for_the_sb3_word(capsys):
    _, _, train_err = run_main(["train", "CartPole-v1", "--batch-size", "64"], capsys)
    hint = "--num-minibatches (it counts minibatches: --num-envs x --num-steps / your minibatch size)"
    assert hint in train_err
    code, _, err = run_main(["bench", "CartPole-v1", "--batch-size", "64"], capsys)
    assert error_line(code, err) == (
        "proxima bench: error: unrecognized arguments: --batch-size 64; --batch-size: proxima train's --num-minibatches "
        "stands for it (it counts minibatches: --num-envs x --num-steps / your minibatch size); bench trains with its "
        "preset's minibatches: --preset NAME picks another (`proxima presets ENV_ID` lists them) (see proxima bench --help)")
