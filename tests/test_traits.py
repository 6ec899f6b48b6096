"""Components say what they are: a policy, user or judge from a user's own package, outside `tbx`, is read
by its declared traits (tbx/traits.py), never by the words in its `_target_`. The package here is named
`my_preference_agents`, so a policy in it has "reference" in its path without being one."""

from __future__ import annotations

import textwrap

import pytest

from tbx.campaign.workers import MIN_ATTEMPTS_PER_WORKER, check_workers, plan_workers
from tbx.errors import ConfigError
from tbx.runs.identity import identity_settings, run_identity
from tbx.stages.environment import check_config
from tests.helpers.stage import make_cfg

PACKAGE = "my_preference_agents"
MODULE = '''
from tbx.policies.base import Policy
from tbx.policies.reference import OraclePolicy
from tbx.users.base import UserSimulator
from tbx.users.scripted import ScriptedUser


class UnplayedPolicy(Policy):
    """Built, never asked for a turn: the tests here only name, plan and check runs."""

    @classmethod
    def from_config(cls, setup):
        return cls()

    def agent(self, context):
        raise NotImplementedError


class PreferencePolicy(UnplayedPolicy):
    """A custom policy that declares nothing: the model's settings it is given count toward its runs."""


class ReferenceLikePolicy(OraclePolicy):
    """A user's own reference policy (plays the task's steps, no model), declared as one."""

    is_reference = True


class ModelWrapperPolicy(UnplayedPolicy):
    """A custom policy around the model tbx serves or calls for it."""

    plays_model = True


class MyScriptedUser(ScriptedUser):
    is_scripted = True


class MyLLMUser(UserSimulator):
    needs_llm = True

    @classmethod
    def from_config(cls, settings):
        return cls()

    def session(self, scenario):
        raise NotImplementedError
'''


@pytest.fixture
def agents(tmp_path, monkeypatch) -> str:
    """The custom package on the import path; returns its module's dotted name."""
    folder = tmp_path / "site" / PACKAGE
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "agents.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return f"{PACKAGE}.agents"


def policy(agents: str, name: str) -> list[str]:
    return [f"policy._target_={agents}.{name}", f"policy.name={name.lower()}"]


def test_a_custom_policy_named_preference_keeps_the_model_in_its_identity(tmp_path, agents):
    args = ("stage=eval", "tasks=mock", *policy(agents, "PreferencePolicy"))
    cfg = make_cfg(tmp_path, *args)
    assert "model" in identity_settings(cfg)
    # two models are two runs: neither resumes the other's results
    assert run_identity(cfg) != run_identity(make_cfg(tmp_path, *args, "model.temperature=0.3"))


def test_a_custom_reference_policy_plays_no_model(tmp_path, agents):
    args = ("stage=eval", "tasks=mock", *policy(agents, "ReferenceLikePolicy"))
    cfg = make_cfg(tmp_path, *args)
    assert "model" not in identity_settings(cfg)
    assert run_identity(cfg) == run_identity(make_cfg(tmp_path, *args, "model.temperature=0.3"))


def test_workers_follow_the_declared_traits(tmp_path, agents, monkeypatch):
    monkeypatch.setattr("tbx.campaign.workers.available_cores", lambda: 8)
    pending = 8 * MIN_ATTEMPTS_PER_WORKER
    scripted = [f"user._target_={agents}.MyScriptedUser"]
    # a reference policy with a scripted user: the harness sets the pace, one worker per core
    assert plan_workers(make_cfg(tmp_path, *policy(agents, "ReferenceLikePolicy")), pending) == 8
    assert plan_workers(make_cfg(tmp_path, *policy(agents, "ReferenceLikePolicy"), *scripted), pending) == 8
    # a policy that is no reference, whatever its path says: one process
    assert plan_workers(make_cfg(tmp_path, *policy(agents, "PreferencePolicy")), pending) == 1
    # a custom model policy that tbx serves cannot be spread over workers (each would start vLLM)
    with pytest.raises(ConfigError, match="eval.workers"):
        check_workers(make_cfg(tmp_path, *policy(agents, "ModelWrapperPolicy"), "eval.workers=2"))
    check_workers(make_cfg(tmp_path, *policy(agents, "PreferencePolicy"), "eval.workers=2"))


def test_checks_follow_the_declared_traits(tmp_path, agents):
    no_endpoint = ("stage=eval", "tasks=mock", "model.kind=openai")
    # a custom policy that plays the model: the model's endpoint is checked
    with pytest.raises(ConfigError, match="model.endpoint.base_url"):
        check_config(make_cfg(tmp_path, *no_endpoint, *policy(agents, "ModelWrapperPolicy")))
    # one that does not: nothing of the model is
    check_config(make_cfg(tmp_path, *no_endpoint, *policy(agents, "PreferencePolicy")))
    # a custom user that calls an LLM: its endpoint is checked
    with pytest.raises(ConfigError, match="user.endpoint.base_url"):
        check_config(make_cfg(tmp_path, "stage=eval", "tasks=mock", "policy=oracle",
                              f"user._target_={agents}.MyLLMUser"))


def test_a_target_that_does_not_import_is_named(tmp_path):
    with pytest.raises(ConfigError, match="policy._target_"):
        run_identity(make_cfg(tmp_path, "stage=eval", "tasks=mock", "policy._target_=no_such_package.Policy"))
