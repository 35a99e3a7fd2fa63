"""Mutation survivors of test_leftsmall49's fixes: the zip end-record reader without zipfile's private
_EndRecData (a comment of the most bytes, a comment length past the end, a multi-disk locator, a zip64 record
whose counts differ), the record cap's edge, the default run directory from Python and on a full disk,
NCCL_SOCKET_IFNAME's empty entries, nccl_used, join_group's backend and doctor's NCCL rows, and the
hyperparameters table's plain strings and older tables."""
from __future__ import annotations

import errno
import inspect
import re
import struct
import zipfile
from pathlib import Path

import pytest

from proxima import checkpoint as ckpt
from proxima.checkpoint import CheckpointError, load_checkpoint
from tests.unit.test_leftsmall49 import CUT_SHORT, _ZipfileWithout
from tests.unit.test_zipcount48 import _end_records, _stored_zip

END = struct.Struct("<4s4H2LH")


@pytest.fixture
def no_private_reader(monkeypatch):
    """checkpoint.py sees a zipfile without _EndRecData (test_leftsmall49's)."""
    monkeypatch.setattr(ckpt, "zipfile", _ZipfileWithout())


def _zipfiles_reading(path: Path):
    """zipfile._EndRecData's answer for ``path`` as _end_record gives it, or the exception it raises."""
    with path.open("rb") as f:
        try:
            end = zipfile._EndRecData(f)
        except Exception as e:  # noqa: BLE001
            return type(e)
    return (end[4], end[5], end[9], end[0] == b"PK\x06\x06") if end else None


def _fallback_reading(path: Path):
    with path.open("rb") as f:
        try:
            return ckpt._read_end_record(f)
        except Exception as e:  # noqa: BLE001
            return type(e)


def _edge_archives(tmp_path) -> dict:
    """Archives at the edges of the end-record search, each named by what it tests."""
    archives = {}

    def write(name, data):
        archives[name] = tmp_path / f"{name}.zip"
        archives[name].write_bytes(data)

    longest = tmp_path / "longest_comment.zip"  # the end record as far from the end as a comment lets it be
    with zipfile.ZipFile(longest, "w") as zf:
        zf.writestr("x/data.pkl", b"abc")
        zf.comment = b"c" * 0xFFFF
    archives["longest_comment"] = longest
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()  # the end record alone, at offset 0: no room for a zip64 locator
    archives["empty"] = empty
    # the end record's comment length says 5, but the file ends with the record: zipfile still reads it
    write("comment_cut_off", END.pack(b"PK\x05\x06", 0, 0, 3, 3, 0, 0, 5))
    # the last 22 bytes start with the signature but do not end in a zero comment length, and the
    # signature recurs within them: zipfile's search finds that last one, too near the end to be a record
    write("signature_twice_at_the_end", b"\0" * 40 + b"PK\x05\x06" + b"\1" * 12 + b"PK\x05\x06" + b"\1\0")
    # zip64 locators of another disk (diskno 1) and of two disks: zipfile refuses both
    plain_end = END.pack(b"PK\x05\x06", 0, 0, 1, 1, 0, 0, 0)
    write("locator_disk_1", b"\0" * 60 + struct.pack("<4sLQL", b"PK\x06\x07", 1, 0, 1) + plain_end)
    write("locator_two_disks", b"\0" * 60 + struct.pack("<4sLQL", b"PK\x06\x07", 0, 0, 2) + plain_end)
    # a zip64 record whose entries on this disk (5) and in all (9) differ: the total is the count
    write("zip64_disk_and_total_differ",
          struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 5, 9, 0, 0)
          + struct.pack("<4sLQL", b"PK\x06\x07", 0, 0, 1)
          + END.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
    return archives


# --- the end-record reader that stands in for zipfile._EndRecData reads the edges as zipfile does ----------------------
def test_the_fallback_reads_the_edge_archives_as_zipfile_does(tmp_path):
    readings = {name: (_fallback_reading(path), _zipfiles_reading(path)) for name, path in _edge_archives(tmp_path).items()}
    assert {name: ours for name, (ours, _) in readings.items()} == {name: theirs for name, (_, theirs) in readings.items()}
    # what zipfile's reading is, so the comparison compares something
    assert readings["longest_comment"][1][0] == 1
    assert readings["empty"][1] == (0, 0, 0, False)
    assert readings["comment_cut_off"][1] == (3, 0, 0, False)
    assert readings["signature_twice_at_the_end"][1] is None
    assert readings["locator_disk_1"][1] is zipfile.BadZipFile
    assert readings["locator_two_disks"][1] is zipfile.BadZipFile
    assert readings["zip64_disk_and_total_differ"][1] == (9, 0, 76, True)


def test_without_zipfiles_private_reader_an_empty_zip_and_a_long_comment_read_as_they_do_with_it(
        tmp_path, no_private_reader):
    archives = _edge_archives(tmp_path)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(archives["empty"])
    assert str(e.value) == f"{archives['empty']}: truncated checkpoint (an empty zip archive, 22 bytes){CUT_SHORT}"
    with pytest.raises(CheckpointError) as e:  # found, then judged by its records (not 'not a zip')
        load_checkpoint(archives["longest_comment"])
    assert "not a torch zip archive" not in str(e.value) and "end of the archive is missing" not in str(e.value)


# --- the record cap's edge, and the zip64 records between the directory and its end record -------------------------
def test_one_record_past_the_cap_is_refused(tmp_path):
    hostile = tmp_path / "one_past.pt"
    hostile.write_bytes(END.pack(b"PK\x05\x06", 0, 0, 20_001, 20_001, 0, 0, 0))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(hostile)
    assert str(e.value) == (f"{hostile}: not a Proxima checkpoint (a zip archive of 20,001 records; torch.save writes at "
                            "most 20,000 for a checkpoint of its 22 bytes)")


@pytest.mark.parametrize("private", [True, False])
def test_a_zip64_directory_that_claims_the_zip64_records_too_is_damaged(private, tmp_path, monkeypatch):
    if not private:
        monkeypatch.setattr(ckpt, "zipfile", _ZipfileWithout())
    damaged = tmp_path / "overlap.pt"
    damaged.write_bytes(b"\0" * 10 + _end_records(1, 86, 0))  # its directory would run over the 76 bytes of zip64's
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(damaged)
    assert str(e.value) == (f"{damaged}: corrupted checkpoint (damaged zip archive: its central directory claims 86 bytes, "
                            "more than the 10 before its end record)")


def test_a_zip64_archive_within_the_cap_is_not_refused_by_it(tmp_path, no_private_reader):
    small = tmp_path / "zip64_small.pt"
    _stored_zip(small, 7)
    with pytest.raises(CheckpointError) as e:  # its records are no torch checkpoint's, but the cap lets it by
        load_checkpoint(small)
    assert "records; torch.save writes at most" not in str(e.value)


# --- the default run directory: Python's wording, and a full disk's advice ------------------------------------------
def test_a_default_run_directory_under_a_file_from_python_names_run_dir_not_the_flag(tmp_path, monkeypatch):
    import proxima
    from proxima.config import ConfigError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(ConfigError) as e:
        proxima.train(proxima.PPOConfig(env_id="CartPole-v1", total_timesteps=512), quiet=True)
    assert re.fullmatch(r"runs/CartPole-v1__1__\d{8}-\d{6}: cannot be the default run directory: runs is a file, not a "
                        r"folder; pass run_dir= \(or set PPOConfig\.run_dir\) in a writable folder", str(e.value)), e.value


def test_a_default_run_directory_on_a_full_disk_says_to_free_space_and_to_pass_run_dir(tmp_path, monkeypatch):
    from proxima.rundir import cannot_create_message

    monkeypatch.chdir(tmp_path)
    full = OSError(errno.ENOSPC, "No space left on device")
    assert cannot_create_message(Path("runs/x__1__t"), full, default=True) == (
        "runs/x__1__t: cannot create the default run directory (No space left on device in .); free some space there; "
        "pass --run-dir in a writable folder")


# --- NCCL_SOCKET_IFNAME: empty entries are skipped, as NCCL's parser skips them --------------------------------------
@pytest.mark.parametrize("spec, selected", [
    ("^lo,", ["eth0", "eth1"]),  # a trailing comma leaves nothing more out
    ("bogus,", []),  # ... and selects nothing more
    ("eth0,,", ["eth0"]),
])
def test_nccl_socket_ifname_skips_empty_entries(spec, selected):
    from proxima.distributed import nccl_interfaces

    assert nccl_interfaces(spec, {"lo", "eth0", "eth1"}) == selected


def test_nccl_socket_ifname_on_a_machine_of_no_interfaces_says_none(monkeypatch):
    from proxima import distributed
    from proxima.config import ConfigError

    monkeypatch.setattr(distributed, "interface_addresses", lambda: set())
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='eth': selects no network interface with an address "
                                          r"here \(interfaces with one: none\); name one"):
        distributed.check_nccl_ifname({"NCCL_SOCKET_IFNAME": "eth"})


@pytest.mark.parametrize("cuda, nccl", [(False, True), (True, False), (True, True), (False, False)])
def test_nccl_is_used_only_where_cuda_and_nccl_both_are(cuda, nccl, monkeypatch):
    import torch
    import torch.distributed as dist

    from proxima.distributed import nccl_used

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: nccl)
    assert nccl_used() is (cuda and nccl)


class _Rendezvous(Exception):
    pass


@pytest.mark.parametrize("backend, checked", [("gloo", False), ("nccl", True), ("cpu:gloo,cuda:nccl", True)])
def test_only_a_backend_of_nccl_checks_nccl_socket_ifname_when_joining(backend, checked, monkeypatch):
    import torch.distributed as dist

    from proxima import distributed
    from proxima.config import ConfigError

    def rendezvous(*args, **kwargs):
        raise _Rendezvous()

    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo", "eth0"})
    monkeypatch.setattr(dist, "rendezvous", rendezvous)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    # a run on CUDA (join_group's cuda=, where it takes one): only the backend decides here
    on_cuda = {"cuda": True} if "cuda" in inspect.signature(distributed.join_group).parameters else {}
    with pytest.raises(ConfigError if checked else _Rendezvous):
        distributed.join_group(backend, **on_cuda)


def test_doctors_distributed_row_names_both_ifname_problems():
    from proxima import doctor

    info = doctor.collect(test_build=False)
    info["gloo_ifname_problem"] = "GLOO_SOCKET_IFNAME='bogus0': no network interface"
    info["nccl_ifname_problem"] = "NCCL_SOCKET_IFNAME='=bogus0': selects no network interface with an address here"
    row = next(line for line in doctor.format_report(info).splitlines() if line.strip().startswith("distributed"))
    assert row.endswith("(GLOO_SOCKET_IFNAME names no interface with an address: see the hints) "
                        "(NCCL_SOCKET_IFNAME selects no interface with an address: see the hints)"), row


def test_doctor_on_a_machine_with_cuda_and_nccl_reports_nccl_socket_ifname(monkeypatch):
    import torch
    import torch.distributed as dist

    from proxima import distributed, doctor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("proxima.device.cuda_op_problem", lambda device=None: "")
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo", "eth0"})
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=bogus0")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    info = doctor.collect(test_build=False)
    assert info["cuda_usable"] and info["distributed"]["nccl"]
    assert info["nccl_ifname_problem"] == (
        "NCCL_SOCKET_IFNAME='=bogus0': selects no network interface with an address here (interfaces with one: eth0, lo); "
        "name one of them (NCCL reads prefixes, '=' for exact names, '^' to leave them out; several: comma-separated), "
        "or unset it for NCCL's own choice")
    assert f"{info['nccl_ifname_problem']} (every rank of a multi-GPU torchrun or --nproc run would fail at its first " \
           "collective)" in info["hints"]


# --- the hyperparameters table: every string as config.yaml spells it, and an older table of YAML values ----------
STRINGS = ["CartPole-v1", "a:", "a:b", "m:C", "a ", "a b", "a #b", "a#b", "a,b", "yes", "Yes", "YES", "no", "No", "NO",
           "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL",
           "y", "n", "~", "1e-3", "1:30", "", "ALE/Pong-v5", "runs/x__1__t", "a: b", "-a", "a-", ".inf", "a|b"]


def test_every_string_cell_is_spelled_as_config_yaml_spells_it():
    from proxima.config import dump_yaml
    from proxima.logger import hyperparameters_table

    config = {f"k{i}": s for i, s in enumerate(STRINGS)}
    rows = hyperparameters_table(config).splitlines()[2:]
    table = dict(re.fullmatch(r"\|(k\d+)\|(.*)\|", row).groups() for row in rows)
    written = dict(line.split(": ", 1) for line in dump_yaml(config).splitlines())
    assert table == {k: v.replace("|", "\\|") for k, v in written.items()}
    assert table["k42"] == "a\\|b"  # a cell's '|' is escaped: the row keeps its two columns


def test_a_resume_of_an_older_table_of_yaml_values_and_unquoted_strings_writes_no_second_table():
    from proxima import logger

    config = {"env_id": "CartPole-v1", "run_dir": "1:30", "anneal_lr": True, "seed": None}
    earlier = "|param|value|\n|-|-|\n|env_id|CartPole-v1|\n|run_dir|1:30|\n|anneal_lr|true|\n|seed|null|"
    assert logger._same_table(config, earlier)
    assert not logger._same_table({**config, "anneal_lr": False}, earlier)
