"""The verl bridge: the only part of tbx that imports verl or ray.

- `overrides`: pure translation of our config into the verl Hydra overrides we vary
  (`verl_overrides`, `plan_training`, `HardwareSettings`, `VERL_VERSION`).
- `data`: the pool manifest as verl dataset rows, and the files a verl run reads.
- `token_agent`, `episode`: a tbx episode played token-in/token-out, with its token stream,
  error retries and response budget, and `check_pool_prompts` to run before launching (no verl
  import; tested without verl).
- `agent_loop`: verl's `AgentLoopBase` subclass `tbx_episode` (imports verl; import it only in
  the verl environment).

Importing this package imports neither verl nor ray.
"""

from tbx.verl_bridge.overrides import (
    AGENT_LOOP_NAME,
    VERL_VERSION,
    BridgePaths,
    HardwareSettings,
    TrainPlan,
    plan_training,
    verl_overrides,
)

__all__ = ["AGENT_LOOP_NAME", "VERL_VERSION", "BridgePaths", "HardwareSettings", "TrainPlan",
           "plan_training", "verl_overrides"]
