"""run_demo as one rank of two, in one process (the collectives faked): rank 0 alone claims the run directory and
builds the demo's files, and the others train on the directory rank 0 claimed. Under torchrun every rank once
claimed a directory of its own (RUN-2 for rank 1) and pretrained and wrote a model into it."""

import dataclasses
from pathlib import Path

import pytest
import torch

from proxima.rlhf import api, demo, dist as D, rundir
from proxima.rlhf.demo import demo_config, run_demo

NAME = "rlhf-demo__1__20260101-000000"


@pytest.fixture
def two_ranks(tmp_path, monkeypatch, request):
    """run_demo(rank) -> (the config train_rlhf got, the folders build_assets was given, what rank 0 broadcast);
    ``two_ranks.events``: the order this rank checked the directory, met the others, claimed it and built the files."""
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()  # run_demo sets the run's, which the stubbed train_rlhf does not put back
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    monkeypatch.setattr(rundir, "default_run_dir", lambda seed, prefix="rlhf": Path("runs") / NAME)
    built, sent, trained, events = [], [], [], []
    monkeypatch.setattr(demo, "build_assets", lambda folder, steps, seed: events.append("build") or built.append(folder))
    monkeypatch.setattr(api, "train_rlhf", lambda cfg: trained.append(cfg) or Path(cfg.run_dir))
    monkeypatch.setattr(D, "gather_objects", lambda obj, d: events.append("gather") or [obj] * d.world_size)
    check, claim = rundir.check_new_run_dir, rundir.claim_run_dir
    monkeypatch.setattr(rundir, "check_new_run_dir", lambda *a, **k: events.append("check") or check(*a, **k))
    monkeypatch.setattr(rundir, "claim_run_dir", lambda *a, **k: events.append("claim") or claim(*a, **k))

    def run(rank: int, rank0_sends: list = ()):
        answers = list(rank0_sends)

        def broadcast(obj, d):  # rank 0 sends its own; another rank gets rank 0's, in order
            if d.is_main:
                sent.append(obj)
                return obj
            return answers.pop(0)

        monkeypatch.setattr(D, "init_distributed", lambda device_type: D.Dist(rank, 2, rank))
        monkeypatch.setattr(D, "broadcast_object", broadcast)
        run_demo(dataclasses.replace(demo_config(), steps=2), pretrain_steps=1)
        return trained[-1], built, sent

    run.events = events
    return run


def test_rank_0_claims_the_next_free_name_builds_once_and_sends_the_name_it_claimed(two_ranks, tmp_path):
    (tmp_path / "runs" / NAME).mkdir(parents=True)  # a demo started in the same second: this one gets NAME-2
    cfg, built, sent = two_ranks(0)
    claimed = Path("runs") / f"{NAME}-2"
    assert built == [claimed / "demo"]
    assert sent[-1] == str(claimed)  # the name claimed, not the one tried first: the other ranks train there
    assert cfg.run_dir == str(claimed) and cfg.policy == str(claimed / "demo" / "model")


def test_another_rank_builds_nothing_and_trains_on_the_directory_rank_0_sends(two_ranks, tmp_path):
    rank0 = f"runs/{NAME}-2"
    cfg, built, _ = two_ranks(1, rank0_sends=[f"runs/{NAME}", rank0])
    assert built == []  # no pretraining, no "demo:" lines, no model written by this rank
    assert not (tmp_path / "runs").exists()  # nor any directory claimed
    assert cfg.run_dir == rank0 and cfg.policy == f"{rank0}/demo/model" and cfg.prompts == f"{rank0}/demo/prompts.txt"


@pytest.mark.parametrize("rank, events", [(0, ["check", "gather", "claim", "build"]), (1, ["check", "gather"])])
def test_every_rank_checks_the_directory_before_rank_0_writes_in_it(two_ranks, rank, events):
    """The gather is the barrier: past it, rank 0 claims and writes; a rank still checking would find rank 0's
    demo/ there and refuse a directory that was free."""
    two_ranks(rank, rank0_sends=[f"runs/{NAME}", f"runs/{NAME}"])
    assert two_ranks.events == events
