"""The sessions on screen: the sessions panel (a row each, the sources) and the video wall."""

from batchscope.ui.sessions.panel import SessionsPanel
from batchscope.ui.sessions.video_wall import VideoWall

__all__ = ["SessionsPanel", "VideoWall"]
