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

from typing import Any

from batchscope.engine.report.body import SessionInfo
from batchscope.engine.report.segment import segment_report
from batchscope.experiment import Experiment
from batchscope.profiles.profile import DeviceProfile
from batchscope.sim.host_jitter import HostJitter
from batchscope.sim.simulator import ProfileCurves, play, simulated_report


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
    """
    curves = ProfileCurves(profile, experiment.base)
    trace = play(experiment, curves, warmup_s, jitter)
    report = simulated_report(trace, curves, warmup_s)
    if jitter is not None:
        report["host_jitter_model"] = jitter.to_json()
    infos = [SessionInfo(sid, "simulated") for sid in range(trace.sessions)]
    report["segments"] = [
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
    report["experiment"] = {
        "name": experiment.name,
        "caption": experiment.caption,
        "duration": experiment.duration,
        "source": experiment.source,
    }
    return report
