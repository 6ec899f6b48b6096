"""Stages: orchestration (I/O, progress, concurrency) around the pure core, one module each, every one
declared in tbx/runs/stages.py."""
