"""Every benchmark family has at least two structural variants (issue 23, part 6): two or more
distinct sequences of tool names among its references, so an agent cannot pass a family by
replaying one fixed sequence of calls."""

import pytest

from tbx.domains import get_domain

BENCH = ("travel", "retail", "auto_insurance", "neobank", "consulting")


def shapes(domain: str) -> dict[str, set[tuple[str, ...]]]:
    found: dict[str, set[tuple[str, ...]]] = {}
    for task in get_domain(domain).generate_tasks(0):
        found.setdefault(task["family"], set()).add(tuple(s["tool"] for s in task["reference"] if "tool" in s))
    return found


@pytest.mark.parametrize("domain", BENCH)
def test_every_benchmark_family_has_two_shapes(domain):
    single = sorted(family for family, found in shapes(domain).items() if len(found) < 2)
    assert not single, single
