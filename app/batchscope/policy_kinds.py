"""The built-in batch policies: every fact about each one but its rule, in one table.

A policy's rule (which waiting windows go now) is its class in
:mod:`batchscope.engine.policies`; everything else the app says or does about it reads
:data:`KINDS`: the name the CLI and files use, the app's label, the plan plot's colour,
the knobs it reads, how Triton's and Ray's batchers hold it, what the planner searches
and what the bus view draws under the batches. Adding a policy is its rule (its function
in :mod:`batchscope.engine.rules`, its class calling it) plus one :class:`PolicyKind`
here (``tests/test_policy_kinds.py`` holds the two together); the simulator plays it
once its loop calls the rule by a code (``sim/fast_loop.py``'s ``CODES``, a branch in
``_loop``), and refuses it in one line until then.

Text templates are ``str.format`` strings over the config's knobs, plus ``cap``: the
knob that caps the batch, phrased (``" (max 8)"`` in a phrase, ``" ≤8"`` in a label;
empty when there is none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _no_knobs(p99_ms: float) -> list[dict[str, Any]]:
    return [{}]


@dataclass(frozen=True)
class PolicyKind:
    """One built-in policy's facts (module doc)."""

    name: str
    #: in the app's Policy list
    label: str
    #: the plan plot's and the Capacity tab's colour (Okabe–Ito, in the order of KINDS)
    colour: str
    #: the RunConfig fields it reads (the others are ignored; the app greys them)
    knobs: tuple[str, ...] = ()
    #: its knobs that may be None ("unlimited" in the app)
    optional: tuple[str, ...] = ()
    #: the knob that caps a batch ("": one window at a time)
    cap_knob: str = ""
    #: a batch waits up to ``max_delay_ms`` for more windows (Triton's queue delay,
    #: Ray's batch_wait_timeout_s; the bus view draws the deadline)
    waits: bool = False
    #: its cap moves while it runs (an export takes the cap it settled at)
    learns_cap: bool = False
    #: the policy in one phrase, for status bars and tables
    phrase: str = ""
    #: short enough for a table cell (≤ 20 characters)
    short: str = ""
    #: the policy with the knob that shapes it, from a report's config ("all ≤8")
    brief: str = "{name}{cap}"
    #: how Triton's dynamic batcher holds it (said in a config.pbtxt and `plan --export`)
    triton: str = ""
    #: why Triton cannot serve it at all ("": it can)
    triton_refusal: str = ""
    #: the knob values the planner searches, given the p99 budget (ms); each value is
    #: clipped to its knob's range there
    grid: Callable[[float], list[dict[str, Any]]] = _no_knobs

    def cap_of(self, knobs: dict[str, Any]) -> int | None:
        """The batch cap ``knobs`` give it: 1 one at a time, None where unbounded."""
        return knobs.get(self.cap_knob) if self.cap_knob else 1

    def text(self, template: str, knobs: dict[str, Any], cap: str) -> str:
        """``template`` (:attr:`phrase`, :attr:`short`, :attr:`brief`) over ``knobs``,
        with ``cap`` formatted with the cap knob's value (empty when it has none)."""
        value = knobs.get(self.cap_knob) if self.cap_knob else None
        return template.format(name=self.name, cap=cap.format(value) if value else "", **knobs)


KINDS: dict[str, PolicyKind] = {
    k.name: k
    for k in (
        PolicyKind(
            "oldest",
            "Oldest first (1 at a time)",
            "#D55E00",
            phrase="oldest first, one at a time",
            short="oldest",
            triton="oldest first -> no Triton equivalent: one request at a time "
            "(max_batch_size 1), served in arrival order (FIFO), which is oldest first only "
            "if clients drop stale frames themselves",
        ),
        PolicyKind(
            "round-robin",
            "Round robin (1 at a time)",
            "#E69F00",
            phrase="round robin, one at a time",
            short="round-robin",
            triton="round robin -> no Triton equivalent (Triton does not cycle over "
            "clients): one request at a time (max_batch_size 1), FIFO",
        ),
        PolicyKind(
            "all",
            "Batch all waiting",
            "#0072B2",
            knobs=("max_batch",),
            optional=("max_batch",),
            cap_knob="max_batch",
            phrase="batch all waiting{cap}",
            short="all{cap}",
            triton="batch all waiting -> dynamic batching without delay "
            "(max_queue_delay_microseconds 0), max_batch_size = the cap (or the session "
            "count)",
            grid=lambda p99_ms: [{"max_batch": b} for b in (None, 2, 4, 8)],
        ),
        PolicyKind(
            "dynamic",
            "Dynamic (size or timeout)",
            "#009E73",
            knobs=("max_batch", "max_delay_ms"),
            cap_knob="max_batch",
            waits=True,
            phrase="dynamic: up to {max_batch}, wait ≤ {max_delay_ms:g} ms",
            short="dynamic{cap}, {max_delay_ms:g} ms",
            triton="dynamic -> max_batch_size and preferred_batch_size = max_batch, "
            "max_queue_delay_microseconds = max_delay_ms x 1000",
            grid=lambda p99_ms: [
                {"max_batch": b, "max_delay_ms": d} for b in (2, 4, 8) for d in (2.0, 5.0, 10.0)
            ],
        ),
        PolicyKind(
            "fixed",
            "Fixed batch size",
            "#CC79A7",
            knobs=("batch", "max_delay_ms"),
            cap_knob="batch",
            waits=True,
            phrase="fixed batch of {batch}, wait ≤ {max_delay_ms:g} ms",
            short="fixed {batch}, {max_delay_ms:g} ms",
            brief="fixed {batch}",
            triton="fixed -> preferred_batch_size = batch (also max_batch_size), "
            "max_queue_delay_microseconds = max_delay_ms x 1000. BatchScope pads a short "
            "batch to that constant shape (what a static TensorRT engine or one CUDA graph "
            "needs), and the plan pays for the padding; Triton's dynamic batcher does not "
            "pad, so it runs a short batch at its own size, faster than planned, unless the "
            "model behind it pads",
            grid=lambda p99_ms: [
                {"batch": b, "max_delay_ms": d} for b in (2, 3, 4) for d in (5.0, 10.0)
            ],
        ),
        PolicyKind(
            "adaptive",
            "Adaptive (AIMD, objective)",
            "#56B4E9",
            knobs=("max_batch", "slo_ms"),
            optional=("max_batch",),
            cap_knob="max_batch",
            learns_cap=True,
            phrase="adaptive (AIMD) under {slo_ms:g} ms{cap}",
            short="adaptive {slo_ms:g} ms{cap}",
            triton="adaptive (AIMD) -> Triton has no AIMD cap: max_batch_size = the cap it "
            "settled at in the simulation, dynamic batching without delay",
            triton_refusal="Triton has no live batch cap: every step of the AIMD cap would "
            "reload the model; choose all, dynamic or fixed with --backend triton",
            # the objective at 0.5 and 0.8 x the budget, 3 significant digits (rounding to
            # 0.1 ms made a 0.09 ms budget's objective 0.0, which the knob refuses)
            grid=lambda p99_ms: [
                {"slo_ms": float(f"{f * p99_ms:.3g}"), "max_batch": None} for f in (0.5, 0.8)
            ],
        ),
    )
}
