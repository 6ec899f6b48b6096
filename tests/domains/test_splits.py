"""The training split is disjoint from the benchmark: other databases, mostly other tools."""

from tbx.catalog import resolve_tasks
from tbx.config import TasksConfig
from tbx.domains import domain_names, get_domain

BENCH = [d for d in domain_names() if get_domain(d).split == "bench"]
TRAIN = [d for d in domain_names() if get_domain(d).split == "train" and d != "mock"]


def schema(name):
    return {t.name: tuple(sorted(c.name for c in t.columns)) for t in get_domain(name).metadata.sorted_tables}


def test_bench_has_five_domains_and_500_tasks_and_train_three_and_187():
    assert len(BENCH) == 5 and len(TRAIN) == 3
    bench = resolve_tasks(TasksConfig(name="bench", domains=BENCH))
    train = resolve_tasks(TasksConfig(name="train", domains=TRAIN))
    assert len(bench) >= 500 and all(t.split == "bench" for t in bench)
    assert len(train) >= 187 and all(t.split == "train" for t in train)


def test_no_training_task_shares_a_database_schema_with_a_benchmark_task():
    for train in TRAIN:
        for bench in BENCH:
            shared = {name for name, columns in schema(train).items() if schema(bench).get(name) == columns}
            # a generic bookkeeping table may look alike, and so may an identity record (the domains'
            # `records`); the databases themselves must differ
            shared -= set(get_domain(train).records)
            assert len(shared) <= 1 and schema(train) != schema(bench), (train, bench, shared)


def test_training_domains_use_mostly_other_tools():
    bench_tools = {name for d in BENCH for name in get_domain(d).tool_names}
    for train in TRAIN:
        tools = set(get_domain(train).tool_names)
        assert len(tools & bench_tools) <= len(tools) // 4, (train, sorted(tools & bench_tools))
