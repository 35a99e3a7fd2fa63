"""The Gymnasium adapter at its edges: an async worker that dies mid-step, a contract break in one
env mid-run that check-env's own env never shows, values beyond float32's range, the check-env
command and render mode a run passes on, torch tensors for observations, an env that zeroes its
returned obs buffer on reset, and torch-native ids asked of the adapter (envs:
tests/fixtures/adapter_edge_envs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli_helpers import isolated, run_main, without_spaces_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NO_CKPT = "no checkpoint was written yet (--checkpoint-every N writes one every N iterations)"
# env 1 (seeded 8 under --seed 7) breaks at its env step 5: vector step 5, global step 15
SMALL = ["--seed", "7", "--num-envs", "3", "--num-steps", "8", "--num-minibatches", "2", "--total-timesteps", "48",
         "--eval-episodes", "0", "--run-dir", "D", "--no-progress"]


@pytest.fixture(autouse=True)
def fixtures_on_path(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.chdir(tmp_path)


def train_line(capsys, kwargs: dict) -> str:
    """The one error line of `proxima train adapter_edge_envs:Faulty --env-kwargs KWARGS` (exit 2)."""
    code, _, err = run_main(["train", "adapter_edge_envs:Faulty", *SMALL, "--env-kwargs", json.dumps(kwargs)], capsys)
    assert code == 2 and "Traceback" not in err, err
    # but the run directory and spaces lines a new run prints at its start, before its first step
    lines = without_spaces_line(err).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("proxima train: error: "), err
    return lines[0].removeprefix("proxima train: error: ")


#: the line check-env prints before its last line of an env with a Box(2,) obs and a Discrete(2) action
BOX2_D2 = "spaces: obs Box(2,) float32 -> 2 features, MLP 64x64 tanh; action Discrete(2) -> categorical over 2"


def check_cmd(kwargs: dict) -> str:
    return f"proxima check-env adapter_edge_envs:Faulty --env-kwargs '{json.dumps(kwargs)}'"


# ------------------------------------------------------------------------------ an async worker that dies
#: steps N envs of adapter_edge_envs:Faulty (argv: vector, N, kwargs as JSON) until an EnvError, then
#: closes them; prints the error (or the last step's info keys), and how many workers outlived close()
DRIVER = """
import json, os, sys, torch
from proxima.envs import EnvError, make_env
vector, num, kwargs = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
env = make_env("adapter_edge_envs:Faulty", num, vector=vector, seed=7, env_kwargs=kwargs)
pids = [p.pid for p in getattr(env.envs, "processes", [])]  # close() closes the Process objects themselves
env.reset()
try:
    for _ in range(25):
        info = env.step(torch.zeros(num, dtype=torch.long))[4]
    print(sorted(info))
except EnvError as e:
    print(e)
env.close()
print(sum(os.path.exists(f"/proc/{pid}") for pid in pids), "workers alive")  # joined: no zombie left either
"""




@pytest.mark.parametrize("fault, why", [
    ("exit", "exit code 3: did the env call sys.exit() or os._exit()?"),
    ("sysexit", "exit code 4: did the env call sys.exit() or os._exit()?"),
    ("kill", "killed by SIGKILL: out of memory (the kernel's OOM killer), or killed by hand?"),
])
def test_an_async_worker_that_dies_mid_step_is_named_and_close_does_not_wait(tmp_path, fault, why):
    """Env 1's worker ends inside step(): Gymnasium's step_wait raised with env 0's pipe read and env
    2's not, and close() read them again, waiting forever on env 0's empty pipe (only env 0's death
    got its line)."""
    result = isolated(["-c", DRIVER, "async", "3", json.dumps({"fault": fault})], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"env 'adapter_edge_envs:Faulty' (--vector async): the worker process of env 1 ended at vector step 5 ({why})",
        "0 workers alive"], result.stderr


def test_train_with_an_async_worker_killed_is_one_line_and_exit_2(tmp_path):
    result = isolated(["-m", "proxima", "train", "adapter_edge_envs:Faulty", *SMALL, "--vector", "async",
                       "--env-kwargs", '{"fault": "kill"}'], tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert without_spaces_line(result.stderr).strip().splitlines() == [
        "proxima train: error: env 'adapter_edge_envs:Faulty' (--vector async): the worker process of env 1 ended at vector step 5 "
        f"(killed by SIGKILL: out of memory (the kernel's OOM killer), or killed by hand?); global step 15; {NO_CKPT}"], result.stderr


#: train() on Faulty under --vector async three times, each ending in an error, with the cyclic
#: collector off (as if the exception's traceback were kept); prints the open fds after each
FD_DRIVER = """
import gc, json, os, sys
from proxima import train
from proxima.config import PPOConfig
gc.disable()
kept = []
for i in range(3):
    cfg = PPOConfig(env_id="adapter_edge_envs:Faulty", env_kwargs={"fault": sys.argv[1]}, vector="async", seed=7, num_envs=3,
                    num_steps=8, num_minibatches=2, total_timesteps=48, eval_episodes=0, progress=False, threads=1,
                    run_dir=f"R{i}", checkpoint_every=0)
    try:
        train(cfg)
    except Exception as e:  # EnvError, NonFiniteError
        kept.append(e)  # the traceback holds the trainer and its env
    print(len(os.listdir("/proc/self/fd")))
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files with /proc")
@pytest.mark.parametrize("fault", ["reward_nan", "obs_strings", "kill"])  # the trainer's error; a worker's; a worker's death
def test_a_failed_async_run_releases_its_pipes_at_once(tmp_path, fault):
    """The env's close() released the worker pipes but Gymnasium's error queue and each worker's
    sentinel stayed open until the collector freed the env: 6 fds per failed run of 3 envs while a
    traceback was kept (a notebook retrying a run ran out of files)."""
    result = isolated(["-c", FD_DRIVER, fault], tmp_path)
    assert result.returncode == 0, result.stderr
    counts = [int(n) for n in result.stdout.split()]
    assert len(counts) == 3 and counts[2] == counts[1], counts


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_an_info_whose_shape_varies_does_not_stop_the_run(tmp_path, vector):
    """Proxima reads nothing of a user env's info: it no longer goes to Gymnasium's stacking, which
    raised on arrays of another length (sync: a traceback; async: partway through reading the pipes,
    and close() then hung). Episodes end at step 10: final_obs still comes through."""
    result = isolated(["-c", DRIVER, vector, "3", json.dumps({"info_shape": True})], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['episode_length', 'episode_return', 'final_obs']", "0 workers alive"], result.stderr


# ------------------------------------------------------------------------------ one env breaks the contract mid-run
def test_the_old_gym_api_in_one_env_mid_run_is_one_line_in_check_envs_words(capsys):
    """Was a ValueError traceback (exit 1): check-env's rerun (one env, seed 0) never saw it."""
    kwargs = {"fault": "old_api"}
    assert train_line(capsys, kwargs) == (
        "env 'adapter_edge_envs:Faulty' breaks the env contract at env 1: step returns: expected 5 values (obs, reward, "
        "terminated, truncated, info); got 4 values at step 5: the old gym API (obs, reward, done, info); return terminated "
        f"and truncated instead of done (check with: {check_cmd(kwargs)}); global step 15; {NO_CKPT}")


NOT_A_NUMBER = [
    ("reward_array", "a reward of shape (2,) dtype float64", "step() returns the reward as one number (float(reward))"),
    ("reward_none", "a reward of type NoneType (None)", "step() returns the reward as one number (float(reward))"),
    ("obs_strings", "an observation of dtype <U1", "observation_space holds numbers: return a numeric array"),
]


def not_a_number_line(fault: str, returned: str, fix: str) -> str:
    return (f"env 'adapter_edge_envs:Faulty': env 1 returned {returned} at env step 5; {fix} (check with: "
            f"{check_cmd({'fault': fault})}); global step 15; {NO_CKPT}")


@pytest.mark.parametrize("fault, returned, fix", NOT_A_NUMBER)
def test_a_reward_or_observation_that_is_no_number_is_named_by_env_and_step(capsys, fault, returned, fix):
    """Were a traceback (a reward array, a string obs) or a NaN reward blamed on the env (None)."""
    assert train_line(capsys, {"fault": fault}) == not_a_number_line(fault, returned, fix)


@pytest.mark.parametrize("fault, returned, fix", NOT_A_NUMBER)
def test_a_reward_or_observation_that_is_no_number_is_named_under_async_too(tmp_path, fault, returned, fix):
    """The reward array hung: Gymnasium raised after reading every pipe, and close() read them again."""
    result = isolated(["-m", "proxima", "train", "adapter_edge_envs:Faulty", *SMALL, "--vector", "async",
                       "--env-kwargs", json.dumps({"fault": fault})], tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert without_spaces_line(result.stderr).strip().splitlines() == [
        f"proxima train: error: {not_a_number_line(fault, returned, fix)}"], result.stderr


# ------------------------------------------------------------------------------ beyond float32's range
def test_a_float64_obs_beyond_float32_in_a_float32_box_is_not_blamed_as_non_finite(capsys):
    """The vector env cast 1e39 into its float32 buffer (a numpy overflow warning, then inf), and the
    run said "non-finite observation"."""
    kwargs = {"fault": "obs_1e39"}
    assert train_line(capsys, kwargs) == (
        "env 'adapter_edge_envs:Faulty': env 1 returned an observation value 1e+39 (entry 0) beyond float32's range "
        f"(+-3.4e+38) at env step 5; Proxima trains in float32: scale it down in the env (check with: {check_cmd(kwargs)}); "
        f"global step 15; {NO_CKPT}")


def test_a_reward_beyond_float32_is_named_as_such_in_train(capsys):
    kwargs = {"fault": "reward_1e300"}
    assert train_line(capsys, kwargs) == (
        "env 'adapter_edge_envs:Faulty': env 1 returned a reward of 1e+300, beyond float32's range (+-3.4e+38) at env step 5; "
        f"Proxima trains in float32: scale it down in the env (check with: {check_cmd(kwargs)}); global step 15; {NO_CKPT}")


@pytest.mark.parametrize("fault, shown", [("reward_1e300", "1e+300"), ("reward_bigint", "1.00e+400")])
def test_check_env_reports_a_reward_beyond_float32(capsys, fault, shown):
    """check-env passed 1e300 (which train refused) and raised OverflowError on 10**400."""
    kwargs = json.dumps({"fault": fault, "at": 1, "faulty_seed": 0})
    code, out, err = run_main(["check-env", "adapter_edge_envs:Faulty", "--env-kwargs", kwargs], capsys)
    assert code == 1 and "Traceback" not in err, err
    assert out.splitlines()[0] == (f"FAIL reward finite: expected a finite reward within float32's range (+-3.4e+38): Proxima "
                                   f"trains in float32; got reward = {shown} at step 1")


# ------------------------------------------------------------------------------ the check-env command holds --env-kwargs
def test_a_non_finite_reward_suggests_check_env_with_the_runs_kwargs(capsys):
    """The suggested `proxima check-env adapter_edge_envs:Faulty` built another env, which passed."""
    kwargs = {"fault": "reward_nan"}
    assert train_line(capsys, kwargs) == (f"non-finite reward nan from env 1 at global step 15 (env step 5); check the env's "
                                          f"step() with: {check_cmd(kwargs)}; {NO_CKPT}")


def test_the_check_env_command_quotes_kwargs_for_the_shell():
    import shlex

    from proxima.envs.gym_adapter import check_env_cmd
    from proxima.guards import NonFiniteError, check_reset

    kwargs = {"name": "it's"}
    assert shlex.split(check_env_cmd("m:E", kwargs)) == ["proxima", "check-env", "m:E", "--env-kwargs", json.dumps(kwargs)]
    assert check_env_cmd("CartPole-v1") == "proxima check-env CartPole-v1"
    with pytest.raises(NonFiniteError) as e:
        check_reset(torch.tensor([[0.0], [float("nan")]]), 0, "m:E", {"x": 1})
    assert str(e.value).endswith("check the env's reset() with: proxima check-env m:E --env-kwargs '{\"x\": 1}'")


# ------------------------------------------------------------------------------ a video's render_mode wins
@pytest.mark.parametrize("env_id", ["adapter_edge_envs:Faulty", "adapter_edge_envs:AdapterEdge-v0"])
def test_recording_overrides_the_render_mode_of_the_runs_kwargs(env_id):
    """A run trained with --env-kwargs '{"render_mode": null}' (docs/cli.md's example): gym.make got
    render_mode twice, and a class's TypeError fallback dropped rgb_array (no frames)."""
    from proxima.envs.gym_adapter import resolve_env_fn

    env = resolve_env_fn(env_id, "rgb_array", {"render_mode": None})()
    env.reset(seed=0)
    assert env.render_mode == "rgb_array" and env.render().shape == (8, 8, 3)
    assert resolve_env_fn(env_id, None, {"render_mode": None})().render_mode is None


# ------------------------------------------------------------------------------ torch tensors for observations
def steps_through(env_id: str, kwargs: dict, vector: str, num: int = 2, steps: int = 3) -> list:
    """What ``num`` envs of ``env_id`` give through the adapter: the reset obs, then (obs, truncated,
    final_obs) of each of ``steps`` steps, as lists."""
    from proxima.envs import make_env

    env = make_env(env_id, num, vector=vector, seed=0, env_kwargs=kwargs)
    try:
        seen = [env.reset().tolist()]
        for _ in range(steps):
            obs, _, _, truncated, info = env.step(torch.zeros(num, dtype=torch.long))
            seen.append((obs.tolist(), truncated.tolist(), info["final_obs"].tolist()))
    finally:
        env.close()
    return seen


@pytest.mark.parametrize("kind, as_dict, vector", [("cpu", False, "sync"), ("cpu", False, "async"), ("cpu", True, "sync"),
                                                   ("cpu", True, "async"), ("float64", False, "sync")])
def test_an_env_returning_cpu_tensors_steps_with_their_values(kind, as_dict, vector):
    """Was AttributeError: 'torch.dtype' object has no attribute 'kind' (train: a traceback, exit 1)
    while check-env, reading the tensors with np.asarray, passed the env. Obs [t, 0.5] at step t;
    truncated at t = 3, whose obs comes back as final_obs."""
    def two(t: float) -> list:  # both envs' obs
        return [[t, 0.5], [t, 0.5]]

    assert steps_through("adapter_edge_envs:TorchReturns", {"kind": kind, "dict": as_dict}, vector) == [
        two(0.0), (two(1.0), [False, False], two(1.0)), (two(2.0), [False, False], two(2.0)),
        (two(0.0), [True, True], two(3.0))]


def test_train_runs_an_env_returning_cpu_tensors(capsys):
    """The whole run (SMALL: 3 envs x 8 steps, twice): episodes of 3 steps counted from the tensors' env."""
    import csv

    code, _, err = run_main(["train", "adapter_edge_envs:TorchReturns", *SMALL], capsys)
    assert code == 0, err
    with open(Path("D") / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["global_step"], r["episodes"], float(r["charts/episodic_length"])) for r in rows] == [("24", "6", 3.0), ("48", "9", 3.0)]


NO_NUMPY = "RuntimeError: Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
TENSOR_FIX = "return numpy arrays (tensor.detach().cpu().numpy())"


@pytest.mark.parametrize("kwargs, what", [
    ({"kind": "grad"}, f"a torch tensor that numpy cannot read ({NO_NUMPY})"),
    ({"kind": "grad", "dict": True}, f"a torch tensor that numpy cannot read ({NO_NUMPY}) at key 'x'"),
    ({"kind": "meta"}, "a torch tensor on meta"),  # off the CPU, as a CUDA tensor is
])
def test_a_tensor_numpy_cannot_read_is_one_line_in_train_and_a_violation_in_check_env(capsys, kwargs, what):
    """check-env and train read a tensor alike: refused by both, with the same words."""
    code, _, err = run_main(["train", "adapter_edge_envs:TorchReturns", *SMALL, "--env-kwargs", json.dumps(kwargs)], capsys)
    check = f"proxima check-env adapter_edge_envs:TorchReturns --env-kwargs '{json.dumps(kwargs)}'"
    assert (code, err.strip().splitlines()) == (2, [
        f"proxima train: error: env 'adapter_edge_envs:TorchReturns': env 0 returned {what} at reset (after env step 0); "
        f"{TENSOR_FIX} (check with: {check})"])
    code, out, err = run_main(["check-env", "adapter_edge_envs:TorchReturns", "--env-kwargs", json.dumps(kwargs)], capsys)
    name, tensor = ("obs['x']", f"obs['x'] {what.removesuffix(' at key ' + repr('x'))}") if kwargs.get("dict") else ("obs", what)
    declared = "observation_space['x']" if kwargs.get("dict") else "observation_space"
    spaces = (BOX2_D2.replace("Box(2,) float32 -> 2 features", "Dict, keys packed in this order ['x': Box(2,) float32 -> 2 features] "
                              "-> 2 features") if kwargs.get("dict") else BOX2_D2)
    assert (code, out.splitlines()) == (1, [
        f"FAIL obs dtype: expected {name}: a numpy array of dtype float32 ({declared}.dtype); got {tensor} at reset(seed=0) "
        f"({TENSOR_FIX}) (and 267 more times)", spaces, "1 violation(s) in adapter_edge_envs:TorchReturns"]), err


@pytest.mark.parametrize("kind, result", [
    ("cpu", [BOX2_D2, "OK: adapter_edge_envs:TorchReturns passes 20 checks"]),
    ("float64", ["FAIL obs dtype: expected dtype float32 (observation_space.dtype); got a torch tensor of dtype torch.float64 at "
                 "reset(seed=0) (does not cast safely to float32: return obs.detach().cpu().numpy().astype(np.float32)) "
                 "(and 267 more times)", BOX2_D2, "1 violation(s) in adapter_edge_envs:TorchReturns"]),
])
def test_check_env_reads_a_tensor_in_its_own_dtype(capsys, kind, result):
    """check-env cast a tensor to the space's dtype (np.asarray(x, dtype=...)), so a float64 tensor
    passed where a float64 array is flagged; train reads both alike (and casts, as for any float64 obs)."""
    code, out, err = run_main(["check-env", "adapter_edge_envs:TorchReturns", "--env-kwargs", json.dumps({"kind": kind})], capsys)
    assert (code, out.splitlines()) == (0 if kind == "cpu" else 1, result), err


# ------------------------------------------------------------------------------ an env that reuses its obs buffer
@pytest.mark.parametrize("as_dict", [False, True])
@pytest.mark.parametrize("vector", ["sync", "async"])
def test_final_obs_is_the_last_state_of_an_env_that_zeroes_its_buffer_on_reset(vector, as_dict):
    """Buffered returns self.s and sets self.s[:] = 0 in reset(): the vector env kept that array as
    final_obs and reset the env (sync; async pickled it after the reset), so final_obs was the reset
    state [[0.0]] and a truncated episode bootstrapped from V(reset state)."""
    assert steps_through("adapter_edge_envs:Buffered", {"dict": as_dict}, vector, num=1) == [
        [[0.0]], ([[1.0]], [False], [[1.0]]), ([[2.0]], [False], [[2.0]]), ([[0.0]], [True], [[3.0]])]


# ------------------------------------------------------------------------------ a torch-native id the adapter cannot build
@pytest.mark.parametrize("argv, line", [
    (["train", "PixelQuadrant-v0", *SMALL, "--backend", "gymnasium"],
     "proxima train: error: 'PixelQuadrant-v0' is a torch-native env with no Gymnasium version: use --backend native (or auto)"),
    (["train", "LinearQuadratic-v0", *SMALL, "--env-kwargs", '{"horizon": 5}'],  # auto: kwargs send it to the adapter
     "proxima train: error: 'LinearQuadratic-v0' is a torch-native env with no Gymnasium version, which --env-kwargs asks for "
     "(the native env takes no constructor arguments): drop --env-kwargs and use --backend native (or auto)"),
    (["check-env", "PixelQuadrant-v0"],
     "proxima check-env: error: 'PixelQuadrant-v0' is a torch-native env with no Gymnasium version: check-env checks Gymnasium "
     "envs (a registered id or module:ClassName), so there is nothing to check; proxima train runs it with --backend native (or auto)"),
])
def test_a_native_only_id_where_gymnasium_is_asked_for_says_so(capsys, argv, line):
    """Was "unknown env id 'PixelQuadrant-v0'; did you mean PixelQuadrant-v0, ...?"."""
    code, _, err = run_main(argv, capsys)
    assert (code, err.strip().splitlines()) == (2, [line])


# ------------------------------------------------------------------------------ reset's obs alone, lists, a bool mask image
OBS_ALONE = ("reset returns: expected reset returns a tuple (obs, info); got {got} at reset{where} (the old gym API returned "
             "obs alone; return obs, {{}})")


@pytest.mark.parametrize("as_dict, got", [(False, "ndarray of shape (2,) dtype float32"), (True, "dict of 2 items")])
def test_an_obs_of_two_entries_returned_alone_by_reset_is_named_so_by_train_and_check_env(capsys, as_dict, got):
    """Was "env 0 returned info of type float32 (of str for the dict) at reset ...; reset() returns (obs, info)
    with info a dict": ``obs, info = out`` unpacked the obs. Now check-env's words, naming the env."""
    kwargs = {"dict": as_dict}
    check = f"proxima check-env adapter_edge_envs:ObsAlone --env-kwargs '{json.dumps(kwargs)}'"
    code, _, err = run_main(["train", "adapter_edge_envs:ObsAlone", *SMALL, "--env-kwargs", json.dumps(kwargs)], capsys)
    assert (code, err.strip().splitlines()) == (2, [
        f"proxima train: error: env 'adapter_edge_envs:ObsAlone' breaks the env contract at env 0: "
        f"{OBS_ALONE.format(got=got, where=' (after env step 0)')} (check with: {check})"])
    code, out, _ = run_main(["check-env", "adapter_edge_envs:ObsAlone", "--env-kwargs", json.dumps(kwargs)], capsys)
    lines = out.splitlines()
    assert code == 1 and len(lines) == 3 and lines[0].startswith(f"FAIL {OBS_ALONE.format(got=got, where='(seed=0)')} (and "), out
    assert lines[1] == BOX2_D2 or lines[1].startswith("spaces: obs Dict"), out


def test_an_obs_returned_alone_is_one_line_under_async_too(tmp_path):
    """An async worker's EnvError reaches the main process as it is (env 0 or 1, whichever reports first)."""
    result = isolated(["-m", "proxima", "train", "adapter_edge_envs:ObsAlone", *SMALL, "--vector", "async"], tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("proxima train: error: env 'adapter_edge_envs:ObsAlone' breaks the env contract at env ")
    assert OBS_ALONE.format(got="ndarray of shape (2,) dtype float32", where=" (after env step 0)") in lines[0]


def test_lists_from_reset_and_step_train_and_pass_check_env(capsys):
    """Gymnasium's vector envs unpack lists as tuples, so train ran; check-env said "expected 5 values;
    got 5 values" (and for reset's [obs, info] an old-API hint and a false obs shape violation)."""
    code, _, err = run_main(["train", "adapter_edge_envs:Lists", *SMALL], capsys)
    assert code == 0, err
    code, out, err = run_main(["check-env", "adapter_edge_envs:Lists"], capsys)
    assert (code, out.splitlines()) == (0, [BOX2_D2, "OK: adapter_edge_envs:Lists passes 20 checks"]), err


@pytest.mark.parametrize("as_dict, vector", [(False, "sync"), (False, "async"), (True, "sync")])
def test_a_bool_mask_image_goes_on_as_uint8_as_check_env_passes_it(capsys, as_dict, vector):
    """Was "env 0 returned an image of dtype bool ...; the observation space declares uint8" while check-env
    said OK: bool casts safely to uint8 (check-env's obs dtype rule, and train's for every other part)."""
    from proxima.envs import make_env

    kwargs = {"dict": as_dict}
    env = make_env("adapter_edge_envs:BoolMask", 2, vector=vector, seed=0, env_kwargs=kwargs)
    try:
        assert env.layout.has_image
        seen = [env.reset()]
        for _ in range(2):
            seen.append(env.step(torch.zeros(2, dtype=torch.long))[0])
    finally:
        env.close()
    for t, obs in enumerate(seen):
        assert obs.dtype == torch.uint8 and set(obs.unique().tolist()) == {0, 1}
        image = obs[:, :36 * 36 * 3].reshape(2, 36, 36, 3) if as_dict else obs
        set_half = image[:, :, 18:] if t % 2 else image[:, :, :18]
        assert bool((set_half == 1).all()) and int(image.sum()) == 2 * 36 * 18 * 3
    code, out, err = run_main(["check-env", "adapter_edge_envs:BoolMask", "--env-kwargs", json.dumps(kwargs)], capsys)
    assert code == 0 and out.splitlines()[-1].startswith("OK: adapter_edge_envs:BoolMask passes"), out + err
    # and before it, the spaces line: a run reads the mask as a 0..1 image
    assert out.splitlines()[-2].startswith("spaces: obs ") and "image (3, 36, 36) 0..1 scaled to [0, 1]" in out, out


def test_train_runs_a_bool_mask_image_env(capsys):
    code, _, err = run_main(["train", "adapter_edge_envs:BoolMask", *SMALL], capsys)
    assert code == 0, err
