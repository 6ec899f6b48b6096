"""A stand-in for `python -m verl.trainer.main_ppo` that fails on demand.

verl's real trainer runs on this machine (tests/verl_bridge/test_verl_cpu.py); it cannot be made to
exit with a chosen failure status, which is what this entry does (`STAND_IN_EXIT=<code>`, default 3)
so the bridge's error path is shown.
"""

import os
import sys


def main() -> int:
    print("stand-in: failing as asked", flush=True)
    return int(os.environ.get("STAND_IN_EXIT", "3"))


if __name__ == "__main__":
    sys.exit(main())
