"""A checkpoint zip of more records than any checkpoint holds is refused from its end record, before zipfile
reads the central directory (10^6 empty records made a load spend ~38 s and ~0.9 GB before any refusal)."""
from __future__ import annotations

import struct
import zipfile

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima.checkpoint import CheckpointError, load_checkpoint
from proxima.config import ConfigError


def _end_records(entries: int, directory: int, offset: int) -> bytes:
    """zip64's end record and locator, then the end record pointing at them (what zipfile writes past 65,535)."""
    zip64_at = offset + directory
    return (struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, directory, offset)
            + struct.pack("<4sLQL", b"PK\x06\x07", 0, zip64_at, 1)
            + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))


def _records(records: int) -> tuple:
    """(the local records, the central directory, its offset) of ``records`` empty stored records 'a/N', written
    with struct: zipfile's writestr takes seconds for 10^5."""
    local, central, offset = [], [], 0
    for i in range(records):
        name = f"a/{i}".encode()
        head = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0) + name
        central.append(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0,
                                   0, offset) + name)
        local.append(head)
        offset += len(head)
    return b"".join(local), b"".join(central), offset


def _stored_zip(path, records: int, declared: int = None) -> None:
    """A zip of ``records`` empty stored records 'a/N' whose zip64 end record declares ``declared`` (default: records)."""
    local, directory, offset = _records(records)
    path.write_bytes(local + directory + _end_records(records if declared is None else declared, len(directory), offset))


@pytest.fixture
def no_directory_read(monkeypatch):
    """zipfile.ZipFile (which reads the whole central directory) is never made."""
    def refused(*args, **kwargs):
        raise AssertionError("zipfile.ZipFile read the central directory")
    monkeypatch.setattr(zipfile, "ZipFile", refused)


def test_a_tiny_file_whose_end_record_claims_a_million_records_is_refused_from_that_record(tmp_path, no_directory_read):
    hostile = tmp_path / "claims.pt"
    hostile.write_bytes(_end_records(1_000_000, 0, 0))  # 98 bytes
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(hostile)
    assert str(e.value) == (f"{hostile}: not a Proxima checkpoint (a zip archive of 1,000,000 records; torch.save "
                            "writes at most 20,000 for a checkpoint of its 98 bytes)")


def test_a_plain_end_record_claiming_65535_records_is_refused_too(tmp_path, no_directory_read):
    hostile = tmp_path / "plain.pt"
    hostile.write_bytes(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 65535, 65535, 0, 0, 0))
    with pytest.raises(CheckpointError, match=r"plain\.pt: not a Proxima checkpoint \(a zip archive of 65,535 records; "
                                              r"torch\.save writes at most 20,000 for a checkpoint of its 22 bytes\)$"):
        load_checkpoint(hostile)


def test_a_real_archive_of_200k_empty_records_is_refused_before_zipfile_reads_it(tmp_path, no_directory_read):
    hostile = tmp_path / "many.pt"
    _stored_zip(hostile, 200_000)  # ~0.5 s, 19 MB
    size = hostile.stat().st_size
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(hostile)
    assert str(e.value) == (f"{hostile}: not a Proxima checkpoint (a zip archive of 200,000 records; torch.save writes "
                            f"at most {20_000 + size // 2048:,} for a checkpoint of its {size:,} bytes)")


def test_an_end_record_declaring_few_records_over_a_directory_of_many_is_refused_by_the_count_of_entries(
        tmp_path, no_directory_read):
    # zipfile reads entries until the directory's declared size is used up, whatever count the end record says
    hostile = tmp_path / "lies.pt"
    _stored_zip(hostile, 100_000, declared=5)
    size = hostile.stat().st_size
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(hostile)
    assert str(e.value).startswith(f"{hostile}: not a Proxima checkpoint (a zip archive of ")
    assert str(e.value).endswith(f" records; torch.save writes at most {20_000 + size // 2048:,} for a checkpoint of its "
                                 f"{size:,} bytes)")
    counted = int(str(e.value).split("archive of ")[1].split(" records")[0].replace(",", ""))
    assert 20_000 + size // 2048 < counted <= 100_000  # given up a MiB past the most a checkpoint holds


def test_the_count_is_the_most_a_checkpoint_of_that_size_holds_and_one_more_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "ARCHIVE_RECORDS", 3)
    at_most, over = tmp_path / "at_most.pt", tmp_path / "over.pt"
    _stored_zip(at_most, 3)
    _stored_zip(over, 4)
    assert over.stat().st_size < 2048  # archive_records: 3 + 0
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(at_most)
    assert "records" not in str(e.value)  # past the count: refused later (empty records are no torch archive)
    with pytest.raises(CheckpointError, match=r"over\.pt: not a Proxima checkpoint \(a zip archive of 4 records; "):
        load_checkpoint(over)


def test_a_count_split_across_reads_is_counted_once(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "ARCHIVE_RECORDS", 100)
    monkeypatch.setattr(ckpt, "_COUNT_CHUNK", 3)  # every signature read across a seam
    archive = tmp_path / "seams.pt"
    _stored_zip(archive, 150, declared=1)
    with archive.open("rb") as f:
        assert ckpt._count_entries(f, 0, archive.stat().st_size, 10**9) == 150
    # counted until one past the most (100 + 12,778 // 2048), a few bytes at a time
    with pytest.raises(CheckpointError, match=r"a zip archive of 107 records; torch\.save writes at most 106 for a "
                                              r"checkpoint of its 12,778 bytes\)$"):
        load_checkpoint(archive)


def test_a_central_directory_larger_than_the_file_before_the_end_record_is_a_damaged_archive(tmp_path, no_directory_read):
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"\0" * 100 + _end_records(1, 10**12, 0))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(damaged)
    assert str(e.value) == (f"{damaged}: corrupted checkpoint (damaged zip archive: its central directory claims "
                            "1,000,000,000,000 bytes, more than the 100 before its end record)")


def test_an_rlhf_load_refuses_the_same_archive_in_the_same_line(tmp_path, no_directory_read):
    from proxima.rlhf.rundir import load_checkpoint as load_rlhf_checkpoint

    hostile = tmp_path / "step_000001.pt"
    hostile.write_bytes(_end_records(1_000_000, 0, 0))
    with pytest.raises(ConfigError, match=r"step_000001\.pt: not a Proxima checkpoint \(a zip archive of 1,000,000 "):
        load_rlhf_checkpoint(hostile)


def test_a_checkpoint_torch_save_writes_still_passes_the_count(tmp_path):
    state = {f"t{i}": torch.zeros(1) for i in range(300)}
    path = tmp_path / "many_tensors.pt"
    torch.save(state, path)
    with path.open("rb") as f:
        ckpt._check_archive(path, f)  # 305 records: passes
        assert f.tell() == 0
