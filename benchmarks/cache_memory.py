"""Memory of the frame cache: one long file, opened, then a live resolution change.

Writes (once, cached in /tmp) a 720p clip of the synthetic scene of ``--seconds`` (MPEG-4
Part 2, what every OpenCV build writes), then in a fresh interpreter opens it on the
emulated laptop-8gb device at 512x288, runs 3 s, changes the resolution to 256x144 and
back to 512x288, and prints: RSS before opening, peak RSS while opening, and for each
change its duration and the peak RSS during it (sampled every 20 ms), with the frame
cache held after it. The budget is CACHE_BYTES (768 MB) plus the interpreter's baseline.

Usage: python benchmarks/cache_memory.py [--seconds 70] [--app PATH]
  --app  the ``app`` folder to import batchscope from (e.g. a worktree of an older commit,
         to measure before/after in one sitting)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, threading, time
from batchscope.config import RunConfig
from batchscope.device.memory import rss_mb
from batchscope.engine.engine import Engine

clip = sys.argv[1]
out = {"baseline_mb": round(rss_mb())}
peak = [0.0]
stop = threading.Event()

def sample():
    while not stop.wait(0.02):
        peak[0] = max(peak[0], rss_mb())

threading.Thread(target=sample, daemon=True).start()
config = RunConfig(sources=(clip,), sessions=2, backend="emulated", profile="laptop-8gb",
                   precision="fp16", resolution=(512, 288))
engine = Engine(config)
t = time.perf_counter()
engine.open()
engine.start()
out["open_s"] = round(time.perf_counter() - t, 1)
out["open_peak_mb"] = round(peak[0])
time.sleep(3)
changes = []
for res in ((256, 144), (512, 288)):
    peak[0] = rss_mb()
    t = time.perf_counter()
    error = engine.apply(engine.config.with_changes(resolution=res))
    held = sum(s.source.nbytes for s in engine.sources if hasattr(s.source, "nbytes"))
    changes.append({"to": f"{res[0]}x{res[1]}", "error": error,
                    "seconds": round(time.perf_counter() - t, 1), "peak_mb": round(peak[0]),
                    "cache_mb": round(held / 2**20)})
    time.sleep(2)
out["changes"] = changes
out["note"] = engine.sources[0].source.note
stop.set()
engine.stop()
print(json.dumps(out))
"""


def make_clip(seconds: float) -> Path:
    path = Path("/tmp") / f"batchscope_720p_{seconds:g}s.mp4"
    if path.exists():
        return path
    sys.path.insert(0, str(ROOT / "app"))
    import cv2

    from batchscope.scene.synthetic import SyntheticScene

    scene = SyntheticScene(1280, 720, fps=30.0, seed=5)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (1280, 720))
    for index in range(int(seconds * 30)):
        rgb, _ = scene.render(index)
        writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=70.0)
    ap.add_argument("--app", type=Path, default=ROOT / "app")
    args = ap.parse_args()
    clip = make_clip(args.seconds)
    env_path = str(args.app.resolve())
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {env_path!r})\n" + CHILD,
            str(clip),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"clip: {clip} ({args.seconds:g} s of 1280x720 at 30 fps); app: {args.app}")
    print(
        f"RSS before opening {report['baseline_mb']} MB; opening took {report['open_s']} s, "
        f"peak {report['open_peak_mb']} MB"
    )
    for change in report["changes"]:
        print(
            f"change to {change['to']}: {change['seconds']} s, peak {change['peak_mb']} MB, "
            f"cache after {change['cache_mb']} MB"
            + (f", ERROR {change['error']}" if change["error"] else "")
        )
    print(f"note: {report['note']}")


if __name__ == "__main__":
    main()
