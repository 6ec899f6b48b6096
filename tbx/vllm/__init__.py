"""The vLLM server tbx starts and talks to: its command and environment (`spec`), the process (`server`: one
per process, shared), servers kept across commands (`kept`: stage=serve_model) and the weight folders it is
given (`weights`: the serving copy, an untied copy of a tied model). The policy that plays through it is
tbx/policies/vllm.py."""
