"""Shared by the tests: the JSON report contract (ARCHITECTURE.md) and a polling helper."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from batchscope.engine.engine import Engine
    from batchscope.experiment import Experiment

REPORT_KEYS = {"kind", "config", "sessions", "overall", "memory"}
SESSION_KEYS = {
    "id",
    "source",
    "fps",
    "delivered",
    "overwritten",
    "expired",
    "latency_ms",
    "stages_ms",
    "host_late_ms",
}
OVERALL_KEYS = {
    "throughput_wps",
    "mean_fps",
    "min_fps",
    "jain",
    "overwritten",
    "expired",
    "latency_ms",
    "host_late_ms",
    "batch_sizes",
    "batch_reasons",
    "busy",
}
#: In each session and in ``overall`` where a source has ground truth (the synthetic
#: scene, a clip with labels); never in the simulator's reports.
ACCURACY_KEYS = {
    "scored",
    "visible",
    "hit_rate",
    "median_error_px",
    "no_ball",
    "false_detection_rate",
    "median_freshness_px",
}
#: A small, fast emulated run (the laptop GPU at 256×144 FP16: 4.7 ms a window).
SMALL_EMULATED = dict(
    sources=("synthetic",),
    resolution=(256, 144),
    precision="fp16",
    profile="laptop-8gb",
    backend="emulated",
)
LATENCY_KEYS = {"mean", "p50", "p95", "p99", "max"}
STAGE_KEYS = {"wait", "host", "prep", "compute", "post"}


def wait_for(cond: Callable[[], object], timeout: float = 10.0) -> bool:
    """Poll ``cond`` every 50 ms until it is true or ``timeout`` seconds pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def running_engine(**config: Any) -> Engine:
    """An engine on :data:`SMALL_EMULATED` with ``config``, started, and every session
    past its first 5 results (the caller stops it)."""
    from batchscope.config import RunConfig
    from batchscope.engine.engine import Engine

    engine = Engine(RunConfig(**{**SMALL_EMULATED, **config}))
    engine.open()
    engine.start()
    assert wait_for(lambda: min(s.delivered for s in engine.snapshot().sessions) > 5)
    return engine


def played_live(exp: Experiment, slack_s: float = 60.0) -> tuple[dict, Engine]:
    """``exp`` played live as the app and ``run --experiment`` play it: engine/player.py
    on an engine started on its first config. The engine comes back stopped, every
    thread ended, for its per-batch records."""
    from batchscope.engine.engine import Engine
    from batchscope.engine.player import ExperimentPlayer, first_config

    engine = Engine(first_config(exp))
    engine.open()
    engine.start()
    player = ExperimentPlayer(engine, exp)
    try:
        player.start()
        assert player.finished.wait(exp.duration + slack_s)
        report = engine.report()
    finally:
        player.stop()
        engine.stop()
    assert wait_for(lambda: engine.threads_alive() == [] and not player.alive)
    return report, engine


def check_plan_verify(on: str, engine_name: str, tmp_path, capsys) -> None:
    """``plan --verify --on ON --json P`` at 256×144 on laptop-8gb: the contract's verify
    object (served ÷ planned as its ratio) and the table naming the engine."""
    import json

    import pytest

    from batchscope.cli import main

    out = tmp_path / "plan.json"
    args = ["plan", "--profile", "laptop-8gb", "--resolution", "256x144", "--seeds", "2",
            "--p99-ms", "50", "--verify", "--on", on, "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    verify = json.loads(out.read_text())["verify"]
    assert verify["on"] == on
    # the contract's keys, and the verdict against the budget asked (issue 48)
    assert set(verify) == {"on", "planned", "served", "ratio", "verdict"}
    assert isinstance(verify["verdict"]["pass"], bool) and "p99" in verify["verdict"]["line"]
    assert verify["served"]["throughput_wps"] > 0
    assert verify["ratio"]["mean_fps"] == pytest.approx(
        verify["served"]["mean_fps"] / verify["planned"]["mean_fps"], abs=0.002
    )
    assert f"served by {engine_name}" in capsys.readouterr().out


def recorded(engine: Any, what: str) -> Any:
    """A view of the engine's recorded ``items`` or ``batches`` (under the store's lock)."""
    with engine.store.lock:
        return getattr(engine.store, what).view()
