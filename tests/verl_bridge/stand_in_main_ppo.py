"""A stand-in for `python -m verl.trainer.main_ppo` (verl and vLLM cannot run on CPU machines).

It does what the real entry does before training that can be checked here: reads the Hydra
overrides it was given, checks the files they point to exist (dataset rows, agent-loop YAML, tbx
config), and joins the running Ray cluster through RAY_ADDRESS as verl's `ray.init()` does. It
writes what it saw to `<run folder>/verl/stand_in.json`; `STAND_IN_EXIT=<code>` makes it fail.
"""

import json
import os
import sys
from pathlib import Path


def main() -> int:
    overrides = dict(arg.split("=", 1) for arg in sys.argv[1:])
    code = int(os.environ.get("STAND_IN_EXIT", "0"))
    if code:
        print("stand-in: failing as asked", flush=True)
        return code
    files = {key: Path(overrides[key].strip("'")).is_file() for key in
             ("data.train_files", "actor_rollout_ref.rollout.agent.agent_loop_config_path")}
    nodes = None
    if os.environ.get("RAY_ADDRESS"):
        import ray

        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False, logging_level="WARNING")
        nodes = len([node for node in ray.nodes() if node["Alive"]])
        ray.shutdown()
    report = {"argv": sys.argv[1:], "files": files, "ray_nodes": nodes, "cwd": os.getcwd()}
    Path("verl/stand_in.json").write_text(json.dumps(report, indent=2))
    print(f"stand-in: {len(overrides)} overrides, ray nodes {nodes}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
