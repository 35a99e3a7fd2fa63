"""Too few prompts for the processes is refused before any rank joins the process group: refused after,
rank 0 could exit while rank 1 was still connecting, and rank 1 ended with gloo's connectFullMesh
traceback, exit 1 (1 run in 5)."""

import signal

import pytest
import torch.distributed as tdist

from proxima.rlhf import dist as D
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from tests.cli_helpers import error_line

REFUSAL = ("--prompts {}: 1 prompt(s) for 2 processes, each of which draws from its own share (prompts rank, "
           "rank + 2, ...); give at least 2 prompts, or train with fewer processes")


@pytest.fixture
def rank_of_two(monkeypatch, tmp_path):
    """This process as a torchrun rank of 2 whose process group must never be joined; a one-prompt file."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("PROXIMA_DIST_TIMEOUT", "7")

    def join(*args, **kwargs):
        raise AssertionError("joined the process group")

    monkeypatch.setattr(tdist, "init_process_group", join)
    prompts = tmp_path / "one.txt"
    prompts.write_text("the food was\n")
    return prompts


def _command(prompts, tmp_path) -> list:
    return ["--policy", str(tmp_path / "bfm"), "--prompts", str(prompts), "--reward", "proxima.rlhf.demo:keyword_sentiment",
            "--steps", "2", "--batch-size", "4", "--run-dir", str(tmp_path / "w1")]


def test_rank_0_refuses_too_few_prompts_before_joining_the_process_group(rank_of_two, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RANK", "0")
    code = main(_command(rank_of_two, tmp_path))
    line = error_line(code, capsys.readouterr().err)
    assert line == "proxima rlhf: error: " + REFUSAL.format(rank_of_two)
    assert not (tmp_path / "w1").exists()


def test_other_ranks_wait_for_torchrun_to_end_them_then_refuse_alike(rank_of_two, monkeypatch, tmp_path, capsys):
    """Rank 1 reads the same file and waits (torchrun's SIGTERM, after rank 0's exit, ends it by default), so
    the line comes once; a rank whose wait ends (rank 0 went on: its file differs) says it itself."""
    monkeypatch.setenv("RANK", "1")
    slept = []
    monkeypatch.setattr(D.time, "sleep", slept.append)
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        code = main(_command(rank_of_two, tmp_path))
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, old)
    assert slept == [7.0]
    assert error_line(code, capsys.readouterr().err) == "proxima rlhf: error: " + REFUSAL.format(rank_of_two)


def test_enough_prompts_go_on_to_join_the_group(rank_of_two, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    rank_of_two.write_text("the food was\nthe film was\n")
    D.check_prompt_share(str(rank_of_two))  # no refusal, no wait


def test_a_rank_that_another_left_while_joining_says_lost_contact_in_one_line(monkeypatch):
    """The Python API's ranks (no CLI check first): a refusal of rank 0 that ends it while rank 1 connects."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")

    def join(*args, **kwargs):
        raise RuntimeError("Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:553] "
                           "Connection closed by peer [127.0.0.1]:40000\nmore")

    monkeypatch.setattr(tdist, "rendezvous", lambda url, timeout: iter([(tdist.HashStore(), 1, 2)]))  # join_group's
    monkeypatch.setattr(tdist, "init_process_group", join)
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    with pytest.raises(ConfigError) as got:
        D.init_distributed("cpu")
    assert str(got.value) == (
        "rank 1 stopped: lost contact with another rank (it failed or was stopped; its error is above): RuntimeError: "
        "Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:40000 (while joining the process group)")


def test_another_error_while_joining_comes_out_as_it_came(monkeypatch):
    """A failure to join that is no lost peer (a wrong MASTER_ADDR) is not called one."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    wrong = RuntimeError("The server socket has failed to listen on any local network address. "
                         "port: 29500, useIpv6: false, code: -99, name: EADDRNOTAVAIL")

    def join(*args, **kwargs):
        raise wrong

    monkeypatch.setattr(tdist, "rendezvous", lambda url, timeout: iter([(tdist.HashStore(), 1, 2)]))  # join_group's
    monkeypatch.setattr(tdist, "init_process_group", join)
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError) as got:
        D.init_distributed("cpu")
    assert got.value is wrong
