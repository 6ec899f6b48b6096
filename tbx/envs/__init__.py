"""tbx tasks as environments of the trainers and evaluators researchers already use (docs/environments.md).

One module per consumer, each importing its library lazily and only there: `tbx.envs.trl` (TRL's
`GRPOTrainer(environment_factory=...)`), `tbx.envs.verifiers` (`load_environment`), `tbx.envs.openenv`
(an OpenEnv `Environment` behind its `create_app`). They share `tbx.envs.episodes`: the episode, the
database clone, the tools, the user and the verdict are tbx's; an adapter only translates.
"""
