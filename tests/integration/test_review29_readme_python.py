"""README's ```python blocks run as written (the training total shrunk), one after the other in one
namespace as a reader pastes them, and do what the text around them says: train() returns the
policy that acts as load(run_dir) does, act() takes the env's tensors and numpy arrays, the module
methods of an nn.Module are refused on it, a total that is not whole iterations is noted, and
evaluate() of the run's episodes gives the run's eval.json, bit for bit."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import warm_python

README = Path(__file__).resolve().parents[2] / "README.md"
PYTHON_API = README.parent / "docs" / "python_api.md"  # the README's Python API, moved there

#: a user's env, named as README's second block names it (mymodule:MyEnv)
MYMODULE = textwrap.dedent("""
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces


    class MyEnv(gym.Env):
        observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

        def step(self, action):
            self.t += 1
            obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
            return obs, float(action == 1), False, self.t >= 20, {}
""")

SCRIPT = textwrap.dedent("""
    import io, json, sys, contextlib
    import numpy as np
    import torch

    blocks = json.loads(sys.argv[1])
    ns = {}
    exec(blocks[0], ns)  # train, load, make_env, act, step
    trained, policy, env, obs, actions = ns["trained"], ns["policy"], ns["env"], ns["obs"], ns["actions"]
    checks = {
        "actions_type": type(actions).__name__, "actions_shape": list(actions.shape),
        "step_len": len(ns["env"].step(actions)),
        "same_as_loaded": bool(torch.equal(trained.act(obs), policy.act(obs))),
        "numpy_out": type(policy.act(obs.numpy())).__name__,
        "numpy_same": bool(np.array_equal(policy.act(obs.numpy()), policy.act(obs).numpy())),  # obs: the block's next one
        "eval_is_policy": trained.eval() is trained,
    }
    try:
        trained.to("cpu")
    except AttributeError as e:
        checks["to_refused"] = str(e)
    # the second block's run: a user's module env trained with --eval-episodes 10, as that block evaluates
    from proxima import PPOConfig, train
    train(PPOConfig(env_id="mymodule:MyEnv", total_timesteps=512, eval_episodes=10, progress=False, run_dir="runs/mine"),
          quiet=True)
    exec(blocks[1], ns)
    result = ns["result"]
    checks["result"] = result
    checks["eval_json"] = json.load(open("runs/mine/eval.json"))
    from proxima.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks["cli_code"] = main(["eval", "runs/mine", "--env", "mymodule:MyEnv", "--episodes", "10", "--json"])
    checks["cli_json"] = json.loads(out.getvalue())
    from proxima import UntrustedEnvError
    from proxima.evaluate import evaluate
    try:
        evaluate(ns["load"]("runs/mine"), episodes=1)
    except UntrustedEnvError as e:
        checks["untrusted"] = str(e)
    print("CHECKS " + json.dumps(checks))
""")


def _python_blocks() -> list:
    """README's blocks (the First hour's play.py), then docs/python_api.md's."""
    return [block for page in (README, PYTHON_API) for block in re.findall(r"^```python\n(.*?)^```", page.read_text(),
                                                                         flags=re.S | re.M)]


def test_readme_python_blocks_run_and_do_what_the_readme_says(tmp_path):
    found = _python_blocks()
    # the fourth, python_api.md's "Exporting the policy", runs in tests/unit/test_deploy47.py
    assert len(found) == 4, "README's or docs/python_api.md's ```python blocks changed: extend this test to the new ones"
    # the Python API's two blocks (the First hour's play.py is test_readme42's)
    blocks = [b for b in found if "make_env" in b or "evaluate(policy" in b]
    assert len(blocks) == 2
    first = blocks[0]
    assert "total_timesteps=102_400" in first
    blocks[0] = first.replace("total_timesteps=102_400", "total_timesteps=1_000")  # a second's run, not minutes
    assert 'load("runs/mine", env_id="mymodule:MyEnv")' in blocks[1]
    (tmp_path / "mymodule.py").write_text(MYMODULE)
    (tmp_path / "readme.py").write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    out = warm_python.run([sys.executable, "readme.py", json.dumps(blocks)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("CHECKS ")]
    assert len(lines) == 1, out.stdout
    checks = json.loads(lines[0][len("CHECKS "):])

    # "actions = policy.act(obs)  # (8,) tensor; numpy in -> numpy out"
    assert (checks["actions_type"], checks["actions_shape"], checks["step_len"]) == ("Tensor", [8], 5)
    assert checks["numpy_out"] == "ndarray" and checks["numpy_same"]
    # "train returns ... the trained policy, which acts as load(run_dir) does on the same observations"
    assert checks["same_as_loaded"]
    # "... are an AttributeError saying to call them on trained.agent ...; trained.eval() returns the policy itself"
    assert checks["eval_is_policy"]
    assert "call policy.agent.to() for the bare network" in checks["to_refused"]
    assert "load(run_dir, device=...)" in checks["to_refused"]
    # "a --total-timesteps that is not a whole number of iterations ... set in a Python PPOConfig ... gets a note"
    assert ("proxima: note: PPOConfig.total_timesteps = 1,000 is not a multiple of the batch (512 steps = num_envs x "
            "num_steps): training 512 steps (1 iteration)") in out.stderr
    # "result = evaluate(policy)  # the run's --eval-episodes (episodes=N to choose): what `proxima eval` prints with --json"
    result, cli = checks["result"], checks["cli_json"]
    assert cli.pop("global_step") == 512 and cli.pop("checkpoint").endswith("step_000000000512.pt")
    assert checks["cli_code"] == 0 and set(result) == set(cli) and result == cli
    # "with the run's --eval-episodes, device and backend its numbers are the run's eval.json's, bit for bit"
    saved = checks["eval_json"]
    assert saved["episodes"] == result["episodes"] == 10
    assert saved["returns"] == result["returns"] and saved["mean_return"] == result["mean_return"]
    # "otherwise raises UntrustedEnvError naming those arguments"
    assert "env_id=" in checks["untrusted"] and "trust_env=True" in checks["untrusted"]
