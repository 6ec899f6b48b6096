"""The vLLM worker extension verl's rollout uses on CPU machines (imports verl and vllm).

verl loads new weights into its vLLM workers in place (`model.load_weights` per received bucket,
then vLLM's `process_weights_after_loading`). vLLM's CPU build repacks every linear layer's weight
after loading into new tensors that have no `weight_loader`, so the second load fails
("'Parameter' object has no attribute 'weight_loader'"). vLLM's own in-place reload
(`vllm/model_executor/model_loader/reload/inplace.py`) brackets the load with
`initialize_layerwise_reload` (restores loadable parameters, defers each layer's processing until
all its weights arrived) and `finalize_layerwise_reload`. This extension does the same around
verl's bucketed transfer: one bracket for the whole sync, so a layer whose tensors span two
buckets is processed once, after both. Adapter syncs (LoRA after the first sync) keep verl's path,
with the name verl's LoRA loader calls on vLLM 0.32 (`tbx.verl_bridge.vllm_ext`).

Chosen by the CPU delta (`tbx.verl_bridge.cpu`) as
`+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls`; verl passes engine kwargs
after its own, so this class replaces verl's extension, which it subclasses.

The tied-embedding limit of that reload ("tied parameters only reflect processing from one of the
parent layers") is why the CPU delta trains an untied copy of a tied model (tbx/vllm/weights.py).
"""

from __future__ import annotations

import torch
from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver
from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

from tbx.verl_bridge.vllm_ext import LoraSyncExtension


class CpuReloadExtension(LoraSyncExtension):
    """verl's worker extension, with vLLM's layerwise reload around a full weight sync."""

    def update_weights_from_ipc(self, peft_config: dict | None = None, base_sync_done: bool = False,
                                use_shm: bool = False) -> None:
        if peft_config and base_sync_done:  # an adapter: added as a LoRA, nothing is repacked
            return super().update_weights_from_ipc(peft_config, base_sync_done, use_shm)
        model = self.model_runner.model
        initialize_layerwise_reload(model)
        try:
            receiver = BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(), device=torch.device("cpu"),
                                              use_shm=use_shm)
            receiver.receive_weights(on_bucket_received=lambda weights, _last: self._update_weights(
                weights, peft_config=peft_config, base_sync_done=base_sync_done))
        finally:
            finalize_layerwise_reload(model, self.model_runner.vllm_config.model_config)
        return None
