"""Cost of watching: the same emulated run headless and with the dashboard open.

The dashboard must not distort what it measures. This runs the emulated
laptop GPU (fp16, 512×288, batch all waiting) on the sample videos twice per
session count — once with no UI, once with the real main window (offscreen)
reading snapshots on its timer — and prints:

- throughput ratio (dashboard / headless; 1.0 = no cost),
- p50 latency ratio (dashboard / headless; 1.0 = no cost),
- the UI timer rate actually achieved (Hz),
- GUI-thread busy %: time spent inside the timer callback / wall time,
- the mean tick (ms inside the timer callback),

with the fps plot on screen (the bus view's tab hidden, so it is skipped), and
again with the bus view on screen instead (``bus`` column: its cost per tick).

Usage: QT_QPA_PLATFORM=offscreen python benchmarks/ui_overhead.py [--duration 10]
       [--sessions 4,16] [--resolution 512x288] [--fps 30] [--json out.json]

``--resolution 256x144`` is the fast curve (4.7 ms a window) for many sessions;
``--fps 5`` keeps 256 sessions within what it can serve.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine, default_sources

WARMUP_S = 2.0
RESOLUTION = (512, 288)  # set from --resolution
FPS = 30.0  # set from --fps


def config(sessions: int) -> RunConfig:
    return RunConfig(
        fps=FPS,
        sources=default_sources(),
        sessions=sessions,
        policy="all",
        backend="emulated",
        profile="laptop-8gb",
        precision="fp16",
        resolution=RESOLUTION,
    )


def headless(sessions: int, duration: float) -> dict[str, Any]:
    engine = Engine(config(sessions))
    engine.open()
    engine.start()
    try:
        time.sleep(WARMUP_S)
        engine.reset_stats(announce=False)
        time.sleep(duration)
        return engine.report()
    finally:
        engine.stop()


def with_dashboard(
    sessions: int, duration: float, bus: bool = False
) -> tuple[dict[str, Any], float, float, float]:
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.theme import Look, apply_look
    from batchscope.ui.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    apply_look(app, Look())

    def pump(seconds: float) -> None:
        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    engine = Engine(config(sessions))
    window = MainWindow(engine, Look(), None, devices=device_choices(gpus=[]))
    window.resize(1600, 1000)
    window.show()
    if bus:
        window.top_tabs.setCurrentWidget(window.bus)
    window.start()
    deadline = time.monotonic() + 60
    while not window.timer.isActive() and time.monotonic() < deadline:
        pump(0.05)
    try:
        pump(WARMUP_S)
        engine.reset_stats(announce=False)
        window.tick_stats.reset()
        pump(duration)
        stats = window.tick_stats
        tick_ms = 1000 * stats.busy_s / max(1, stats.ticks)
        return engine.report(), stats.rate_hz, stats.busy_fraction, tick_ms
    finally:
        window.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--sessions", default="4,16", help="session counts, comma-separated")
    parser.add_argument("--resolution", default="512x288", help="model input, WxH")
    parser.add_argument("--fps", type=float, default=30.0, help="source fps of every session")
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args()
    global RESOLUTION, FPS
    w, h = (int(v) for v in args.resolution.lower().split("x"))
    RESOLUTION, FPS = (w, h), args.fps
    rows = []
    print(
        f"sources: {', '.join(Path(s).name for s in default_sources())}; "
        f"emulated laptop-8gb fp16 {w}x{h}, {FPS:g} fps, policy all; {args.duration:g} s per run"
    )
    head = (
        f"{'sessions':>8} {'thru headless':>14} {'thru UI':>8} {'ratio':>6} "
        f"{'p50 headless':>13} {'p50 UI':>7} {'ratio':>6} {'UI Hz':>6} {'GUI busy':>9} "
        f"{'tick ms':>8} {'bus':>4}"
    )
    print(head)
    print("-" * len(head))
    for n in (int(v) for v in args.sessions.split(",")):
        base = headless(n, args.duration)
        for bus in (False, True):
            ui, hz, busy, tick_ms = with_dashboard(n, args.duration, bus)
            b, u = base["overall"], ui["overall"]
            row = {
                "sessions": n,
                "bus_view": bus,
                "throughput_headless_wps": b["throughput_wps"],
                "throughput_ui_wps": u["throughput_wps"],
                "throughput_ratio": round(u["throughput_wps"] / b["throughput_wps"], 3),
                "p50_headless_ms": b["latency_ms"]["p50"],
                "p50_ui_ms": u["latency_ms"]["p50"],
                "p50_ratio": round(u["latency_ms"]["p50"] / b["latency_ms"]["p50"], 3),
                "ui_timer_hz": round(hz, 1),
                "gui_busy_pct": round(100 * busy, 1),
                "tick_ms": round(tick_ms, 2),
            }
            rows.append(row)
            print(
                f"{n:>8} {row['throughput_headless_wps']:>14.1f} {row['throughput_ui_wps']:>8.1f} "
                f"{row['throughput_ratio']:>6.3f} {row['p50_headless_ms']:>13.1f} "
                f"{row['p50_ui_ms']:>7.1f} {row['p50_ratio']:>6.3f} {row['ui_timer_hz']:>6.1f} "
                f"{row['gui_busy_pct']:>8.1f}% {row['tick_ms']:>8.2f} {'on' if bus else 'off':>4}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
