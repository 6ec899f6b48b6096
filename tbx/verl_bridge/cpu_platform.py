"""verl's platform plug-in for a machine without accelerators (imports verl and torch).

verl 0.9.1 knows three platforms (nvidia, npu, rocm; `verl/plugin/platform/platform_manager.py`)
and falls back to nvidia when it detects none, which means `cuda` devices and `nccl`. This module
registers a fourth, `cpu`, through verl's own extension points: every verl process imports it
because `VERL_USE_EXTERNAL_MODULES` names it (`verl/__init__.py`), and `VERL_PLATFORM=cpu` selects
it. The launcher sets both only when training on hardware without GPUs
(`tbx.verl_bridge.cpu.cpu_environment`); on a GPU cluster this module is never imported.

What the platform says, and why:
- device `cpu`, collectives over `gloo`;
- `current_device()` is `torch.device("cpu")`, not an index: verl moves tensors with
  `tensor.to(get_device_id())`, and torch reads an integer as "the accelerator";
- the Ray resource stays "GPU": verl's placement groups ask for GPU bundles, so the Ray head gets
  as many fake GPUs as there are training ranks (`+ray_kwargs.ray_init.num_gpus`, or the job's
  Ray head); nothing runs on them;
- no CUDA IPC: verl then hands weights to vLLM through shared memory.

One fix outside the platform API: verl builds the process-group backend as
`cpu:gloo,<device>:<backend>`, which is `cpu:gloo,cpu:gloo` here and torch refuses ("Duplicate
device type cpu"); `init_process_group` is wrapped to pass plain `gloo` for exactly that string.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any

import psutil
import torch
import torch.distributed
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

DUPLICATE_CPU_BACKEND = "cpu:gloo,cpu:gloo"


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


def _zero(*_args: Any, **_kwargs: Any) -> int:
    return 0


def _memory_info(*_args: Any, **_kwargs: Any) -> tuple[int, int]:
    memory = psutil.virtual_memory()
    return memory.available, memory.total


class CpuDeviceModule(types.ModuleType):
    """What verl calls on `get_torch_device()` (the torch.cuda API): torch.cpu, plus no-ops for the
    cache, memory and IPC calls that have no CPU meaning, and the CPU random generator."""

    empty_cache = ipc_collect = reset_peak_memory_stats = set_per_process_memory_fraction = staticmethod(_nothing)
    memory_allocated = memory_reserved = max_memory_allocated = max_memory_reserved = staticmethod(_zero)
    mem_get_info = staticmethod(_memory_info)

    def __init__(self) -> None:
        super().__init__("tbx_cpu_device")

    @staticmethod
    def get_rng_state(*_args: Any, **_kwargs: Any) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, *_args: Any, **_kwargs: Any) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_device_name(*_args: Any, **_kwargs: Any) -> str:
        return "cpu"

    def __getattr__(self, name: str) -> Any:
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        raise AttributeError(f"the CPU device module has no {name!r}")


DEVICE_MODULE = CpuDeviceModule()


@PlatformRegistry.register(platform="cpu")
class CpuPlatform(PlatformBase):
    """Chosen only by VERL_PLATFORM=cpu (never auto-detected)."""

    device_name = "cpu"
    vendor_name = "cpu"
    device_module = DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False

    def current_device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


_init_process_group = torch.distributed.init_process_group


def init_process_group(*args: Any, **kwargs: Any) -> Any:
    """torch's init_process_group, with verl's duplicated CPU backend string collapsed to gloo."""
    if str(kwargs.get("backend", "")).replace(" ", "") == DUPLICATE_CPU_BACKEND:
        kwargs["backend"] = "gloo"
    return _init_process_group(*args, **kwargs)


torch.distributed.init_process_group = init_process_group
