"""An RTSP server for the stream tests: GStreamer's gst-rtsp-server (Debian) on
127.0.0.1:PORT/cam, a moving test pattern as RTP/JPEG at FPS frames a second, sent over TCP
(interleaved in the RTSP connection: BatchScope's default) or UDP, whichever the client
asks, with RTCP sender reports (the frame age's wall clock).

Run by Debian's own python3, which has the GObject bindings (python3-gi); the project's
virtual environment has not: ``/usr/bin/python3 tests/gst_rtsp_server.py PORT [FPS]``.
It prints ``ready`` once it listens, and runs until it is terminated.
"""

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

port = sys.argv[1]
fps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
Gst.init(None)
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
factory = GstRtspServer.RTSPMediaFactory()
# I420: RTP/JPEG carries 4:2:0 JPEG only
factory.set_launch(
    f"( videotestsrc is-live=true pattern=ball ! video/x-raw,width=160,height=96,"
    f"framerate={fps}/1,format=I420 ! jpegenc quality=80 ! rtpjpegpay name=pay0 pt=26 )"
)
factory.set_shared(True)
server.get_mount_points().add_factory("/cam", factory)
if server.attach(None) == 0:
    sys.exit(f"cannot listen on 127.0.0.1:{port}")
print("ready", flush=True)
GLib.MainLoop().run()
