"""Folders an RLHF run reads or rewrites are data. A model or tokenizer folder (which a run's config.yaml may
name, relative to where the resume starts) is loaded without running its Python files: transformers is never
left to ask on stdin, where a piped "y" would import them. Whatever stands at policy/, .policy.partial or
.policy.old is removed as it is (never opened, followed or waited on), and pruning leaves alone a folder at a
checkpoint's name: the resume finishes instead of hanging, failing at every try, or crashing."""

import json
import os
import shutil
import sys
import threading
import time

import pytest
from cli_helpers import snapshot
import yaml

from proxima.rlhf import loop, resume, rundir, train_rlhf
from proxima.rlhf.config import RLHFConfig
import warm_python

EVIL = 'open({marker!r}, "w").write("ran")\n'


@pytest.fixture(scope="module")
def finished(assets, tmp_path_factory):
    """A finished 2-step run with checkpoints of steps 1 and 2."""
    cfg = RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                     reward="proxima.rlhf.demo:keyword_sentiment", batch_size=8, num_minibatches=2, update_epochs=1,
                     max_new_tokens=4, lr=1e-3, steps=2, print_every=0, sample_every=1, checkpoint_every=1, plot=False,
                     run_dir=str(tmp_path_factory.mktemp("untrusted_folders") / "run"))
    return train_rlhf(cfg)


@pytest.fixture
def run(finished, tmp_path):
    return shutil.copytree(finished, tmp_path / "run", symlinks=True)


# ---------------------------------------------------------------------------------------------
# custom code in a model or tokenizer folder
# ---------------------------------------------------------------------------------------------
def _custom_model(assets, folder, marker) -> None:
    """The test model under an architecture transformers does not ship, whose auto_map names evil.py."""
    shutil.copytree(assets / "model", folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="evilgpt", auto_map={"AutoConfig": "evil.EvilConfig",
                                                  "AutoModelForCausalLM": "evil.EvilModel",
                                                  "AutoModelForSequenceClassification": "evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)) + (
        "from transformers import GPT2Config, GPT2LMHeadModel\n"
        "class EvilConfig(GPT2Config):\n    model_type = 'evilgpt'\n"
        "class EvilModel(GPT2LMHeadModel):\n    config_class = EvilConfig\n"))


def _custom_tokenizer(assets, folder, marker) -> None:
    """The test tokenizer, whose tokenizer_config.json names a class in evil_tok.py."""
    folder.mkdir()
    shutil.copy(assets / "model" / "tokenizer.json", folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "EvilTokenizer", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
         "auto_map": {"AutoTokenizer": ["evil_tok.EvilTokenizer", "evil_tok.EvilTokenizer"]}}))
    (folder / "evil_tok.py").write_text(EVIL.format(marker=str(marker)) + (
        "from transformers import PreTrainedTokenizerFast\n"
        "class EvilTokenizer(PreTrainedTokenizerFast):\n    pass\n"))


SHIPPED = {  # config.yaml field: (value, folder maker, the error line after "proxima resume: error: ")
    "policy": ("model_in", _custom_model, "--policy 'model_in': holds custom code (auto_map in config.json), which "
                                         "Proxima does not run; use a model of an architecture transformers ships"),
    "tokenizer": ("tok", _custom_tokenizer, "--tokenizer 'tok': holds custom code (auto_map in tokenizer_config.json), "
                                            "which Proxima does not run; use a tokenizer of a class transformers ships"),
    "reward": (["model_in"], _custom_model, "--reward 'model_in': holds custom code (auto_map in config.json), which "
                                            "Proxima does not run; use a model of an architecture transformers ships"),
}


@pytest.mark.parametrize("field", list(SHIPPED))
def test_a_folder_the_run_ships_with_custom_code_is_refused_even_with_y_on_stdin(assets, run, tmp_path, field):
    value, make, line = SHIPPED[field]
    marker = tmp_path / "PWNED"
    make(assets, run / (value[0] if isinstance(value, list) else value), marker)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config[field] = value
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    before = snapshot(run)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    res = warm_python.run([sys.executable, "-m", "proxima", "resume", "."], cwd=run, input="y\n", capture_output=True,
                          text=True, timeout=300, env=env)
    assert not marker.exists(), "the folder's Python file was imported"
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines() == [f"proxima resume: error: {line}"]
    assert "custom code" not in res.stdout  # no question asked
    assert snapshot(run) == before


# ---------------------------------------------------------------------------------------------
# what stands at policy/, .policy.partial or .policy.old
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def unblocker():
    """Opens the FIFOs at the given paths for writing whenever a reader waits on one, until the test ends: the
    code before the fix, which opened them, reads EOF then instead of hanging the test."""
    done = threading.Event()

    def start(*paths):
        def go():
            while not done.is_set():
                for path in paths:
                    try:
                        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                    except OSError:  # no reader yet, gone, or not a FIFO (any more)
                        pass
                time.sleep(0.05)

        threading.Thread(target=go, daemon=True).start()

    yield start
    done.set()


def _plant(run, name, kind) -> None:
    path = run / name
    if path.is_dir():
        shutil.rmtree(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "file":
        path.write_text("junk")
    else:  # a link to a folder of the run: removing it must not empty that folder
        path.symlink_to("checkpoints", target_is_directory=True)


@pytest.mark.parametrize("name, kind", [("policy", "fifo"), (".policy.partial", "fifo"), (".policy.old", "fifo"),
                                        ("policy", "file"), (".policy.old", "file"), (".policy.partial", "link")])
def test_a_non_folder_at_a_policy_name_is_removed_and_the_resume_writes_policy(run, name, kind, unblocker, capsys):
    (run / "summary.json").unlink()  # killed while writing its files: the resume writes them
    _plant(run, name, kind)
    unblocker(*(run / n for n in ("policy", ".policy.partial", ".policy.old")))
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert resume(run) == 0, capsys.readouterr().err
    assert "policy/ or summary.json is missing or incomplete; writing them" in capsys.readouterr().out
    assert (run / "policy").is_dir() and not (run / "policy").is_symlink() and loop.policy_complete(run / "policy")
    assert not os.path.lexists(run / ".policy.partial") and not os.path.lexists(run / ".policy.old")
    assert json.loads((run / "summary.json").read_text())["final_step"] == 2
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == checkpoints


# ---------------------------------------------------------------------------------------------
# a folder at a checkpoint's name
# ---------------------------------------------------------------------------------------------
def test_pruning_leaves_a_folder_at_a_checkpoint_name_and_prunes_the_files(run, capsys):
    """As PPO's pruning does: it counts and removes files only (IsADirectoryError, a traceback, before)."""
    folder = run / "checkpoints" / "step_000000.pt"
    folder.mkdir()
    (folder / "mine.txt").write_text("kept")
    assert resume(run, steps=4) == 0, capsys.readouterr().err
    files = [p.name for p in rundir.list_checkpoints(run) if p.is_file()]
    assert files == ["step_000002.pt", "step_000003.pt", "step_000004.pt"]  # the last --keep-checkpoints (3)
    assert (folder / "mine.txt").read_text() == "kept"
