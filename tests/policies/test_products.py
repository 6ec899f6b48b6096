"""Few-row weight products (tbx/policies/products.py): the weights-first product equals torch's
`linear`, the plan picks the faster way from timings, and switching restores the modules."""

import json

import pytest
import torch

from tbx.policies import products


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 40, bias=False), torch.nn.GELU(), torch.nn.Linear(40, 24))


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13, 16])
def test_weights_first_equals_linear_for_any_padding(rows):
    layer = model()[2]
    x = torch.randn(rows, 1, 40)
    expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    for padded in sorted({rows, 16, 32}):
        got = products.weights_first(layer, padded, x)
        assert got.shape == expected.shape == (rows, 1, 24) and got.is_contiguous()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # More rows than the plan pads to: the plain product.
    more = torch.randn(rows + 1, 40)
    torch.testing.assert_close(products.weights_first(layer, rows, more), layer(more))


def test_choose_pads_each_row_count_up_to_a_count_where_weights_first_won():
    calls = []

    def timing(modules, rows, first):  # weights first wins at 4 and 16 rows only
        calls.append((rows, first))
        return 1.0 if first != (rows in (4, 16)) else 0.5

    plan = products.choose(["m"], counts=(2, 4, 8, 16, 32), timing=timing)
    assert plan == {3: 4, 4: 4, **dict.fromkeys(range(9, 17), 16)}
    assert products.describe(plan) == "3-4, 9-16"
    # Both ways timed the same number of times at every count, taking turns at going first.
    for count in (2, 4, 8, 16, 32):
        assert [first for rows, first in calls if rows == count] == [False, True, True, False] * (products._REPEATS // 2)


def test_choose_goes_by_each_ways_fastest_timing():
    """A way that was once slowed by other work is judged by its fastest run."""
    timings = {False: iter([1.0] * products._REPEATS), True: iter([5.0, 0.9] + [5.0] * (products._REPEATS - 2))}
    assert products.choose(["m"], counts=(2,), timing=lambda modules, rows, first: next(timings[first])) == {2: 2}
    timings = {False: iter([1.0] * (products._REPEATS - 1) + [0.8]), True: iter([0.9] * products._REPEATS)}
    assert products.choose(["m"], counts=(2,), timing=lambda modules, rows, first: next(timings[first])) == {}


def test_plan_for_times_a_model_once_per_process(monkeypatch):
    chosen = []
    monkeypatch.setattr(products, "_PLANS", {})
    monkeypatch.setattr(products, "choose", lambda modules: chosen.append(len(modules)) or {2: 2})
    net = model()
    assert products.plan_for(net) == {2: 2} and products.plan_for(model()) == {2: 2}
    assert chosen == [2]  # the second model has the same shapes: no second timing
    assert products.plan_for(torch.nn.Sequential(torch.nn.GELU())) == {}


def test_measure_times_both_ways_on_the_modules():
    net = model()
    modules = products.linears(net)
    assert [m.weight.shape for m in modules] == [torch.Size([40, 24]), torch.Size([24, 40])]
    assert products.measure(modules, 4, True) > 0 and products.measure(modules, 4, False) > 0


def test_switching_is_exact_to_the_plan_and_restores_the_modules():
    net = model()
    hooked = torch.nn.Linear(24, 24)
    hooked.forward = lambda x: x  # e.g. an accelerate hook: its forward is left alone
    assert products.linears(torch.nn.Sequential(net, hooked)) == [net[0], net[2]]
    switch = products.Products(products.linears(net), {3: 4})
    x = torch.randn(3, 24)
    expected = net(x)
    with switch.active(3):
        assert all(m.__dict__["forward"].func is products.weights_first and m.__dict__["forward"].args == (m, 4)
                   for m in (net[0], net[2]))
        torch.testing.assert_close(net(x), expected, rtol=1e-5, atol=1e-5)
    assert all("forward" not in m.__dict__ for m in (net[0], net[2]))
    with switch.active(5):  # not planned: modules untouched
        assert all("forward" not in m.__dict__ for m in (net[0], net[2]))
    with pytest.raises(RuntimeError, match="boom"), switch.active(3):
        raise RuntimeError("boom")
    assert all("forward" not in m.__dict__ for m in (net[0], net[2]))



def test_timing_leaves_the_global_torch_rng_alone():
    """A process that times the plan must draw the same training samples as one that read it."""
    modules = products.linears(model())
    torch.manual_seed(3)
    before = torch.get_rng_state()
    products.measure(modules, 4, True)
    products.measure(modules, 4, False)
    assert torch.equal(torch.get_rng_state(), before)


def test_a_stored_plan_is_read_by_later_processes_and_a_bad_file_is_timed_again(monkeypatch, tmp_path):
    timed = []
    monkeypatch.setattr(products, "choose", lambda modules: timed.append(1) or {3: 4, 4: 4})
    store = tmp_path / "cache" / "products.json"
    monkeypatch.setattr(products, "_PLANS", {})
    assert products.plan_for(model(), store) == {3: 4, 4: 4} and len(timed) == 1 and store.is_file()
    monkeypatch.setattr(products, "_PLANS", {})  # another process
    assert products.plan_for(model(), store) == {3: 4, 4: 4} and len(timed) == 1
    other = torch.nn.Sequential(torch.nn.Linear(8, 8))
    monkeypatch.setattr(products, "_PLANS", {})
    products.plan_for(other, store)  # other shapes: timed and added beside the first
    assert len(timed) == 2 and len(json.loads(store.read_text())) == 2
    store.write_text("{not json")
    monkeypatch.setattr(products, "_PLANS", {})
    assert products.plan_for(model(), store) == {3: 4, 4: 4} and len(timed) == 3
    assert len(json.loads(store.read_text())) == 1  # rewritten
