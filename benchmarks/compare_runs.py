"""Compare the stored episodes of two runs of the same command (before and after a change of the harness).

Per attempt it compares the last try's outcome, reward, terminal-state delta, grade, tool-call counts
and transcript; timings, hashes of code versions and storage times are left out (they are meant to
differ). Prints how many attempts agree and the first few that do not. A measurement, not a test.

    .venv/bin/python benchmarks/compare_runs.py outputs/eval-bench-oracle-<a> /tmp/before/eval-bench-oracle-<b>
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tbx.store.results import read_records  # noqa: E402

COMPARED = ("outcome", "reward", "final_delta", "grade", "counts", "transcript", "ended_by", "cause")


def last_tries(run_dir: Path) -> dict[tuple[str, int], dict]:
    """The compared parts of each attempt's last try, as stored."""
    final: dict[tuple[str, int], dict] = {}
    for record in read_records(run_dir):
        stored = record.to_dict()
        final[(record.task_id, record.attempt)] = {key: stored[key] for key in COMPARED}
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("left", type=Path)
    parser.add_argument("right", type=Path)
    args = parser.parse_args()
    left, right = last_tries(args.left), last_tries(args.right)
    keys = sorted(set(left) | set(right))
    differ = [key for key in keys if left.get(key) != right.get(key)]
    outcomes: dict[str, int] = {}
    for record in left.values():
        outcomes[record["outcome"]] = outcomes.get(record["outcome"], 0) + 1
    print(f"{len(keys)} attempts ({len(left)} left, {len(right)} right), outcomes left {outcomes}: "
          f"{len(keys) - len(differ)} identical, {len(differ)} differ")
    for key in differ[:10]:
        a, b = left.get(key) or {}, right.get(key) or {}
        fields = [name for name in COMPARED if a.get(name) != b.get(name)]
        print(f"  {key[0]} attempt {key[1]}: {', '.join(fields) or 'missing on one side'}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
