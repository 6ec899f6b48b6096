"""Field metadata of the config schema: what counts toward a run's identity, which settings are paths."""

# Run identity (tbx/runs/identity.py): every field counts toward the hash that names a run, unless its metadata
# says otherwise, so a new setting starts a new run until it is marked as not changing results.
NOT_IDENTITY = {"identity": False}  # paths, logging, concurrency, waits and retries: never change a verdict
CONTENT = {"identity": "content"}  # a path: the content of what it names counts, not the path itself
# A path setting: `~` and `$VAR` in it are expanded when the config is built (tbx/config/values.py expand_paths),
# so `tasks.path=~/my_tasks` and `'out_root=$HOME/runs'` mean what they would in a shell.
NOT_IDENTITY_PATH = {**NOT_IDENTITY, "path": True}
CONTENT_PATH = {**CONTENT, "path": True}
# A group that counts toward the identity of the stages that use it only: those whose entry in
# tbx/runs/stages.py names it in `uses` (`grpo` for train and pipeline, not for eval).
STAGE_GROUP = {"stage_group": True}
