"""verl 0.9.1's pause call at a weight sync, on vLLM 0.32's engine (tbx/verl_bridge/vllm_pause.py)."""

from __future__ import annotations

import asyncio
import inspect
import sys

import pytest

from tbx.verl_bridge import vllm_pause


def engine_class():
    class Engine:  # vLLM 0.32's signature: `mode` instead of verl's keyword
        calls: list[dict] = []

        async def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True) -> None:
            self.calls.append({"mode": mode, "clear_cache": clear_cache})

    return Engine


def test_verls_keyword_becomes_vllms_mode_once():
    engine = engine_class()
    with pytest.raises(TypeError, match="wait_for_inflight_requests"):  # what verl's abort hit before
        asyncio.run(engine().pause_generation(wait_for_inflight_requests=False, clear_cache=True))
    assert vllm_pause.accept_old_pause_keyword(engine)
    assert not vllm_pause.accept_old_pause_keyword(engine)  # patched once
    asyncio.run(engine().pause_generation(wait_for_inflight_requests=False, clear_cache=False))
    asyncio.run(engine().pause_generation(wait_for_inflight_requests=True))
    asyncio.run(engine().pause_generation(mode="keep"))  # vLLM's own callers are unchanged
    assert engine.calls == [{"mode": "abort", "clear_cache": False}, {"mode": "wait", "clear_cache": True},
                            {"mode": "keep", "clear_cache": True}]


def test_an_engine_that_takes_the_keyword_is_left_alone():
    class Old:
        async def pause_generation(self, *, wait_for_inflight_requests: bool = False) -> None:
            return None

    original = Old.pause_generation
    assert not vllm_pause.accept_old_pause_keyword(Old) and Old.pause_generation is original


def test_the_engine_is_patched_when_its_module_is_first_imported(tmp_path, monkeypatch):
    (tmp_path / "fake_engine_mod.py").write_text(inspect.getsource(engine_class).replace(
        "def engine_class():\n", "if True:\n").replace("    return Engine\n", "AsyncLLM = Engine\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(vllm_pause, "ENGINE_MODULE", "fake_engine_mod")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    vllm_pause.install()
    import fake_engine_mod  # type: ignore[import-not-found]

    assert "wait_for_inflight_requests" in inspect.signature(fake_engine_mod.AsyncLLM.pause_generation).parameters
    assert not any(isinstance(f, vllm_pause._PatchOnImport) for f in sys.meta_path)  # the hook removed itself
    monkeypatch.delitem(sys.modules, "fake_engine_mod")


@pytest.mark.verl
def test_vllms_engine_takes_verls_keyword_after_the_shim():
    pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")
    from vllm.v1.engine.async_llm import AsyncLLM

    assert "wait_for_inflight_requests" in inspect.signature(AsyncLLM.pause_generation).parameters
