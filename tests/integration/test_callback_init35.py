"""train(callback=...) under torchrun when rank 0's callback raises: every rank writes the iteration's
checkpoint together (a collective save) before stopping, rank 0 raises the callback's own exception and
the others a CallbackFailed naming it, so no rank is left waiting in a collective and the run resumes
from that iteration. A sys.exit() in the callback too, with the callback given on rank 0 alone."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.distributed_helpers import two_ranks

SCRIPT = textwrap.dedent('''
    import json
    import os
    import sys
    import time

    os.environ["PROXIMA_DIST_TIMEOUT"] = "60"  # a rank left waiting fails the test in a minute, not five

    from proxima import PPOConfig, distributed, train

    class Down(Exception):
        pass

    def fails_at_the_second(row, trainer):
        if row["iteration"] == 2:
            raise Down("wandb is down")

    def exits_at_the_second(row):
        if row["iteration"] == 2:
            sys.exit(3)

    cfg = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
                    threads=1, progress=False, eval_episodes=0, total_timesteps=128 * 5, checkpoint_every=50)
    rank = distributed.context().rank
    try:
        train(cfg, run_dir=f"{sys.argv[1]}/run", quiet=True, callback=fails_at_the_second)
        raised = None
    except Exception as e:
        raised = [type(e).__name__, str(e)]
    started = time.monotonic()
    try:
        train(cfg, run_dir=f"{sys.argv[1]}/exit", quiet=True, callback=exits_at_the_second if rank == 0 else None)
        exited = None
    except BaseException as e:  # SystemExit on rank 0: caught, so that the rank records it and ends 0
        exited = [type(e).__name__, str(e)]
    with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
        json.dump({"raised": raised, "exited": exited, "seconds": time.monotonic() - started}, f)
''')


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = two_ranks(SCRIPT, tmp_path_factory.mktemp("callback_ranks"))
    return out, [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_rank_0s_callback_error_checkpoints_on_every_rank_and_stops_them_all(ranks):
    out, ranks = ranks
    raised = [r["raised"] for r in ranks]
    assert raised[0] == ["Down", "wandb is down"]
    assert raised[1][0] == "CallbackFailed"
    assert raised[1][1].startswith("rank 0's train() callback raised at global step 256; last good checkpoint: ")
    assert [p.name for p in sorted((out / "run" / "checkpoints").glob("step_*.pt"))] == ["step_000000000256.pt"]


@pytest.mark.slow
def test_sys_exit_in_rank_0s_callback_checkpoints_and_ends_every_rank_without_waiting_out_the_timeout(ranks):
    out, ranks = ranks
    assert ranks[0]["exited"] == ["SystemExit", "3"]
    assert ranks[1]["exited"][0] == "CallbackFailed"
    assert ranks[1]["exited"][1].startswith("rank 0's train() callback raised at global step 256")
    assert max(r["seconds"] for r in ranks) < 60  # PROXIMA_DIST_TIMEOUT: no rank was left waiting in a collective
    assert [p.name for p in sorted((out / "exit" / "checkpoints").glob("step_*.pt"))] == ["step_000000000256.pt"]
