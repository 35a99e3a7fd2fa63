"""Hostile inputs of review 49: a meta.json's many spellings of one folder, a recorded path with control
characters, eval.json counts that are no counts, a Tuple's nested image, NCCL's empty interface lists."""
import json
import sys

import pytest


# ------------------------------------------------------------------------------- 1. the recorded cwd's folders
@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A run folder whose meta.json is written by the test, read as eval reads it, from another folder."""
    from proxima.envs import gym_adapter

    run, here, big = tmp_path / "run", tmp_path / "here", tmp_path / "big"
    for folder in (run, here, big):
        folder.mkdir()
    monkeypatch.setattr(gym_adapter, "_DATA_DIRS", [str(run)])
    monkeypatch.chdir(here)
    return big, lambda meta: (run / "meta.json").write_text(json.dumps(meta))


def test_many_spellings_of_the_recorded_cwd_are_one_folder_looked_in_without_an_importer(recorded):
    from proxima.envs.gym_adapter import _recorded_cwd_holding

    big, write = recorded
    (big / "mod49h.py").write_text("X = 1\n")
    spellings = [str(big) + "/." * i for i in range(1, 2000)]
    write({"cwd": str(big), "resumes": [{"cwd": s} for s in spellings]})
    before = set(sys.path_importer_cache)
    assert _recorded_cwd_holding("mod49h") == str(big)
    assert _recorded_cwd_holding("nomod49h") is None
    assert set(sys.path_importer_cache) - before == set()  # no FileFinder (a listing) kept for any spelling


def test_only_the_last_resumes_folders_and_the_first_cwd_are_looked_in(recorded, tmp_path):
    from proxima.envs.gym_adapter import _recorded_cwd_holding

    big, write = recorded
    old = tmp_path / "old"
    old.mkdir()
    (old / "mod49h.py").write_text("X = 1\n")
    write({"cwd": str(big), "resumes": [{"cwd": str(old)}] + [{"cwd": str(big)}] * 10})
    assert _recorded_cwd_holding("mod49h") is None  # the old resume is 11th from the end
    (big / "pkg49h").mkdir()
    (big / "pkg49h" / "__init__.py").write_text("")
    assert _recorded_cwd_holding("pkg49h.envs") == str(big)


# ------------------------------------------------------------------------------- 2. a recorded path with control characters
@pytest.mark.parametrize("name", ["tr\x1b[31mRED", "two\nlines"])
def test_a_recorded_cwd_with_control_characters_is_named_escaped_and_never_as_a_command(recorded, tmp_path, name):
    from proxima.envs.gym_adapter import import_failure_line

    _, write = recorded
    odd = tmp_path / name
    odd.mkdir()
    (odd / "mod49e.py").write_text("X = 1\n")
    write({"cwd": str(odd)})
    line = import_failure_line(ModuleNotFoundError("No module named 'mod49e'", name="mod49e"), "mod49e", "mod49e:Env")
    assert line.isprintable()
    assert f"the run was trained in {ascii(str(odd))}, which holds it" in line
    assert line.endswith("(its name holds control characters and cannot be shown as a command)")
    assert "cd " not in line and "PYTHONPATH=" not in line


def test_a_printable_recorded_cwd_is_named_as_a_command_to_run(recorded, tmp_path):
    from proxima.envs.gym_adapter import import_failure_line

    _, write = recorded
    plain = tmp_path / "with space"
    plain.mkdir()
    (plain / "mod49e.py").write_text("X = 1\n")
    write({"cwd": str(plain)})
    line = import_failure_line(ModuleNotFoundError("No module named 'mod49e'", name="mod49e"), "mod49e", "mod49e:Env")
    assert line.endswith(f"(cd '{plain}', or PYTHONPATH='{plain}')")


# ------------------------------------------------------------------------------- 3. eval.json's success counts
EVAL = {"mean_return": 500.0, "std_return": 0.0, "episodes": 10, "success_rate": 0.5}


@pytest.mark.parametrize("episodes, k, shown", [(10, 10 ** 6, "1000000 of 10"), (10, 10, "10 of 10"),
                                                (0, 3, "3 of 0"), (10, 10 ** 4000, "1000000000000000000000000000000000000... of 10")],
                         ids=["million", "all", "of-0", "4001-digits"])
def test_success_episodes_not_below_episodes_is_refused_in_one_short_line(episodes, k, shown):
    from proxima.report import ReportError, _check_eval

    with pytest.raises(ReportError) as e:
        _check_eval("r/eval.json", dict(EVAL, episodes=episodes, success_episodes=k))
    assert str(e.value).startswith(f"r/eval.json: success_episodes is not a count of episodes ({shown} episodes; ")
    assert len(str(e.value)) < 200


def test_a_success_rate_of_0_episodes_is_refused():
    from proxima.report import ReportError, _check_eval

    with pytest.raises(ReportError, match=r"^r/eval.json: success_rate is not a rate of 0 episodes \(0.5; "):
        _check_eval("r/eval.json", dict(EVAL, episodes=0))


def test_a_negative_zero_success_rate_is_shown_as_0_00_and_written_as_0():
    from proxima.report import _check_eval, _eval_json, _success_cell

    ev = _check_eval("r/eval.json", dict(EVAL, success_rate=-0.0, success_episodes=3))
    assert _success_cell(ev) == "0.00 over 3 of 10 episodes"
    assert json.dumps(_eval_json(dict(ev, source="eval.json"))["success_rate"]) == "0.0"
    assert _success_cell(_check_eval("r/eval.json", dict(EVAL, success_episodes=9))) == "0.50 over 9 of 10 episodes"


# ------------------------------------------------------------------------------- 4. a Tuple's image parts
def _tuple_error(space) -> str:
    import gymnasium as gym

    from proxima.envs import EnvError
    from proxima.envs.spaces import check_spaces

    with pytest.raises(EnvError) as e:
        check_spaces("x:Y", space, gym.spaces.Discrete(2))
    return str(e.value)


def test_an_image_nested_in_a_tuples_part_gets_the_dict_fix_not_flattenobservation():
    import gymnasium as gym
    import numpy as np

    img = gym.spaces.Box(0, 255, (4, 4, 1), np.uint8)
    line = _tuple_error(gym.spaces.Tuple([gym.spaces.Tuple([img]), gym.spaces.Discrete(3)]))
    assert line.endswith("; make it a Dict with each image of part 0 at a key of its own (part 0 holds it nested in a "
                         "Tuple or Dict), read by the CNN (pixels scaled to [0, 1]), and the other parts flattened at "
                         "one vector key (gymnasium.wrappers.FlattenObservation would make it one Box(19,) an MLP reads "
                         "its pixels from unscaled)")


def test_a_flattened_box_with_per_element_bounds_stays_on_one_line():
    import gymnasium as gym
    import numpy as np

    box = gym.spaces.Box(np.zeros(20, np.float32), np.arange(1, 21, dtype=np.float32))
    line = _tuple_error(gym.spaces.Tuple([box, gym.spaces.Discrete(3)]))
    assert "\n" not in line and "FlattenObservation makes it Box(0.0, [ 1. 2. 3. 4. 5. 6. 7. 8. 9. 10. 11. 12. 13. 14. 15. 16. 17. 18. 19. 20. 1. 1. 1.], (23,), float64): put" in line


def test_a_tuple_of_20000_images_and_20000_discretes_is_named_by_its_first_parts_and_a_count():
    import time

    import gymnasium as gym
    import numpy as np

    img = gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
    start = time.perf_counter()
    line = _tuple_error(gym.spaces.Tuple([img] * 20000 + [gym.spaces.Discrete(2)] * 20000))
    assert time.perf_counter() - start < 5  # was 11 s (a list's 'in' per part) and a 2.1 MB line
    assert len(line) < 800
    assert ", and 39,996 more parts) " in line
    assert "each image of parts 0, 1, 2, 3 and 19,996 more at a key of its own, read by the CNN" in line


# ------------------------------------------------------------------------------- 5. NCCL_SOCKET_IFNAME of no names
@pytest.mark.parametrize("spec, selected", [
    (",", ["eth0", "lo"]), ("=", ["eth0", "lo"]), (",,,", ["eth0", "lo"]), (":5000", ["eth0", "lo"]),  # NCCL: all
    ("^", []), ("^=", []), ("^,", []), ("^:5000", []),  # ... and under '^', all left out
    ("eth0,:5000", ["eth0"]),  # a port with no name is skipped, as NCCL's parser skips it
])
def test_an_nccl_socket_ifname_of_no_names_selects_every_interface_or_none_under_a_caret(spec, selected):
    from proxima.distributed import nccl_interfaces

    assert nccl_interfaces(spec, {"lo", "eth0"}) == selected


def test_a_caret_of_no_names_is_refused_and_an_empty_list_passes(monkeypatch):
    from proxima import distributed
    from proxima.config import ConfigError

    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo", "eth0"})
    distributed.check_nccl_ifname({"NCCL_SOCKET_IFNAME": ","})
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='\^=': selects no network interface with an address "
                                          r"here \(interfaces with one: eth0, lo\)"):
        distributed.check_nccl_ifname({"NCCL_SOCKET_IFNAME": "^="})
