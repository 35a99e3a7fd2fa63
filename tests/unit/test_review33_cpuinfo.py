"""cpuinfo(key) reads the value of the line whose whole name is ``key``, in any case (it matched a
lower-cased row against the key as given, and by prefix)."""
import builtins
import io

import pytest

from proxima import cpuinfo as mod

FAKE = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2\n"


@pytest.fixture()
def fake_cpuinfo(monkeypatch):
    real = builtins.open

    def fake(path, *a, **k):
        return io.StringIO(FAKE) if path == "/proc/cpuinfo" else real(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake)


@pytest.mark.parametrize("key, value", [("model name", "AMD EPYC 9R14"), ("Model Name", "AMD EPYC 9R14"), ("model", "17"),
                                        ("vendor_id", "AuthenticAMD"), ("cpu", ""), ("flags", "fpu avx2")])
def test_a_key_is_the_whole_name_before_the_colon_in_any_case(fake_cpuinfo, key, value):
    assert mod.cpuinfo(key) == value
