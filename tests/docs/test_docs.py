"""The docs run: every command and snippet of README.md and docs/*.md, in
order, against a fresh cluster per page (``docrun`` says how pages are
marked).  A block that cannot run here is marked ``skip`` with its reason,
and counted: ``test_what_is_not_run_is_few_and_says_why`` keeps them few."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .docrun import ROOT, Runner, parse

if TYPE_CHECKING:
    from pathlib import Path

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Pages with nothing to run (prose and tables): still parsed by the count test.
RUN = [p for p in PAGES if any(b.skip is None for b in parse(p).runnable)]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN, ids=[p.name for p in RUN])
def test_page_runs(page: Path, tmp_path: Path) -> None:
    runner = Runner(parse(page), tmp_path)
    try:
        outcome = runner.run()
    finally:
        runner.close()
    print(f"{page.name}: {len(outcome.ran)} blocks ran, {len(outcome.skipped)} not run here")
    for line, why in outcome.skipped:
        print(f"  {page.name}:{line}: {why}")
    assert outcome.ran, f"{page.name}: nothing ran"


#: Pages mostly about what cannot run here: benchmark runs (minutes of both
#: cores each, reproduced by hand) and several hosts (followed on network
#: namespaces by tests/integration/test_across_hosts.py).
MOSTLY_ELSEWHERE = {"performance.md", "deploy.md"}


def test_what_is_not_run_is_few_and_says_why() -> None:
    """Every block is run or says why not; the ones not run stay at most
    half of every page but those of ``MOSTLY_ELSEWHERE``, and at most a
    quarter of the rest together."""
    total = ran = 0
    for page in PAGES:
        blocks = parse(page).runnable
        skipped = [b for b in blocks if b.skip is not None]
        for b in skipped:
            assert b.skip != "no reason given", f"{page.name}:{b.line}: say why"
        print(f"{page.name}: {len(blocks) - len(skipped)} of {len(blocks)} blocks run")
        if page.name in MOSTLY_ELSEWHERE or not blocks:
            continue
        total += len(blocks)
        ran += len(blocks) - len(skipped)
        assert len(skipped) * 2 <= len(blocks), (page.name, [b.line for b in skipped])
    print(f"elsewhere: {ran} of {total} blocks run")
    assert ran * 4 >= total * 3
