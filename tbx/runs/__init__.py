"""A run and what it leaves: its identity and folder (`identity`: the hash of every setting, task and part of
the code that decides a verdict), the frozen record each stage returns (`results`) and where its numbers are
logged (`sinks`: W&B, JSONL)."""
