"""Review 34, finding 2: a run of a colour frame stack (N, H, W, C) uint8 trained before e2898ee read the stack as a
vector: its MLP took the N*H*W*C values flattened and unscaled, and its checkpoint records a flat float32 Box of that
size (with the stack's shape as declared_shape). eval and resume of it blamed the user's env ("env ... now observes
(4, 36, 36, 3), the run was trained on (15552,)"), which had not changed: they now say that the run predates frame
stacks as images, and to retrain or use the Proxima that trained it (its git commit, from meta.json). load() rebuilds
that very MLP and acts on the raw values as the old code did, so it keeps working.

The old checkpoint is made with this code the way the old code wrote it: a tiny --encoder mlp run of the stack, its
recorded observation space turned into the flat float32 Box and its stack record (nets.FlatInput's frame_stack
buffer, which the old agent had no module for) dropped; its keys, shapes and dtypes are those of a checkpoint written
at 281a38a (checked by hand against one, with the same line from eval and resume)."""

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.cli_helpers import TINY_RUN, edit_checkpoint, error_line, module_written_in, run_main, snapshot
from tests.integration import test_review34_framestack as framestack

ENVS = framestack.ENVS  # its Frames at their defaults: (36, 36, 3) uint8 quadrant frames, stacked 4 deep
STACK = "rev34old_envs:stack"
SHAPE = (4, 36, 36, 3)
SIZE = 4 * 36 * 36 * 3
OLD_COMMIT = "281a38a215dd47e5a7386edcfd77ce9332b3e7cb"  # the last commit that read a colour stack as a vector


@pytest.fixture(autouse=True)
def envs_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "rev34old_envs", ENVS)


def as_written_before_stacks_were_images(state):
    """The checkpoint as 281a38a wrote it for this env: a flat float32 Box of the stack's values (bounds
    0..255, the stack's own shape as declared_shape), an MLP with no encoder record, next_obs flat float32."""
    state["spaces"]["observation"] = {"type": "Box", "shape": [SIZE], "low": torch.zeros(SIZE, dtype=torch.float64),
                                      "high": torch.full((SIZE,), 255.0, dtype=torch.float64), "dtype": "float32",
                                      "declared_shape": list(SHAPE)}
    state["agent"] = {k: v for k, v in state["agent"].items() if not k.startswith("encoder.")}
    state["next_obs"] = state["next_obs"].reshape(state["next_obs"].shape[0], -1).float()


@pytest.fixture
def old_run(capsys):
    code, _, err = run_main(["train", STACK, *TINY_RUN, "--encoder", "mlp", "--total-timesteps", "64",
                             "--run-dir", "old", "--quiet"], capsys)
    assert code == 0, err
    edit_checkpoint("old", as_written_before_stacks_were_images)
    meta = json.loads(open("old/meta.json").read())
    meta.update(git_commit=OLD_COMMIT, git_dirty=False)
    with open("old/meta.json", "w") as f:
        json.dump(meta, f)
    return "old"


def test_eval_and_resume_of_a_run_from_before_stacks_were_images_say_so_not_that_the_env_changed(capsys, old_run):
    code, _, err = run_main(["eval", old_run, "--trust-run", "--episodes", "1"], capsys)
    line = error_line(code, err, "old/checkpoints/step_", ": trained before Proxima read a uint8 frame stack as an image",
                      f"the {SHAPE} stack of env '{STACK}' as {SIZE} values flattened and unscaled",
                      "retrain it with this version, or evaluate it with the Proxima that trained it (git commit 281a38a)")
    assert "has Box(" not in line and "trained on observations" not in line, line

    before = snapshot(old_run)
    code, _, err = run_main(["resume", old_run, "--total-timesteps", "128", "--trust-run"], capsys)
    line = error_line(code, err, ": trained before Proxima read a uint8 frame stack as an image",
                      "retrain it with this version, or resume it with the Proxima that trained it (git commit 281a38a)")
    assert "now observes" not in line and "with the env it was trained on" not in line, line
    assert snapshot(old_run) == before  # refused before anything of the run was rewritten


def test_load_of_such_a_run_acts_as_its_mlp_did_on_the_raw_values(old_run):
    import proxima

    policy = proxima.load(old_run, trust_env=True)
    weights = torch.load(sorted(Path(old_run, "checkpoints").glob("step_*.pt"))[-1], weights_only=True)["agent"]
    obs = np.random.default_rng(0).integers(0, 256, (32, *SHAPE), dtype=np.uint8)
    # the old agent: tanh MLP on the stack's values as float32, 0..255, never divided by 255
    x = torch.as_tensor(obs).reshape(32, -1).float()
    for i in (0, 2):
        x = torch.tanh(x @ weights[f"actor.{i}.weight"].T + weights[f"actor.{i}.bias"])
    logits = x @ weights["actor.4.weight"].T + weights["actor.4.bias"]
    # raw 0..255 values saturate the tanh layers, so equal actions alone could hide scaled inputs: compare the
    # first layer's inputs too
    seen = []
    policy.agent.actor[0].register_forward_hook(lambda m, i, o: seen.append(i[0]))
    assert np.array_equal(np.asarray(policy.act(obs)), logits.argmax(-1).numpy())
    assert torch.equal(seen[0], torch.as_tensor(obs).reshape(32, -1).float())


def _flat(size=SIZE, declared=SHAPE):
    from proxima.checkpoint import space_from_dict

    d = {"type": "Box", "shape": [size], "low": torch.zeros(size, dtype=torch.float64),
         "high": torch.full((size,), 255.0, dtype=torch.float64), "dtype": "float32"}
    if declared is not None:
        d["declared_shape"] = list(declared)
    return space_from_dict(d)


@pytest.mark.parametrize("recorded, env, ours", [
    (lambda: _flat(), gym.spaces.Box(0, 255, SHAPE, np.uint8), True),
    (lambda: _flat(declared=None), gym.spaces.Box(0, 255, SHAPE, np.uint8), True),  # a file without declared_shape
    (lambda: _flat(4 * 36 * 36, None), gym.spaces.Box(0, 255, SHAPE, np.uint8), False),  # another size: the env changed
    (lambda: _flat(declared=(4, 3, 36, 36)), gym.spaces.Box(0, 255, SHAPE, np.uint8), False),  # another stack's layout
    (lambda: _flat(), gym.spaces.Box(0, 255, SHAPE, np.float32), False),  # a float stack: not read as an image
    (lambda: _flat(36 * 36 * 3, (36, 36, 3)), gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), False),  # one image
])
def test_only_a_flat_float_record_of_this_very_stack_gets_the_line(recorded, env, ours):
    from proxima.checkpoint import env_spaces_mismatch, space_to_dict

    spaces = {"observation": space_to_dict(recorded()), "action": space_to_dict(gym.spaces.Discrete(4))}
    line = env_spaces_mismatch("x.pt", STACK, spaces, env, gym.spaces.Discrete(4))
    assert line is not None
    assert ("read a uint8 frame stack as an image" in line) is ours, line
    assert ("now observes" in line) is not ours, line
    assert ours or "the Proxima version that trained it" not in line
    if ours:  # a loose file has no meta.json to name the commit by
        assert line.endswith("resume it with the Proxima version that trained it"), line
