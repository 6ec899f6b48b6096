"""Weight products for decode steps (CPU), whichever of three ways is fastest for the row count.

A decode step multiplies a handful of rows (one per running conversation) by every weight
matrix of the model. The product can be asked of the CPU three ways:

- `linear`: torch's `x @ W.T` (MKL's sgemm);
- weights first: `(W @ x.T).T`, the rows zero-padded up to the timed count; for a few rows MKL
  may pick a very different kernel for it;
- packed: oneDNN's matmul on a copy of `W` that oneDNN has reordered once into its own blocked
  layout (`torch.ops.mkldnn._reorder_linear_weight` / `_linear_pointwise`, the ops torch's own
  compiler emits for CPU linears). The copy costs the weights' size again in memory, and it is
  packed again whenever a weight changes (an optimizer step, a loaded state): each module's copy
  is keyed by its weight's storage and version counter.

On this project's 2-core AMD EPYC, SmolLM2's 211 products took (ms, fastest of several; linear /
weights first / packed): 1 row 45 / - / 30, 4 rows 79 / 48 / 38, 8 rows 80 / 89 / 45, 16 rows
93 / 78 / 62, 32 rows 111 / 92 / 91; a 256-row prompt chunk 575-670 / - / 500-590.

Which way wins depends on the CPU, the BLAS and the thread count, so `plan_for` times them on the
model's own weight matrices (all of them, as a step reads them) for 1, 2, 4, 8, 16 and 32 rows,
once per process and set of shapes, or once per machine with a store (~10 s for SmolLM2 on 2
cores), and the decoder then uses the winner for each row count (rows between two counts go the
way of the larger; more rows than the largest count go its way if that was packed, else
`linear`). The ways differ only in floating-point summation order (~1e-6-1e-5 relative in
float32), as a row's products already differ with the number of rows beside it. A torch built
without oneDNN, or a dtype it cannot pack, is timed with the other two ways only.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

COUNTS = (1, 2, 4, 8, 16, 32)  # row counts timed; rows between two counts go the way of the larger
LINEAR, FIRST, PACKED = "linear", "weights first", "packed"
WAYS = (LINEAR, FIRST, PACKED)
_REPEATS = 6  # timings of each way per count (the order rotates; the fastest counts: others ran beside other work)
_PACK_HINT = 16  # the row count oneDNN lays the packed weights out for (8-256 timed alike here; 1 was slower)
_PLANS: dict[tuple, dict[int, tuple[str, int]]] = {}  # per process: (shapes, dtypes, threads) -> plan
_FORMAT = "ways-v2"  # in a stored plan's name: plans of an older format are timed again


def linears(model: Any) -> list[Any]:
    """The model's plain `torch.nn.Linear` modules on the CPU (subclasses, which may compute
    something else, and modules whose forward is already replaced by a hook are left alone)."""
    import torch

    return [module for module in model.modules()
            if type(module) is torch.nn.Linear and "forward" not in module.__dict__
            and module.weight.device.type == "cpu"]


def weights_first(module: Any, padded: int, x: Any) -> Any:
    """`module(x)` computed as `(W @ x.T).T`, the rows zero-padded up to `padded`."""
    import torch

    weight = module.weight
    flat = x.reshape(-1, weight.shape[1])
    rows = flat.shape[0]
    if rows > padded:
        return torch.nn.functional.linear(x, weight, module.bias)
    if rows < padded:
        flat = torch.cat([flat, flat.new_zeros(padded - rows, flat.shape[1])])
    out = torch.mm(weight, flat.t()).t()[:rows].contiguous()
    if module.bias is not None:
        out = out.add_(module.bias)
    return out.reshape(*x.shape[:-1], weight.shape[0])


def can_pack() -> bool:
    """Whether this torch has oneDNN and its packed linear ops."""
    import torch

    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class Packing:
    """oneDNN's packed copies of modules' weights, made on first use and again whenever a weight
    has changed since (its storage or its version counter, which every in-place update such as an
    optimizer step or `load_state_dict` moves on)."""

    def __init__(self) -> None:
        self._copies: dict[Any, tuple[tuple[int, int], Any]] = {}

    def of(self, module: Any) -> Any:
        import torch

        weight = module.weight
        key = (weight.data_ptr(), weight._version)
        held = self._copies.get(module)
        if held is None or held[0] != key:
            held = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_HINT))
            self._copies[module] = held
        return held[1]


def packed(module: Any, packing: Packing, x: Any) -> Any:
    """`module(x)` by oneDNN on the module's packed weight."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, packing.of(module), module.bias, "none", [None], "")


def measure(modules: Sequence[Any], rows: int, way: str, packing: Packing | None = None) -> float:
    """Seconds to multiply `rows` random rows by every module's weights, one of `WAYS`."""
    import torch

    inputs = {(module.in_features, module.weight.dtype) for module in modules}
    generator = torch.Generator().manual_seed(0)  # its own: timing never moves the global torch RNG
    rows_of = {key: torch.randn(rows, key[0], generator=generator).to(key[1]) for key in sorted(inputs, key=str)}
    if way == PACKED:
        packing = packing or Packing()
        for module in modules:  # not part of a product's time; a given `packing` keeps its copies between calls
            packing.of(module)
    start = time.perf_counter()
    for module in modules:
        x = rows_of[module.in_features, module.weight.dtype]
        if way == FIRST:
            weights_first(module, rows, x)
        elif way == PACKED:
            packed(module, packing, x)
        else:
            torch.nn.functional.linear(x, module.weight, module.bias)
    return time.perf_counter() - start


def _packs(modules: Sequence[Any]) -> bool:
    """Whether oneDNN packs and multiplies these modules' weights (else the packed way is not timed)."""
    if not can_pack():
        return False
    try:
        measure(modules[:1], 2, PACKED)
    except (RuntimeError, NotImplementedError) as error:  # e.g. a dtype this build cannot pack
        log.info("weight products: oneDNN packing not available here (%s)", error)
        return False
    return True


def choose(modules: Sequence[Any], counts: Sequence[int] = COUNTS,
           timing: Callable[[Sequence[Any], int, str], float] = measure,
           ways: Sequence[str] = WAYS) -> dict[int, tuple[str, int]]:
    """Row count -> (way, timed count) for the row counts where a way other than `linear` was
    fastest (each way judged by its fastest timing; the order of the ways rotates between
    repeats, so each goes first equally often). Weights first pads rows up to the timed count;
    one row is not timed weights first (a matrix-vector product either way)."""
    plan: dict[int, tuple[str, int]] = {}
    below = 0
    for count in sorted(counts):
        tried = [way for way in ways if not (way == FIRST and count == 1)]
        times: dict[str, list[float]] = {way: [] for way in tried}
        for repeat in range(_REPEATS):
            shift = repeat % len(tried)
            for way in tried[shift:] + tried[:shift]:
                times[way].append(timing(modules, count, way))
        best = min(tried, key=lambda way: min(times[way]))
        if best != LINEAR:
            plan.update(dict.fromkeys(range(below + 1, count + 1), (best, count)))
        below = count
    return plan


def plan_for(model: Any, store: Path | None = None, pack: bool = True) -> dict[int, tuple[str, int]]:
    """`choose` for `model`'s linear modules, timed once per process and set of shapes
    (`pack=False`: without the packed way, which costs the weights' size again in memory).

    With `store` (a JSON file), a plan timed for the same shapes, threads, torch and CPU is read
    from it instead, and a new one is added to it: every process on the machine then decodes
    with the same plan, so a resumed run repeats an uninterrupted one's numbers (timings vary
    from process to process, and where two ways are close the plan could differ).
    """
    import torch

    modules = linears(model)
    if not modules:
        return {}
    key = (tuple((tuple(module.weight.shape), module.weight.dtype, module.bias is not None) for module in modules),
           torch.get_num_threads(), pack)
    if key not in _PLANS:
        name = hashlib.sha256(repr((key, torch.__version__, _cpu(), _FORMAT)).encode()).hexdigest()[:16]
        stored = _parse(_read(store).get(name)) if store is not None else None
        if stored is not None:
            _PLANS[key] = stored
        else:
            with torch.inference_mode():  # one packed copy for every timing of the packed way, dropped after
                _PLANS[key] = choose(modules, ways=WAYS if pack and _packs(modules) else (LINEAR, FIRST),
                                     timing=functools.partial(measure, packing=Packing()))
            if store is not None:
                _write(store, name, _PLANS[key])
        log.info("weight products: %s (%s on %d matrices)", describe(_PLANS[key]),
                 "timed" if stored is None else f"read from {store}", len(modules))
    return _PLANS[key]


def _parse(stored: Any) -> dict[int, tuple[str, int]] | None:
    """A stored plan (`{"rows": [way, count]}`), or None if it is not one (then it is timed again)."""
    if not isinstance(stored, dict):
        return None
    try:
        plan = {int(rows): (str(way), int(count)) for rows, (way, count) in stored.items()}
    except (TypeError, ValueError):
        return None
    return plan if all(way in WAYS for way, _ in plan.values()) else None


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _read(store: Path) -> dict[str, Any]:
    """The stored plans; an unreadable or malformed file counts as empty (it is re-timed and rewritten)."""
    try:
        plans = json.loads(store.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log.warning("weight products: ignoring %s (%s); timing again", store, error)
        return {}
    return plans if isinstance(plans, dict) else {}


def _write(store: Path, name: str, plan: Mapping[int, tuple[str, int]]) -> None:
    """Add a plan to `store`, atomically (a temporary sibling renamed into place)."""
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        plans = _read(store)
        plans[name] = {str(rows): [way, count] for rows, (way, count) in sorted(plan.items())}
        temporary = store.with_name(f".{store.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(plans, indent=1))
        os.replace(temporary, store)
    except OSError as error:  # a read-only cache: this process keeps its plan, the next one times again
        log.warning("weight products: could not store the plan in %s (%s)", store, error)


def planned() -> list[tuple[int, int, dict[int, tuple[str, int]]]]:
    """(weight matrices, threads, plan) for every set of shapes planned in this process (timed or read)."""
    return [(len(shapes), threads, dict(plan)) for (shapes, threads, _), plan in _PLANS.items()]


def describe(plan: Mapping[int, tuple[str, int]]) -> str:
    """E.g. 'weights first for 2-4 rows; packed for 1, 5-32+ rows' ('+': and more rows than were
    timed; 'linear for every row count' when nothing else won)."""
    parts = []
    for way in (FIRST, PACKED):
        spans: list[list[int]] = []
        for rows in sorted(r for r, (w, _) in plan.items() if w == way):
            if spans and spans[-1][1] == rows - 1:
                spans[-1][1] = rows
            else:
                spans.append([rows, rows])
        text = ", ".join(f"{low}-{high}" if low != high else str(low) for low, high in spans)
        if spans and way == PACKED and spans[-1][1] == max(COUNTS):
            text += "+"
        if spans:
            parts.append(f"{way} for {text} rows")
    return "; ".join(parts) or "linear for every row count"


class Products:
    """Switches a model's linear modules to the planned way for a forward's row count."""

    def __init__(self, modules: Sequence[Any], plan: Mapping[int, tuple[str, int]]):
        self.modules, self.plan = list(modules), dict(plan)
        self._packing = Packing()

    @classmethod
    def of(cls, model: Any, store: Path | None = None, pack: bool = True) -> Products:
        return cls(linears(model), plan_for(model, store, pack))

    def way(self, rows: int) -> tuple[str, int] | None:
        """The plan's (way, count) for a product of `rows` rows (None: `linear`)."""
        chosen = self.plan.get(rows)
        if chosen is None and rows > max(COUNTS):
            chosen = self.plan.get(max(COUNTS))
            if chosen is not None and chosen[0] != PACKED:  # weights first cannot pad rows down
                chosen = None
        return chosen

    @contextlib.contextmanager
    def active(self, rows: int) -> Iterator[None]:
        """Inside the block, products of `rows` rows go the planned way."""
        chosen = self.way(rows)
        if chosen is None or not self.modules:
            yield
            return
        way, count = chosen
        switched = []
        try:
            for module in self.modules:
                module.forward = (functools.partial(weights_first, module, count) if way == FIRST
                                  else functools.partial(packed, module, self._packing))
                switched.append(module)
            yield
        finally:
            for module in switched:
                del module.forward
