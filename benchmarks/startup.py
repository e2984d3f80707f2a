"""Start-up speed: how soon the real app paints its window and plots its first result.

    python benchmarks/startup.py [--runs 5] [GUI ARGS…]

Launches ``python -m batchscope gui [GUI ARGS…]`` (what ``./batchscope.sh demo`` runs)
``--runs`` times as a subprocess under ``QT_QPA_PLATFORM=offscreen``, each with fresh
settings (an empty ``XDG_CONFIG_HOME``, so it opens on the demo), and reads the
milestones the app writes to ``BATCHSCOPE_STARTUP_LOG`` (``batchscope.ui.window.startup_log``):
the seconds from the process's start to its window's first paint and to the first
result drawn into the plots. Each run is ended once its first result is in. Prints
the median (and min–max) of each; ``--json PATH`` also writes every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120.0  # a run that has not plotted a result by then failed


def read_log(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        name, _, stamp = line.partition(" ")
        out[name] = float(stamp)
    return out


def one_run(gui_args: list[str]) -> dict[str, float]:
    """Seconds from process start to ``window_painted`` and to ``first_result``."""
    with tempfile.TemporaryDirectory(prefix="batchscope-startup-") as tmp:
        log = Path(tmp) / "startup.log"
        env = {
            **os.environ,
            "QT_QPA_PLATFORM": "offscreen",
            "XDG_CONFIG_HOME": str(Path(tmp) / "config"),
            "BATCHSCOPE_STARTUP_LOG": str(log),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT / "app"), os.environ.get("PYTHONPATH")) if p
            ),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "batchscope", "gui", *gui_args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while "first_result" not in (marks := read_log(log)):
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace")[-2000:]
                    raise RuntimeError(f"the app exited ({proc.returncode}) first:\n{err}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no result plotted within {TIMEOUT_S:.0f} s")
                time.sleep(0.01)
        finally:
            proc.kill()
            proc.wait()
    t0 = marks["process_start"]
    return {
        "window_painted_s": marks["window_painted"] - t0,
        "first_result_s": marks["first_result"] - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="also write every run here")
    args, gui_args = parser.parse_known_args()
    runs = []
    for i in range(args.runs):
        run = one_run(gui_args)
        runs.append(run)
        print(
            f"run {i + 1}: painted {run['window_painted_s']:.2f} s, "
            f"first result {run['first_result_s']:.2f} s",
            flush=True,
        )
    print(f"\n{args.runs} runs of: python -m batchscope gui {' '.join(gui_args)}".rstrip())
    print("| milestone | median (s) | min | max |\n|---|---:|---:|---:|")
    for key, name in (("window_painted_s", "window painted"), ("first_result_s", "first result")):
        values = [r[key] for r in runs]
        print(
            f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": gui_args, "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
