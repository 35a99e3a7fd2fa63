"""Small fixes left by earlier sessions: the empty checkpoint's line, the zip record cap without zipfile's private
reader, EFBIG among storage errors, flag hints of bench and eval, the default runs/ folder's line, NCCL_SOCKET_IFNAME,
and the TensorBoard hyperparameters table's strings."""
from __future__ import annotations

import errno
import re
import zipfile
from pathlib import Path

import pytest
import torch

from cli_helpers import run_main, tiny_cartpole_run
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


# --- 2. the zip record cap without zipfile's private _EndRecData -----------------------------------------------------
class _ZipfileWithout:
    """zipfile as a Python without the private _EndRecData would show it to checkpoint.py (zipfile's own
    is_zipfile keeps its reader: a future Python would have its own)."""

    def __getattr__(self, name):
        if name == "_EndRecData":
            raise AttributeError(name)
        return getattr(zipfile, name)


@pytest.fixture
def no_private_reader(monkeypatch):
    monkeypatch.setattr(ckpt, "zipfile", _ZipfileWithout())


def _archives(tmp_path) -> dict:
    from tests.unit.test_zipcount48 import _end_records, _stored_zip

    torch_file = tmp_path / "torch.pt"
    torch.save({"a": torch.zeros(3), "b": torch.ones(2)}, torch_file)
    commented, signed = tmp_path / "commented.zip", tmp_path / "signed.zip"
    for path, comment in ((commented, b"a comment"), (signed, b"PK\x05\x06 a comment that holds the signature")):
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("x/data.pkl", b"abc")
            zf.comment = comment
    zip64 = tmp_path / "zip64.pt"
    _stored_zip(zip64, 7, declared=300_000)
    claims = tmp_path / "claims.pt"
    claims.write_bytes(_end_records(1_000_000, 0, 0))
    return {"torch": torch_file, "commented": commented, "signed": signed, "zip64": zip64, "claims": claims}


def test_the_end_record_read_without_zipfile_is_zipfiles_own_reading(tmp_path):
    for name, path in _archives(tmp_path).items():
        with path.open("rb") as f:
            assert ckpt._read_end_record(f) == ckpt._end_record(f), name


def test_without_zipfiles_private_reader_the_record_cap_still_refuses_before_the_directory_is_read(
        tmp_path, no_private_reader, monkeypatch):
    archives = _archives(tmp_path)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(archives["claims"])
    assert str(e.value) == (f"{archives['claims']}: not a Proxima checkpoint (a zip archive of 1,000,000 records; "
                            "torch.save writes at most 20,000 for a checkpoint of its 98 bytes)")
    with pytest.raises(CheckpointError, match=r"zip64\.pt: not a Proxima checkpoint \(a zip archive of 300,000 "):
        load_checkpoint(archives["zip64"])


def test_without_zipfiles_private_reader_a_trained_checkpoint_still_loads(tmp_path_factory, no_private_reader):
    run_dir = tiny_cartpole_run(tmp_path_factory, "reader")
    state = load_checkpoint(run_dir)
    assert state["global_step"] == 128


# --- 3. a write past a file size limit (EFBIG) is a storage error with the size limit's advice ------------------------
def test_a_run_stopped_by_a_file_size_limit_says_the_limit_and_what_to_do(monkeypatch):
    from proxima import diskspace
    from proxima.diskspace import StorageError
    from proxima.run_setup import diagnose_failure

    monkeypatch.setattr(diskspace, "file_size_limit", lambda: 1 << 20)  # ulimit -f 1024
    too_large = OSError(errno.EFBIG, "File too large", "/data/run/metrics.csv")
    error = diagnose_failure(too_large, None, lambda: "its last checkpoint is step 4096")
    assert isinstance(error, StorageError)
    assert str(error) == ("/data/run/metrics.csv: could not write (File too large); this process may write files of at "
                          "most 1.0 MiB (its file size limit: ulimit -f, or a scheduler's): raise the limit (or choose a "
                          "folder on another filesystem) and try again; its last checkpoint is step 4096")


# --- 4. bench's --seed and eval's training flags get true hints, not difflib's --seconds and --help ------------------
def test_bench_given_seed_says_it_takes_none_not_seconds(capsys):
    code, out, err = run_main(["bench", "CartPole-v1", "--seed", "3"], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (
        "proxima bench: error: unrecognized arguments: --seed 3; --seed: bench takes no --seed: it measures steps per "
        "second, which the seed does not change (every line trains with its preset's seed); proxima train takes it "
        "(see proxima bench --help)")


EVAL_HINTS = [
    (["--lr", "0.1"], "--lr: a training setting: eval runs the trained policy as its checkpoint holds it and takes no "
                      "--lr; proxima train takes it"),
    (["--learning-rate", "0.1"], "--learning-rate: a training setting: eval runs the trained policy as its checkpoint "
                                 "holds it and takes no --lr; proxima train takes --lr"),
    (["--n-epochs", "4"], "--n-epochs: proxima train's --update-epochs stands for it; a training setting: eval runs the "
                          "trained policy as its checkpoint holds it and takes no --update-epochs; proxima train takes "
                          "--update-epochs"),
    (["--num-steps", "8"], "--num-steps: a training setting: eval runs the trained policy as its checkpoint holds it and "
                           "takes no --num-steps; proxima train takes it"),  # not difflib's --max-steps
    (["--total-timesteps", "1000"], "--total-timesteps: a training setting: eval runs the trained policy as its "
                                    "checkpoint holds it and takes no --total-timesteps; proxima train takes it, and "
                                    "proxima resume RUN --total-timesteps N continues the run with it"),
]


@pytest.mark.parametrize("flags, says", EVAL_HINTS, ids=lambda v: v[0] if isinstance(v, list) else "")
def test_eval_given_a_training_flag_says_it_is_one_and_who_takes_it(flags, says, tmp_path, capsys):
    code, out, err = run_main(["eval", str(tmp_path / "run"), *flags], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (f"proxima eval: error: unrecognized arguments: {' '.join(flags)}; {says} "
                                            "(see proxima eval --help)"), err


def test_eval_keeps_difflib_for_a_typo_of_its_own_flag(tmp_path, capsys):
    code, _, err = run_main(["eval", str(tmp_path / "run"), "--sed", "3"], capsys)
    assert code == 2 and "did you mean --seed?" in err and "training setting" not in err, err


# --- 5. the default run directory that cannot be made names no --run-dir the user did not pass -----------------------
def test_a_default_run_directory_under_a_file_says_it_is_the_default_and_to_pass_run_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("not a folder")
    code, out, err = run_main(["train", "CartPole-v1", "--total-timesteps", "512", "--quiet"], capsys)
    line = err.strip().splitlines()[-1]
    assert code == 2 and re.fullmatch(
        r"proxima train: error: runs/CartPole-v1__1__\d{8}-\d{6}: cannot be the default run directory: runs is a file, "
        r"not a folder; pass --run-dir in a writable folder", line), err


def test_a_default_population_directory_that_cannot_be_created_says_so_and_to_pass_run_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("not a folder")
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "512", "--quiet"], capsys)
    line = err.strip().splitlines()[-1]
    assert code == 2 and re.fullmatch(
        r"proxima train: error: runs/CartPole-v1__seeds1-2__\d{8}-\d{6}: cannot create the default run directory "
        r"\(Not a directory in runs\); pass --run-dir in a writable folder", line), err


def test_a_run_dir_given_keeps_its_flag_in_the_line(tmp_path, monkeypatch):
    from proxima.rundir import cannot_create_message

    monkeypatch.chdir(tmp_path)  # no runs/ here: '.' is the folder that refused it

    refused = OSError(errno.EACCES, "Permission denied")
    assert cannot_create_message(Path("ro/run"), refused) == (
        "--run-dir ro/run: cannot create it (Permission denied in .); choose another --run-dir")
    assert cannot_create_message(Path("runs/x__1__t"), refused, default=True) == (
        "runs/x__1__t: cannot create the default run directory (Permission denied in .); pass --run-dir in a writable folder")


# --- 6. NCCL_SOCKET_IFNAME, read in NCCL's syntax, checked where NCCL is used ------------------------------------------
HERE = {"lo", "eth0", "eth1", "docker0", "ib0"}


@pytest.mark.parametrize("spec, selected", [
    ("eth", ["eth0", "eth1"]),  # a prefix
    ("eth0", ["eth0"]),
    ("eth,ib", ["eth0", "eth1", "ib0"]),
    ("=eth", []),  # exact names: no interface is called 'eth'
    ("=eth0,ib0", ["eth0", "ib0"]),
    ("^docker,lo", ["eth0", "eth1", "ib0"]),  # all but these prefixes
    ("^=eth0", ["docker0", "eth1", "ib0", "lo"]),  # all but exactly eth0
    ("eth0:5000", ["eth0"]),  # a port is no part of the name
    ("bogus", []),
])
def test_nccl_socket_ifname_selects_interfaces_as_nccl_reads_it(spec, selected):
    from proxima.distributed import nccl_interfaces

    assert nccl_interfaces(spec, HERE) == selected


def test_nccl_socket_ifname_that_selects_nothing_is_one_line_naming_the_interfaces(monkeypatch):
    from proxima import distributed
    from proxima.config import ConfigError

    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo", "eth0"})
    distributed.check_nccl_ifname({"NCCL_SOCKET_IFNAME": "^docker"})  # eth0 and lo are left: fine
    distributed.check_nccl_ifname({})
    with pytest.raises(ConfigError) as e:
        distributed.check_nccl_ifname({"NCCL_SOCKET_IFNAME": "^eth,lo"})
    assert str(e.value) == (
        "NCCL_SOCKET_IFNAME='^eth,lo': selects no network interface with an address here (interfaces with one: eth0, lo); "
        "name one of them (NCCL reads prefixes, '=' for exact names, '^' to leave them out; several: comma-separated), "
        "or unset it for NCCL's own choice")


@pytest.mark.parametrize("cuda", [True, False])
def test_nproc_checks_nccl_socket_ifname_only_where_nccl_is_used(cuda, monkeypatch):
    from proxima import distributed, launch
    from proxima.config import ConfigError

    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo", "eth0"})
    monkeypatch.setattr(distributed, "nccl_used", lambda: cuda)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=bogus0")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    argv = ["train", "CartPole-v1", "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256"]
    launch._check(2, argv)  # --device cpu: its ranks never start NCCL, CUDA or not (review 49)
    if cuda:  # ranks on CUDA do (test_review49 has the run's --device resolved to it)
        with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='=bogus0': selects no network interface"):
            launch._check_nccl(torch.device("cuda", 0))
    else:  # a CPU machine's ranks join through gloo alone: NCCL never reads it
        launch._check_nccl(torch.device("cuda", 0))


def test_a_rank_joining_with_nccl_checks_nccl_socket_ifname_before_the_rendezvous(monkeypatch):
    from proxima import distributed
    from proxima.config import ConfigError

    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo", "eth0"})
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='ib': selects no network interface"):
        distributed.join_group("cpu:gloo,cuda:nccl", cuda=True)


def test_doctors_distributed_row_points_at_an_nccl_socket_ifname_problem():
    from proxima import doctor

    info = doctor.collect(test_build=False)
    info["nccl_ifname_problem"] = "NCCL_SOCKET_IFNAME='=bogus0': selects no network interface with an address here"
    row = next(line for line in doctor.format_report(info).splitlines() if line.strip().startswith("distributed"))
    assert row.endswith("(NCCL_SOCKET_IFNAME selects no interface with an address: see the hints)"), row


# --- 7. the TensorBoard hyperparameters table spells top-level strings as config.yaml does --------------------------
def test_hyperparameters_table_quotes_a_string_where_config_yaml_does():
    from proxima.config import dump_yaml
    from proxima.logger import hyperparameters_table

    config = {"env_id": "CartPole-v1", "run_dir": "1:30", "device": "cuda:0", "note": "yes", "empty": "", "tag": "1e-3",
              "path": "ALE/Pong-v5", "hidden_sizes": [64, 64]}
    assert hyperparameters_table(config) == (
        "|param|value|\n|-|-|\n|env_id|CartPole-v1|\n|run_dir|'1:30'|\n|device|cuda:0|\n|note|'yes'|\n|empty|''|\n"
        "|tag|'1e-3'|\n|path|ALE/Pong-v5|\n|hidden_sizes|[64, 64]|")
    strings = {k: v for k, v in config.items() if isinstance(v, str)}
    written = dict(line.split(": ", 1) for line in dump_yaml(strings).splitlines())
    table = dict(row.strip("|").split("|") for row in hyperparameters_table(config).splitlines()[2:])
    assert {k: table[k] for k in written} == written  # every string cell as config.yaml spells it


def test_a_resume_of_a_run_whose_table_showed_strings_unquoted_writes_no_second_table():
    from proxima import logger

    config = {"env_id": "CartPole-v1", "run_dir": "1:30", "lr": 0.00025}
    earlier = "|param|value|\n|-|-|\n|env_id|CartPole-v1|\n|run_dir|1:30|\n|lr|0.00025|"  # before strings were quoted
    assert logger._same_table(config, earlier)
    assert not logger._same_table({**config, "run_dir": "1:31"}, earlier)
