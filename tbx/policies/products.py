"""Weight products for decode steps with a few rows (CPU), in whichever orientation is faster.

A decode step multiplies a handful of rows (one per running conversation) by every weight
matrix of the model. The same product can be asked of the BLAS two ways, `x @ W.T` (torch's
`linear`) or `(W @ x.T).T`, and for a few rows it may choose very different kernels for them.
On this project's 2-core AMD EPYC machine with torch's MKL, SmolLM2's 211 products (30 layers and
the output layer) for 16 rows took ~56-92 ms written as `linear` and ~48-63 ms weights first, and
a whole 16-row decode step went from ~215 to ~170 ms; for 11-15 rows weights first was slower
unless the rows were padded to 16.

Which way wins depends on the CPU, the BLAS and the thread count, so `plan_for` times both on the
model's own weight matrices (all of them, as a step reads them) for 2, 4, 8, 16 and 32 rows, once
per process and set of shapes, or once per machine with a store (~6 s for SmolLM2 on 2 cores),
and the decoder then uses weights first (rows padded up to that count) for the row counts where
it won. One row is a matrix-vector product either way (padding it to two rows weights first
timed about even in isolation here and slower in a real step: 96 vs 90 ms), so it is left to
`linear`. The two ways differ only in floating-point summation order (~1e-5 relative in
float32), as a row's products already differ with the number of rows beside it.
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

COUNTS = (2, 4, 8, 16, 32)  # row counts timed; rows between two counts are padded up to the larger
_REPEATS = 6  # timings of each way per count (alternating which goes first; the fastest counts: others ran beside other work)
_PLANS: dict[tuple, dict[int, int]] = {}  # per process: (shapes, dtypes, threads) -> plan


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


def measure(modules: Sequence[Any], rows: int, first: bool) -> float:
    """Seconds to multiply `rows` random rows by every module's weights (weights first or `linear`)."""
    import torch

    inputs = {(module.in_features, module.weight.dtype) for module in modules}
    generator = torch.Generator().manual_seed(0)  # its own: timing never moves the global torch RNG
    rows_of = {key: torch.randn(rows, key[0], generator=generator).to(key[1]) for key in sorted(inputs, key=str)}
    start = time.perf_counter()
    for module in modules:
        x = rows_of[module.in_features, module.weight.dtype]
        if first:
            weights_first(module, rows, x)
        else:
            torch.nn.functional.linear(x, module.weight, module.bias)
    return time.perf_counter() - start


def choose(modules: Sequence[Any], counts: Sequence[int] = COUNTS,
           timing: Callable[[Sequence[Any], int, bool], float] = measure) -> dict[int, int]:
    """Row count -> the count to pad to and multiply weights first, for the counts where that
    was faster (the fastest of alternating timings of each way); other row counts use `linear`."""
    plan: dict[int, int] = {}
    below = 1
    for count in sorted(counts):
        times: dict[bool, list[float]] = {False: [], True: []}
        for repeat in range(_REPEATS):
            for first in (False, True) if repeat % 2 == 0 else (True, False):
                times[first].append(timing(modules, count, first))
        if min(times[True]) < min(times[False]):
            plan.update(dict.fromkeys(range(below + 1, count + 1), count))
        below = count
    return plan


def plan_for(model: Any, store: Path | None = None) -> dict[int, int]:
    """`choose` for `model`'s linear modules, timed once per process and set of shapes.

    With `store` (a JSON file), a plan timed for the same shapes, threads, torch and CPU is read
    from it instead, and a new one is added to it: every process on the machine then decodes
    with the same plan, so a resumed run repeats an uninterrupted one's numbers (timings vary
    from process to process, and where the two ways are close the plan could differ).
    """
    import torch

    modules = linears(model)
    if not modules:
        return {}
    key = (tuple((tuple(module.weight.shape), module.weight.dtype, module.bias is not None) for module in modules),
           torch.get_num_threads())
    if key not in _PLANS:
        name = hashlib.sha256(repr((key, torch.__version__, _cpu())).encode()).hexdigest()[:16]
        stored = _read(store).get(name) if store is not None else None
        if stored is not None:
            _PLANS[key] = {int(rows): int(padded) for rows, padded in stored.items()}
        else:
            with torch.inference_mode():
                _PLANS[key] = choose(modules)
            if store is not None:
                _write(store, name, _PLANS[key])
        log.info("weight products: weights first for %s rows (%s on %d matrices)", describe(_PLANS[key]) or "no",
                 "timed" if stored is None else f"read from {store}", len(modules))
    return _PLANS[key]


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _read(store: Path) -> dict[str, dict[str, int]]:
    """The stored plans; an unreadable or malformed file counts as empty (it is re-timed and rewritten)."""
    try:
        plans = json.loads(store.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log.warning("weight products: ignoring %s (%s); timing again", store, error)
        return {}
    return plans if isinstance(plans, dict) else {}


def _write(store: Path, name: str, plan: Mapping[int, int]) -> None:
    """Add a plan to `store`, atomically (a temporary sibling renamed into place)."""
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        plans = _read(store)
        plans[name] = {str(rows): padded for rows, padded in sorted(plan.items())}
        temporary = store.with_name(f".{store.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(plans, indent=1))
        os.replace(temporary, store)
    except OSError as error:  # a read-only cache: this process keeps its plan, the next one times again
        log.warning("weight products: could not store the plan in %s (%s)", store, error)


def planned() -> list[tuple[int, int, dict[int, int]]]:
    """(weight matrices, threads, plan) for every set of shapes planned in this process (timed or read)."""
    return [(len(shapes), threads, dict(plan)) for (shapes, threads), plan in _PLANS.items()]


def describe(plan: Mapping[int, int]) -> str:
    """`{2: 2, 3: 4, 4: 4, 9: 16, ...}` as '2-4, 9-16'."""
    spans: list[list[int]] = []
    for rows in sorted(plan):
        if spans and spans[-1][1] == rows - 1:
            spans[-1][1] = rows
        else:
            spans.append([rows, rows])
    return ", ".join(f"{low}-{high}" if low != high else str(low) for low, high in spans)


class Products:
    """Switches a model's linear modules to weights-first products for the planned row counts."""

    def __init__(self, modules: Sequence[Any], plan: Mapping[int, int]):
        self.modules, self.plan = list(modules), dict(plan)

    @classmethod
    def of(cls, model: Any, store: Path | None = None) -> Products:
        return cls(linears(model), plan_for(model, store))

    @contextlib.contextmanager
    def active(self, rows: int) -> Iterator[None]:
        """Inside the block, products of `rows` rows go weights first if the plan says so."""
        padded = self.plan.get(rows)
        if padded is None:
            yield
            return
        switched = []
        try:
            for module in self.modules:
                module.forward = functools.partial(weights_first, module, padded)
                switched.append(module)
            yield
        finally:
            for module in switched:
                del module.forward
