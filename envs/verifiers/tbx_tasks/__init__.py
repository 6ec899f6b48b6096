"""tbx tasks for verifiers, by the taskset id `tbx-tasks`: the classes are tbx.envs.verifiers'."""

from tbx.envs.verifiers import TbxEnv, TbxHarness, TbxTaskset

__all__ = ["TbxEnv", "TbxHarness", "TbxTaskset"]
