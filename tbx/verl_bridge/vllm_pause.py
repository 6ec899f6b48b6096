"""verl 0.9.1's pause call on vLLM 0.32 (loaded in every verl process of an asynchronous run; imports no vllm itself).

verl's asynchronous trainers abort the in-flight requests at a weight sync (partial rollout) through
`vLLMHttpServer.abort_all_requests` (`verl/workers/rollout/vllm_rollout/vllm_async_server.py:992`), which calls
`AsyncLLM.pause_generation(wait_for_inflight_requests=False, clear_cache=...)`. vLLM replaced that keyword by
`mode` ("abort" | "wait" | "keep"; vLLM 0.32: `vllm/v1/engine/async_llm.py:952`), so on vLLM 0.32, the CPU
build here and the CUDA build of the `[gpu]` extra alike, the first weight sync of an asynchronous run dies
with "AsyncLLM.pause_generation() got an unexpected keyword argument 'wait_for_inflight_requests'" (found by
the CPU run of tests/verl_bridge/test_verl_async_cpu.py). The synchronous trainer never aborts.

This module gives `pause_generation` the old keyword back (False → mode "abort", True → "wait"), only where the
installed vLLM lacks it and has `mode`. verl imports it at `import verl` in every process
(`VERL_USE_EXTERNAL_MODULES`, set by tbx/verl_bridge/async_overrides.py for asynchronous runs); vLLM is
patched when its engine module is first imported, so a process that never loads vLLM never imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
from typing import Any

ENGINE_MODULE = "vllm.v1.engine.async_llm"
OLD_KEYWORD = "wait_for_inflight_requests"


def accept_old_pause_keyword(engine_cls: Any) -> bool:
    """Make `engine_cls.pause_generation` take verl's keyword; returns whether it had to."""
    original = engine_cls.pause_generation
    parameters = inspect.signature(original, follow_wrapped=False).parameters
    if OLD_KEYWORD in parameters or "mode" not in parameters:
        return False

    async def pause_generation(self: Any, *args: Any, wait_for_inflight_requests: bool | None = None,
                               **kwargs: Any) -> Any:
        if wait_for_inflight_requests is not None:
            kwargs.setdefault("mode", "wait" if wait_for_inflight_requests else "abort")
        return await original(self, *args, **kwargs)

    engine_cls.pause_generation = pause_generation
    return True


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches vLLM's engine class right after its module executes (once)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != ENGINE_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            execute(module)
            accept_old_pause_keyword(module.AsyncLLM)

        loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    """Patch now if vLLM's engine is loaded, else when it is."""
    if ENGINE_MODULE in sys.modules:
        accept_old_pause_keyword(sys.modules[ENGINE_MODULE].AsyncLLM)
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


install()
