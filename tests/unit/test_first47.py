"""Review 47's first-run lines: the preset start line names the command that prints the preset's fields
(`proxima presets ENV NAME`, the game's id for an Atari template) and the total it trains in whole batches
(WORLD_SIZE processes' batches under torchrun); --threads above the CPUs with no batch paired says what runs
(the paired side thread unused, N intra-op threads) and advises dropping --threads or pairing, not fewer threads."""

from __future__ import annotations

from proxima import cpuinfo, trainer
from proxima.config import PPOConfig
from proxima.presets import resolve
from tests.cli_helpers import run_main

FAST_LINE = ("proxima: preset CartPole-v1/fast: backend native, num_envs 96, num_steps 16, total_timesteps 550,000 "
             "(549,888: whole batches), stop_return 500 and 5 more (proxima presets CartPole-v1 fast lists them; "
             "--preset none for PPOConfig's defaults)")


def _preset_lines(err: str) -> list:
    return [line for line in err.splitlines() if line.startswith("proxima: preset ")]


# -- the preset start line ---------------------------------------------------------------------------------------------

def test_the_preset_line_names_the_preset_and_the_total_in_whole_batches(capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, _, err = run_main(["train", "CartPole-v1", "--preset", "fast", "--dry-run"], capsys)
    assert code == 0, err
    assert _preset_lines(err) == [FAST_LINE]


def test_the_command_the_preset_line_names_prints_the_fields(capsys):
    code, out, err = run_main(["presets", "CartPole-v1", "fast"], capsys)
    assert code == 0, err
    assert "total_timesteps: 550000" in out.splitlines() and "num_envs: 96" in out.splitlines()


def test_an_atari_game_is_named_in_the_command_which_prints_its_template(capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    trainer._note_preset(resolve("ALE/Boxing-v5"))
    assert capsys.readouterr().err.splitlines() == [
        "proxima: preset ALE/Boxing-v5 (the Atari preset <Game>-v5/default): num_envs 8, total_timesteps 10,000,000 "
        "(9,999,360: whole batches), clip_coef 0.1, encoder cnn (proxima presets ALE/Boxing-v5 default lists them; "
        "--preset none for PPOConfig's defaults)"]
    code, out, err = run_main(["presets", "ALE/Boxing-v5", "default"], capsys)
    assert code == 0, err
    assert "encoder: cnn" in out.splitlines()


def test_under_torchrun_the_whole_batches_are_every_processs(capsys, monkeypatch):
    # 3 processes x 96 envs x 16 steps: 4,608-step iterations, 119 of them in 550,000
    monkeypatch.setenv("WORLD_SIZE", "3")
    trainer._note_preset(resolve("CartPole-v1", "fast"))
    assert "total_timesteps 550,000 (548,352: whole batches), " in capsys.readouterr().err


def test_a_total_of_whole_batches_has_no_tail(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert trainer._whole_batches(PPOConfig(num_envs=96, num_steps=16, total_timesteps=96 * 16 * 10)) == ""
    assert trainer._whole_batches(PPOConfig(num_envs=96, num_steps=16, total_timesteps=550_000)) == " (549,888: whole batches)"


# -- --threads above the CPUs, unpaired --------------------------------------------------------------------------------

def test_unpaired_threads_above_the_cpus_say_what_runs_and_advise_dropping_or_pairing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "64",
                             "--threads", "4", "--eval-episodes", "0", "--no-plot", "--no-progress",
                             "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "--threads 4" in line]
    assert notes == [
        "proxima: note: --threads 4 is more than this machine's 2 CPUs and no batch here pairs: drop --threads, or train "
        "with more envs to pair them",
        "proxima: note: --threads 4: no batch reaches 2,048 rows, so the paired side thread is not used (2 intra-op "
        "threads); train with more envs (num_envs >= 2,048 or num_envs x num_steps / num_minibatches >= 2,048) to pair "
        "them"], err


def test_threads_above_the_cpus_that_pair_keep_the_fewer_threads_advice(monkeypatch):
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)
    assert trainer.threads_note(4) == ("--threads 4 is more than this machine's 2 CPUs: the threads take turns on them, "
                                       "which is usually slower than --threads 2")
    assert trainer.threads_note(4, python=True, unpaired=True) == (
        "PPOConfig.threads=4 is more than this machine's 2 CPUs and no batch here pairs: drop threads, or train with "
        "more envs to pair them")


def test_the_unpaired_note_counts_one_intra_op_thread_at_threads_2():
    assert trainer.unpaired_threads_note(PPOConfig(threads=2, num_envs=4), python=True).startswith(
        "PPOConfig.threads=2: no batch reaches 2,048 rows, so the paired side thread is not used (1 intra-op thread); "
        "drop threads, or ")
