"""Review 31: a complete population resumed with --eval-episodes N rewrote its members' eval.json with
N episodes but left their config.yaml at the trained count; the next plain ``proxima resume POP``
then evaluated every member again with that count and replaced eval.json. A single run records the
typed count in config.yaml and shows the stored evaluation on a later resume; a member now does too."""

from __future__ import annotations

import json

import yaml

from cli_helpers import TINY_POP, run_main

TINY = TINY_POP


def _members(run):
    return sorted(p for p in run.iterdir() if p.name.startswith("m0"))


def _evals(run) -> dict:
    return {d.name: (d / "eval.json").read_bytes() for d in _members(run)}


def _config(d) -> dict:
    return yaml.safe_load((d / "config.yaml").read_text())


def _trained(tmp_path, capsys):
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--eval-episodes", "3",
                             *TINY, "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert all(json.loads(e)["episodes"] == 3 for e in _evals(run).values())
    return run


def test_a_typed_eval_episodes_is_recorded_and_a_plain_resume_shows_that_evaluation(tmp_path, capsys):
    run = _trained(tmp_path, capsys)
    code, out, err = run_main(["resume", str(run), "--eval-episodes", "1"], capsys)
    assert code == 0, err
    assert "eval CartPole-v1: 2 members" in out
    for d in _members(run):
        assert json.loads((d / "eval.json").read_text())["episodes"] == 1
        cfg = _config(d)
        assert (cfg["eval_episodes"], cfg["total_timesteps"], cfg["run_dir"]) == (1, 64, str(d))
    evals = _evals(run)
    configs = {d.name: (d / "config.yaml").read_bytes() for d in _members(run)}

    code, out, err = run_main(["resume", str(run)], capsys)  # plain: the stored evaluation, shown, not recomputed
    assert code == 0, err
    assert _evals(run) == evals
    assert {d.name: (d / "config.yaml").read_bytes() for d in _members(run)} == configs
    means = [json.loads(evals[d.name])["mean_return"] for d in _members(run)]
    assert f"mean of means {sum(means) / 2:.2f}" in out
    doc = json.loads((run / "population.json").read_text())
    assert [m["eval_mean_return"] for m in doc["member_dirs"]] == means


def test_a_complete_populations_resume_with_other_flags_keeps_the_evaluation_and_records_the_checkpoints_values(
        tmp_path, capsys):
    """As a single run's: a resume that trains nothing records the checkpoint's values, whatever flags it
    was given, but for the count of the evaluation on disk; --eval-episodes 0 evaluates nothing and
    leaves that count recorded."""
    run = _trained(tmp_path, capsys)
    assert run_main(["resume", str(run), "--eval-episodes", "1", "--quiet"], capsys)[0] == 0
    evals = _evals(run)
    for flags in (["--keep-checkpoints", "7"], ["--eval-episodes", "0"]):
        code, _, err = run_main(["resume", str(run), *flags, "--quiet"], capsys)
        assert code == 0, err
        assert _evals(run) == evals, flags
        for d in _members(run):
            cfg = _config(d)
            assert (cfg["eval_episodes"], cfg["keep_checkpoints"]) == (1, 3), (flags, cfg)


def test_members_whose_evaluations_disagree_are_evaluated_again_with_the_checkpoints_count(tmp_path, capsys):
    run = _trained(tmp_path, capsys)
    first = _members(run)[0]
    kept = (first / "eval.json").read_bytes()
    assert run_main(["resume", str(run), "--eval-episodes", "1", "--quiet"], capsys)[0] == 0
    (first / "eval.json").write_bytes(kept)  # 3 episodes for one member, 1 for the other: no count to show
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    for d in _members(run):
        assert json.loads((d / "eval.json").read_text())["episodes"] == 3
        assert _config(d)["eval_episodes"] == 3


def _stamps(run) -> dict:
    """Each member's config.yaml and population.json: bytes, mtime and inode (write_atomic renames a new file in)."""
    files = [d / "config.yaml" for d in _members(run)] + [run / "population.json"]
    return {str(p.relative_to(run)): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in files}


def test_a_plain_resume_of_a_complete_population_writes_nothing_from_whatever_directory(tmp_path, capsys, monkeypatch):
    """As a single run's (train_state._resumed_config): a resume that trains nothing keeps each member's
    recorded run_dir (here relative to where it was trained) rather than the path as this command names
    it, and rewrites no file whose content it would not change."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--eval-episodes", "1",
                             *TINY, "--run-dir", "pop", "--quiet"], capsys)
    assert code == 0, err
    run = tmp_path / "pop"
    before = _stamps(run)
    assert [_config(d)["run_dir"] for d in _members(run)] == [f"pop/{d.name}" for d in _members(run)]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd, name in ((run, "."), (elsewhere, "../pop"), (elsewhere, str(run))):
        monkeypatch.chdir(cwd)
        code, out, err = run_main(["resume", name], capsys)
        assert code == 0, (name, err)
        assert "eval CartPole-v1: 2 members" in out, name
        assert _stamps(run) == before, name

    monkeypatch.chdir(elsewhere)  # a typed count is still recorded; the run_dir on file stays
    code, _, err = run_main(["resume", "../pop", "--eval-episodes", "2", "--quiet"], capsys)
    assert code == 0, err
    for d in _members(run):
        assert (json.loads((d / "eval.json").read_text())["episodes"], _config(d)["eval_episodes"]) == (2, 2)
        assert _config(d)["run_dir"] == f"pop/{d.name}"
