"""Mutation tests for small fixes 48 (7f0a4fe, d44eba1): a preset file's shapes (an empty or missing config, long
values, non-string keys), the 1-sample minibatch note's bounds and who prints it, bench's --minibatch-size hint,
and the checkpoint zip's record count (its window: the central directory alone, zip64 or not; a count across
read seams; the end record's total)."""

from __future__ import annotations

import struct

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima.checkpoint import CheckpointError, load_checkpoint
from tests.cli_helpers import error_line, run_main
from tests.unit.test_small48 import ONE_SAMPLE_NOTE, SB3_COPY
from tests.unit.test_zipcount48 import _records, _stored_zip


# ------------------------------------------------------------------ 1. preset files: what is legal, what the line says
# preset_dir: tests/conftest.py's (the shipped preset files in a folder of the test's own)


def test_a_preset_with_an_empty_or_no_config_is_a_preset_of_no_settings(preset_dir, capsys):
    from proxima import presets

    (preset_dir / "zz_bare.yaml").write_text("CartPole-v1:\n  bare:\n    description: nothing set\n"
                                             "  blank:\n    description: config left empty\n    config:\n")
    known = presets.all_presets()["CartPole-v1"]
    assert known["bare"]["config"] == {} and known["blank"]["config"] == {}
    for name in ("bare", "blank"):
        code, out, err = run_main(["train", "CartPole-v1", "--preset", name, "--total-timesteps", "2048", "--dry-run"],
                                  capsys)
        assert code == 0 and "error" not in err, err
        assert "num_envs:" in out


def _broken_line(preset_dir, capsys, text: str) -> str:
    broken = preset_dir / "zz_broken.yaml"
    broken.write_text(text)
    code, _, err = run_main(["presets"], capsys)
    return error_line(code, err, f"proxima presets: error: preset file {broken}")


def test_a_long_value_is_cut_to_40_characters_and_one_of_40_is_whole(preset_dir, capsys):
    listed = _broken_line(preset_dir, capsys, "Broken-v0:\n  default: [%s]\n" % ", ".join(str(i) for i in range(30)))
    assert " at line 2: preset Broken-v0/default is a list ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11...), not a " in listed
    whole = _broken_line(preset_dir, capsys, "Broken-v0:\n  default: 'abcdefghijklmnopqrstuvwxyz0123456789AB'\n")
    assert " at line 2: preset Broken-v0/default is a str ('abcdefghijklmnopqrstuvwxyz0123456789AB'), not a " in whole


def test_an_env_id_yaml_reads_as_a_number_still_gets_its_line(preset_dir, capsys):
    line = _broken_line(preset_dir, capsys, "# a year, not an env\n2024: 3\n")
    assert " at line 2: the entry of 2024 is an int (3), not a mapping of preset name" in line


# ------------------------------------------------------------------ 2. the 1-sample minibatch note
def _note_of(argv: list, capsys) -> tuple:
    code, _, err = run_main(["train", "CartPole-v1", *argv, "--no-norm-adv", "--dry-run"], capsys)
    return code, [ln for ln in err.splitlines() if "1 sample" in ln], err


def test_the_note_starts_at_a_batch_of_8_and_not_below(capsys):
    code, notes, err = _note_of(["--num-envs", "1", "--num-steps", "8", "--num-minibatches", "8",
                                 "--total-timesteps", "64"], capsys)
    assert code == 0 and len(notes) == 1, err
    assert "(the batch is num_envs 1 x num_steps 8 = 8), 8 gradient steps an epoch" in notes[0]
    code, notes, err = _note_of(["--num-envs", "1", "--num-steps", "4", "--num-minibatches", "4",
                                 "--total-timesteps", "64"], capsys)
    assert code == 0 and notes == [], err


def test_the_note_writes_a_batch_of_thousands_with_its_comma(capsys):
    code, notes, err = _note_of(["--num-envs", "4", "--num-steps", "256", "--num-minibatches", "1024",
                                 "--total-timesteps", "1024"], capsys)
    assert code == 0 and len(notes) == 1, err
    assert "= 1,024), 1,024 gradient steps an epoch" in notes[0]
    assert "(--num-minibatches 1 for SB3's batch_size 1024)" in notes[0]


def test_no_note_before_validates_refusal_alone(capsys):
    code, err = run_main(["train", *SB3_COPY, "--lr", "-1", "--dry-run"], capsys)[::2]
    assert error_line(code, err) == "proxima train: error: --lr -1.0: must be positive"
    assert "1 sample" not in err


def test_no_note_before_the_refusal_of_the_nproc_batch(capsys):
    # valid for one process; 2 processes make a batch of 128 > 100: validate's refusal with the world size alone
    argv = [*SB3_COPY[:-1], "100", "--nproc", "2", "--dry-run"]
    code, _, err = run_main(["train", *argv], capsys)
    error_line(code, err, "x 2 processes = 128 steps) is larger than --total-timesteps 100")
    assert "1 sample" not in err


@pytest.mark.parametrize("name, value", [("RANK", "1"), ("PROXIMA_LAUNCH_COMMAND", "proxima train")],
                         ids=["torchrun-rank-1", "launcher-rank"])
def test_the_note_is_rank_0s_of_a_run_started_by_hand_only(name, value, monkeypatch, capsys):
    monkeypatch.setenv(name, value)
    code, _, err = run_main(["train", *SB3_COPY, "--dry-run"], capsys)
    assert code == 0 and "1 sample" not in err, err


def test_a_resume_typing_the_same_flags_is_not_noted(tmp_path, capsys):
    run = tmp_path / "r"
    code, _, err = run_main(["train", *SB3_COPY, "--run-dir", str(run), "--no-progress"], capsys)
    assert code == 0 and err.count(ONE_SAMPLE_NOTE) == 1, err
    code, _, err = run_main(["train", *SB3_COPY[:-1], "256", "--resume", str(run), "--dry-run"], capsys)
    assert code == 0, err
    assert "1 sample" not in err


# ------------------------------------------------------------------ 3. bench --minibatch-size: train's hint too
def test_bench_minibatch_size_gets_trains_hint(capsys):
    code, _, err = run_main(["bench", "CartPole-v1", "--minibatch-size", "64"], capsys)
    assert error_line(code, err) == (
        "proxima bench: error: unrecognized arguments: --minibatch-size 64; --minibatch-size: proxima train's "
        "--num-minibatches stands for it (it counts minibatches: --num-envs x --num-steps / your minibatch size); bench "
        "trains with its preset's minibatches: --preset NAME picks another (`proxima presets ENV_ID` lists them) "
        "(see proxima bench --help)")


# ------------------------------------------------------------------ 4. the checkpoint zip's record count
def _plain_zip(path, records: int, declared: int, comment: bytes = b"", this_disk: int = None) -> None:
    """A zip of ``records`` empty stored records with a plain end record (no zip64) declaring ``declared``
    (``this_disk``: the entries on this disk it declares, default the same) and ``comment``."""
    local, directory, offset = _records(records)
    this_disk = declared if this_disk is None else this_disk
    path.write_bytes(local + directory
                     + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, this_disk, declared, len(directory), offset,
                                   len(comment)) + comment)


@pytest.mark.parametrize("zip64", [False, True], ids=["plain", "zip64"])
def test_entries_past_the_most_are_counted_exactly_whatever_the_end_record_declares(tmp_path, monkeypatch, zip64):
    monkeypatch.setattr(ckpt, "ARCHIVE_RECORDS", 3)
    over = tmp_path / "over.pt"
    (_stored_zip if zip64 else _plain_zip)(over, 4, declared=1)
    size = over.stat().st_size
    assert size < 2048
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(over)
    assert str(e.value) == (f"{over}: not a Proxima checkpoint (a zip archive of 4 records; torch.save writes at most 3 "
                            f"for a checkpoint of its {size:,} bytes)")


def test_signatures_in_a_zip_comment_are_not_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "ARCHIVE_RECORDS", 3)
    commented = tmp_path / "commented.pt"
    _plain_zip(commented, 3, declared=3, comment=b"PK\x01\x02" * 5)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(commented)
    assert "records" not in str(e.value)  # 3 entries: past the count, refused later (no torch archive)


def test_a_checkpoint_whose_tensor_bytes_hold_the_entry_signature_passes(tmp_path):
    # 25,000 signatures in the data, more than the 20,000 + 48 a checkpoint of its size holds: only the
    # central directory's entries count
    data = torch.frombuffer(bytearray(b"PK\x01\x02" * 25_000), dtype=torch.uint8).clone()
    path = tmp_path / "signatures.pt"
    torch.save({"weights": data}, path)
    with path.open("rb") as f:
        ckpt._check_archive(path, f)
        assert f.tell() == 0


@pytest.mark.parametrize("chunk", [4, 5, 7, 50, 64])
def test_the_count_across_reads_of_any_size_is_exact(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(ckpt, "_COUNT_CHUNK", chunk)
    archive = tmp_path / "seams.pt"
    _stored_zip(archive, 150, declared=1)
    with archive.open("rb") as f:
        assert ckpt._count_entries(f, 0, archive.stat().st_size, 10**9) == 150


def test_an_end_record_whose_total_claims_65535_is_refused_whatever_this_disk_says(tmp_path):
    hostile = tmp_path / "total.pt"
    hostile.write_bytes(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 65535, 0, 0, 0))
    with pytest.raises(CheckpointError, match=r"total\.pt: not a Proxima checkpoint \(a zip archive of 65,535 records; "):
        load_checkpoint(hostile)


def test_an_empty_zip_is_no_damaged_directory(tmp_path):
    import zipfile

    empty = tmp_path / "empty.pt"
    zipfile.ZipFile(empty, "w").close()  # its directory: 0 bytes, at 0
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(empty)
    assert "central directory" not in str(e.value) and "records" not in str(e.value)
