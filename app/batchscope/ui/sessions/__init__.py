"""The sessions on screen: the sessions panel (a row each, the sources) and the video wall."""

from batchscope.ui.sessions.panel import SessionsPanel
from batchscope.ui.sessions.stream_dialog import StreamDialog, stream_settings_line
from batchscope.ui.sessions.video_wall import VideoWall

__all__ = ["SessionsPanel", "StreamDialog", "VideoWall", "stream_settings_line"]
