"""README.md: short, with every code block run or checked as the docs' blocks are
(tests/support/doc_examples.py), links that lead somewhere, and the web guard within its
first screenful."""
from __future__ import annotations

import re

import pytest

import doc_examples as dx
from test_docs_examples import FILES, UNTOLD, run_block, untold_words

ROOT = dx.ROOT
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
BLOCKS = dx.blocks(README_PATH)


def test_the_readme_is_short():
    assert README.count("\n") <= 250


def test_the_first_screenful_links_the_web_guard():
    """A newcomer finds how to protect a Flask view in the links of the first screen."""
    first = "\n".join(README.split("\n")[:24])
    assert re.search(r"\[[^\]]*Flask[^\]]*\]\(docs/integrations\.md\)", first), first


def test_the_readme_has_its_examples():
    scripts = [b.code for b in BLOCKS if b.lang == "python" and b.file is None]
    assert any("BlockedFilter" in c or "MemoryFilter" in c for c in scripts)
    assert any("RedisFilter" in c for c in scripts)
    assert any("flask" in c and "bloom.guard" in c for c in scripts)
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    code_lines = sum(b.code.count("\n") for b in dx.blocks_of_text(quickstart))
    assert 20 <= code_lines <= 45, code_lines


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_first_guard_example_shares_its_filter_between_worker_processes(page, tmp_path,
                                                                            request):
    """The first web guard a reader sees serves a filter every worker shares (a file or
    Redis), not one in each process's memory: run with UnsharedFilterWarning an error."""
    first = next(b for b in dx.blocks(ROOT / page)
                 if b.lang == "python" and "bloom.guard" in b.code)
    assert re.search(r"files=|LING_BLOOM_FILES|RedisFilter|MemoryFilter\.open", first.code)
    code = ("import warnings, ling_bloom\n"
            "warnings.simplefilter('error', ling_bloom.UnsharedFilterWarning)\n" + first.code)
    env = dx.python_env(first.code, request, tmp_path)
    proc = dx.run_python(code, tmp_path, env)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def test_the_speed_table_names_its_command():
    speed = README.split("## Speed", 1)[1].split("\n## ", 1)[0]
    assert "python benchmarks/bench_memory.py --rounds 3" in speed
    results = (ROOT / "benchmarks" / "results" / "bench_memory.md").read_text(encoding="utf-8")
    assert "command: python benchmarks/bench_memory.py --rounds 3" in results
    # each figure of the table is one the results file has, in the same row
    for row in re.findall(r"^\| ling_bloom `(\w+)` \|(.+)\|$", speed, re.M):
        name = "ling_bloom" if row[0] == "MemoryFilter" else f"ling_bloom {row[0]}"
        line = next(l for l in results.split("\n") if l.startswith(f"| {name} |"))
        for cell in row[1].split("|")[:4]:
            assert cell.strip() in line, (cell, line)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.file is None],
                         ids=[b.id for b in BLOCKS if b.file is None])
def test_block(block, tmp_path, request):
    run_block(block, tmp_path, request)


def test_project_files_are_the_tested_ones():
    """A ```python file=NAME block here is a file of the Django example the docs' test runs."""
    for block in BLOCKS:
        if block.file:
            assert FILES.get(block.file) == block.code, block.file


def _anchors(text):
    """GitHub's and MkDocs' anchors of a page's headings (lower case, punctuation dropped,
    spaces to dashes)."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)}


def test_links_lead_somewhere():
    for target in re.findall(r"\]\(([^)\s]+)\)", README):
        if re.match(r"^[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path if path else README_PATH
        assert page.exists(), target
        if anchor:
            assert anchor in _anchors(page.read_text(encoding="utf-8")), target


def test_no_word_a_user_cannot_know():
    assert not untold_words(README)
    assert UNTOLD
