"""train(callback=...) under torchrun when rank 0's callback raises: every rank writes the iteration's
checkpoint together (a collective save) before stopping, rank 0 raises the callback's own exception and
the others a CallbackFailed naming it, so no rank is left waiting in a collective and the run resumes
from that iteration."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.distributed_helpers import two_ranks

SCRIPT = textwrap.dedent('''
    import json
    import sys

    from proxima import PPOConfig, distributed, train

    class Down(Exception):
        pass

    def fails_at_the_second(row, trainer):
        if row["iteration"] == 2:
            raise Down("wandb is down")

    cfg = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
                    threads=1, progress=False, eval_episodes=0, total_timesteps=128 * 5, checkpoint_every=50)
    rank = distributed.context().rank
    try:
        train(cfg, run_dir=f"{sys.argv[1]}/run", quiet=True, callback=fails_at_the_second)
        raised = None
    except Exception as e:
        raised = [type(e).__name__, str(e)]
    with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
        json.dump({"raised": raised}, f)
''')


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_rank_0s_callback_error_checkpoints_on_every_rank_and_stops_them_all(tmp_path):
    out = two_ranks(SCRIPT, tmp_path)
    ranks = [json.loads((out / f"rank{r}.json").read_text())["raised"] for r in (0, 1)]
    assert ranks[0] == ["Down", "wandb is down"]
    assert ranks[1][0] == "CallbackFailed"
    assert ranks[1][1].startswith("rank 0's train() callback raised at global step 256; last good checkpoint: ")
    assert [p.name for p in sorted((out / "run" / "checkpoints").glob("step_*.pt"))] == ["step_000000000256.pt"]
