"""A run directory is data: plot, report and resume read its files without blocking on a FIFO
planted at a file's name and without reading a file past its size cap (rundir.read_run_bytes: a
sparse file claims gigabytes for free), and draw the text they hold (env ids, run names) as written,
never as matplotlib $mathtext$. Each is one line naming the file (exit 2, nothing written), or, where
the reader treats an unreadable file as absent (plot's config.yaml), a note and the curve."""

from __future__ import annotations

import csv
import json
import os
import stat
from pathlib import Path

import pytest

from proxima import report, rundir
from proxima.logger import CSV_COLUMNS, drop_events_after, logged_past, read_csv_lines, truncate_csv
from proxima.plot import PlotError, read_metrics
from tests.cli_helpers import one_error_line, run_main, snapshot

# a FIFO blocks a plain read forever: without the fix these tests fail by this timeout instead of hanging
FIFO_TIMEOUT = 120


def _write_run(d: Path, env_id: str = "CartPole-v1") -> Path:
    """A finished run by hand: config.yaml, meta.json, eval.json of its last step, metrics.csv of 4 rows."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"env_id: {json.dumps(env_id)}\nseed: 1\n")
    (d / "meta.json").write_text(json.dumps({"kind": "ppo", "versions": {"proxima": "0"}}))
    (d / "eval.json").write_text(json.dumps({"mean_return": 100.0, "std_return": 1.0, "episodes": 2, "returns": [99.0, 101.0],
                                             "deterministic": True, "global_step": 2048}))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i in range(4):
            w.writerow({"iteration": i + 1, "global_step": 512 * (i + 1), "time": 0.1 * (i + 1), "episodes": 3,
                        "charts/episodic_return": 20.0 + i})
    return d


def _replace_with_fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _replace_with_sparse(path: Path, size: int) -> None:
    """A file of ``size`` bytes that takes no disk (truncate -s), as a planted one would."""
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def _listing(folder: Path) -> dict:
    """{relative path: (kind, size)}: what a command must leave as it found (never reads a file's bytes)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = (stat.S_IFMT(st.st_mode), st.st_size if stat.S_ISREG(st.st_mode) else None)
    return out


# ------------------------------------------------------------------------------------ config.yaml, eval.json, meta.json
@pytest.mark.timeout(FIFO_TIMEOUT)
def test_a_fifo_at_config_yaml_is_one_line_for_report_and_a_note_for_plot(tmp_path, capsys):
    run = _write_run(tmp_path / "run")
    _replace_with_fifo(run / "config.yaml")
    before = _listing(run)
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and line.startswith(f"{run / 'config.yaml'}: is not a regular file"), line
    assert _listing(run) == before  # no report.md, no curve.png

    # plot treats an unreadable config.yaml as absent (the env is 'unknown'): it draws, and says why
    code, out, err = run_main(["plot", str(run)], capsys)
    assert (code, out.strip()) == (0, f"wrote {run / 'curve.png'}"), err
    assert err.strip() == (f"proxima: note: {run / 'config.yaml'}: is not a regular file (a FIFO, device or socket); the run "
                           "directory was edited; its config is not read (env 'unknown')")


@pytest.mark.parametrize("name", ["config.yaml", "eval.json", "meta.json"])
def test_a_run_text_file_over_its_cap_is_one_line_for_report(tmp_path, capsys, name):
    run = _write_run(tmp_path / "run")
    _replace_with_sparse(run / name, rundir.TEXT_MAX_BYTES + 1)
    before = _listing(run)
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 2
    cap = report.CONFIG_MAX_BYTES if name == "config.yaml" else rundir.TEXT_MAX_BYTES  # a config.yaml's is 1 MiB
    assert one_error_line(err, "proxima report") == (f"{run / name}: {rundir.TEXT_MAX_BYTES + 1:,} bytes, more than the "
                                                     f"{cap:,} a run writes there; the run directory was "
                                                     "damaged or edited")
    assert _listing(run) == before


def test_plot_refuses_a_run_whose_config_yaml_is_over_its_cap_with_reports_line(tmp_path, capsys):
    run = _write_run(tmp_path / "run")
    _replace_with_sparse(run / "config.yaml", rundir.TEXT_MAX_BYTES + 1)
    code, _, err = run_main(["plot", str(run), "--out", str(tmp_path / "c.png")], capsys)
    assert code == 2 and not (tmp_path / "c.png").exists()
    assert one_error_line(err, "proxima plot") == (f"{run / 'config.yaml'}: {rundir.TEXT_MAX_BYTES + 1:,} bytes, more "
                                                   f"than the {1 << 20:,} a run writes there; the run directory was "
                                                   "damaged or edited")  # report.CONFIG_MAX_BYTES, report's line


# ------------------------------------------------------------------------------------ metrics.csv
@pytest.mark.timeout(FIFO_TIMEOUT)
def test_read_csv_lines_refuses_a_fifo_without_waiting_on_it(tmp_path):
    path = tmp_path / "metrics.csv"
    os.mkfifo(path)
    with pytest.raises(rundir.RunFileError, match=r"metrics\.csv: is not a regular file"):
        read_csv_lines(path)


def test_a_metrics_csv_over_its_cap_is_one_line_for_plot_and_report(tmp_path, capsys):
    run = _write_run(tmp_path / "run")
    _replace_with_sparse(run / "metrics.csv", rundir.LOG_MAX_BYTES + 1)
    want = (f"{run / 'metrics.csv'}: {rundir.LOG_MAX_BYTES + 1:,} bytes, more than the {rundir.LOG_MAX_BYTES:,} a run "
            "writes there; the run directory was damaged or edited")
    with pytest.raises(PlotError) as e:
        read_metrics(run)
    assert str(e.value) == want
    before = _listing(run)
    for command in (["plot", str(run)], ["report", str(run), "--episodes", "0"]):
        code, _, err = run_main(command, capsys)
        assert (code, one_error_line(err, f"proxima {command[0]}")) == (2, want)
        assert _listing(run) == before


@pytest.mark.timeout(FIFO_TIMEOUT)
@pytest.mark.parametrize("kind", ["fifo", "sparse"])
def test_the_resume_readers_of_metrics_csv_stop_with_a_line_and_leave_it(tmp_path, kind):
    path = tmp_path / "metrics.csv"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        _replace_with_sparse(path, rundir.LOG_MAX_BYTES + 1)
    for read in (lambda: logged_past(path, 0), lambda: truncate_csv(path, 0)):
        with pytest.raises(rundir.RunDirError) as e:  # a ConfigError: one line from the CLI, never "disk full"
            read()
        assert str(e.value).startswith(f"{path}: ") and str(e.value).endswith("; proxima resume reads and rewrites it")
    st = path.lstat()
    assert stat.S_ISFIFO(st.st_mode) if kind == "fifo" else st.st_size == rundir.LOG_MAX_BYTES + 1


def test_an_event_file_over_its_cap_stops_the_rewrite_of_a_resume_with_a_line(tmp_path):
    events = tmp_path / "events.out.tfevents.1700000000.host.1.0"
    _replace_with_sparse(events, rundir.LOG_MAX_BYTES + 1)
    with pytest.raises(rundir.RunDirError, match=r"tfevents.*more than the 2,147,483,648 a run writes there"):
        drop_events_after(tmp_path, 0)
    assert events.stat().st_size == rundir.LOG_MAX_BYTES + 1


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 2-iteration CartPole run (checkpoint at step 128)."""
    from proxima import cli

    run = tmp_path_factory.mktemp("runfiles") / "run"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "128", "--num-envs", "4",
                     "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "0",
                     "--threads", "1", "--no-progress", "--quiet"]) == 0
    return run


@pytest.mark.timeout(FIFO_TIMEOUT)
def test_resume_of_a_run_with_a_fifo_at_metrics_csv_is_one_line_and_changes_nothing(trained, tmp_path, capsys):
    import shutil

    run = Path(shutil.copytree(trained, tmp_path / "run"))
    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace(str(trained), str(run)))
    _replace_with_fifo(run / "metrics.csv")
    before = snapshot(run)  # a FIFO is listed, never read
    code, _, err = run_main(["resume", str(run)], capsys)  # complete: only rows logged past the checkpoint would go
    assert code == 2, err
    assert [ln for ln in err.splitlines() if "error:" in ln] == [
        f"proxima resume: error: {run / 'metrics.csv'}: is not a regular file (a FIFO, device or socket); the run "
        "directory was edited; proxima resume reads and rewrites it"]
    assert "Traceback" not in err
    assert snapshot(run) == before  # the lock released, nothing written


@pytest.mark.timeout(FIFO_TIMEOUT)
def test_resume_that_trains_on_stops_at_a_fifo_at_metrics_csv_and_releases_the_lock(trained, tmp_path, capsys):
    import shutil

    run = Path(shutil.copytree(trained, tmp_path / "run"))
    _replace_with_fifo(run / "metrics.csv")
    before = {name: (run / name).read_bytes() for name in ("config.yaml", "meta.json")}
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192"], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert [ln for ln in err.splitlines() if "error:" in ln] == [
        f"proxima resume: error: {run / 'metrics.csv'}: is not a regular file (a FIFO, device or socket); the run "
        "directory was edited; proxima resume reads and rewrites it"]
    assert stat.S_ISFIFO((run / "metrics.csv").lstat().st_mode)
    assert not (run / rundir.LOCK_NAME).exists() and sorted(p.name for p in (run / "checkpoints").iterdir()) == \
        sorted(p.name for p in (trained / "checkpoints").iterdir())
    # refused before the resume rewrote anything: no new total in config.yaml, no resume entry in meta.json
    assert {name: (run / name).read_bytes() for name in ("config.yaml", "meta.json")} == before


# ------------------------------------------------------------------------------------ text drawn as written
def _drawn_figures(monkeypatch) -> list:
    """The figures plot_runs saves, as they are saved (savefig still writes them)."""
    from matplotlib.figure import Figure

    saved, savefig = [], Figure.savefig

    def spy(self, *args, **kwargs):
        saved.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return saved


def test_text_from_run_files_is_drawn_as_written_not_as_mathtext(tmp_path, capsys, monkeypatch):
    env = "Cart$\\frac{Pole$"  # not valid mathtext: parsed, it ended plot and report in a traceback
    run = _write_run(tmp_path / "r$x^{$", env_id=env)
    saved = _drawn_figures(monkeypatch)
    code, out, err = run_main(["plot", str(run)], capsys)
    assert (code, out.strip()) == (0, f"wrote {run / 'curve.png'}"), err
    ax = saved[-1].axes[0]
    assert ax.get_title() == env and not ax.title.get_parse_math()
    legend = ax.get_legend().get_texts()
    assert [t.get_text() for t in legend] == ["r$x^{$"] and not any(t.get_parse_math() for t in legend)
    (run / "curve.png").unlink()
    code, out, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "](report_curve.png)" in text and "No curve" not in text and (run / "report_curve.png").is_file()


def test_a_curve_matplotlib_cannot_draw_is_a_line_for_plot_and_a_no_curve_note_in_the_report(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    def fails(self, *args, **kwargs):  # how matplotlib's mathtext parser fails: a ValueError of several lines
        raise ValueError("\nCart$\\frac{Pole$\n     ^\nParseSyntaxException: Expected \\frac{num}{den}, found '{'")

    monkeypatch.setattr(Figure, "savefig", fails)
    run = _write_run(tmp_path / "run")
    before = _listing(run)
    code, _, err = run_main(["plot", str(run)], capsys)
    why = "could not draw the curve (ParseSyntaxException: Expected \\frac{num}{den}, found '{')"
    assert (code, one_error_line(err, "proxima plot")) == (2, f"{run / 'curve.png'}: {why}")
    assert _listing(run) == before  # no image, no temp file
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)  # docs/reliability.md: report.md still written
    assert code == 0, err
    assert f"No curve: {run / 'report_curve.png'}: {why}" in (run / "report.md").read_text()
    assert sorted(_listing(run)) == sorted([*before, "report.md"])


# ------------------------------------------------------------------------------------ resume's compare-then-write, populations
def test_a_resume_that_trains_on_replaces_a_sparse_config_yaml_without_reading_it(trained, tmp_path, capsys):
    """A resume compares config.yaml with what it runs before rewriting it: no further than that text's
    length (a planted 30 GB sparse file was read whole: MemoryError)."""
    import shutil

    run = Path(shutil.copytree(trained, tmp_path / "run"))
    _replace_with_sparse(run / "config.yaml", 30 << 30)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--no-progress", "--quiet"], capsys)
    assert code == 0 and "Traceback" not in err, err
    text = (run / "config.yaml").read_text()
    assert "total_timesteps: 192" in text and len(text) < 10_000


def test_holds_text_reads_no_further_than_the_text(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("a: 1\n")
    assert rundir.holds_text(path, "a: 1\n") and not rundir.holds_text(path, "a: 2\n")
    assert not rundir.holds_text(path, "a: 1")  # longer than the text: not the same
    _replace_with_sparse(path, 30 << 30)
    assert not rundir.holds_text(path, "a: 1\n")
    assert not rundir.holds_text(tmp_path / "missing.yaml", "")


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    from proxima import cli

    run = tmp_path_factory.mktemp("popfiles") / "pop"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1,2", "--run-dir", str(run), "--total-timesteps", "128",
                     "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
                     "--eval-episodes", "0", "--threads", "1", "--no-progress", "--quiet"]) == 0
    return run


@pytest.mark.timeout(FIFO_TIMEOUT)
@pytest.mark.parametrize("command", ["report", "resume"])
def test_a_fifo_at_population_json_is_one_line(population, tmp_path, capsys, command):
    import shutil

    run = Path(shutil.copytree(population, tmp_path / "pop"))
    _replace_with_fifo(run / "population.json")
    argv = ["report", str(run), "--episodes", "0", "--out", str(tmp_path / "r.md")] if command == "report" else ["resume", str(run)]
    code, _, err = run_main(argv, capsys)
    assert code == 2 and "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(errors) == 1 and str(run / "population.json") in errors[0], err
    assert stat.S_ISFIFO((run / "population.json").lstat().st_mode)


@pytest.mark.timeout(FIFO_TIMEOUT)
@pytest.mark.parametrize("command", ["plot", "report"])
def test_a_fifo_at_metrics_csv_is_named_as_such_not_as_missing(tmp_path, capsys, command):
    run = _write_run(tmp_path / "run")
    _replace_with_fifo(run / "metrics.csv")
    argv = [command, str(run), "--out", str(tmp_path / ("c.png" if command == "plot" else "r.md"))]
    if command == "report":
        argv += ["--episodes", "0"]
    code, _, err = run_main(argv, capsys)
    assert code == 2, err
    assert f"{run / 'metrics.csv'}: is not a regular file" in err and "no metrics.csv" not in err, err
