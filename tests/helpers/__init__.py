"""Helpers shared by test modules: imported from here (or from a package's own helper modules, such as
tests/serve/served.py or tests/verl_bridge/verl_run.py), never from another test module or from launch.py.

stage: a config composed as on the command line, a stage run in process, launch.py run as users run it,
  every option of conf/.
episodes: the default episode limits, mock tasks, a scripted policy, a tool that blocks until released.
records: synthetic stored tries with usage and prices, reference success counts, a training history.
models: a tiny random llama. prompts: the mock bank's tools, policy and requests.
processes: a process group's live processes. slurm: a Slurm job's fields.
"""
