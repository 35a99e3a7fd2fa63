"""proxima check-env on an env whose observation_space or action_space raises (a property's ValueError, a
wrapper chain 10,000 deep's RecursionError): a FAIL line in train's words, naming the user's line and
'reading observation_space', and exit 1 as for any violation, not a traceback."""

import sys

import pytest

from tests.cli_helpers import run_main
from tests.unit.test_hostile48b import ENVS

BAD_ACTION = '''

class BadActSpace(BadObsSpace):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    @property
    def action_space(self):
        raise KeyError("no actions yet")
'''


def line_of(text: str) -> int:
    """The line of the env module that holds ``text``: the user's line check-env must name."""
    return next(i for i, line in enumerate((ENVS + BAD_ACTION).splitlines(), 1) if text in line)


@pytest.fixture
def env_module(tmp_path, monkeypatch):
    (tmp_path / "checkspaces48_envs.py").write_text(ENVS + BAD_ACTION)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield "checkspaces48_envs"
    sys.modules.pop("checkspaces48_envs", None)


def test_an_observation_space_that_raises_is_a_spaces_declared_violation_naming_the_users_line(env_module, capsys):
    code, out, err = run_main(["check-env", f"{env_module}:BadObsSpace"], capsys)
    assert code == 1, err
    assert err == ""
    assert out.strip().splitlines() == [
        "FAIL spaces declared: expected observation_space and action_space read without raising; got building env "
        f"'{env_module}:BadObsSpace' raised ValueError: boom ({env_module}.py:{line_of('raise ValueError')}) reading observation_space",
        f"1 violation(s) in {env_module}:BadObsSpace"]


def test_an_action_space_that_raises_names_action_space(env_module, capsys):
    code, out, err = run_main(["check-env", f"{env_module}:BadActSpace"], capsys)
    assert code == 1, err
    assert out.strip().splitlines()[0] == (
        "FAIL spaces declared: expected observation_space and action_space read without raising; got building env "
        f"'{env_module}:BadActSpace' raised KeyError: 'no actions yet' ({env_module}.py:{line_of('raise KeyError')}) reading action_space")


def test_a_wrapper_chain_deeper_than_the_stack_is_a_spaces_declared_violation(env_module, capsys):
    code, out, err = run_main(["check-env", f"{env_module}:deep", "--steps", "0"], capsys)
    assert code == 1, err
    assert "Traceback" not in err and "Traceback" not in out
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"FAIL spaces declared: expected observation_space and action_space read without raising; "
                               f"got building env '{env_module}:deep' raised RecursionError: maximum recursion depth exceeded")
    assert lines[0].endswith(" reading observation_space"), lines[0]
    assert lines[1:] == [f"1 violation(s) in {env_module}:deep"]
