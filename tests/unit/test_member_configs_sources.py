"""member_configs (the Python way to build a population) keeps which preset or --config file set
each field, as the CLI's populations do, so a member's refusal or note can name that source."""
from proxima.config import from_dict, source_of
from proxima.population import member_configs
from proxima.presets import resolve


def test_members_keep_the_files_sources_and_a_swept_field_loses_its_own():
    base = from_dict({"lr": 1e-3, "num_envs": 4}, source="mine.yaml")
    members = member_configs(base, [1, 2], {"lr": [3e-4, 1e-3]})
    assert len(members) == 4
    for member in members:
        assert source_of(member, "num_envs") == "mine.yaml"
    # the sweep, not the file, set the first setting's rate; the second setting holds the file's value
    assert [source_of(m, "lr") for m in members] == [None, None, "mine.yaml", "mine.yaml"]


def test_members_keep_a_presets_sources_and_each_member_owns_its_record():
    base = resolve("CartPole-v1", "gpu")
    assert source_of(base, "backend") == "preset CartPole-v1/gpu"
    first, second = member_configs(base, [1, 2])
    assert source_of(first, "backend") == source_of(second, "backend") == "preset CartPole-v1/gpu"
    first._sources.clear()  # one member's record is its own: the base's and the other member's stay
    assert source_of(second, "backend") == "preset CartPole-v1/gpu"
    assert source_of(base, "backend") == "preset CartPole-v1/gpu"
