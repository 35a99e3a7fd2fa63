"""The README is a short essentials page whose long parts live in docs/: every relative link in the README and
the docs reaches a file that exists, and every #anchor a heading of that file (as GitHub makes its ids)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docker" / "README.md",
         ROOT / "benchmarks" / "README.md"]
#: the README's sections, in the order a newcomer reads them
README_SECTIONS = ["Quick start", "First hour", "Command line", "Python API", "Environments", "Presets", "Speed switches",
                   "Many processes, GPUs and machines", "Populations and sweeps", "RLHF", "Container",
                   "Development and tests", "Docs", "Troubleshooting"]


def _unfenced(text: str) -> list[str]:
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def heading_ids(text: str) -> set[str]:
    """GitHub's ids of a page's headings: lower case, punctuation but '-' and '_' dropped, spaces as '-',
    a repeated id suffixed -1, -2, ..."""
    ids: set[str] = set()
    for line in _unfenced(text):
        m = re.match(r"#{1,6} +(.*?)\s*#*\s*$", line)
        if m:
            base = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            slug, n = base, 0
            while slug in ids:
                n += 1
                slug = f"{base}-{n}"
            ids.add(slug)
    return ids


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", "\n".join(_unfenced(page.read_text()))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}: ({target})"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_ids(dest.read_text()):
            broken.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return broken


def test_every_relative_link_and_anchor_in_the_readme_and_docs_resolves():
    assert [line for page in PAGES for line in broken_links(page)] == []


def test_the_link_check_finds_a_missing_page_and_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "cli.md").write_text("# Command line\n\n## Run directory\n\n```bash\n# not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text("[a](cli.md#run-directory) [b](cli.md#not-a-heading) [c](gone.md) [d](#own) [e](https://x.org/y)\n"
                    "\n## Own\n")
    assert broken_links(page) == ["README.md: (cli.md#not-a-heading): no heading #not-a-heading in cli.md",
                                  "README.md: (gone.md): no such file"]


def test_heading_ids_are_githubs():
    ids = heading_ids("# Command line: every command\n## `--compile` and `--amp`\n## Run directory\n## Run directory\n")
    assert ids == {"command-line-every-command", "--compile-and---amp", "run-directory", "run-directory-1"}


def test_the_readme_is_a_short_essentials_page_in_its_reading_order():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 350
    sections = re.findall(r"^## (.+)$", "\n".join(_unfenced(text)), flags=re.M)
    assert sections == README_SECTIONS
    # the long parts it links to instead
    for page in ("docs/cli.md", "docs/python_api.md", "docs/environments.md", "docs/presets.md"):
        assert f"]({page})" in text and f"`{page}`" in text.split("\n## Docs\n", 1)[1], page
