"""Soak: a long emulated run with policy changes; is memory flat, are threads and events bounded?

16 sessions on the emulated laptop-8gb device, the policy changing every 30 s
(oldest → round-robin → all → dynamic → fixed → adaptive → …). Every 10 s it
samples RSS, the thread count and the event count; at the end it prints the
RSS at start and end, the slope of a least-squares line through the samples
after the first minute and through those after the in-memory timeline is full
(``TIMELINE_S``, 5 min; everything else is allocated up front), in MB/min, and
the errors seen.

Usage: python benchmarks/soak.py [--minutes 10] [--sessions 16] [--dashboard]
  --dashboard  run the same with the Qt dashboard open (offscreen if no display)
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np

from batchscope.config import POLICIES, RunConfig
from batchscope.device.memory import rss_mb
from batchscope.engine.engine import Engine
from batchscope.engine.metrics import TIMELINE_S

SAMPLE_S = 10.0
CHANGE_S = 30.0


def soak(engine: Engine, minutes: float, tick=lambda: None) -> list[tuple[float, float, int, int]]:
    """Drive policy changes and sample (t, rss, threads, events) until time is up."""
    samples = []
    t0 = time.monotonic()
    next_sample, next_change, k = 0.0, CHANGE_S, 0
    while (t := time.monotonic() - t0) < minutes * 60:
        if t >= next_sample:
            samples.append((t, rss_mb(), threading.active_count(), len(engine.events())))
            next_sample += SAMPLE_S
        if t >= next_change:
            k += 1
            policy = POLICIES[k % len(POLICIES)]
            engine.apply(engine.config.with_changes(policy=policy, max_batch=8))
            next_change += CHANGE_S
        tick()
        time.sleep(0.05)
    return samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--dashboard", action="store_true")
    args = ap.parse_args()
    cfg = RunConfig(
        sources=("synthetic",),
        sessions=args.sessions,
        policy="oldest",
        max_batch=8,
        resolution=(512, 288),
        precision="fp16",
    )
    window = None
    engine = Engine(cfg)
    if args.dashboard:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        from PySide6.QtWidgets import QApplication

        from batchscope.ui.controls.device_options import device_choices
        from batchscope.ui.theme import Look, apply_look
        from batchscope.ui.window.main_window import MainWindow

        app = QApplication.instance() or QApplication([])
        apply_look(app, Look())
        window = MainWindow(engine, Look(), None, devices=device_choices(gpus=[]))
        window.resize(1600, 1000)
        window.show()
        window.start()  # opens and starts the engine off the GUI thread
        while not engine.running:
            app.processEvents()
            time.sleep(0.02)
        tick = app.processEvents
    else:
        engine.open()
        engine.start()
        tick = lambda: None  # noqa: E731
    try:
        samples = soak(engine, args.minutes, tick)
        report = engine.report()
    finally:
        if window is not None:
            window.close()
        engine.stop()
    t, rss, threads, events = (np.array(c, dtype=float) for c in zip(*samples, strict=True))

    def slope(after: float) -> str:
        keep = t >= after
        if keep.sum() < 3:
            return "n/a (run longer)"
        per_min = np.polyfit(t[keep] / 60.0, rss[keep], 1)[0]
        return f"{per_min:+.2f} MB/min over {keep.sum()} samples"

    errors = [e for e in report["events"] if e["kind"] in ("error", "oom")]
    mode = "with dashboard" if args.dashboard else "headless"
    print(
        f"# soak {mode}: {args.minutes:g} min, {args.sessions} sessions, emulated laptop-8gb "
        f"fp16 512x288, policy change every {CHANGE_S:g} s, {time.strftime('%Y-%m-%d')}"
    )
    print(f"RSS start {rss[0]:.1f} MB, end {rss[-1]:.1f} MB")
    print(f"slope after the first minute: {slope(60.0)}")
    print(f"slope once the timeline is full ({TIMELINE_S / 60:g} min): {slope(TIMELINE_S + 10.0)}")
    print(
        f"threads min {threads.min():.0f} max {threads.max():.0f}; events at end "
        f"{events[-1]:.0f} (bounded at 2000)"
    )
    print(
        f"errors/oom events: {len(errors)}; windows processed since start: "
        f"{sum(s['delivered'] for s in report['sessions'])}"
    )
    for e in errors[:5]:
        print("  ", e)


if __name__ == "__main__":
    main()
