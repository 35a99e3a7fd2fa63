"""Review 31: every number the docs claim is true, scoped (machine, seeds, date, preset) and traceable to
benchmarks/results/. The fast preset became 96 envs x 16 steps at lr 8e-3 on 2026-12-05, yet pages still
gave the 256-env preset's figures as today's; the gpu preset (three CUDA graph replays) was described as
if it had run, though no GPU has run it; issue 12's item 4 was called "met" where the AVX2 EPYC's tables
say 0.87; a population table named a machine and torch that its results file does not record."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cli_helpers import run_main
from proxima.config import FIELDS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def read(rel: str) -> str:
    return (ROOT / rel).read_text()


def doc_texts() -> dict[str, str]:
    """Every page a user reads for numbers, the notebook's text cells and the presets' descriptions."""
    pages = {p.relative_to(ROOT).as_posix(): p.read_text() for p in
             [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    nb = json.loads(read("notebooks/quickstart.ipynb"))
    pages["notebooks/quickstart.ipynb"] = "\n\n".join(
        "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for path in sorted((ROOT / "proxima" / "presets").glob("*.yaml")):
        pages[path.relative_to(ROOT).as_posix()] = path.read_text()
    return pages


def flat(text: str) -> str:
    """``text`` with every run of whitespace one space: a phrase the docs wrap still matches."""
    return " ".join(text.split())


def paragraphs(text: str) -> list[str]:
    return [flat(p) for p in re.split(r"\n\s*\n", text) if p.strip()]


# What dates a 256-env figure as the old fast preset's: the day it was measured, or a name that says
# it is the old preset. A bare "previous" or "of then" does not (it dates nothing a reader can check),
# and a marker anywhere in the paragraph does not: it must be within NEAR characters of the figure.
DATE_MARKER = re.compile(r"2026-11-30|2026-12-01|2026-12-02|256-env preset|\bprevious preset\b")
NEAR = 200
OLD_SHAPE = re.compile(r"256 envs|256 acting rows|1,024-row minibatches|of 134\b|~40 ms alone")
MENTIONS_FAST = re.compile(r"fast preset|--preset\s+fast|`fast`|\bfast\b.*preset")
# 256-env figures in a paragraph that mentions the fast preset but are not the preset's
NOT_THE_PRESET = {
    # PureJaxRL's comparison shape, in the paragraph after the `--preset fast` command block
    "benchmarks/README.md": ("on this machine's CPU, 256 envs x 16 steps: 9.2-11.2 s of `jit_only_seconds`",),
}


def stale_figures(name: str, text: str) -> list[str]:
    """Each 256-env figure in ``text`` (page ``name``) that a paragraph mentioning the fast preset gives
    with no date marker near it."""
    stale = []
    for para in paragraphs(text):
        if not MENTIONS_FAST.search(para):
            continue
        exempt = [(i, i + len(s)) for s in NOT_THE_PRESET.get(name, ()) for i in [para.find(flat(s))] if i >= 0]
        for m in OLD_SHAPE.finditer(para):
            if any(a <= m.start() < b for a, b in exempt):
                continue
            if not DATE_MARKER.search(para, max(0, m.start() - NEAR), m.end() + NEAR):
                stale.append(f"{name}: ...{para[max(0, m.start() - 80):m.end() + 80]}...")
    return stale


def test_no_page_gives_the_256_env_fast_preset_as_today_s():
    stale = [line for name, text in doc_texts().items() for line in stale_figures(name, text)]
    assert not stale, "\n".join(stale)


def test_a_256_env_figure_passes_only_with_a_date_marker_near_it():
    today = "The fast preset is tuned for seconds. It runs 256 envs x 16 steps."
    assert stale_figures("x.md", today)
    for loose in ("The previous commit measured it.", "The tables of then name no CPU.", "(2026-12-01)"):
        # a word that dates nothing, or a date far from the figure, lets nothing through
        assert stale_figures("x.md", loose + " " + "filler " * 40 + today), loose
    for dated in ("the fast preset of 2026-12-01 (256 envs at lr 5e-3)", "the fast preset: the previous preset (256\nenvs)",
                  "the fast preset; the 256-env preset's 256 acting rows"):
        assert not stale_figures("x.md", dated), dated
    whole = "`--preset fast`\non this machine's CPU, 256 envs x 16 steps: 9.2-11.2 s of\n`jit_only_seconds`"
    assert not stale_figures("benchmarks/README.md", whole) and stale_figures("docs/x.md", whole)


def test_today_s_fast_preset_figures_are_the_results_file_s():
    solve = flat(read("benchmarks/results/solve-cpu.md"))
    # the 2026-12-05 tables: seeds 1-10 and 11-30 of the 96-env preset on the AVX2 EPYC
    assert "**10 of 10 seeds solved**; wall median 4.88 s (range 4.61-5.95 s)" in solve
    assert "**20 of 20 seeds solved**; wall median 5.18 s (range 4.21-6.72 s)" in solve
    perf = flat(read("docs/performance.md"))
    assert "median 4.88 s (4.61-5.95 s" in perf and "seeds 11-30 20 of 20 (median 5.18 s)" in perf
    presets = flat(read("docs/presets.md"))  # the README's presets table, moved there
    assert "2026-12-05, 2 CPU cores, an AMD EPYC with AVX2 only" in presets and "4.88 s (4.61-5.95 s)" in presets


def test_the_gpu_preset_says_it_has_not_been_measured_on_a_gpu(capsys):
    code, out, _ = run_main(["presets", "CartPole-v1"], capsys)
    gpu_line = next(line for line in out.splitlines() if re.match(r"CartPole-v1\s+gpu\s", line))
    assert code == 0 and "three CUDA graphs" in gpu_line and "not yet measured on a GPU" in gpu_line
    presets = read("docs/presets.md")  # the README's presets table, moved there
    row = next(line for line in presets.splitlines() if line.startswith("| CartPole-v1 | gpu |"))
    assert "not yet measured on a GPU" in row
    for page in ("README.md", "docs/cli.md"):  # the speed switches: the README's short list and the full one
        assert "replayed as three CUDA graphs; not yet measured on a GPU)" in flat(read(page)), page


def test_gpu_session_timings_are_estimates_but_the_one_measured():
    table = read("benchmarks/README.md").split("### GPU session", 1)[1].split("\n### ", 1)[0]
    assert "timings measured on an H200" not in table
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == 9
    for cells in rows:
        behind = cells[-1]
        if cells[0].startswith("| `purejaxrl-solve`"):
            # /work/shared/perf/H200-2026-11-30.md: "PureJaxRL 4 envs x 128 steps, 500k steps | 15.7 s"
            assert behind.startswith("15.7 s measured (H200, 2026-11-30"), behind
        else:
            assert behind.startswith("estimate"), cells[0]


def test_item_4_is_behind_on_avx2_and_each_ratio_is_in_the_results_file():
    perf = read("docs/performance.md")
    assert "is met on the Xeon and level on the EPYC." not in flat(perf)
    assert "behind (0.87) on AVX2-only CPUs" in flat(perf)
    table = perf.split("Issue 12's item 4", 1)[1].split("\n\n", 2)[1]
    results = read("benchmarks/results/vs-purejaxrl-cpu.md")
    ratios = re.findall(r"\d\.\d\d \(\d\.\d\d-\d\.\d\d\)", table)
    assert {"1.29 (1.28-1.34)", "1.47 (1.42-1.49)", "0.90 (0.85-1.15)", "0.87 (0.87-0.90)"} <= set(ratios)
    for ratio in ratios:
        assert f"| {ratio} |" in results, ratio


def test_population_speed_quotes_the_final_code_run_and_no_unrecorded_machine():
    speed = flat(read("docs/populations.md").split("## Speed", 1)[1])
    assert "torch 2.13.0+cpu" not in speed and "the 2-core development machine" not in speed
    assert "2.47x (2.36-2.68)" in speed and "2026-11-30 23:51" in speed
    assert "| 2.47 (2.36-2.68)x |" in flat(read("benchmarks/results/population-cpu.md"))
    assert "256 envs x 16 steps, 450k steps, clip 0.2" in speed
    assert "the command below now runs today's fast preset" in speed


def test_ten_seed_learning_claims_name_their_machines():
    presets = flat(read("docs/presets.md"))  # the README's learning notes, moved there
    claim = presets.split("on 10 seeds each", 1)[1][:400]
    assert "CartPole and Acrobot on a 2-core AMD EPYC with CPU tanh numpy" in claim
    assert "the others on a 2-core Intel Xeon with CPU tanh torch" in claim
    results = flat(read("benchmarks/results/learning-10-seeds.md"))
    assert "machine (CartPole-v1, Acrobot-v1): AMD EPYC" in results and "CPU tanh: numpy" in results


def test_mountaincar_continuous_preset_claims_what_ten_seeds_reached():
    text = flat(read("proxima/presets/continuous.yaml"))
    assert "holds 93+" not in text and "about 92.5-93 by the end (10 seeds, learning-10-seeds.md)" in text
    row = next(line for line in read("benchmarks/results/learning-10-seeds.md").splitlines()
               if line.startswith("| MountainCarContinuous-v0 |"))
    training = [float(v) for v in re.search(r"10 it\.: ([^|]+)\|", row).group(1).split(",")]
    assert min(training) == 92.5 and max(training) == 93.0
    for notes in ("benchmarks/results/learning.md", "benchmarks/results/learning-10-seeds.md"):
        note = flat(read(notes))  # the tuning note may not claim more than the 10 seeds reached
        assert "holds 93+" not in note and "the 10 seeds end at 92.5-93.0 after 500k" in note


def test_atari_page_says_proxima_s_10m_returns_are_not_measured():
    atari = flat(read("docs/atari.md"))
    assert "has what Proxima reached" not in atari
    assert "What Proxima reaches at 10M steps is not yet measured" in atari
    assert "| Pong-v5 | - | 0 | not run (compute) |" in read("benchmarks/results/learning.md")


def test_the_notebook_marks_its_return_range_unrecorded():
    nb = json.loads(read("notebooks/quickstart.ipynb"))
    first = flat("".join(nb["cells"][0]["source"]))
    assert "420-490" in first and "An unrecorded observation, with no results file behind it" in first


def test_threads_help_names_the_machine_and_the_later_measurement():
    help_text = FIELDS["threads"].metadata["help"]
    assert "AVX-512 AMD EPYC" in help_text and "1.34x, later 1.31x" in help_text
    threads = flat(read("benchmarks/results/threads-cpu.md"))
    assert "**1.34 (1.09-1.41)**" in threads and "**1.31 (1.17-1.60)**" in threads


def test_unrecorded_figures_say_so_and_pointers_resolve():
    perf = flat(read("docs/performance.md"))
    assert "not in a results file, as it was run without `--out`" in perf  # 0.95 (0.95-0.98)
    assert "0.41x acting in 4,096 envs (unrecorded" in perf
    assert "0.34x" not in read("benchmarks/results/cpu-parts.md")
    dist = read("benchmarks/results/distributed-cpu.md")
    assert "benchmarks/learning.md" not in dist and "benchmarks/results/learning.md" in dist
    assert (ROOT / "benchmarks" / "results" / "learning.md").exists()
    solve = flat(read("benchmarks/results/solve-cpu.md"))
    assert "115.8k vs 114.3k steps/s at 4,096 envs (unrecorded" in solve
    assert "aebc3c9" not in read("benchmarks/results/vs-revision-cpu.md")
