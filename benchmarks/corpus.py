"""Real-world-like files through `batchscope run`: what happens to each (issue 16).

Builds a corpus of short clips with ffmpeg's lavfi test sources (codecs, frame rates,
odd and portrait sizes, rotation metadata, 1- and 2-frame clips, audio only, grayscale,
4K, a 10-minute 720p file, a unicode name) and broken inputs (truncated, a named pipe,
an empty file, text renamed .mp4), then runs each one headless, as a user would::

    batchscope run FILE --duration 2 --sessions 1 --json OUT.json

(the emulated device, default settings; ``--timeout`` seconds at most per file, in its
own process group) and prints a markdown table: exit code and outcome (the one-line
error, or frames decoded, the file's own fps and the paced fps, its size and the notes
the run printed), and the peak RSS of each run (GNU ``/usr/bin/time -v`` where present,
else the child's ``wait4`` rusage).

Where the outcome's numbers come from: the exit code, the error line and the notes are
the run's stderr; the own and paced fps and the delivered fps are its JSON report
(``sessions[0]``). The report has no frame count or source size, so for a file that ran
they come from opening it once more the way the engine does (``open_source`` at the
default 512x288) in a child process. Each is checked against what the file was made
as (frames, fps, display size); a mismatch the run did not itself say is marked "⚠".

ffmpeg: ``--ffmpeg PATH``, else the binary of ``imageio_ffmpeg`` if it imports, else
``ffmpeg`` on the PATH (a tool for this benchmark only, not a project dependency)::

    python -m pip install --target /tmp/ffpkg imageio-ffmpeg
    PYTHONPATH=/tmp/ffpkg python benchmarks/corpus.py

Usage: python benchmarks/corpus.py [--out DIR] [--ffmpeg PATH] [--quick] [--rebuild]
                                   [--only NAME,…] [--timeout 60]
  --quick    leave out the 10-minute 720p file (the only slow one to encode)
  --rebuild  encode every file again (files already in DIR are kept otherwise)
  --only     run only the cases whose file names contain one of these words
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path("/tmp/batchscope_corpus")
GNU_TIME = Path("/usr/bin/time")

#: What the harness runs; FILE and OUT.json are filled in.
RUN_ARGS = ("run", "FILE", "--duration", "2", "--sessions", "1", "--json", "OUT.json")

X264 = ("-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p")


def testsrc(size: str = "1280x720", rate: str = "30", seconds: float = 3) -> str:
    return f"testsrc2=size={size}:rate={rate}:duration={seconds:g}"


#: testsrc2 (and crop on its 4:2:0 frames) round a size down to even: crop in 4:4:4.
ODD = testsrc(size="642x360") + ",format=yuv444p,crop=641:359:0:0"


@dataclass
class Case:
    name: str
    what: str
    source: str | None = None  # a lavfi graph, encoded with ``args``
    args: tuple[str, ...] = ()
    make: str = ""  # a special builder instead: truncated, pipe, empty, text, rotate, audio
    base: str = ""  # the case a special builder starts from
    frames: int | None = None  # what it was made as, to check the outcome against
    fps: float | None = None
    size: tuple[int, int] | None = None  # as displayed (after rotation)
    long: bool = False
    extra: dict = field(default_factory=dict)


CASES = [
    Case("h264.mp4", "H.264, 1280x720, 30 fps, 3 s", testsrc(), X264, frames=90, fps=30),
    Case(
        "hevc_8bit.mp4",
        "HEVC 8-bit (Main), 1280x720, 30 fps, 3 s",
        testsrc(),
        ("-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-tag:v", "hvc1"),
        frames=90,
        fps=30,
    ),
    Case(
        "hevc_10bit.mp4",
        "HEVC 10-bit (Main 10), 1280x720, 30 fps, 3 s",
        testsrc(),
        ("-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le", "-tag:v", "hvc1"),
        frames=90,
        fps=30,
    ),
    Case(
        "vp9.webm",
        "VP9 in WebM, 1280x720, 30 fps, 3 s",
        testsrc(),
        ("-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1M"),
        frames=90,
        fps=30,
    ),
    Case(
        "av1.mp4",
        "AV1 (SVT-AV1) in MP4, 1280x720, 30 fps, 3 s",
        testsrc(),
        ("-c:v", "libsvtav1", "-preset", "12", "-pix_fmt", "yuv420p"),
        frames=90,
        fps=30,
    ),
    Case(
        "mjpeg.avi",
        "MJPEG in AVI, 1280x720, 30 fps, 3 s",
        testsrc(),
        ("-c:v", "mjpeg", "-q:v", "5", "-pix_fmt", "yuvj420p"),
        frames=90,
        fps=30,
    ),
    Case(
        "mpeg4_part2.avi",
        "MPEG-4 Part 2 in AVI, 1280x720, 30 fps, 3 s",
        testsrc(),
        ("-c:v", "mpeg4", "-q:v", "5"),
        frames=90,
        fps=30,
    ),
    Case(
        "prores.mov",
        "ProRes 422 (10-bit 4:2:2) in MOV, 1280x720, 30 fps, 3 s",
        testsrc(),
        ("-c:v", "prores_ks", "-profile:v", "2", "-pix_fmt", "yuv422p10le"),
        frames=90,
        fps=30,
    ),
    Case(
        "fps_23.976.mp4",
        "H.264, 24000/1001 fps, 3 s",
        testsrc(rate="24000/1001"),
        X264,
        frames=72,
        fps=24000 / 1001,
    ),
    Case("fps_60.mp4", "H.264, 60 fps, 3 s", testsrc(rate="60"), X264, frames=180, fps=60),
    Case("fps_120.mp4", "H.264, 120 fps, 3 s", testsrc(rate="120"), X264, frames=360, fps=120),
    Case(
        "vfr.mp4",
        "H.264, variable frame rate: 1.5 s at 30 fps then 1.5 s at 60 fps (135 frames)",
        testsrc(rate="60") + ",select='if(lt(t\\,1.5)\\,not(mod(n\\,2))\\,1)'",
        (*X264, "-fps_mode", "vfr"),
        frames=135,
    ),
    Case(
        "odd_641x359.mp4",
        "H.264 4:4:4 (odd sizes need it), 641x359, 30 fps, 3 s",
        ODD,
        ("-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv444p"),
        frames=90,
        fps=30,
        size=(641, 359),
    ),
    Case(
        "odd_641x359.webm",
        "VP9 4:2:0, 641x359, 30 fps, 3 s",
        ODD,
        ("-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-pix_fmt", "yuv420p"),
        frames=90,
        fps=30,
        size=(641, 359),
    ),
    Case(
        "portrait_720x1280.mp4",
        "H.264, portrait 720x1280, 30 fps, 3 s",
        testsrc(size="720x1280"),
        X264,
        frames=90,
        fps=30,
        size=(720, 1280),
    ),
    Case(
        "rotated_90.mp4",
        "H.264 1280x720 with a 90° display matrix (a phone held upright): shows 720x1280",
        make="rotate",
        base="h264.mp4",
        frames=90,
        fps=30,
        size=(720, 1280),
    ),
    Case(
        "one_frame.mp4",
        "H.264, 1 frame",
        testsrc(),
        (*X264, "-frames:v", "1"),
        frames=1,
        fps=30,
    ),
    Case(
        "two_frames.mp4",
        "H.264, 2 frames",
        testsrc(),
        (*X264, "-frames:v", "2"),
        frames=2,
        fps=30,
    ),
    Case("audio_only.mp4", "AAC audio only in MP4, 3 s, no video stream", make="audio"),
    Case("audio_only.webm", "Opus audio only in WebM, 3 s, no video stream", make="audio"),
    Case(
        "grayscale.mp4",
        "H.264 4:0:0 (pix_fmt gray), 1280x720, 30 fps, 3 s",
        testsrc(),
        ("-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "gray"),
        frames=90,
        fps=30,
    ),
    Case(
        "uhd_3840x2160.mp4",
        "H.264, 4K 3840x2160, 30 fps, 3 s",
        testsrc(size="3840x2160"),
        ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"),
        frames=90,
        fps=30,
    ),
    Case(
        "long_10min_720p.mp4",
        "H.264, 1280x720, 30 fps, 10 min (18000 frames), 300 kb/s",
        testsrc(seconds=600),
        ("-c:v", "libx264", "-preset", "ultrafast", "-b:v", "300k", "-pix_fmt", "yuv420p"),
        frames=18000,
        fps=30,
        long=True,
    ),
    Case(
        "Ballwechsel – Übung 日本語.mp4",
        "H.264, a unicode name with spaces, 30 fps, 3 s",
        testsrc(),
        X264,
        frames=90,
        fps=30,
    ),
    Case(
        "truncated.mp4",
        "h264.mp4 cut to 30% of its bytes (ffmpeg's default layout: moov index at the end)",
        make="truncated",
        base="h264.mp4",
    ),
    Case(
        "truncated_faststart.mp4",
        "the same clip with -movflags +faststart (index first), cut to 30% of its bytes",
        make="truncated",
        base="h264_faststart",
        frames=90,
        fps=30,
    ),
    Case("pipe.mp4", "a named pipe (mkfifo), nothing writing to it", make="pipe"),
    Case("empty.mp4", "an empty file (0 bytes)", make="empty"),
    Case("text.mp4", "a text file renamed .mp4", make="text"),
]

#: Built for other cases, never run on their own.
HELPERS = {
    "h264_faststart": Case(
        ".h264_faststart.mp4", "", testsrc(), (*X264, "-movflags", "+faststart")
    ),
}


def find_ffmpeg(given: str | None) -> str:
    if given:
        if not shutil.which(given) and not Path(given).is_file():
            sys.exit(f"corpus: --ffmpeg {given}: no such program")
        return given
    try:
        import imageio_ffmpeg
    except ImportError:
        found = shutil.which("ffmpeg")
        if found:
            return found
        sys.exit(
            "corpus: no ffmpeg: give --ffmpeg PATH, or install a static one for this "
            "benchmark only: python -m pip install --target /tmp/ffpkg imageio-ffmpeg, "
            "then run with PYTHONPATH=/tmp/ffpkg"
        )
    return imageio_ffmpeg.get_ffmpeg_exe()


def encode(ffmpeg: str, case: Case, path: Path) -> None:
    tmp = path.with_name(".part-" + path.name)
    cmd = [ffmpeg, "-y", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i"]
    subprocess.run([*cmd, case.source, *case.args, str(tmp)], check=True)
    tmp.replace(path)


def build(ffmpeg: str, case: Case, out: Path, rebuild: bool) -> Path:
    path = out / case.name
    if case.make == "pipe":
        if path.exists() or path.is_symlink():
            path.unlink()
        os.mkfifo(path)
        return path
    if path.exists() and not rebuild:
        return path
    base = None
    if case.base:
        helper = HELPERS.get(case.base) or next(c for c in CASES if c.name == case.base)
        base = build(ffmpeg, helper, out, rebuild)
    if case.make == "empty":
        path.write_bytes(b"")
    elif case.make == "text":
        path.write_text("These are notes about the match, not a video.\n" * 20)
    elif case.make == "truncated":
        data = base.read_bytes()
        path.write_bytes(data[: int(0.3 * len(data))])
    elif case.make == "rotate":
        tmp = path.with_name(".part-" + path.name)
        cmd = [ffmpeg, "-y", "-hide_banner", "-loglevel", "error", "-display_rotation", "90"]
        subprocess.run([*cmd, "-i", str(base), "-c", "copy", str(tmp)], check=True)
        tmp.replace(path)
    elif case.make == "audio":
        tmp = path.with_name(".part-" + path.name)
        cmd = [ffmpeg, "-y", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i"]
        codec = "libopus" if path.suffix == ".webm" else "aac"
        subprocess.run([*cmd, "sine=frequency=440:duration=3", "-c:a", codec, str(tmp)], check=True)
        tmp.replace(path)
    else:
        encode(ffmpeg, case, path)
    return path


def batchscope_cmd() -> list[str]:
    exe = shutil.which("batchscope") or str(Path(sys.executable).with_name("batchscope"))
    return [exe] if Path(exe).exists() else [sys.executable, "-m", "batchscope"]


@dataclass
class Result:
    rc: int | None  # None: killed at the timeout
    stderr: str
    report: dict | None
    seconds: float
    peak_mb: float


def run_case(path: Path, timeout: float) -> Result:
    """``batchscope run`` on one file, in its own process group, killed at ``timeout``."""
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / "out.json"
        args = [
            str(path) if a == "FILE" else str(out_json) if a == "OUT.json" else a for a in RUN_ARGS
        ]
        cmd = [*batchscope_cmd(), *args]
        timing = Path(tmp) / "time.txt"
        if GNU_TIME.exists():
            cmd = [str(GNU_TIME), "-v", "-o", str(timing), *cmd]
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
        t = time.monotonic()
        child = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        chunks: list[str] = []
        reader = threading.Thread(target=lambda: chunks.append(child.stderr.read()))
        reader.start()
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            os.killpg(child.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
        timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        reader.join()
        err = "".join(chunks)
        rc: int | None = None if killed.is_set() else child.returncode
        seconds = time.monotonic() - t
        peak = usage.ru_maxrss / (1024 if sys.platform.startswith("linux") else 2**20)
        if timing.exists():  # GNU time: the same figure, and the program's own exit status
            for line in timing.read_text().splitlines():
                if "Maximum resident set size" in line:
                    peak = int(line.rsplit(":", 1)[1]) / 1024
                if line.strip().startswith("Exit status:") and rc is not None:
                    rc = int(line.rsplit(":", 1)[1])
        report = json.loads(out_json.read_text()) if out_json.exists() else None
    return Result(rc, err, report, seconds, peak)


PROBE = r"""
import json, sys
from pathlib import Path
from batchscope.config import DEFAULT_RESOLUTION
from batchscope.engine.sources import SourceError, open_source
try:
    s = open_source(sys.argv[1], DEFAULT_RESOLUTION)
except SourceError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({"n_frames": s.n_frames, "source_size": list(s.source_size),
                      "own_fps": s.own_fps, "complete": s.complete, "note": s.note}))
"""


def probe(path: Path, timeout: float) -> dict:
    """What the engine's decoder makes of the file (frames, size), in a child process."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"probe: no answer in {timeout:g} s"}
    lines = out.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {"error": out.stderr.strip()[-300:]}


def outcome(case: Case, result: Result, facts: dict | None) -> str:
    err = result.stderr
    parts: list[str] = []
    if "Traceback" in err:
        parts.append("⚠ traceback: " + _last_line(err))
    if result.rc is None:
        return "⚠ hung: killed at the timeout" + (f"; {'; '.join(parts)}" if parts else "")
    if result.rc != 0:
        return "; ".join(parts) or "`" + _last_line(err) + "`"
    session = (result.report or {}).get("sessions", [{}])[0]
    facts = facts or {}
    n, size = facts.get("n_frames"), facts.get("source_size")
    if n is not None:
        if not facts.get("complete", True):
            text = f"loops its first {n} of {case.frames} frames"
        else:
            text = f"{n} frame{'s' * (n != 1)} decoded, looped"
        if case.frames and facts.get("complete", True) and n != case.frames:
            said = "truncated" in err
            text = f"{n} of {case.frames} frames decoded, looped" + ("" if said else " ⚠")
        parts.append(text)
    own, paced = session.get("source_fps"), session.get("paced_fps")
    if own is not None:
        text = f"own {own:g} fps, paced {paced:g}"
        if abs(paced - own) > 0.01:
            text += f" ({paced / own:.2f}× speed)"
        if case.fps and abs(own - case.fps) > 0.01:
            text += f" ⚠ made at {case.fps:g}"
        elif case.fps is None and case.frames and "variable frame rate" not in err:
            text += " ⚠ variable rate played as constant, and not said"
        parts.append(text)
    else:
        parts.append(f"no own fps; paced {result.report['config']['fps']:g}")
    if size:
        text = f"{size[0]}x{size[1]}"
        want = case.size or _made_size(case)
        if want and tuple(size) != want:
            text += f" ⚠ displays as {want[0]}x{want[1]}"
        parts.append(text)
    parts.append(f"delivered {session.get('fps', 0):.1f} fps")
    notes = [line.split(": note: ", 1)[1] for line in err.splitlines() if ": note: " in line]
    parts += [f"note: {note.split(': ', 1)[-1]}" for note in notes]
    return "; ".join(parts)


def _made_size(case: Case) -> tuple[int, int] | None:
    if not case.source or "size=" not in case.source:
        return None
    w, h = case.source.split("size=")[1].split(":")[0].split("x")
    return int(w), int(h)


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--ffmpeg")
    ap.add_argument("--quick", action="store_true", help="leave out the 10-minute file")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--only", help="comma-separated words: cases whose names contain one")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per file")
    args = ap.parse_args()
    ffmpeg = find_ffmpeg(args.ffmpeg)
    args.out.mkdir(parents=True, exist_ok=True)
    cases = [c for c in CASES if not (args.quick and c.long)]
    if args.only:
        words = args.only.split(",")
        cases = [c for c in cases if any(w in c.name for w in words)]
    rows = []
    for case in cases:
        t = time.monotonic()
        path = build(ffmpeg, case, args.out, args.rebuild)
        built = time.monotonic() - t
        print(f"corpus: {case.name}: built in {built:.1f} s, running…", file=sys.stderr)
        result = run_case(path, args.timeout)
        regular = stat.S_ISREG(os.stat(path).st_mode)
        facts = probe(path, args.timeout) if result.rc == 0 and regular else None
        text = outcome(case, result, facts).replace(f"{args.out}/", "")
        rc = "timeout" if result.rc is None else str(result.rc)
        peak = f"{result.peak_mb:.0f} MB"
        print(f"corpus: {case.name}: exit {rc} in {result.seconds:.1f} s: {text}", file=sys.stderr)
        if "Traceback" in result.stderr:
            print(result.stderr, file=sys.stderr)
        rows.append((case.name, case.what, rc, text, peak))
        if case.make == "pipe":
            path.unlink()
    cmd = " ".join(RUN_ARGS)
    print(f"\nEach file: `batchscope {cmd}` (timeout {args.timeout:g} s)\n")
    print("| file | what it is | exit | outcome | peak RSS |")
    print("|---|---|---|---|---|")
    for name, what, rc, text, peak in rows:
        print(f"| `{name}` | {what} | {rc} | {text.replace('|', '/')} | {peak} |")


if __name__ == "__main__":
    main()
