"""The sessions' colours, the same on screen (ui/plots) and in the files (render/)."""

from __future__ import annotations

SESSION_COLOURS = (
    "#4C9BE8",  # blue
    "#F28E2B",  # orange
    "#59C15B",  # green
    "#E15759",  # red
    "#B07AEA",  # purple
    "#2EC4C4",  # teal
    "#EDC948",  # yellow
    "#FF7EB6",  # pink
    "#A47D62",  # brown
    "#9CC9F0",  # light blue
    "#A6D98C",  # light green
    "#FFB36B",  # light orange
    "#D4A6C8",  # mauve
    "#7FB7B0",  # sea green
    "#BAB0AC",  # grey
    "#D37295",  # rose
)


def session_colour(sid: int) -> str:
    return SESSION_COLOURS[sid % len(SESSION_COLOURS)]
