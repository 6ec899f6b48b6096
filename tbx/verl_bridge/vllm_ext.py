"""The vLLM worker extension verl's rollout uses for a LoRA run (imports verl and vllm; loaded only in
vLLM's worker processes, named by `actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls`).

verl 0.9.1 syncs a LoRA adapter into vLLM as tensors through its own `_load_adapter`
(`verl/utils/vllm/utils.py`), which calls `WeightsMapper.get_unstacked_mapper()` on any vLLM from 0.25
on. vLLM 0.29 renamed that method `get_rename_mapper()` (same result: the model's renames without the
stacked maps), so on vLLM 0.32, the CPU build here and the CUDA build of the `[gpu]` extra alike, verl's
first adapter sync dies with "'WeightsMapper' object has no attribute 'get_unstacked_mapper'"
(tests/verl_bridge/test_verl_slurm_lora.py found it). This module gives the old name back, pointing at
the new method, when the installed vLLM lacks it; nothing else of vLLM or verl changes.
"""

from __future__ import annotations

from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from vllm.model_executor.models.utils import WeightsMapper


def restore_unstacked_mapper() -> bool:
    """Give `WeightsMapper` the name verl 0.9.1 calls, when this vLLM only has the renamed method.
    Returns whether it was missing."""
    if hasattr(WeightsMapper, "get_unstacked_mapper") or not hasattr(WeightsMapper, "get_rename_mapper"):
        return False
    WeightsMapper.get_unstacked_mapper = WeightsMapper.get_rename_mapper
    return True


restore_unstacked_mapper()  # in the worker process, before verl's first adapter sync


class LoraSyncExtension(vLLMColocateWorkerExtension):
    """verl's worker extension, on a vLLM whose `WeightsMapper` answers verl's LoRA loader."""
