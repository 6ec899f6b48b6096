"""Weight products (tbx/policies/products.py): weights first and oneDNN's packed product equal
torch's `linear`, packed weights follow weight updates, the plan picks the fastest way from
timings, and switching restores the modules."""

import json

import pytest
import torch

from tbx.policies import products
from tbx.policies.products import FIRST, LINEAR, PACKED

needs_onednn = pytest.mark.skipif(not products.can_pack(), reason="this torch has no oneDNN packed linear")


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


@needs_onednn
@pytest.mark.parametrize("rows", [1, 3, 16, 70])
def test_packed_equals_linear_with_and_without_bias(rows):
    net, packing = model(), products.Packing()
    for layer, width in ((net[0], 24), (net[2], 40)):  # without bias, with bias
        x = torch.randn(rows, 2, width)
        with torch.inference_mode():
            got = products.packed(layer, packing, x)
        assert got.shape == (rows, 2, layer.out_features) and got.is_contiguous()
        torch.testing.assert_close(got, torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_packed_weights_follow_an_optimizer_step_and_a_loaded_state():
    """The packed copy is made once, and again after any in-place change of the weight: else a
    policy would go on sampling from the weights before the last training step."""
    net, packing = model(), products.Packing()
    layer, x = net[2], torch.randn(4, 40)
    first = packing.of(layer)
    assert packing.of(layer) is first  # not repacked while the weight is unchanged
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.1)
    net(torch.randn(3, 24)).sum().backward()
    optimizer.step()
    with torch.inference_mode():
        torch.testing.assert_close(products.packed(layer, packing, x), layer(x), rtol=1e-5, atol=1e-5)
    assert packing.of(layer) is not first
    net.load_state_dict(model().state_dict())  # the weights before the step, copied in place
    with torch.inference_mode():
        torch.testing.assert_close(products.packed(layer, packing, x), layer(x), rtol=1e-5, atol=1e-5)


def test_choose_takes_the_fastest_way_per_count_and_rotates_their_order():
    calls = []

    def timing(modules, rows, way):  # weights first wins at 4 rows, packed at 1 and 16, linear elsewhere
        calls.append((rows, way))
        fastest = {1: PACKED, 4: FIRST, 16: PACKED}.get(rows, LINEAR)
        return 0.5 if way == fastest else 1.0

    plan = products.choose(["m"], counts=(1, 2, 4, 8, 16, 32), timing=timing)
    assert plan == {1: (PACKED, 1), 3: (FIRST, 4), 4: (FIRST, 4), **dict.fromkeys(range(9, 17), (PACKED, 16))}
    assert products.describe(plan) == "weights first for 3-4 rows; packed for 1, 9-16 rows"
    # One row is a matrix-vector product: not timed weights first.
    assert {way for rows, way in calls if rows == 1} == {LINEAR, PACKED}
    # Every way timed equally often at every count, each going first equally often.
    for count in (2, 4, 8, 16, 32):
        ways = [way for rows, way in calls if rows == count]
        assert all(ways.count(way) == products._REPEATS for way in products.WAYS)
        firsts = ways[::3]
        assert all(firsts.count(way) == products._REPEATS // 3 for way in products.WAYS)


def test_choose_goes_by_each_ways_fastest_timing():
    """A way that was once slowed by other work is judged by its fastest run."""
    def runs(*times):
        return iter(list(times) + [times[-1]] * (products._REPEATS - len(times)))

    timings = {LINEAR: runs(1.0), FIRST: runs(5.0, 0.9, 5.0)}
    plan = products.choose(["m"], counts=(2,), timing=lambda modules, rows, way: next(timings[way]),
                           ways=(LINEAR, FIRST))
    assert plan == {1: (FIRST, 2), 2: (FIRST, 2)}
    timings = {LINEAR: runs(*[1.0] * (products._REPEATS - 1), 0.8), FIRST: runs(0.9)}
    assert products.choose(["m"], counts=(2,), timing=lambda modules, rows, way: next(timings[way]),
                           ways=(LINEAR, FIRST)) == {}


def test_plan_for_times_a_model_once_per_process(monkeypatch):
    chosen = []
    monkeypatch.setattr(products, "_PLANS", {})
    monkeypatch.setattr(products, "choose", lambda modules, ways, timing: chosen.append(len(modules)) or {2: (FIRST, 2)})
    net = model()
    assert products.plan_for(net) == {2: (FIRST, 2)} and products.plan_for(model()) == {2: (FIRST, 2)}
    assert chosen == [2]  # the second model has the same shapes: no second timing
    assert products.plan_for(torch.nn.Sequential(torch.nn.GELU())) == {}


def test_without_onednn_or_when_told_not_to_pack_the_packed_way_is_not_timed(monkeypatch):
    asked = []
    monkeypatch.setattr(products, "choose", lambda modules, ways, timing: asked.append(tuple(ways)) or {})
    monkeypatch.setattr(products, "_PLANS", {})
    assert products.plan_for(model(), pack=False) == {} and asked == [(LINEAR, FIRST)]
    if products.can_pack():  # the same shapes with packing allowed: a plan of its own
        assert products.plan_for(model()) == {} and asked[-1] == products.WAYS
    monkeypatch.setattr(products, "_PLANS", {})
    monkeypatch.setattr(products, "can_pack", lambda: False)
    assert products.plan_for(model()) == {} and asked[-1] == (LINEAR, FIRST)


def test_measure_times_every_way_on_the_modules():
    net = model()
    modules = products.linears(net)
    assert [m.weight.shape for m in modules] == [torch.Size([40, 24]), torch.Size([24, 40])]
    for way in (LINEAR, FIRST) + ((PACKED,) if products.can_pack() else ()):
        assert products.measure(modules, 4, way) > 0


@pytest.mark.parametrize("way", [FIRST, pytest.param(PACKED, marks=needs_onednn)])
def test_switching_is_exact_to_the_plan_and_restores_the_modules(way):
    net = model()
    hooked = torch.nn.Linear(24, 24)
    hooked.forward = lambda x: x  # e.g. an accelerate hook: its forward is left alone
    assert products.linears(torch.nn.Sequential(net, hooked)) == [net[0], net[2]]
    top = max(products.COUNTS)
    switch = products.Products(products.linears(net), {3: (way, 4), top: (way, top)})
    function = products.weights_first if way == FIRST else products.packed
    x = torch.randn(3, 24)
    expected = net(x)
    with switch.active(3), torch.inference_mode():
        assert all(m.__dict__["forward"].func is function for m in (net[0], net[2]))
        torch.testing.assert_close(net(x), expected, rtol=1e-5, atol=1e-5)
    assert all("forward" not in m.__dict__ for m in (net[0], net[2]))
    with switch.active(5):  # not planned: modules untouched
        assert all("forward" not in m.__dict__ for m in (net[0], net[2]))
    with switch.active(top + 20):  # more rows than timed: packed goes on, weights first cannot pad down
        assert all(("forward" in m.__dict__) == (way == PACKED) for m in (net[0], net[2]))
    with pytest.raises(RuntimeError, match="boom"), switch.active(3):
        raise RuntimeError("boom")
    assert all("forward" not in m.__dict__ for m in (net[0], net[2]))


def test_timing_leaves_the_global_torch_rng_alone():
    """A process that times the plan must draw the same training samples as one that read it."""
    modules = products.linears(model())
    torch.manual_seed(3)
    before = torch.get_rng_state()
    for way in (LINEAR, FIRST) + ((PACKED,) if products.can_pack() else ()):
        products.measure(modules, 4, way)
    assert torch.equal(torch.get_rng_state(), before)


def test_a_stored_plan_is_read_by_later_processes_and_a_bad_file_is_timed_again(monkeypatch, tmp_path):
    timed = []
    plan = {3: (FIRST, 4), 4: (FIRST, 4), 5: (PACKED, 8)}
    monkeypatch.setattr(products, "choose", lambda modules, ways, timing: timed.append(1) or dict(plan))
    store = tmp_path / "cache" / "products.json"
    monkeypatch.setattr(products, "_PLANS", {})
    assert products.plan_for(model(), store) == plan and len(timed) == 1 and store.is_file()
    monkeypatch.setattr(products, "_PLANS", {})  # another process
    assert products.plan_for(model(), store) == plan and len(timed) == 1
    other = torch.nn.Sequential(torch.nn.Linear(8, 8))
    monkeypatch.setattr(products, "_PLANS", {})
    products.plan_for(other, store)  # other shapes: timed and added beside the first
    assert len(timed) == 2 and len(json.loads(store.read_text())) == 2
    # A plan in an older format (row count -> padded count) under the same name: timed again.
    stored = json.loads(store.read_text())
    stored = {name: {"3": 4} for name in stored}
    store.write_text(json.dumps(stored))
    monkeypatch.setattr(products, "_PLANS", {})
    assert products.plan_for(model(), store) == plan and len(timed) == 3
    store.write_text("{not json")
    monkeypatch.setattr(products, "_PLANS", {})
    assert products.plan_for(model(), store) == plan and len(timed) == 4
    assert len(json.loads(store.read_text())) == 1  # rewritten


def test_describe_names_each_way_and_the_rows_above_the_largest_count():
    top = max(products.COUNTS)
    assert products.describe({}) == "linear for every row count"
    assert products.describe({2: (FIRST, 2), **{rows: (PACKED, top) for rows in range(17, top + 1)}}) == \
        f"weights first for 2 rows; packed for 17-{top}+ rows"
