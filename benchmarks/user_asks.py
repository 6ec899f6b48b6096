"""Benchmark: the scripted user on the two corpora of agent asks (tests/users/phrasings.yaml and
tests/users/asks_corpus.yaml): asks answered with every fact they want, asks refused (nothing
revealed), and asks (decoys included) that revealed a fact they did not ask for. A measurement,
not a test: it asserts nothing (tests/users/test_asks_corpus.py does). docs/users.md quotes it.

    .venv/bin/python benchmarks/user_asks.py [--corpus phrasings asks_corpus] [--show-misses]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from tbx.users.corpus import corpus_lines, measure, play

CORPORA = Path(__file__).resolve().parents[1] / "tests" / "users"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", default=["phrasings", "asks_corpus"])
    parser.add_argument("--show-misses", action="store_true")
    args = parser.parse_args()
    for name in args.corpus:
        rows = list(play(corpus_lines(yaml.safe_load((CORPORA / f"{name}.yaml").read_text()))))
        print(f"{name}: {measure(rows).line()}")
        for r in rows if args.show_misses else ():
            if r.missed or r.unasked:
                print(f"  {r.key}: {r.ask!r} wanted {r.wanted}, revealed {r.revealed}")


if __name__ == "__main__":
    main()
