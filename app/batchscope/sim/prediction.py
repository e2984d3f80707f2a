"""What the simulator predicts for a live segment.

A live report's segments (``Engine.report()["segments"]``) carry the
simulator's figures for the same config over the same measured duration, so a
reader sees at once whether the live worker does what its batch curve says it
should: a ratio live ÷ predicted (:func:`batchscope.engine.report.rows.live_vs_predicted`)
far from 1 points at the pipeline (prep, wake-ups, a second process on the
GPU), not at the policy.

A prediction is a plain :func:`~batchscope.sim.simulator.simulate` of the
segment's config, warmed up for the settling second a live segment leaves
out (:data:`~batchscope.engine.segments.SETTLE_S`), then measured for the
segment's ``measured_s``. It starts from empty mailboxes where the live
segment starts from the previous setting's, which the settling second is
there to wash out. A segment on several devices is predicted by the devices'
simulator (:func:`~batchscope.sim.devices.simulate_devices`: its devices, its
router), without a measured host's lateness, which that loop does not replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchscope.config import ConfigError, RunConfig
from batchscope.engine.report.segment import too_short
from batchscope.engine.segments import SETTLE_S
from batchscope.profiles.profile import DeviceProfile, ProfileError, load_profile
from batchscope.sim.devices import load_devices, simulate_devices
from batchscope.sim.host_jitter import HostJitter
from batchscope.sim.simulator import simulate

#: The report's ``config`` keys a prediction reads (the rest do not change the simulation).
_SIMULATED_KEYS = (
    "policy",
    "sessions",
    "fps",
    "max_batch",
    "max_delay_ms",
    "batch",
    "slo_ms",
    "precision",
    "seed",
    "drop_after_ms",
    "neighbours",
    "neighbour_duty",
    "devices",
    "router",
)


#: The shortest measured interval a segment gets a prediction for (s).
MIN_PREDICTED_S = 1.0


def predict_segment(
    config: RunConfig,
    duration_s: float,
    profile: DeviceProfile | None = None,
    seed: int = 0,
    jitter: HostJitter | None = None,
) -> dict[str, Any] | None:
    """The simulator's figures for ``config`` over ``duration_s`` measured seconds.

    ``{"mean_fps", "min_fps", "latency_ms": {"p50", "p99"}, "throughput_wps"}``;
    None when there is nothing to predict from: no profile (``profile`` not
    given and the config is not emulated — a torch config's profile field is
    only the default), no curve for its precision and resolution, no frame
    rate (``fps = source``), or under ``MIN_PREDICTED_S`` measured: a few
    dozen windows give no figure worth comparing (a 0.1 s segment predicted
    250 fps from the first burst of its sessions' frames).
    """
    if duration_s < MIN_PREDICTED_S or config.fps is None:
        return None
    try:
        if profile is None:
            if config.backend != "emulated" or config.device_list:
                return None
            profile = load_profile(config.profile or "")
        config = config.with_changes(duration_s=duration_s, seed=seed)
        if config.devices > 1:  # its devices (each its own profile), its router
            names = config.profiles or [profile.name] * config.devices
            on = load_devices(names, profile)
            report = simulate_devices(config, on, config.router, SETTLE_S, jitter)
        else:
            report = simulate(config, profile, SETTLE_S, jitter)
    except (ProfileError, ConfigError):
        return None
    overall = report["overall"]
    return {
        "mean_fps": overall["mean_fps"],
        "min_fps": overall["min_fps"],
        "latency_ms": {k: overall["latency_ms"][k] for k in ("p50", "p99")},
        "throughput_wps": overall["throughput_wps"],
    } | ({"host_jitter": jitter.to_json()} if jitter is not None else {})


def add_predictions(
    report: Mapping[str, Any],
    profile: DeviceProfile | None = None,
    jitter: HostJitter | None = None,
) -> dict[str, Any]:
    """``report`` with each segment's ``predicted`` filled in (a new dict; the input is kept).

    Segments of an emulated run are predicted on the profile their config names;
    those of a torch run only if ``profile`` is given (the one the user named
    for it). A segment that cannot be predicted keeps ``predicted: None``; so does
    a fault's segment: a prediction simulates the segment's config from a steady
    start, which a stall or a burst is not (``simulate --experiment`` plays the
    fault itself).
    """
    out = dict(report)
    out["segments"] = [
        {**seg, "predicted": _predict(seg, profile, jitter)} for seg in report.get("segments", [])
    ]
    return out


def _predict(
    segment: Mapping[str, Any], profile: DeviceProfile | None, jitter: HostJitter | None = None
) -> dict[str, Any] | None:
    if "fault" in segment.get("changes", {}) or segment.get("faults") or too_short(segment):
        return None
    cfg = segment["config"]
    if cfg.get("device_list"):  # a real device among them: no curve to predict it from
        return None
    if cfg.get("backend") == "emulated":
        profile = None  # the one its config names
    elif profile is None:
        return None
    try:
        config = RunConfig(
            backend="emulated",
            profile=profile.name if profile else cfg.get("profile"),
            resolution=tuple(cfg["resolution"]),
            profiles=tuple(cfg.get("profiles") or ()) if cfg.get("backend") == "emulated" else (),
            **{k: cfg[k] for k in _SIMULATED_KEYS if k in cfg},
        )
    except (ConfigError, TypeError, KeyError):
        return None
    return predict_segment(config, segment["measured_s"], profile, config.seed, jitter)
