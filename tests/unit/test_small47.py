"""Four small items of session 47: sizes are said in the binary units they are counted in (KiB, MiB, GiB);
the CNN size note counts --eval-every's best.pt on disk; `proxima resume RUN/checkpoints` of an RLHF run
resumes RUN; a bad value from an RLHF --config file is named by the file and its key, not by a flag."""

import errno
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

from proxima import diskspace, sizing  # noqa: E402
from proxima.config import PPOConfig  # noqa: E402
from proxima.diskspace import human_bytes  # noqa: E402
from proxima.envs.spaces import obs_layout  # noqa: E402
from tests.cli_helpers import TINY_RUN, one_error_line, run_main  # noqa: E402

KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4


# --- (a) human_bytes counts in 1024s, so it says KiB/MiB/GiB/TiB -----------------------------------------------------
@pytest.mark.parametrize("n, said", [
    (0, "0 B"), (1023, "1023 B"), (KIB, "1.0 KiB"), (36 * KIB, "36.0 KiB"),
    (10**9, "953.7 MiB"),  # a decimal gigabyte is less than a GiB: never "1.0 GB" for 1,073,741,824 bytes
    (GIB, "1.0 GiB"), (int(21.4 * GIB), "21.4 GiB"), (5 * TIB, "5.0 TiB"), (2048 * TIB, "2048.0 TiB"),
])
def test_sizes_are_said_in_the_binary_units_they_are_counted_in(n, said):
    assert human_bytes(n) == said


def test_a_full_disk_line_says_the_free_space_in_binary_units(tmp_path, monkeypatch):
    monkeypatch.setattr(diskspace, "free_bytes", lambda path: 36 * KIB)
    line = str(diskspace.write_error(tmp_path / "f.pt", OSError(errno.ENOSPC, "No space left on device")))
    assert line == (f"{tmp_path / 'f.pt'}: could not write (No space left on device; 36.0 KiB free there); "
                    "free some space (or choose another folder) and try again")


# --- (b) the CNN size note's disk figure counts best.pt under --eval-every ------------------------------------------
def _note_disk(keep: int, eval_every: int) -> tuple:
    """(the note's words between the parameters and the steps, one checkpoint's bytes) for a (220, 220, 1) image."""
    layout = obs_layout(gym.spaces.Box(0, 255, (220, 220, 1), np.uint8))
    cfg = PPOConfig(env_id="x", keep_checkpoints=keep, eval_every=eval_every, eval_episodes=2)
    note = sizing.cnn_size_note(cfg, layout)
    params = sizing._cnn_terms(layout.parts[0])[0]
    return note.split(" parameters, ")[1].split(", and slow steps")[0], 12 * params


@pytest.mark.parametrize("keep, kept", [(3, "--keep-checkpoints 3 plus --eval-every's best.pt"),
                                        (1, "one kept plus --eval-every's best.pt")])
def test_the_size_note_counts_best_pt_as_one_more_checkpoint_under_eval_every(keep, kept):
    words, ckpt = _note_disk(keep, 1000)
    assert words == f"~{human_bytes(ckpt)} a checkpoint ({kept}: ~{human_bytes((keep + 1) * ckpt)})"
    assert human_bytes((keep + 1) * ckpt) != human_bytes(keep * ckpt)


def test_the_size_note_with_every_checkpoint_kept_names_best_pt_too():
    words, ckpt = _note_disk(0, 1000)
    assert words == f"~{human_bytes(ckpt)} a checkpoint (--keep-checkpoints 0 keeps every one plus --eval-every's best.pt)"


@pytest.mark.parametrize("keep, kept", [(3, " (--keep-checkpoints 3: ~{})"), (1, ""),
                                        (0, " (--keep-checkpoints 0 keeps every one)")])
def test_the_size_note_without_eval_every_counts_the_periodic_checkpoints_alone(keep, kept):
    words, ckpt = _note_disk(keep, 0)
    assert words == f"~{human_bytes(ckpt)} a checkpoint" + kept.format(human_bytes(keep * ckpt))


def test_best_pt_is_a_whole_checkpoint_the_size_of_a_periodic_one(tmp_path, capsys):
    # what the note counts it as: trainer._evaluate_now saves the same training state to checkpoints/best.pt
    run = tmp_path / "run"
    flags = [f for f in TINY_RUN if f not in ("--eval-episodes", "0")]
    code, _, err = run_main(["train", "CartPole-v1", *flags, "--eval-episodes", "1", "--eval-every", "64",
                             "--total-timesteps", "128", "--keep-checkpoints", "1", "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    steps = sorted((run / "checkpoints").glob("step_*.pt"))
    best = run / "checkpoints" / "best.pt"
    assert len(steps) == 1 and best.is_file()
    assert abs(best.stat().st_size - steps[0].stat().st_size) < 0.05 * steps[0].stat().st_size


# --- (c) proxima resume RUN/checkpoints of an RLHF run resumes RUN ----------------------------------------------------
@pytest.fixture(scope="module")
def rlhf_run(tmp_path_factory):
    """A finished 1-step RLHF run on a tiny GPT-2, with its checkpoints/step_000001.pt."""
    from rlhf_assets import finished_tiny_rlhf_run

    return finished_tiny_rlhf_run(tmp_path_factory.mktemp("small47_rlhf"))


def _steps(run) -> list:
    return sorted(p.name for p in (run / "checkpoints").glob("step_*.pt"))


def test_resume_of_an_rlhf_runs_checkpoints_folder_extends_the_run(rlhf_run, tmp_path, capsys):
    run = shutil.copytree(rlhf_run, tmp_path / "run")
    code, out, err = run_main(["resume", str(run / "checkpoints"), "--steps", "2", "--quiet"], capsys)
    assert (code, err) == (0, ""), err
    assert _steps(run) == ["step_000001.pt", "step_000002.pt"]
    assert yaml.safe_load((run / "config.yaml").read_text())["steps"] == 2
    assert out.startswith("done: 2 steps in ") and out.rstrip().endswith(f"run directory {run}"), out


def test_resume_of_an_rlhf_runs_checkpoints_folder_as_dot_resumes_the_run(rlhf_run, tmp_path, capsys, monkeypatch):
    run = shutil.copytree(rlhf_run, tmp_path / "run")
    monkeypatch.chdir(run / "checkpoints")
    code, out, err = run_main(["resume", ".", "--steps", "2", "--quiet"], capsys)
    assert (code, err) == (0, ""), err
    assert _steps(run) == ["step_000001.pt", "step_000002.pt"]


def test_resume_of_a_finished_rlhf_runs_checkpoints_folder_is_the_runs_own_answer(rlhf_run, capsys):
    code, out, err = run_main(["resume", str(rlhf_run / "checkpoints")], capsys)
    assert (code, err) == (0, ""), err
    assert f"{rlhf_run}: already at step 1 of 1; nothing to do" in out, out
    assert _steps(rlhf_run) == ["step_000001.pt"]


def test_a_ppo_flag_to_an_rlhf_runs_checkpoints_folder_names_the_run(rlhf_run, capsys):
    code, out, err = run_main(["resume", str(rlhf_run / "checkpoints"), "--lr", "5"], capsys)
    assert code == 2 and out == ""
    assert one_error_line(err, "proxima resume") == (
        f"--lr: {rlhf_run} is an RLHF run, whose settings its config.yaml records: an RLHF run's resume takes only "
        f"--steps N, --trust-run and --quiet (a new run with other settings: proxima rlhf --config "
        f"{rlhf_run / 'config.yaml'} --lr ...)")


# --- (d) a bad value from an RLHF --config file is named by the file and its key -------------------------------------
def _rlhf_config_error(tmp_path, capsys, values: dict, *flags: str) -> str:
    path = tmp_path / "rlhf.yaml"
    # absolute paths that need not exist: the value checks come before any model is read
    base = {"policy": str(tmp_path / "model"), "prompts": str(tmp_path / "prompts.txt"),
            "reward": "proxima.rlhf.demo:keyword_sentiment"}
    path.write_text(yaml.safe_dump({**base, **values}))
    code, out, err = run_main(["rlhf", "--config", str(path), *flags], capsys)
    assert code == 2 and out == "", err
    return one_error_line(err, "proxima rlhf")


def test_a_config_files_micro_batch_size_is_refused_by_its_key_and_file(tmp_path, capsys):
    line = _rlhf_config_error(tmp_path, capsys, {"batch_size": 8, "num_minibatches": 2, "micro_batch_size": 3})
    assert line == (f"{tmp_path / 'rlhf.yaml'}: micro_batch_size 3: must divide the minibatch size "
                    "batch_size / num_minibatches = 4")


def test_a_typed_flag_over_the_file_is_refused_as_the_flag(tmp_path, capsys):
    line = _rlhf_config_error(tmp_path, capsys, {"batch_size": 8, "num_minibatches": 2, "micro_batch_size": 5},
                              "--micro-batch-size", "3")
    assert line == "--micro-batch-size 3: must divide the minibatch size batch_size / num_minibatches = 4"


def test_a_config_files_other_name_for_a_field_is_the_name_refused(tmp_path, capsys):
    line = _rlhf_config_error(tmp_path, capsys, {"learning_rate": -1.0})
    assert line == f"{tmp_path / 'rlhf.yaml'}: learning_rate (lr's other name) -1.0: must be positive"


def test_the_advice_names_the_files_keys_and_the_other_fields_flags(tmp_path, capsys):
    # batch_size from the file, max_new_tokens typed, max_prompt_length the default
    line = _rlhf_config_error(tmp_path, capsys, {"batch_size": 65536}, "--max-new-tokens", "1000")
    assert line == (f"{tmp_path / 'rlhf.yaml'}: batch_size 65536: x (max_prompt_length 128 + max_new_tokens 1000) = "
                    "73,924,608 tokens in one rollout, more than the 67,108,864 a process can hold (ids, log-probs, "
                    f"values and the KV cache of every token); lower batch_size in {tmp_path / 'rlhf.yaml'}, "
                    "--max-prompt-length or --max-new-tokens")
