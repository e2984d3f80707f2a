"""An experiment file in the simulator: the same steps at the same times as live.

``simulate --experiment`` plays the file that ``run --experiment`` and the app
play, in virtual time (:func:`~batchscope.sim.simulator.play`; its faults too,
with the segments they open live), and reports it
the way the live engine does: the whole run as the report's body, and one
entry per segment from :func:`~batchscope.engine.segments.segment_report`
(kind ``simulate``), so a segment's figures and its settling second are the
same code as live.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from batchscope.engine.metrics import OVERWRITE_DTYPE
from batchscope.engine.player import first_config
from batchscope.engine.report.body import SessionInfo
from batchscope.engine.report.segment import segment_report
from batchscope.experiment import Experiment
from batchscope.profiles.profile import DeviceProfile
from batchscope.sim.devices import (
    Device,
    devices_report,
    emulated_names,
    load_devices,
    measured_records,
    play_devices_experiment,
)
from batchscope.sim.host_jitter import HostJitter
from batchscope.sim.simulator import (
    ProfileCurves,
    Trace,
    play,
    simulated_report,
)


def simulate_experiment(
    experiment: Experiment,
    profile: DeviceProfile | None = None,
    warmup_s: float = 0.0,
    jitter: HostJitter | None = None,
) -> dict[str, Any]:
    """The report of ``experiment`` simulated, with ``segments`` and ``experiment`` added.

    ``profile`` stands for the profile the experiment's base names (default:
    loaded by name); a step naming another profile loads that one. The
    warm-up (default none, as a live experiment starts at its 0 s) runs the
    first config before the experiment's clock starts. Raises ConfigError or
    ProfileError if the first config cannot run; a later step that cannot is
    a segment with ``"error"``. ``jitter``: a measured host's lateness, replayed.

    An experiment on several devices (``devices`` > 1 in any of its configs) plays
    in the devices' loop (:func:`~batchscope.sim.devices.play_devices_experiment`), each
    device on its own profile, and its report has the ``devices`` list too.
    """
    if experiment.most("devices") > 1:
        report = _on_devices(experiment, profile, warmup_s, jitter)
    else:
        report = _on_one_device(experiment, profile, warmup_s, jitter)
    if jitter is not None:
        report["host_jitter_model"] = jitter.to_json()
    report["experiment"] = {
        "name": experiment.name,
        "caption": experiment.caption,
        "duration": experiment.duration,
        "source": experiment.source,
    }
    return report


def _on_one_device(
    experiment: Experiment,
    profile: DeviceProfile | None,
    warmup_s: float,
    jitter: HostJitter | None,
) -> dict[str, Any]:
    curves = ProfileCurves(profile, experiment.base)
    trace = play(experiment, curves, warmup_s, jitter)
    report = simulated_report(trace, curves, warmup_s)
    report["segments"] = segment_reports(trace)
    return report


def segment_reports(trace: Trace) -> list[dict[str, Any]]:
    """Each segment's entry of the report (the live engine's ``segment_report``)."""
    infos = [SessionInfo(sid, "simulated") for sid in range(trace.sessions)]
    return [
        segment_report(
            seg,
            infos,
            trace.items,
            trace.batches,
            trace.overwrites,
            trace.end,
            trace.start,
            "simulate",
            trace.expiries,
        )
        for seg in trace.segments
    ]


def _on_devices(
    experiment: Experiment,
    profile: DeviceProfile | None,
    warmup_s: float,
    jitter: HostJitter | None,
) -> dict[str, Any]:
    """The devices the experiment's opening config lists, each its profile."""
    first = first_config(experiment)  # the base unless a step is at 0 s
    devices = load_devices(emulated_names(first), profile)
    return simulate_on_devices(experiment, devices, first.router, warmup_s, jitter)


def simulate_on_devices(
    experiment: Experiment,
    devices: Sequence[Device],
    router: str,
    warmup_s: float = 0.0,
    jitter: HostJitter | None = None,
) -> dict[str, Any]:
    """The report of ``experiment`` played on ``devices`` by ``router`` (the opening
    config's: a step may change both), with its ``segments`` (each from the live engine's
    code) and the ``devices`` list (every device that ran, by its index)."""
    played = play_devices_experiment(experiment, devices, router, warmup_s, jitter)
    assert played.changes is not None, "an experiment's run has its changes"
    config = played.changes.config
    report = devices_report(played, config, played.devices, played.router, warmup_s)
    items, batches = measured_records(played.measured, played.delivered, on_devices=True)
    overwrites = played.clock.overwrites()
    trace = Trace(
        items=items,
        batches=batches,
        overwrites=overwrites[overwrites["t"] >= played.t0],
        start=played.t0,
        end=played.t_end,
        sessions=experiment.most("sessions"),
        config=config,
        segments=tuple(played.changes.segments.all()),
        peak_mb=None,  # the report's memory is devices_report's
        expiries=np.array(played.expired, OVERWRITE_DTYPE),
    )
    report["segments"] = segment_reports(trace)
    return report
