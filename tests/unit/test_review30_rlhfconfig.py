"""RLHF config files: a field written twice in its two spellings, or a text field YAML read as a
number, is refused in one line (batch-size then batch_size silently kept the later; policy: 1e3
loaded '1000.0'). A leading zero stays the text typed (load_yaml): run_dir: 0123 is '0123'."""

import pytest

from proxima.config import ConfigError, load_yaml
from proxima.rlhf.config import from_dict


def test_one_field_in_both_spellings_is_refused():
    with pytest.raises(ConfigError) as e:
        from_dict(load_yaml("batch-size: 0\nbatch_size: 16\n"), source="c.yaml")
    assert str(e.value) == "c.yaml: field 'batch_size' is given twice ('batch-size' and 'batch_size'); keep one"


@pytest.mark.parametrize("text, field, value", [("run_dir: 123\n", "run_dir", 123), ("policy: 1e3\n", "policy", 1000.0)])
def test_a_text_field_read_as_a_number_is_refused_from_a_file(text, field, value):
    with pytest.raises(ConfigError) as e:
        from_dict(load_yaml(text), source="c.yaml")
    assert str(e.value) == (f"c.yaml: field '{field}' got {value!r}: a number, not text (YAML reads unquoted digits as a "
                            f"number); quote it as you wrote it ({field}: '...')")


def test_quoted_it_is_the_text_and_a_flag_is_text_anyway():
    assert from_dict(load_yaml("run_dir: '0123'\n"), source="c.yaml").run_dir == "0123"
    assert from_dict(load_yaml("run_dir: 0123\n"), source="c.yaml").run_dir == "0123"
    assert from_dict({"run_dir": "0123"}, source="command line").run_dir == "0123"
