"""Real network streams on loopback for the tests: ffmpeg (Debian's) and rtsp-server-perl.

Each server is a child process started by the test on a port the OS gave as free,
bound to 127.0.0.1 only, tied to the test process (``PR_SET_PDEATHSIG``: it gets
SIGTERM if pytest dies) and stopped by its PID (:meth:`Server.stop`), never by name.

- HTTP: ffmpeg's own server (``-listen 1``) sends MJPEG (``mpjpeg``) or MPEG-TS to one
  client; it ends when that client goes.
- UDP: ffmpeg sends MPEG-TS datagrams to 127.0.0.1:PORT, where the client listens.
- RTSP, two servers: GStreamer's gst-rtsp-server (``gst_rtsp_server.py``, run by Debian's
  python3) serves a live test pattern as RTP/JPEG over TCP (BatchScope's default) or
  UDP, with RTCP sender reports; ``rtsp-server-perl`` (Debian) relays the H.264 an ffmpeg
  pushes to it (ANNOUNCE and RECORD on its source port) to its clients, over UDP only
  (they use ``stream_transport="udp"``).

Without the tools the stream tests skip here, and fail under CI (``.ci/run`` installs
them: ffmpeg, rtsp-server-perl, gir1.2-gst-rtsp-server-1.0, python3-gi,
gstreamer1.0-plugins-base and -good), so a CI run cannot pass by skipping them.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

FFMPEG = shutil.which("ffmpeg")
RTSP_SERVER = shutil.which("rtsp-server-perl")
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-gi (the venv has no gi)
GST_SERVER = Path(__file__).with_name("gst_rtsp_server.py")
CLIP_FPS = 30
CLIP_SIZE = "160x96"
#: How long a test server may take to listen before it counts as failed (s): a condition
#: waited on, generous for a loaded machine, not a timing the test asserts.
LISTEN_TIMEOUT_S = 60.0


def need(tool: str | None, name: str) -> str:
    """The tool's path; skip the test without it (fail under CI, which installs it)."""
    if tool:
        return tool
    message = f"{name} is not installed (Debian: see .ci/run's apt-get install)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: .ci/run installs it")
    pytest.skip(message)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 that the OS just gave as free (TCP or UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_udp_pair() -> int:
    """An even UDP port whose next one is free too (RTP and RTCP)."""
    for _ in range(50):
        port = free_port(socket.SOCK_DGRAM) & ~1
        try:
            for p in (port, port + 1):
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free UDP port pair on 127.0.0.1")


def _die_with_parent() -> None:  # runs in the child, before exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def make_clip(folder: Path, seconds: float = 4.0) -> Path:
    """An H.264 test pattern (moving, so frames differ) at CLIP_FPS, key frame every 10."""
    ffmpeg = need(FFMPEG, "ffmpeg")
    clip = folder / "pattern.mp4"
    if not clip.exists():
        subprocess.run(
            [ffmpeg, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i",
             f"testsrc2=size={CLIP_SIZE}:rate={CLIP_FPS}", "-t", str(seconds),
             "-pix_fmt", "yuv420p", "-c:v", "libx264", "-bf", "0", "-g", "10", "-y", str(clip)],
            check=True, timeout=60,
        )  # fmt: skip
    return clip


class Server:
    """One child process serving a stream; started and stopped by the test, by PID."""

    def __init__(
        self,
        args: Sequence[str],
        url: str,
        ready_port: int | None = None,
        listen_port: int | None = None,
    ) -> None:
        self.args = list(args)
        self.url = url
        self.ready_port = ready_port  # a TCP port that accepts once it is up
        self.listen_port = listen_port  # one it listens on, not to be probed
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> Server:
        # what it says (errors only) goes to a file, for the reason when it never listens
        self._said = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the object)
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._said,
            preexec_fn=_die_with_parent,
        )
        if self.ready_port is not None:
            wait_listening(self.ready_port, self.proc)
        if self.listen_port is not None:
            # generous: ffmpeg opens its input before it listens, slow late in a suite run
            # beside two CPU hogs (it failed once at 15 s)
            deadline = time.monotonic() + LISTEN_TIMEOUT_S
            while not serving_on(self.listen_port, self.proc.pid):
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.args[0]} ended with code {self.proc.returncode} before it "
                        f"listened on {self.listen_port}: {self.said()}"
                    )
                if time.monotonic() > deadline:
                    said = self.said()
                    self.stop()  # by its PID: not left running past the failed test
                    raise RuntimeError(
                        f"{self.args[0]} did not listen on {self.listen_port} within "
                        f"{LISTEN_TIMEOUT_S:g} s: {said}"
                    )
                time.sleep(0.05)
        return self

    def said(self) -> str:
        """The last of what the server wrote on stderr (or that it wrote nothing)."""
        self._said.seek(0)
        text = self._said.read().decode(errors="replace").strip()
        return text[-500:] if text else "(nothing on stderr)"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # by its PID
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float | None = None) -> None:
    """Until something accepts on 127.0.0.1:port (the server is up), or fail."""
    timeout = LISTEN_TIMEOUT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} ended with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {timeout:g} s")


def serving_on(port: int, pid: int) -> bool:
    """Whether process ``pid`` listens on 127.0.0.1:``port``, or has already accepted its
    client there (the kernel's table and the process's open sockets, no connection).

    ffmpeg's ``-listen 1`` accepts one client and closes its listening socket: when a
    client is already retrying (a session reconnecting to a restarted server), the socket
    can listen and be gone between two looks, so an accepted connection counts too. A
    socket on that port counts only if the server holds it (not the old server's
    closing one)."""
    want = f"0100007F:{port:04X}"
    mine: set[str] = set()
    try:
        links = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False  # it ended (the caller says so)
    for link in links:
        try:
            target = os.readlink(link)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        # TCP_LISTEN or TCP_ESTABLISHED, on the local side, held by the server
        if cols[1] == want and cols[3] in ("0A", "01") and cols[9] in mine:
            return True
    return False


def _ffmpeg_in(clip: Path) -> list[str]:
    ffmpeg = need(FFMPEG, "ffmpeg")
    return [ffmpeg, "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1",
            "-i", str(clip), "-an"]  # fmt: skip


def http_server(clip: Path, kind: str = "mjpeg") -> Server:
    """ffmpeg's HTTP server for one client: MJPEG (multipart) or MPEG-TS (progressive).

    A probe connection would be its one client, so readiness is read from the kernel's
    table of sockets instead (:func:`serving_on`)."""
    port = free_port()
    if kind == "mjpeg":
        out = ["-c:v", "mjpeg", "-q:v", "5", "-f", "mpjpeg"]
        url = f"http://127.0.0.1:{port}/live.mjpg"
    else:
        out = ["-c:v", "copy", "-f", "mpegts"]
        url = f"http://127.0.0.1:{port}/live.ts"
    return Server([*_ffmpeg_in(clip), *out, "-listen", "1", url], url, listen_port=port)


def udp_sender(clip: Path) -> Server:
    """ffmpeg sending MPEG-TS datagrams to 127.0.0.1:PORT (the client binds the port)."""
    port = free_port(socket.SOCK_DGRAM)
    target = f"udp://127.0.0.1:{port}?pkt_size=1316"
    return Server([*_ffmpeg_in(clip), "-c:v", "copy", "-f", "mpegts", target],
                  f"udp://127.0.0.1:{port}")  # fmt: skip


class RtspRelay:
    """rtsp-server-perl on loopback, with an ffmpeg pushing ``clip`` to ``/cam`` on it.

    ``url``: where clients read it (``rtsp://127.0.0.1:PORT/cam``). Both processes stop
    by PID on :meth:`stop`; :meth:`start` again brings the stream back on the same port.
    """

    def __init__(self, clip: Path, user: str | None = None) -> None:
        server = need(RTSP_SERVER, "rtsp-server-perl")
        self.client_port, self.source_port = free_port(), free_port()
        rtp = free_udp_pair()
        self.server = Server(
            [server, "--clientport", str(self.client_port), "--serverport",
             str(self.source_port), "--client_listen_address", "127.0.0.1",
             "--source_listen_address", "127.0.0.1", "--rtp_start_port", str(rtp)],
            "", ready_port=self.client_port,
        )  # fmt: skip
        push = f"rtsp://127.0.0.1:{self.source_port}/cam"
        self.pusher = Server([*_ffmpeg_in(clip), "-c:v", "copy", "-f", "rtsp", push], push)
        auth = f"{user}@" if user else ""
        self.url = f"rtsp://{auth}127.0.0.1:{self.client_port}/cam"

    @property
    def pids(self) -> list[int]:
        return [p for p in (self.server.pid, self.pusher.pid) if p is not None]

    def start(self) -> RtspRelay:
        self.server.start()
        self.pusher.start()
        wait_mounted(self.client_port)
        return self

    def stop(self) -> None:
        self.pusher.stop()
        self.server.stop()

    def __enter__(self) -> RtspRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def gst_rtsp_available() -> str | None:
    """Debian's python3 if it has GStreamer's RTSP server bindings, else None."""
    if not Path(SYSTEM_PYTHON).exists():
        return None
    probe = "import gi; gi.require_version('GstRtspServer', '1.0'); gi.require_version('Gst', '1.0'); from gi.repository import GstRtspServer"  # noqa: E501
    done = subprocess.run([SYSTEM_PYTHON, "-c", probe], capture_output=True, timeout=30)
    return SYSTEM_PYTHON if done.returncode == 0 else None


def gst_rtsp_server(fps: int = 30, user: str | None = None) -> Server:
    """GStreamer's RTSP server on a free loopback port: ``url`` ends in ``/cam``."""
    python = need(gst_rtsp_available(), "GStreamer's RTSP server (python3-gi)")
    port = free_port()
    auth = f"{user}@" if user else ""
    return Server(
        [python, str(GST_SERVER), str(port), str(fps)],
        f"rtsp://{auth}127.0.0.1:{port}/cam",
        ready_port=port,
    )


def wait_mounted(port: int, timeout: float = 15.0) -> None:
    """Until the relay answers DESCRIBE for /cam with 200 (the pusher's stream is there)."""
    deadline = time.monotonic() + timeout
    request = (
        f"DESCRIBE rtsp://127.0.0.1:{port}/cam RTSP/1.0\r\nCSeq: 1\r\n"
        "Accept: application/sdp\r\n\r\n"
    ).encode()
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                s.sendall(request)
                if b" 200 " in s.recv(4096).split(b"\r\n", 1)[0]:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no stream mounted at rtsp://127.0.0.1:{port}/cam in {timeout:g} s")


def listening_sockets(pid: int) -> list[tuple[str, str]]:
    """(protocol, local address:port) of every socket ``pid`` listens on or has bound
    (from ``ss``), to check that a server stays on loopback."""
    ss = shutil.which("ss")
    if ss is None:
        pytest.skip("ss (iproute2) is not installed")
    out = subprocess.run([ss, "-tulnpH"], capture_output=True, text=True, timeout=10).stdout
    found = []
    for line in out.splitlines():
        if f"pid={pid}," in line:
            cols = line.split()
            found.append((cols[0], cols[4]))
    return found
