"""distributed.join_group (PPO's init and RLHF's rlhf.dist.init): the process group's keys live under
this torchrun attempt's own prefix of the store, so a --max-restarts attempt never reads the dead
attempt's addresses (it hung), and the start-up waits at least JOIN_MIN_TIMEOUT, the collectives as asked."""
import datetime

import pytest
import torch.distributed as dist

from proxima import distributed


@pytest.mark.parametrize("attempt, timeout", [(None, datetime.timedelta(seconds=7)), ("2", None)])
def test_join_group_prefixes_the_attempts_keys_and_sets_the_store_timeout(attempt, timeout, monkeypatch):
    base = dist.HashStore()
    joined = {}
    if attempt is None:
        monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    else:
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", attempt)
    monkeypatch.setattr(dist, "rendezvous", lambda url, timeout: iter([(base, 1, 2)]))
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: joined.update(kw))
    monkeypatch.setattr(dist.distributed_c10d, "_set_pg_timeout", lambda t: joined.update(collectives=t))
    distributed.join_group("gloo", timeout)
    assert (joined["backend"], joined["rank"], joined["world_size"]) == ("gloo", 1, 2)
    # the start-up waits at least JOIN_MIN_TIMEOUT (60 s); the collectives then get the timeout asked for
    start = None if timeout is None else datetime.timedelta(seconds=distributed.JOIN_MIN_TIMEOUT)
    assert joined.get("timeout") == start  # None: torch's default, not passed
    assert joined.get("collectives") == timeout
    joined["store"].set("addr", "x")  # written through the prefix: the base store holds it under the attempt's name
    assert base.get(f"proxima/attempt_{attempt or '0'}/addr") == b"x"
    assert base.timeout == (start or dist.distributed_c10d.default_pg_timeout)


def test_rlhf_joins_through_join_group(monkeypatch):
    """rlhf.dist.init_distributed joins as PPO does: each --max-restarts attempt under its own keys."""
    from proxima.rlhf import dist as rlhf_dist

    joined = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(distributed, "join_group", lambda backend, timeout=None, cuda=False: joined.append((backend, cuda)))
    monkeypatch.setattr(rlhf_dist, "_JOINED", 0)
    monkeypatch.setattr(rlhf_dist, "_STORE", None)
    d = rlhf_dist.init_distributed("cpu")
    assert joined == [("gloo", False)] and (d.rank, d.world_size) == (1, 2)  # a CPU run: no NCCL check (4980319)
