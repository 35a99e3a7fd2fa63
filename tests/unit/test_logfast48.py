"""Fresh-eyes findings on 98dcbb0's logs: the TensorBoard hyperparameters table is built without a yaml.dump per
cell (a population builds one table per member; 52 fields took 6.9 ms, 300x the table before) and still spells
every value as config.yaml does; the progress line's return is at most 12 characters for any finite float
(return_text(1e-300) was 302 characters of zeros)."""

from __future__ import annotations

import math
import random
import struct
import time
from decimal import Decimal

import pytest

from proxima.config import PPOConfig, dump_yaml
from proxima.logger import hyperparameters_table, return_text


def _cells(config: dict) -> dict:
    return dict(line.strip("|").split("|", 1) for line in hyperparameters_table(config).splitlines()[2:])


def _floats(count: int) -> list:
    """Edge floats, then random bit patterns (every exponent) and random magnitudes, all finite."""
    rng = random.Random(48)
    edges = [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 1e-5, 2.5e-4, 1e15, 1e16, 1e17, 1e-16, 1.5e-7, 123456789.0,
             1e300, -1e300, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308]
    out = list(edges)
    while len(out) < count:
        bits = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if math.isfinite(bits):
            out.append(bits)
        out.append(rng.choice((-1, 1)) * 10 ** rng.uniform(-320, 308))
    return out


# ------------------------------------------------------------------------ the hyperparameters table
def test_every_scalar_of_the_table_is_the_text_config_yaml_writes_for_it():
    values = [None, True, False, 0, 7, -3, 10**30, math.inf, -math.inf, math.nan] + _floats(4000)
    cells = _cells({f"f{i}": value for i, value in enumerate(values)})
    for i, value in enumerate(values):
        assert f"f{i}: {cells[f'f{i}']}\n" == dump_yaml({f"f{i}": value}), repr(value)


def test_a_default_config_table_is_config_yaml_s_text_field_by_field():
    config = PPOConfig(env_id="CartPole-v1").to_dict()
    cells = _cells(config)
    assert list(cells) == list(config)
    for name, value in config.items():
        if isinstance(value, str):
            assert cells[name] == value, name
        elif isinstance(value, (list, dict)):
            assert cells[name] == {"hidden_sizes": "[64, 64]", "env_kwargs": "{}"}[name], name
        else:
            assert f"{name}: {cells[name]}\n" == dump_yaml({name: value}), name


@pytest.mark.parametrize("value, shown", [([], "[]"), ([1e-05, None, True, math.inf, -math.inf, 0.5], "[1.0e-05, null, true, .inf, -.inf, 0.5]"),
                                          (["1e1", "x", 1], "['1e1', x, 1]"), ([[1, 2], 3], "[[1, 2], 3]"),
                                          ({"n": 1e-05, "s": "1:30"}, "{n: 1.0e-05, s: '1:30'}"), ({}, "{}")])
def test_a_list_or_dict_is_yaml_s_one_line_flow_text_with_config_yaml_s_quotes(value, shown):
    assert _cells({"v": value})["v"] == shown


def test_a_default_config_table_is_built_in_well_under_a_millisecond():
    config = PPOConfig(env_id="CartPole-v1").to_dict()
    start = time.perf_counter()
    for _ in range(1000):
        hyperparameters_table(config)
    # a generous guard (about 0.05 s here, 4.6 s with a yaml.dump per cell): 1024 population members' tables
    assert time.perf_counter() - start < 2.0


# ------------------------------------------------------------------------ the progress line's return
@pytest.mark.parametrize("value, shown", [(38.5714, "38.6"), (-978.8, "-978.8"), (0.028834, "0.0288"), (500.0, "500.0"),
                                          (1.25, "1.25"), (1e-7, "0.0000001"), (-1.23e-7, "-0.000000123"),
                                          (99999999.0, "99999999.0"), (-99999999.96, "-100000000.0"),
                                          (1e-300, "1e-300"), (5e-324, "4.94e-324"), (-9.9e-8, "-9.9e-08"),
                                          (1.23456e8, "1.23e+08"), (-1e300, "-1e+300")])
def test_a_return_is_fixed_point_from_1e_minus_7_to_1e8_and_an_exponent_beyond(value, shown):
    assert return_text(value) == shown


def test_any_finite_return_is_at_most_12_characters_and_reads_back_to_3_digits():
    for value in _floats(20000):
        text = return_text(value)
        assert len(text) <= 12, (value, text)
        error = abs(Decimal(text) - Decimal(value))  # Decimal: 1.8e+308 (the largest float's text) is no float
        assert error <= max(Decimal("0.05"), abs(Decimal(value)) * Decimal("0.005")), (value, text)
