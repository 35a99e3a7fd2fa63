"""train(callback=...) under torchrun: rank 0 alone calls the callback (one log line per iteration, not
one per rank), and its answer to stop reaches rank 1, so both leave the loop at the same iteration
(a rank stopping alone would wait forever in the next collective). Rank 1 may pass none (the usual
``callback=cb if rank == 0 else None``); one given on rank 1 alone is refused on both ranks."""

from __future__ import annotations

import json
import textwrap

import pytest
from distributed_helpers import two_ranks

#: both scripts' callback (it stops after iteration 2), config and rank; after their imports
RANK_SETUP = textwrap.dedent('''
    seen = []

    def until_second(row):
        seen.append(row["iteration"])
        return row["iteration"] < 2

    cfg = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
                    threads=1, progress=False, eval_episodes=0, total_timesteps=128 * 5)
    rank = distributed.context().rank
''')

SCRIPT = textwrap.dedent('''
    import json
    import sys

    from proxima import PPOConfig, distributed, train

    {RANK_SETUP}
    _, policy = train(cfg, run_dir=f"{sys.argv[1]}/run", quiet=True, callback=until_second)
    with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
        json.dump({"seen": seen, "step": policy.global_step}, f)
''').replace("{RANK_SETUP}", RANK_SETUP)


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_rank_0_calls_the_callback_and_every_rank_stops_where_it_asked(tmp_path):
    out = two_ranks(SCRIPT, tmp_path)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["seen"] == [1, 2] and ranks[1]["seen"] == []
    assert ranks[0]["step"] == ranks[1]["step"] == 256  # 2 iterations of 2 ranks x 4 envs x 16 steps
    assert [p.name for p in sorted((out / "run" / "checkpoints").glob("step_*.pt"))] == ["step_000000000256.pt"]


ONLY_ONE_RANK = textwrap.dedent('''
    import json
    import os
    import sys

    os.environ["PROXIMA_DIST_TIMEOUT"] = "60"  # a rank left waiting fails the test in a minute, not five

    from proxima import PPOConfig, distributed, train
    from proxima.config import ConfigError

    {RANK_SETUP}
    try:  # on rank 1 alone it would never be called: every rank refuses it, none waits for the others
        train(cfg, run_dir=f"{sys.argv[1]}/on1", quiet=True, callback=until_second if rank == 1 else None)
        refused = None
    except ConfigError as e:
        refused = str(e)
    # how a script logs from rank 0 alone: rank 1 passes None, yet follows rank 0's answer
    _, policy = train(cfg, run_dir=f"{sys.argv[1]}/on0", quiet=True, callback=until_second if rank == 0 else None)
    with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
        json.dump({"refused": refused, "seen": seen, "step": policy.global_step}, f)
''').replace("{RANK_SETUP}", RANK_SETUP)


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_a_callback_on_rank_0_alone_stops_every_rank_where_it_asked_and_one_on_rank_1_alone_is_refused(tmp_path):
    out = two_ranks(ONLY_ONE_RANK, tmp_path)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["refused"] == ranks[1]["refused"] == (
        "train(callback=...): given on another rank but not on rank 0, whose callback alone is called under torchrun; "
        "pass it on rank 0 (or on every rank)")
    assert not list((out / "on1").glob("checkpoints/*.pt"))
    assert ranks[0]["seen"] == [1, 2] and ranks[1]["seen"] == []
    assert ranks[0]["step"] == ranks[1]["step"] == 256
    assert [p.name for p in sorted((out / "on0" / "checkpoints").glob("step_*.pt"))] == ["step_000000000256.pt"]
