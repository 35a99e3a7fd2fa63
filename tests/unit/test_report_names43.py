"""A run or population folder's name is whoever made it's (a downloaded run): report.md shows it in a
code span where it holds markup, never as HTML a viewer renders: the title, the tables' columns, the
comparison's labels and verdict, and the 'from' line."""
import shutil

from proxima import population_report as pr
from tests.cli_helpers import run_main, tiny_cartpole_run
from tests.integration import test_review34_compare as cmp

EVIL = "p<img src=x onerror=alert(1)>"


def test_a_population_folder_name_with_html_is_shown_in_code_spans(tmp_path):
    a = cmp._population(tmp_path / EVIL, {0.1: [100.0, 102.0, 104.0, 106.0, 108.0], 0.2: [1.0, 2.0, 3.0, 4.0, 5.0]})
    b = cmp._population(tmp_path / "plain", {0.1: [10.0, 20.0, 30.0, 41.0, 50.0]})
    single = pr.build_populations_report([a], out=tmp_path / "one.md", episodes=0).read_text()
    assert single.splitlines()[0] == f"# Population report: `{EVIL}`"
    both = pr.build_populations_report([a, b], out=tmp_path / "two.md", episodes=0).read_text()
    assert both.splitlines()[0] == f"# Population report: `{EVIL}`, plain"
    for text in (single, both):  # every <img is inside the name's code span (its labels: "`NAME: lr=0.1`" too)
        assert "<img" not in text.replace(f"`{EVIL}`", "").replace(f"`{EVIL}: lr=0.1`", "").replace(
            f"`{EVIL}: lr=0.2`", ""), text
    assert any(ln.startswith(f"- `{EVIL}`: ") for ln in both.splitlines())


def test_a_run_folder_name_with_html_is_shown_in_code_spans(tmp_path_factory, tmp_path, capsys):
    run = tiny_cartpole_run(tmp_path_factory, "names43")
    evil = tmp_path / "r<b>x"
    shutil.copytree(run, evil)
    code, _, err = run_main(["report", str(run), str(evil), "--out", str(tmp_path / "r.md")], capsys)
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    assert "<b>" not in text.replace("`r<b>x`", "").replace(f"`{evil}`", ""), text
    assert "`r<b>x`" in text
