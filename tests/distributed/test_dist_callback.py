"""train(callback=...) under torchrun: rank 0 alone calls the callback (one log line per iteration, not
one per rank), and its answer to stop reaches rank 1, so both leave the loop at the same iteration
(a rank stopping alone would wait forever in the next collective)."""

from __future__ import annotations

import json
import textwrap

import pytest
from distributed_helpers import two_ranks

SCRIPT = textwrap.dedent('''
    import json
    import sys

    from proxima import PPOConfig, distributed, train

    seen = []

    def until_second(row):
        seen.append(row["iteration"])
        return row["iteration"] < 2

    cfg = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
                    threads=1, progress=False, eval_episodes=0, total_timesteps=128 * 5)
    rank = distributed.context().rank
    _, policy = train(cfg, run_dir=f"{sys.argv[1]}/run", quiet=True, callback=until_second)
    with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
        json.dump({"seen": seen, "step": policy.global_step}, f)
''')


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_rank_0_calls_the_callback_and_every_rank_stops_where_it_asked(tmp_path):
    out = two_ranks(SCRIPT, tmp_path)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["seen"] == [1, 2] and ranks[1]["seen"] == []
    assert ranks[0]["step"] == ranks[1]["step"] == 256  # 2 iterations of 2 ranks x 4 envs x 16 steps
    assert [p.name for p in sorted((out / "run" / "checkpoints").glob("step_*.pt"))] == ["step_000000000256.pt"]
