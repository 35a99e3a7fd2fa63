"""Small fixes left by earlier sessions: the empty checkpoint's line, the zip record cap without zipfile's private
reader, EFBIG among storage errors, flag hints of bench and eval, the default runs/ folder's line, NCCL_SOCKET_IFNAME,
and the TensorBoard hyperparameters table's strings."""
from __future__ import annotations

import zipfile

import pytest

from proxima import checkpoint as ckpt
from proxima.checkpoint import CheckpointError, load_checkpoint

CUT_SHORT = "; it was cut short when written or copied: use another checkpoint of the run, or copy the file again"


# --- 1. an empty file or a zip of no records is a cut-short checkpoint, with what to do ------------------------------
def test_empty_file_says_it_was_cut_short_and_what_to_do(tmp_path):
    empty = tmp_path / "step_1.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(empty)
    assert str(e.value) == f"{empty}: empty file (0 bytes), not a checkpoint{CUT_SHORT}"


def test_zip_of_no_records_is_truncated_not_an_unpickling_failure(tmp_path):
    hollow = tmp_path / "step_1.pt"
    zipfile.ZipFile(hollow, "w").close()  # 22 bytes: the end record alone
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(hollow)
    assert str(e.value) == f"{hollow}: truncated checkpoint (an empty zip archive, 22 bytes){CUT_SHORT}"
