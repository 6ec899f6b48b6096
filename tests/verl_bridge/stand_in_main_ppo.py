"""A stand-in for `python -m verl.trainer.main_ppo`: fails on demand, or ends as a run without a gradient.

verl's real trainer runs on this machine (tests/verl_bridge/test_verl_cpu.py); it cannot be made to
exit with a chosen failure status, or to draw only zero-variance groups, which is what this entry does:
- `STAND_IN_EXIT=<code>` (default 3): prints a line and exits with that status, so the bridge's error
  path is shown;
- `STAND_IN_EXIT=0` with `STAND_IN_GRAD_NORMS=0,0`: writes what verl leaves after those steps (one
  line per step in its file logger's format, a checkpoint pointer to the last step) and exits 0;
- `STAND_IN_HANG=<file>`: writes its pid to that file and waits, logging its counters every 0.1 s, as verl
  does on rollout workers that died under it (tests/verl_bridge/test_verl_stall_cpu.py kills the real one's,
  in a run of several minutes); after two minutes it exits 5, so a bridge that never stops it fails its test.
"""

import json
import os
import sys
import threading
from pathlib import Path

HANG_TICKS = 1200  # 0.1 s each: two minutes
LOGGER = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"


def main() -> int:
    if hang := os.environ.get("STAND_IN_HANG"):
        Path(hang).write_text(str(os.getpid()))
        for _ in range(HANG_TICKS):  # a bound of its own, so a bridge that never stops it fails its test, not hangs
            threading.Event().wait(0.1)
            print("stand-in: pending: 0, running: 2, finished: 0, failure: 0", flush=True)
        print("stand-in: nothing stopped me", flush=True)
        return 5
    code = int(os.environ.get("STAND_IN_EXIT", "3"))
    if code:
        print("stand-in: failing as asked", flush=True)
        return code
    args = dict(arg.split("=", 1) for arg in sys.argv[1:] if "=" in arg)
    norms = [float(n) for n in os.environ.get("STAND_IN_GRAD_NORMS", "").split(",") if n]
    metrics, checkpoints = Path(args[LOGGER]), Path(args["trainer.default_local_dir"])
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_text("".join(json.dumps({"step": step, "data": {"actor/grad_norm": norm}}) + "\n"
                               for step, norm in enumerate(norms, start=1)))
    checkpoints.mkdir(parents=True, exist_ok=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(len(norms)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
