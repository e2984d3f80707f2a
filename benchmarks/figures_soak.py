"""Do the figures stay true over a long, wide run with the app open? (issue 43)

``soak``: the dashboard open (offscreen unless a display is set) on a live run of
``--sessions`` sessions (64) on the emulated laptop-8gb device, fp16 256x144, for
``--minutes`` (30), a step every ``--step-minutes`` (5: the policy cycles through
all → dynamic → adaptive → all with a cap …). It prints:

- every closed segment's figures as read 2 s after it closed, and whether they are the
  same at the end of the run (they must be: a closed segment is frozen), with the
  simulator's prediction beside them (live ÷ predicted mean fps and p99);
- at minutes 1, half-way and the end: the UI tick's mean cost (ms, over the last minute),
  the share of the GUI thread it takes, and the process's RSS;
- the process's CPU (% of one core) over ``--pause-s`` (20) paused, at the end, beside
  the same span running just before.

``ring``: two ``--segment-s`` (30) segments of ``--sessions`` (16) with the item ring
shrunk to ``--ring`` (8,192) windows: segment 0 read 3 s and 30 s after it closed, and
the whole run.

``devices``: 4 emulated devices (least-loaded) with enough sessions for ≥ 800 windows/s,
``--seconds`` (30): the live timeline's throughput (its mean over the run's last 20 s)
beside the report's, and the timeline's busy beside the report's.

    python benchmarks/figures_soak.py soak [--minutes 30] [--sessions 64]
    python benchmarks/figures_soak.py devices [--seconds 30]
    python benchmarks/figures_soak.py ring [--ring 8192] [--sessions 16]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np

from batchscope.config import RunConfig
from batchscope.device.memory import rss_mb
from batchscope.engine.engine import Engine

#: Both checks' run: the emulated laptop GPU at 256x144 fp16, batch all waiting
BASE: dict[str, Any] = dict(
    sources=("synthetic",),
    policy="all",
    backend="emulated",
    profile="laptop-8gb",
    precision="fp16",
    resolution=(256, 144),
)
STEPS = (
    {"policy": "all", "max_batch": None},
    {"policy": "dynamic", "max_batch": 16, "max_delay_ms": 10.0},
    {"policy": "adaptive", "max_batch": None, "slo_ms": 120.0},
    {"policy": "all", "max_batch": 32},
)


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def soak(args: argparse.Namespace) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from batchscope.sim.prediction import add_predictions
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.theme import Look, apply_look
    from batchscope.ui.window.main_window import MainWindow

    config = RunConfig(**BASE, sessions=args.sessions)
    app = QApplication.instance() or QApplication([])
    apply_look(app, Look())
    engine = Engine(config)
    window = MainWindow(engine, Look(), None, devices=device_choices(gpus=[]))
    window.resize(1600, 1000)
    window.show()
    window.start()
    while not engine.running:
        app.processEvents()
        time.sleep(0.02)

    def run_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    def reading(t: float) -> tuple[float, float, float, float]:
        """(minute, the tick's mean ms, its share of the GUI thread, RSS MB) now."""
        stats = window.tick_stats
        tick_ms = 1000.0 * stats.busy_s / max(1, stats.ticks)
        return t / 60.0, tick_ms, stats.busy_fraction, rss_mb()

    t0 = time.monotonic()
    total = args.minutes * 60.0
    step_s = args.step_minutes * 60.0
    marks = sorted({60.0, round(total / 2)})  # and the end
    at_close: dict[int, dict] = {}
    readings = []
    next_step, k = step_s, 0
    window.tick_stats.reset()
    last_reset = 0.0
    try:
        while (t := time.monotonic() - t0) < total:
            if marks and t >= marks[0]:
                readings.append(reading(marks.pop(0)))
            if t - last_reset >= 60.0:  # each reading covers the minute before it
                window.tick_stats.reset()
                last_reset = t
            if t >= next_step:
                k += 1
                engine.apply(engine.config.with_changes(**STEPS[k % len(STEPS)]))
                closed = engine.segments.all()[-2]
                run_for(2.0)
                at_close[closed.index] = engine.report()["segments"][closed.index]
                next_step += step_s
            run_for(0.2)
        readings.append(reading(total))
        cpu0, w0 = _cpu_s(), time.monotonic()
        run_for(args.pause_s)
        running_cpu = (_cpu_s() - cpu0) / (time.monotonic() - w0)
        engine.set_paused(True)
        run_for(1.0)
        cpu0, w0 = _cpu_s(), time.monotonic()
        run_for(args.pause_s)
        paused_cpu = (_cpu_s() - cpu0) / (time.monotonic() - w0)
        engine.set_paused(False)
        report = add_predictions(engine.report())
    finally:
        window.close()
        engine.stop()

    print(
        f"# figures soak: {args.minutes:g} min live, {args.sessions} sessions, emulated "
        f"laptop-8gb fp16 256x144, a step every {args.step_minutes:g} min, dashboard open "
        f"({os.environ['QT_QPA_PLATFORM']}), {time.strftime('%Y-%m-%d')}"
    )
    print("segment  span s        mean fps  p99 ms  w/s     same at end  live/pred fps  p99")
    segments = report["segments"]
    for index, then in sorted(at_close.items()):
        now = segments[index]
        o = now["overall"]
        pred = now.get("predicted") or {}
        same = "yes" if {**now, "predicted": None} == {**then, "predicted": None} else "NO"
        fps_ratio = o["mean_fps"] / pred["mean_fps"] if pred.get("mean_fps") else float("nan")
        p99_ratio = (
            o["latency_ms"]["p99"] / pred["latency_ms"]["p99"]
            if pred.get("latency_ms")
            else float("nan")
        )
        print(
            f"{index:>7}  {now['start_s']:>6.0f}-{now['end_s']:<6.0f} {o['mean_fps']:>8.2f} "
            f"{o['latency_ms']['p99']:>7.1f} {o['throughput_wps']:>6.0f}  {same:>11}  "
            f"{fps_ratio:>13.3f} {p99_ratio:>5.2f}"
        )
    print("minute  tick ms  GUI thread  RSS MB")
    for minute, tick_ms, share, rss in readings:
        print(f"{minute:>6.1f}  {tick_ms:>7.2f}  {100 * share:>9.1f}%  {rss:>6.0f}")
    print(
        f"CPU over {args.pause_s:g} s: running {100 * running_cpu:.0f}% of a core, "
        f"paused {100 * paused_cpu:.0f}%"
    )


def devices(args: argparse.Namespace) -> None:
    config = RunConfig(**BASE, sessions=args.sessions, devices=4, router="least-loaded")
    engine = Engine(config)
    engine.open()
    engine.start()
    try:
        time.sleep(args.seconds)
        report = engine.report()
        timeline = [s for s in engine.snapshot().timeline if s.t >= engine.now() - 20.0]
    finally:
        engine.stop()
    o = report["overall"]
    live = float(np.mean([s.throughput_wps for s in timeline]))
    busy = float(np.mean([s.busy for s in timeline]))
    print(
        f"# 4 emulated laptop-8gb devices (least-loaded), {args.sessions} sessions, fp16 "
        f"256x144, {args.seconds:g} s, {time.strftime('%Y-%m-%d')}"
    )
    print(f"report: {o['throughput_wps']:.0f} w/s, busy {o['busy']:.2f}")
    print(f"timeline (mean of the last 20 s): {live:.0f} w/s, busy {busy:.2f}")


def ring(args: argparse.Namespace) -> None:
    """Closed segments longer than the ring, at a small scale: the item ring shrunk to
    ``--ring`` windows (the real one: 262,144, 136 s of 64 sessions)."""
    from batchscope.engine import metrics

    metrics.ITEM_CAPACITY = args.ring
    engine = Engine(RunConfig(**BASE, sessions=args.sessions))
    engine.open()
    engine.start()

    def show(when: str) -> None:
        seg = engine.report()["segments"][0]
        o = seg["overall"]
        windows = sum(s["delivered"] for s in seg["sessions"])
        print(
            f"segment 0, {when}: {o['mean_fps']:.2f} fps, {o['throughput_wps']:.1f} w/s, "
            f"{windows} windows"
        )

    try:
        time.sleep(args.segment_s)
        engine.apply({"max_batch": 8})
        time.sleep(3.0)
        show("3 s after it closed")
        time.sleep(args.segment_s - 3.0)
        show(f"{args.segment_s:g} s after it closed")
        o = engine.report()["overall"]
        print(f"whole run: {o['mean_fps']:.2f} fps, {o['throughput_wps']:.1f} w/s")
    finally:
        engine.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("soak")
    s.add_argument("--minutes", type=float, default=30.0)
    s.add_argument("--sessions", type=int, default=64)
    s.add_argument("--step-minutes", type=float, default=5.0)
    s.add_argument("--pause-s", type=float, default=20.0)
    d = sub.add_parser("devices")
    d.add_argument("--seconds", type=float, default=30.0)
    d.add_argument("--sessions", type=int, default=32)
    r = sub.add_parser("ring")
    r.add_argument("--ring", type=int, default=8192)
    r.add_argument("--sessions", type=int, default=16)
    r.add_argument("--segment-s", type=float, default=30.0)
    args = ap.parse_args()
    {"soak": soak, "devices": devices, "ring": ring}[args.what](args)


if __name__ == "__main__":
    main()
