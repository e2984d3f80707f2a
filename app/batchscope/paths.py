"""Where BatchScope finds its bundled data (profiles, sample videos, icon).

The data lives at the top of the repository (``assets/``, ``sample_videos/``),
beside ``app/``; a PyInstaller build puts the same folders next to the
executable (``sys._MEIPASS``). ``BATCHSCOPE_HOME`` overrides both.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("BATCHSCOPE_HOME")
    if env:
        return Path(env)
    frozen = getattr(sys, "_MEIPASS", None)
    if frozen:
        return Path(frozen)
    return Path(__file__).resolve().parents[2]


def assets_dir() -> Path:
    return project_root() / "assets"


def sample_videos_dir() -> Path:
    return project_root() / "sample_videos"


def sample_videos() -> list[Path]:
    return sorted(sample_videos_dir().glob("*.mp4"))


def user_config_dir() -> Path:
    """The user's BatchScope folder (profiles, experiments): $XDG_CONFIG_HOME/batchscope."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "batchscope"


def user_profiles_dir() -> Path:
    """Profiles written by ``batchscope sweep`` when no path is given."""
    return user_config_dir() / "profiles"


def user_cache_dir() -> Path:
    """Files BatchScope makes and can make again (the int8 ONNX models):
    $XDG_CACHE_HOME/batchscope, else ~/.cache/batchscope."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "batchscope"
