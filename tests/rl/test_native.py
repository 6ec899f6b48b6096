"""The native GRPO update on a tiny random llama: it learns a rewarded choice, prompt (tool and
user) tokens get no gradient, and a checkpoint resumes to the identical next step."""

import random

import numpy as np
import pytest
import torch

from tbx.rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from tbx.rl.grpo import LossSettings, group_advantages
from tbx.rl.native import TurnSample, batch_tensors, grpo_update, token_logprobs
from tests.helpers.models import tiny_model


def even_probability(model, prompt):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    return float(torch.softmax(logits, -1)[0::2].sum())


def test_batch_tensors_mask_only_generated_tokens():
    # prompt [5, 6, 7] then generated [8, 9]: targets are ids[1:] = [6, 7, 8, 9]; mask on 8 and 9
    ids, attention, response = batch_tensors([TurnSample((5, 6, 7), (8, 9), 1.0), TurnSample((1,), (2,), 0.0)], 0)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 0, 0, 0]]
    assert attention.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert response.tolist() == [[0, 0, 1, 1], [1, 0, 0, 0]]


def test_prompt_tokens_get_zero_gradient():
    model = tiny_model()
    ids, attention, response = batch_tensors([TurnSample((3, 4, 5, 6), (7, 8), 1.0)], 0)
    logp = token_logprobs(model, ids, attention, 1.0)
    logp.retain_grad()
    from tbx.rl.grpo import policy_loss

    policy_loss(logp, logp.detach(), response * 1.0, response).loss.backward()
    assert torch.all(logp.grad[response == 0] == 0)  # tool/user/prompt positions
    assert torch.all(logp.grad[response == 1] != 0)  # generated positions


def test_a_few_steps_raise_the_probability_of_the_rewarded_choice():
    model = tiny_model()
    prompt = (1, 2, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(0)
    before = even_probability(model, prompt)
    for _ in range(6):
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1], -1)
        choices = torch.multinomial(probs, 16, replacement=True, generator=generator).tolist()
        rewards = torch.tensor([1.0 if c % 2 == 0 else 0.0 for c in choices])  # even tokens are rewarded
        advantages = group_advantages(rewards, [0] * 16)
        samples = [TurnSample(prompt, (c,), float(a)) for c, a in zip(choices, advantages, strict=True)]
        grpo_update(model, optimizer, samples, LossSettings(), pad_id=0, micro_batch_size=5, temperature=1.0,
                    max_grad_norm=1.0)
    after = even_probability(model, prompt)
    assert after > before + 0.1, (before, after)


def test_micro_batches_accumulate_to_the_full_batch_gradient():
    samples = [TurnSample((1, 2), (3, 4, 5), 1.0), TurnSample((2,), (6,), -1.0), TurnSample((4, 4, 4), (7, 8), 0.5)]
    results = []
    for micro in (3, 1):
        model = tiny_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        grpo_update(model, optimizer, samples, LossSettings(), pad_id=0, micro_batch_size=micro, temperature=1.0,
                    max_grad_norm=1e9)
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-6)


def test_resume_from_checkpoint_gives_the_identical_next_step(tmp_path):
    samples_a = [TurnSample((1, 2, 3), (4, 5), 1.0), TurnSample((1, 2, 3), (6,), -1.0)]
    samples_b = [TurnSample((2, 3), (9, 10, 11), 0.7), TurnSample((2, 3), (12,), -0.7)]

    def step(model, optimizer, samples):
        grpo_update(model, optimizer, samples, LossSettings(), pad_id=0, micro_batch_size=1, temperature=1.0,
                    max_grad_norm=1.0)

    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step(model, optimizer, samples_a)
    save_checkpoint(tmp_path, 1, model, optimizer, {"sampler": {"position": 3}})
    torch.rand(5)  # the random stream moves on after the checkpoint
    step(model, optimizer, samples_b)
    straight = [p.detach().clone() for p in model.parameters()]
    straight_rand = torch.rand(3)

    resumed = tiny_model(seed=123)  # different initial weights: everything must come from the checkpoint
    optimizer2 = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    step_number, extra = load_checkpoint(latest_checkpoint(tmp_path), resumed, optimizer2)
    assert step_number == 1 and extra == {"sampler": {"position": 3}}
    torch.rand(5)
    step(resumed, optimizer2, samples_b)
    assert all(torch.equal(a, b) for a, b in zip(straight, resumed.parameters(), strict=True))
    assert torch.equal(straight_rand, torch.rand(3))


class TwoGpus:
    """torch.cuda's generator calls on a machine without a GPU (the hardware seam): two devices' states."""

    def __init__(self):
        self.states = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)]

    def get_rng_state_all(self):
        return [state.clone() for state in self.states]

    def set_rng_state_all(self, states):
        self.states = [state.clone() for state in states]


def test_a_checkpoint_restores_every_random_generator(tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        gpus = TwoGpus()
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", gpus.get_rng_state_all)
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", gpus.set_rng_state_all)
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    save_checkpoint(tmp_path, 1, model, optimizer, {})
    cuda = torch.cuda.get_rng_state_all()

    def draw():
        return random.random(), float(np.random.rand()), torch.rand(2).tolist()

    expected = draw()  # what each generator gives next after the checkpoint
    draw()
    torch.cuda.set_rng_state_all([torch.zeros_like(state) for state in cuda])  # every generator moved on
    load_checkpoint(latest_checkpoint(tmp_path), model, optimizer)
    assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), cuda, strict=True))
    assert draw() == expected


def test_a_checkpoint_interrupted_mid_write_leaves_the_previous_one(tmp_path):
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    save_checkpoint(tmp_path, 1, model, optimizer, {})
    (tmp_path / ".step_00002.partial").mkdir()  # a kill during the next save
    assert latest_checkpoint(tmp_path).name == "step_00001"


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(1, 6):
        save_checkpoint(tmp_path, step, model, optimizer, {"step": step}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_00004", "step_00005"]
    assert load_checkpoint(latest_checkpoint(tmp_path), model, optimizer) == (5, {"step": 5})
    for step in range(6, 9):
        save_checkpoint(tmp_path / "all", step, model, optimizer, {})  # keep=None: every one
    assert len(list((tmp_path / "all").glob("step_*"))) == 3


def test_empty_update_is_refused():
    model = tiny_model()
    with pytest.raises(ValueError, match="at least one sample"):
        grpo_update(model, torch.optim.SGD(model.parameters(), lr=0.1), [], LossSettings(), pad_id=0,
                    micro_batch_size=1, temperature=1.0, max_grad_norm=1.0)


def test_shared_prefix_gives_the_full_sequences_update():
    # turns that share a long prompt prefix, as every turn of a domain does (system, tools, examples)
    head = tuple(range(3, 20))
    samples = [TurnSample(head + (21, 22), (23, 24, 25), 1.0), TurnSample(head + (26,), (27,), -1.0),
               TurnSample(head + (21, 28, 29, 30), (31, 2), 0.5), TurnSample(head + (4,), (5, 6), -0.5)]
    from tbx.rl.native import common_prefix_length

    assert common_prefix_length(samples) == len(head)
    assert common_prefix_length([TurnSample((1, 2), (3,), 0.0)]) == 1  # one prompt token left to predict from
    results = []
    for share in (True, False):
        model = tiny_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        out = grpo_update(model, optimizer, samples, LossSettings(), pad_id=0, micro_batch_size=3, temperature=0.7,
                          max_grad_norm=1e9, share_prefix=share)
        results.append((out, torch.cat([p.detach().flatten() for p in model.parameters()])))
    (shared, weights_shared), (full, weights_full) = results
    assert shared.loss == pytest.approx(full.loss, abs=1e-6) and shared.grad_norm == pytest.approx(full.grad_norm, rel=1e-5)
    assert torch.allclose(weights_shared, weights_full, atol=1e-6)
    assert not torch.equal(weights_full, torch.cat([p.detach().flatten() for p in tiny_model().parameters()]))


def test_sorting_turns_by_prompt_gives_the_same_update_with_shared_prefixes(monkeypatch):
    """Turns of two domains interleaved (each domain's prompts share a head): in sampled order every micro-batch of
    2 mixes them and shares no prefix; sorted by prompt, each micro-batch is one domain's and shares its head. The
    update is the same to float precision."""
    from tbx.rl import native

    head_a, head_b = tuple(range(3, 20)), tuple(range(30, 19, -1))  # the tiny model's 32-token vocabulary
    samples = [TurnSample(head_a + (21, 22), (23, 24, 25), 1.0), TurnSample(head_b + (26,), (27,), -1.0),
               TurnSample(head_a + (21, 28, 29, 30), (31, 2), 0.5), TurnSample(head_b + (4,), (5, 6), -0.5)]
    prefixes = []
    counted = native.common_prefix_length
    monkeypatch.setattr(native, "common_prefix_length", lambda micro: prefixes.append(counted(micro)) or prefixes[-1])
    results = []
    for ordered in (False, True):
        prefixes.clear()
        model = tiny_model()
        out = grpo_update(model, torch.optim.SGD(model.parameters(), lr=0.1), samples, LossSettings(), pad_id=0,
                          micro_batch_size=2, temperature=1.0, max_grad_norm=1e9, sort_by_prompt=ordered)
        results.append((out, torch.cat([p.detach().flatten() for p in model.parameters()]), list(prefixes)))
    (plain, weights_plain, shared_plain), (ordered, weights_ordered, shared_ordered) = results
    assert shared_plain == [0, 0] and sorted(shared_ordered) == [len(head_b), len(head_a) + 1]
    assert ordered.loss == pytest.approx(plain.loss, abs=1e-6) and ordered.grad_norm == pytest.approx(plain.grad_norm,
                                                                                                     rel=1e-5)
    assert torch.allclose(weights_ordered, weights_plain, atol=1e-6)


def test_golden_two_steps_on_a_tiny_model():
    """Two native steps on a fixed tiny llama and fixed samples: the losses are the hand-worked
    on-policy value, the gradient norms the recorded ones, and the parameters move.

    On-policy (the ratio is 1) the token-mean loss is -sum(A_i * tokens_i) / tokens:
    -(1.0 * 2 + (-1.0) * 1 + 0.5 * 3) / 6 = -5/12 at every step. The gradient norms were recorded
    with torch 2.13 on CPU (float32); they change when the model or the loss changes."""
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    samples = [TurnSample((1, 2, 3, 4), (5, 6), 1.0), TurnSample((1, 2, 3, 7), (8,), -1.0),
               TurnSample((1, 2, 9), (10, 11, 12), 0.5)]
    results = [grpo_update(model, optimizer, samples, LossSettings(), pad_id=0, micro_batch_size=2,
                           temperature=1.0, max_grad_norm=1.0) for _ in range(2)]
    assert [r.loss for r in results] == pytest.approx([-5 / 12, -5 / 12], abs=1e-6)
    assert [r.grad_norm for r in results] == pytest.approx([3.334713, 2.262165], rel=1e-4)
    assert all(r.response_tokens == 6 and r.sequences == 3 for r in results)
    moved = sum(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert moved == len(before)  # every parameter took the two steps


def test_the_sampler_gap_compares_each_completion_token_with_its_sampled_log_prob():
    """Rows laid out as batch_tensors does: row 0's completion (8, 9) sits at target positions 2 and 3,
    row 1's (2,) at position 0. |trainer - sampler| summed over the three: |(-1) - (-1.5)| + |(-2) - (-2)| +
    |(-3) - (-2)| = 0.5 + 0 + 1 = 1.5 over 3 tokens; a row without sampler log-probs is left out."""
    from tbx.rl.native import sampler_gap

    samples = [TurnSample((5, 6, 7), (8, 9), 1.0, (-1.5, -2.0)), TurnSample((1,), (2,), 0.0, (-2.0,)),
               TurnSample((1,), (3,), 0.0)]
    _, _, response = batch_tensors(samples, 0)
    logp = torch.zeros_like(response)
    logp[0, 2], logp[0, 3], logp[1, 0] = -1.0, -2.0, -3.0
    assert sampler_gap(logp, response, samples) == (pytest.approx(1.5), 3)
