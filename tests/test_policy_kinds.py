"""The policy table (policy_kinds.py) and the rules (engine/policies.py) hold together: a
policy is its rule plus one entry, and what the app says about it comes from the entry."""

from __future__ import annotations

import inspect

import pytest

from batchscope.config import KNOBS, POLICIES, POLICY_PARAMS, SERVING_REFUSALS, RunConfig
from batchscope.engine.policies import RULES, make_policy
from batchscope.engine.report.rows import policy_text
from batchscope.policy_kinds import KINDS
from batchscope.setting import TRITON_MAPPING, triton_batching
from batchscope.sim.planner import Budget, settings


def test_every_kind_has_its_rule_and_every_rule_its_kind():
    assert set(RULES) == set(KINDS)
    assert tuple(KINDS) == POLICIES


@pytest.mark.parametrize("name", list(KINDS))
def test_a_rule_is_built_from_its_kinds_knobs(name):
    kind = KINDS[name]
    params = inspect.signature(RULES[name].__init__).parameters
    required = {
        p
        for p, v in params.items()
        if p != "self"
        and v.default is v.empty
        and v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY)
    }
    assert required <= set(kind.knobs), "a rule's constructor needs only its knobs"
    assert set(kind.optional) <= set(kind.knobs)
    assert all(k in KNOBS for k in kind.knobs)
    config = RunConfig(policy=name, max_batch=4)
    policy = make_policy(config)
    assert type(policy) is RULES[name]
    assert policy.knobs == kind.knobs
    cap = kind.cap_of({k: getattr(config, k) for k in kind.knobs})
    if kind.learns_cap:  # it starts low and learns up to its knob
        assert 1 <= policy.cap <= cap
    else:
        assert policy.cap == cap


def test_facts_the_app_reads_come_from_the_table():
    assert {k.name: k.knobs for k in KINDS.values()} == POLICY_PARAMS
    assert SERVING_REFUSALS["triton"] == {"adaptive": KINDS["adaptive"].triton_refusal}
    assert {k.name: k.triton for k in KINDS.values()} == TRITON_MAPPING
    assert all(len(k.label) <= 30 and k.colour.startswith("#") for k in KINDS.values())
    assert len({k.colour for k in KINDS.values()}) == len(KINDS)


def test_phrases_labels_and_report_text():
    c = RunConfig(policy="all", max_batch=8)
    assert (c.policy_phrase(), c.policy_label()) == ("batch all waiting (max 8)", "all ≤8")
    assert RunConfig(policy="all").policy_label() == "all"
    c = RunConfig(policy="dynamic", max_batch=4, max_delay_ms=5.0)
    assert c.policy_phrase() == "dynamic: up to 4, wait ≤ 5 ms"
    assert c.policy_label() == "dynamic ≤4, 5 ms"
    c = RunConfig(policy="fixed", batch=3, max_delay_ms=2.5)
    assert (c.policy_phrase(), c.policy_label()) == (
        "fixed batch of 3, wait ≤ 2.5 ms",
        "fixed 3, 2.5 ms",
    )
    c = RunConfig(policy="adaptive", slo_ms=40.0, max_batch=6)
    assert c.policy_phrase() == "adaptive (AIMD) under 40 ms (max 6)"
    assert c.policy_label() == "adaptive 40 ms ≤6"
    assert RunConfig(policy="oldest").policy_phrase() == "oldest first, one at a time"
    assert policy_text({"policy": "dynamic", "max_batch": 8}) == "dynamic ≤8"
    assert policy_text({"policy": "fixed", "batch": 4}) == "fixed 4"
    assert policy_text({"policy": "round-robin"}) == "round-robin"
    assert policy_text({"policy": "from a newer version"}) == "from a newer version"


def test_a_policy_that_needs_a_knob_says_which_flag():
    with pytest.raises(Exception, match="the dynamic policy needs --max-batch"):
        RunConfig(policy="dynamic", max_batch=None)


def test_triton_holds_each_kind_by_its_facts():
    assert triton_batching("oldest", None, 4, 5.0, 16) == (1, None, 0)
    assert triton_batching("all", None, 4, 5.0, 16) == (16, None, 0)
    assert triton_batching("adaptive", 6, 4, 5.0, 16) == (6, None, 0)
    assert triton_batching("dynamic", 8, 4, 5.0, 16) == (8, 8, 5000)
    assert triton_batching("fixed", None, 4, 2.5, 16) == (4, 4, 2500)


def test_the_planner_searches_each_kinds_grid_clipped_to_its_knobs():
    budget = Budget(30.0, 0.09, 0.9)
    assert settings("adaptive", budget) == [
        {"slo_ms": 0.045, "max_batch": None},
        {"slo_ms": 0.072, "max_batch": None},
    ]
    assert len(settings("dynamic", budget)) == 9
    assert settings("oldest", budget) == [{}]
    huge = Budget(30.0, 10 * KNOBS["slo_ms"].hi, 0.9)  # both objectives clip to its top
    assert settings("adaptive", huge) == [{"slo_ms": KNOBS["slo_ms"].hi, "max_batch": None}]
