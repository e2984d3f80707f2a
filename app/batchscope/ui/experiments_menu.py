"""Experiment files in the app: the menu's entries and the sources they play on.

The built-in experiments (``assets/experiments/*.toml``, the demo scenarios of
the study) and the user's (``~/.config/batchscope/experiments``) are each one
click in the Experiments menu; any other file opens from File → Open
experiment…. The :class:`~batchscope.engine.player.ExperimentPlayer` plays
them, the same as ``run --experiment`` does headless.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from batchscope.experiment import Experiment, ExperimentError, list_experiments

MENU_TEXT_MAX = 72  # characters of a menu entry (name and the start of its caption)


@dataclass(frozen=True)
class MenuEntry:
    text: str
    tip: str  # the whole caption, or why the file cannot be played
    experiment: Experiment | None  # None: the file is malformed (shown disabled)


def menu_entries() -> list[MenuEntry]:
    """One entry per experiment file found, built-in first; a bad file says why."""
    out = []
    for kind, found in list_experiments():
        if isinstance(found, ExperimentError):
            out.append(MenuEntry(f"({kind}) cannot be read", str(found), None))
            continue
        text = f"{found.name} — {found.caption}" if found.caption else found.name
        if len(text) > MENU_TEXT_MAX:
            text = text[: MENU_TEXT_MAX - 1] + "…"
        if kind != "built-in":
            text = f"{text}  ({kind})"
        out.append(MenuEntry(text, found.caption or found.name, found))
    return out


def on_sources(experiment: Experiment, sources: Sequence[str]) -> Experiment:
    """``experiment`` on ``sources`` when its file names none (the app keeps what is open).

    A file that names its sources plays on them; one that does not means "the
    default", which in the app is what the user has open, as the old demo
    scenarios did.
    """
    if experiment.base.sources or not sources:
        return experiment
    keep = tuple(sources)
    return replace(
        experiment,
        base=experiment.base.with_changes(sources=keep),
        configs=tuple(c if c.sources else c.with_changes(sources=keep) for c in experiment.configs),
    )
