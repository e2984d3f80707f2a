"""Stream kinds: does BatchScope read each kind of network stream, and how does it arrive?

    .venv/bin/python benchmarks/stream_kinds.py [--out PATH] [--only N …]

Tries every kind of stream source BatchScope reads (``batchscope.engine.streams``), on
loopback only (127.0.0.1): RTSP from GStreamer's server (TCP, UDP, auto) and from an
rtsp-server-perl relay of H.264 (UDP, and TCP, which the relay lacks); HTTP MJPEG and
MPEG-TS (ffmpeg's one-client server), a progressive MP4 and an HLS playlist on demand
(``python3 -m http.server``), the same playlist as a local file, HLS live (an ffmpeg
writing a sliding playlist into the served folder), UDP MPEG-TS and MPEG-TS over RTP.

For each kind it starts the server with the helpers in ``tests/stream_servers.py``
(children tied to this process, stopped by PID), runs

    batchscope run URL --sessions 1 --duration 4 --warmup 1 --resolution 256x144
        [--stream-transport X] --json TMP

(emulated device: the figures are the stream's, not a model's) with a 60 s timeout,
reads the session's ``stream`` object from the report and stops the server. Prints a
Markdown table: what happened (the state, frames and reconnects, or the one error line
a failed run writes), the session's fps, the stream's arrival fps, its RFC 3550
interarrival jitter, the median age of a frame at arrival (only where FFmpeg gives an
RTCP wall clock: RTSP, RTP) and whether it was read on demand (at its own timestamps).
Each kind's result also goes to stderr as it ends, numbered 1–13 in the order above;
``--only 1 5`` runs just those. ``--out PATH`` also writes the table.

Needs ffmpeg, rtsp-server-perl and GStreamer's RTSP server (Debian's python3-gi); a kind
whose tool is missing is reported as skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest  # the helpers skip through it when a tool is missing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import stream_servers as ss

ROOT = Path(__file__).resolve().parents[1]
BATCHSCOPE = next(
    (p for p in (Path(sys.executable).with_name("batchscope"), ROOT / ".venv/bin/batchscope")
     if p.exists()),
    Path("batchscope"),
)  # fmt: skip
RUN_ARGS = ["--sessions", "1", "--duration", "4", "--warmup", "1", "--resolution", "256x144"]
TIMEOUT_S = 60.0  # one batchscope run
CLIP_S = 8.0
READY_S = 20.0  # for a file a server or writer makes (the live playlist)

#: Sets up one kind in a work folder (the clip and the served files are there) and
#: yields the URL or path BatchScope reads; tears it down when done.
Setup = Callable[[Path], contextlib.AbstractContextManager[str]]


@dataclass(frozen=True)
class Kind:
    name: str
    form: str  # the URL's form, as the table shows it
    transport: str | None  # --stream-transport, or None for the default / not RTSP
    setup: Setup
    shown_transport: str = "—"


# -- servers ---------------------------------------------------------------------------


@contextlib.contextmanager
def serving(server: ss.Server | ss.RtspRelay) -> Iterator[None]:
    """Start a helper's server (or relay) and stop it by PID, whatever happens."""
    try:
        server.start()
        yield
    finally:
        server.stop()


@contextlib.contextmanager
def gst_rtsp(work: Path) -> Iterator[str]:
    server = ss.gst_rtsp_server()
    with serving(server):
        yield server.url


@contextlib.contextmanager
def perl_relay(work: Path) -> Iterator[str]:
    relay = ss.RtspRelay(ss.make_clip(work, CLIP_S))
    with serving(relay):
        yield relay.url


def ffmpeg_http(kind: str) -> Setup:
    @contextlib.contextmanager
    def setup(work: Path) -> Iterator[str]:
        server = ss.http_server(ss.make_clip(work, CLIP_S), kind)
        with serving(server):
            yield server.url

    return setup


def http_folder(folder: Path) -> ss.Server:
    """``python3 -m http.server`` on 127.0.0.1 serving ``folder`` (no Range requests)."""
    port = ss.free_port()
    return ss.Server(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(folder)],
        f"http://127.0.0.1:{port}",
        ready_port=port,
    )  # fmt: skip


def ffmpeg(*args: str) -> None:
    """Run ffmpeg once (a remux, a playlist) and wait for it."""
    tool = ss.need(ss.FFMPEG, "ffmpeg")
    subprocess.run(
        [tool, "-hide_banner", "-loglevel", "error", *args, "-y"],
        check=True,
        timeout=60,
        preexec_fn=ss._die_with_parent,
    )


def faststart_mp4(work: Path) -> Path:
    """The clip re-muxed with its index first (the server cannot seek to it)."""
    www = work / "www"
    www.mkdir(exist_ok=True)
    mp4 = www / "faststart.mp4"
    if not mp4.exists():
        ffmpeg("-i", str(ss.make_clip(work, CLIP_S)), "-c", "copy", "-movflags", "+faststart",
               str(mp4))  # fmt: skip
    return mp4


def vod_playlist(work: Path) -> Path:
    """An HLS playlist of the whole clip in 1 s segments (on demand: it has an end)."""
    vod = work / "www" / "vod"
    vod.mkdir(parents=True, exist_ok=True)
    playlist = vod / "index.m3u8"
    if not playlist.exists():
        ffmpeg("-i", str(ss.make_clip(work, CLIP_S)), "-c", "copy", "-f", "hls",
               "-hls_time", "1", "-hls_list_size", "0", str(playlist))  # fmt: skip
    return playlist


@contextlib.contextmanager
def http_mp4(work: Path) -> Iterator[str]:
    mp4 = faststart_mp4(work)
    server = http_folder(mp4.parent)
    with serving(server):
        yield f"{server.url}/{mp4.name}"


@contextlib.contextmanager
def http_hls(work: Path) -> Iterator[str]:
    playlist = vod_playlist(work)
    server = http_folder(work / "www")
    with serving(server):
        yield f"{server.url}/{playlist.parent.name}/{playlist.name}"


@contextlib.contextmanager
def local_hls(work: Path) -> Iterator[str]:
    yield str(vod_playlist(work))


@contextlib.contextmanager
def http_hls_live(work: Path) -> Iterator[str]:
    live = work / "www" / "live"
    shutil.rmtree(live, ignore_errors=True)
    live.mkdir(parents=True)
    playlist = live / "live.m3u8"
    writer = ss.Server(
        [ss.need(ss.FFMPEG, "ffmpeg"), "-hide_banner", "-loglevel", "error", "-re",
         "-stream_loop", "-1", "-i", str(ss.make_clip(work, CLIP_S)), "-c", "copy",
         "-f", "hls", "-hls_time", "1", "-hls_list_size", "5", "-hls_flags",
         "delete_segments", str(playlist)],
        str(playlist),
    )  # fmt: skip
    server = http_folder(work / "www")
    with serving(writer), serving(server):
        wait_for_file(playlist, writer)
        yield f"{server.url}/live/{playlist.name}"


def wait_for_file(path: Path, writer: ss.Server) -> None:
    deadline = time.monotonic() + READY_S
    while not path.exists():
        if not writer.running():
            raise RuntimeError(f"{writer.args[0]} ended before writing {path.name}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {path.name} within {READY_S:g} s")
        time.sleep(0.1)


@contextlib.contextmanager
def udp_ts(work: Path) -> Iterator[str]:
    server = ss.udp_sender(ss.make_clip(work, CLIP_S))
    with serving(server):
        yield server.url


@contextlib.contextmanager
def rtp_ts(work: Path) -> Iterator[str]:
    port = ss.free_udp_pair()  # RTP on PORT, RTCP on PORT + 1
    url = f"rtp://127.0.0.1:{port}"
    sender = ss.Server(
        [ss.need(ss.FFMPEG, "ffmpeg"), "-hide_banner", "-loglevel", "error", "-re",
         "-stream_loop", "-1", "-i", str(ss.make_clip(work, CLIP_S)), "-an", "-c", "copy",
         "-f", "rtp_mpegts", url],
        url,
    )  # fmt: skip
    with serving(sender):
        yield url


GST, PERL = "RTSP, GStreamer (MJPEG)", "RTSP, rtsp-server-perl relay (H.264)"
RTSP_FORM = "rtsp://127.0.0.1:PORT/cam"
HTTP_FORM = "http://127.0.0.1:PORT"
KINDS = (
    Kind(GST, RTSP_FORM, None, gst_rtsp, "tcp (default)"),
    Kind(GST, RTSP_FORM, "udp", gst_rtsp, "udp"),
    Kind(GST, RTSP_FORM, "auto", gst_rtsp, "auto"),
    Kind(PERL, RTSP_FORM, "udp", perl_relay, "udp"),
    Kind(PERL, RTSP_FORM, "tcp", perl_relay, "tcp"),
    Kind("HTTP MJPEG (ffmpeg)", f"{HTTP_FORM}/live.mjpg", None, ffmpeg_http("mjpeg")),
    Kind("HTTP MPEG-TS (ffmpeg)", f"{HTTP_FORM}/live.ts", None, ffmpeg_http("ts")),
    Kind("HTTP progressive MP4 (http.server)", f"{HTTP_FORM}/faststart.mp4", None, http_mp4),
    Kind("HLS on demand over HTTP", f"{HTTP_FORM}/vod/index.m3u8", None, http_hls),
    Kind("HLS on demand, local file", "/tmp/…/vod/index.m3u8 (a path)", None, local_hls),
    Kind("HLS live over HTTP", f"{HTTP_FORM}/live/live.m3u8", None, http_hls_live),
    Kind("UDP MPEG-TS", "udp://127.0.0.1:PORT", None, udp_ts),
    Kind("RTP MPEG-TS", "rtp://127.0.0.1:PORT", None, rtp_ts),
)


# -- one run ---------------------------------------------------------------------------


def on_loopback(spec: str) -> bool:
    """Whether ``spec`` is a 127.0.0.1 URL or a local path (never another address)."""
    if "://" not in spec:
        return True
    return urlsplit(spec).hostname == "127.0.0.1"


def error_line(stderr: str) -> str:
    """The one line a failed run says why in (``batchscope: error: …``), else its last."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line
    return lines[-1] if lines else "(nothing on stderr)"


def run_batchscope(spec: str, transport: str | None, work: Path) -> dict[str, Any]:
    """One ``batchscope run`` on ``spec``: its session and stream figures, or its error."""
    if not on_loopback(spec):
        raise RuntimeError(f"not on loopback: {spec}")
    report = work / "report.json"
    report.unlink(missing_ok=True)
    args = [str(BATCHSCOPE), "run", spec, *RUN_ARGS, "--json", str(report)]
    if transport:
        args[3:3] = ["--stream-transport", transport]
    try:
        done = subprocess.run(
            args,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            preexec_fn=ss._die_with_parent,  # tied to this script, as the servers are
        )
    except subprocess.TimeoutExpired:  # subprocess.run killed it by its PID
        return {"happened": f"timed out after {TIMEOUT_S:g} s"}
    if done.returncode != 0 or not report.exists():
        return {"happened": f"exit {done.returncode}: {error_line(done.stderr)}"}
    session = json.loads(report.read_text())["sessions"][0]
    stream = session.get("stream") or {}
    return {"happened": happened(stream), "fps": session.get("fps"), **stream}


def happened(stream: dict[str, Any]) -> str:
    """The stream's state in a few words: frames, declared rate, reconnects, losses."""
    if not stream:
        return "ran, but the report has no stream object"
    parts = [f"{stream['state']}: {stream['frames']} frames"]
    own = stream.get("own_fps")
    parts.append(f"declares {own:g} fps" if own else "declares no rate")
    if stream.get("reconnects"):
        parts.append(f"{stream['reconnects']} reconnects, {stream['down_s']:.1f} s down")
    for key in ("lost_reason", "last_error"):
        if stream.get(key):
            parts.append(f"{key.replace('_', ' ')}: {stream[key]}")
    return "; ".join(parts)


def try_kind(kind: Kind, work: Path) -> dict[str, Any]:
    try:
        with kind.setup(work) as spec:
            return run_batchscope(spec, kind.transport, work)
    except pytest.skip.Exception as exc:  # a helper's tool is missing
        return {"happened": f"skipped: {exc.msg}"}
    except Exception as exc:  # the server did not start: say so, try the next kind
        return {"happened": f"server failed: {type(exc).__name__}: {exc}"}


# -- the table -------------------------------------------------------------------------


def cell(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.{digits}f}"


def table(rows: list[tuple[int, Kind, dict[str, Any]]]) -> str:
    head = (
        "| kind | URL form | transport | what happened | session fps | arrival fps "
        "| jitter ms | frame age ms | on demand |\n"
        "|---|---|---|---|---:|---:|---:|---:|---|"
    )
    lines = [head]
    for _, kind, r in rows:
        what = r["happened"].replace("|", "\\|")
        lines.append(
            f"| {kind.name} | `{kind.form}` | {kind.shown_transport} | {what} "
            f"| {cell(r.get('fps'))} | {cell(r.get('arrival_fps'))} "
            f"| {cell(r.get('jitter_ms'))} | {cell(r.get('age_ms'), 0)} "
            f"| {cell(r.get('on_demand'))} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", metavar="PATH", help="also write the table here")
    parser.add_argument(
        "--only", type=int, nargs="+", metavar="N", help="run just these kinds (1-based)"
    )
    args = parser.parse_args()
    chosen = args.only or range(1, len(KINDS) + 1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="batchscope-streams-") as tmp:
        work = Path(tmp)
        for number in chosen:
            kind = KINDS[number - 1]
            started = time.monotonic()
            result = try_kind(kind, work)
            print(
                f"{number:2d}. {kind.name}, {kind.shown_transport}: {result['happened']} "
                f"({time.monotonic() - started:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
            rows.append((number, kind, result))
    text = table(rows)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
