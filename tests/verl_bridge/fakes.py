"""Test doubles at the bridge's seams: a tiny offline tokenizer and rollout servers.

- `tiny_tokenizer()`: a byte-level BPE trained here in milliseconds (no download), with ChatML
  special tokens and a ChatML chat template, wrapped as a transformers tokenizer.
- `ScriptedServer`: verl's `generate(request_id, *, prompt_ids, sampling_params)` signature; plays
  a fixed list of assistant texts per task (chosen by the task's opening message in the prompt),
  emulating vLLM: a `stop` string ends the output at the token that completes it, otherwise the
  end-of-turn token is generated. It records every request so tests can check token continuity.
- `oracle_texts(task)`: the reference solution of a task as the assistant texts a perfect policy
  would generate (rendered by the same functions the prompt builder uses).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from typing import Any

from tbx.llm.parsing import render_assistant_text
from tbx.tasks.model import Task

END_OF_TURN = "<|im_end|>"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# A template that renders earlier turns differently once the conversation grows (it numbers them).
SHIFTING = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + ' ' + (messages|length|string) + "
            "'\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
_CORPUS = [
    "Please send $5 from my account 1 to account 2. Can you confirm the owner name on the account?",
    '<tool_call>\n{"name": "get_account", "arguments": {"account_id": 1}}\n</tool_call>',
    "<tool_response>\n{\"id\": 1, \"owner\": \"Ada\", \"balance\": 100}\n</tool_response>",
    "Verify the account owner's name before moving money. Frozen accounts cannot send money.",
    "You help the user by calling tools. Tool results come back inside. Done: the transfer is complete.",
]


@cache
def tiny_tokenizer(template: str = CHATML) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>", "<|im_start|>", END_OF_TURN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(_CORPUS * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=END_OF_TURN, pad_token=END_OF_TURN,
                                        bos_token="<|im_start|>", unk_token="<|endoftext|>")
    tokenizer.chat_template = template
    return tokenizer


def oracle_texts(task: Task) -> list[str]:
    """The assistant texts of the task's reference solution, one per turn."""
    from tbx.messages import ToolCall

    return [render_assistant_text(step.say or "", [ToolCall(step.tool, dict(step.arguments))] if step.tool else [])
            for step in task.reference]


@dataclass
class Output:
    """The fields of verl's `TokenOutput` the bridge reads."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str | None = "completed"
    num_preempted: int | None = 0
    extra_fields: dict[str, Any] | None = None


class ScriptedServer:
    """Not a dataclass on purpose: verl passes the server through `hydra.utils.instantiate`, which
    would turn a dataclass into a config node."""

    def __init__(self, tokenizer: Any, scripts: dict[str, list[str]], logprob: float = -0.5, output_cls: Any = Output):
        self.tokenizer, self.scripts = tokenizer, scripts  # scripts: opening message -> assistant texts in order
        self.logprob, self.output_cls = logprob, output_cls
        self.weight_step = 0  # the weight version reported with every output, as verl's server does
        self.requests: list[dict[str, Any]] = []
        self.outputs: list[list[int]] = []
        self._turns: dict[str, int] = defaultdict(int)

    def _script(self, prompt_text: str) -> list[str]:
        for opening, texts in self.scripts.items():
            if opening in prompt_text:
                return texts
        raise AssertionError("no script for this prompt")

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **_: Any) -> Any:
        texts = self._script(self.tokenizer.decode(prompt_ids))
        turn = self._turns[request_id]
        self._turns[request_id] += 1
        text = texts[turn] if turn < len(texts) else "Everything is done."
        ids = self._emit(text, sampling_params.get("stop") or [])[: sampling_params.get("max_tokens")]
        self.requests.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "params": sampling_params})
        self.outputs.append(ids)
        return self.output_cls(token_ids=ids, log_probs=[self.logprob] * len(ids), stop_reason="completed",
                               num_preempted=0, extra_fields={"min_global_steps": self.weight_step,
                                                              "max_global_steps": self.weight_step})

    def _emit(self, text: str, stops: list[str]) -> list[int]:
        """Token ids vLLM would return: cut at the token completing a stop string, else end-of-turn."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        for count in range(1, len(ids) + 1):
            if any(stop in self.tokenizer.decode(ids[:count]) for stop in stops):
                return ids[:count]
        return ids + [self.tokenizer.convert_tokens_to_ids(END_OF_TURN)]
