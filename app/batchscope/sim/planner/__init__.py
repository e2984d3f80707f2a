"""The capacity planner: how many sessions fit a budget, with which policy and knobs.

Three rooms, as Triton Model Analyzer keeps them: ``search`` (the grid of
settings as a generator of candidates, the capacity bound, the ranking),
``measure`` (each candidate simulated over the phase seeds; ``verify`` runs the
recommendation live) and ``present`` (the series the capacity plot draws), with
the result types in ``results``. The rules are in ``search``'s docstring.
"""

from batchscope.sim.planner.measure import (
    ENGINE_NAMES,
    VERIFY_FIGURES,
    VERIFY_S,
    Evaluator,
    VerifyCancelled,
    format_verify,
    verify,
    verify_json,
)
from batchscope.sim.planner.present import Series, plot_counts, series
from batchscope.sim.planner.results import (
    DEFAULT_DURATION_S,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MIN_FPS_RATIO,
    DEFAULT_SEEDS,
    Budget,
    Plan,
    PlanCancelled,
    Point,
    PolicyPlan,
)
from batchscope.sim.planner.search import (
    candidates,
    capacity_bound,
    plan,
    plan_policy,
    recommend,
    settings,
    windows_needed,
)

__all__ = [
    "DEFAULT_DURATION_S",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MIN_FPS_RATIO",
    "DEFAULT_SEEDS",
    "ENGINE_NAMES",
    "VERIFY_FIGURES",
    "VERIFY_S",
    "Budget",
    "Evaluator",
    "Plan",
    "PlanCancelled",
    "Point",
    "PolicyPlan",
    "Series",
    "VerifyCancelled",
    "candidates",
    "capacity_bound",
    "format_verify",
    "plan",
    "plan_policy",
    "plot_counts",
    "recommend",
    "series",
    "settings",
    "verify",
    "verify_json",
    "windows_needed",
]
