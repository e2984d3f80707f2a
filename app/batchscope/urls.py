"""Network stream addresses: which sources are streams, and their credentials masked.

One place for what a stream spec is (a URL of a scheme the decoder reads live, or an
HLS playlist) and for the rule that a password never leaves the process: every report,
recording, event, error line and view shows ``rtsp://user:***@host/…`` instead of what
was typed (:func:`mask_credentials`). The session still connects with the real URL.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

#: URL schemes BatchScope opens as live streams (OpenCV's FFmpeg backend reads them).
STREAM_SCHEMES = ("rtsp", "rtsps", "http", "https", "udp", "rtp")

#: ``scheme://``: a URL, not a path; a Windows drive (``C:\``) is not one.
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")

MASK = "***"

#: Query parameters that carry a secret in camera URLs (``?token=…``, ``&password=…``).
SECRET_PARAMS = frozenset(
    {"password", "pass", "pwd", "passwd", "token", "key", "auth", "signature", "sig", "secret"}
)

# scheme://user:password@  or  scheme://token@  (userinfo ends at the last @ before the
# host; '/' or '?' or '#' cannot be in it)
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/?#\s]*)@")
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;](?:" + "|".join(sorted(SECRET_PARAMS)) + r"))=(?P<value>[^&#\s;]*)",
    re.IGNORECASE,
)


def is_url(spec: str) -> bool:
    """Whether ``spec`` is a URL (``scheme://…``) rather than a path."""
    return URL.match(spec) is not None


def is_stream(spec: str) -> bool:
    """Whether ``spec`` names a live network stream: a URL of :data:`STREAM_SCHEMES`
    (``http(s)`` included: a progressive file or MJPEG is read as it arrives), or an HLS
    playlist (``….m3u8``)."""
    if is_url(spec):
        return urlsplit(spec).scheme.lower() in STREAM_SCHEMES
    return is_hls(spec)


def is_hls(spec: str) -> bool:
    """Whether ``spec`` names an HLS playlist (``….m3u8``, a path or a URL)."""
    return spec.lower().split("?")[0].endswith(".m3u8")


def mask_credentials(text: str) -> str:
    """``text`` with every URL's password (or lone token) and secret query values masked.

    ``rtsp://admin:pw@cam/live`` → ``rtsp://admin:***@cam/live``; ``rtsp://tok@cam`` →
    ``rtsp://***@cam``; ``…?token=abc`` → ``…?token=***``. Works on a URL alone or on a
    sentence that contains URLs (an error, an event); text without one is unchanged.
    """
    if "://" not in text:
        return text

    def userinfo(m: re.Match[str]) -> str:
        user, colon, _secret = m.group("info").partition(":")
        shown = f"{user}:{MASK}" if colon else MASK
        return f"{m.group('head')}{shown}@"

    text = _USERINFO.sub(userinfo, text)
    return _QUERY_SECRET.sub(lambda m: f"{m.group('key')}={MASK}", text)


def mask_all(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, tuples, strings) with every string masked."""
    if isinstance(value, str):
        return mask_credentials(value)
    if isinstance(value, dict):
        return {k: mask_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_all(v) for v in value]
    return value


def has_credentials(spec: str) -> bool:
    """Whether masking changes ``spec`` (it carries a password, a token or a secret)."""
    return mask_credentials(spec) != spec


def stream_host(spec: str) -> tuple[str, int | None]:
    """(host, port) a stream URL names; the port None when the URL gives none."""
    parts = urlsplit(spec)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname or "", port
