"""Words for people: a change or a fault as a short phrase, made here once.

"burst ×4 on S0 for 5 s", "S1 stalls for 4 s", "every device ×2 slower for 6 s",
"policy oldest → all", "sessions 4 → 8", "resolution 256×144 → 512×288".
The ``config`` and ``fault`` events (the time plots' notes, the events table),
a step's default caption, the status line, the segment table's "changed" cell
(the app, ``run``'s text table, the CSV, the HTML report) and ``compare`` all
read these. The JSON report keeps its keys and values (a contract): only what
people read is made here. Plain text, no Qt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from batchscope.config import KNOBS, POSTPROCESSING
from batchscope.engine.accuracy import HIT_RADIUS_PX
from batchscope.engine.faults import ENDED
from batchscope.experiment import Fault

ARROW = " → "
NOT_APPLIED = "(not applied)"  # after the change a step asked for and could not make
#: What a field is called where a person reads it (others: the field, "_" as " ").
NAMES = {
    "max_delay_ms": "max delay",
    "slo_ms": "latency objective",
    "drop_after_ms": "drop after",
    "duration_s": "run length",
    "warmup_s": "warm-up",
    "skip_bad_sources": "skip sources that fail to open",
    "cudnn_benchmark": "cuDNN benchmark",
    "cuda_graphs": "CUDA graphs",
}
#: Fields that say how long or how forgivingly a run plays, not what it plays (an
#: experiment from the menu sets them with its first config: "duration 20 → 30 s, skip
#: bad sources off" read as changes to the run on screen). A phrase names them only when
#: nothing else changed.
BACKSTAGE = ("duration_s", "warmup_s", "skip_bad_sources")
#: What "none" means, per field (others: the knob's word on the command line, or "none").
NONE_WORDS = {
    "max_batch": "no cap",
    "fps": "source's own",
    "drop_after_ms": "never",
    "sources": "the sample videos",
}


#: How each way of measuring blobs (config.POSTPROCESSING) made the detections, in words.
POSTPROCESS_PHRASES = {
    "weighted": "weighted (BatchScope's: blur angle and length from the probability-weighted "
    "blob, positions on pixel centres; --postprocess reference gives the authors' rules)",
    "reference": "reference (the authors' rules exactly: angle from the binary mask's "
    "moments, 0° where μ20 = μ02; length from the PCA of its pixels; positions x · scale)",
}


def accuracy_notes(report: Mapping[str, Any]) -> list[str]:
    """The notes under a table that shows accuracy: what hit % and false % count, and how
    the detections were measured; none when nothing was scored."""
    accuracy = (report.get("overall") or {}).get("accuracy")
    if not accuracy or not accuracy["scored"]:
        return []
    method = report["config"].get("postprocess", POSTPROCESSING[0])
    return [
        f"hit %: of the {accuracy['visible']} scored windows with the ball in view, those "
        f"with a detection within {HIT_RADIUS_PX:g} source px of it; false %: of the "
        f"{accuracy['no_ball']} without the ball, those with a detection",
        f"post-processing: {POSTPROCESS_PHRASES[method]}",
    ]


def session_name(sid: int) -> str:
    """A session as the tiles, the lanes and the notes name it: "S0"."""
    return f"S{sid}"


def fault_phrase(fault: Fault | Mapping[str, Any]) -> str:
    """A fault in a few words: "S0 stalls for 5 s", "burst ×4 on S0 for 5 s",
    "every device ×2 slower for 6 s" ("device 1 ×2 …" when it names one), "S1's source
    fails for 2 s".

    ``fault``: a Fault, or the JSON a segment lists it as (``Fault.as_json``).
    """
    f = fault.as_json() if isinstance(fault, Fault) else fault
    kind, lasts = f["kind"], f"for {f['for_s']:g} s"
    if kind == "slow_device":
        where = "every device" if f.get("device") is None else f"device {f['device']}"
        return f"{where} ×{f['factor']:g} slower {lasts}"
    who = session_name(f["session"])
    if kind == "stall":
        return f"{who} stalls {lasts}"
    if kind == "burst":
        return f"burst ×{f['factor']:g} on {who} {lasts}"
    return f"{who}'s source fails {lasts}"


def faults_phrase(faults: Fault | Mapping[str, Any] | Sequence[Any]) -> str:
    """One fault's phrase, or several joined by "; " (a step that started more than one)."""
    if isinstance(faults, Fault | Mapping):
        return fault_phrase(faults)
    return "; ".join(fault_phrase(f) for f in faults)


def field_name(key: str) -> str:
    return NAMES.get(key, key.replace("_", " "))


def value_phrase(key: str, value: Any) -> str:
    """A config value as read: "512×288", "on", "no cap", "30", "10" (the unit is the
    phrase's, see :func:`set_phrase`)."""
    if value is None:
        knob = KNOBS.get(key)
        return NONE_WORDS.get(key, knob.none_word if knob else "none")
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        if key == "resolution" and len(value) == 2:
            return f"{value[0]}×{value[1]}"
        return ", ".join(map(str, value)) or NONE_WORDS.get(key, "none")
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _unit(key: str, *values: Any) -> str:
    """ms and s follow the figures (the other knobs' units are their names: fps, sessions)."""
    knob = KNOBS.get(key)
    if knob is None or knob.unit not in ("ms", "s") or all(v is None for v in values):
        return ""
    return f" {knob.unit}"


def set_phrase(key: str, value: Any) -> str:
    """A field set to a value: "sessions 5", "max delay 20 ms"."""
    return f"{field_name(key)} {value_phrase(key, value)}{_unit(key, value)}"


def change_phrase(key: str, before: Any, after: Any) -> str:
    """A field changed: "policy oldest → all", "resolution 256×144 → 512×288"."""
    was, now = value_phrase(key, before), value_phrase(key, after)
    return f"{field_name(key)} {was}{ARROW}{now}{_unit(key, before, after)}"


def changes_phrase(diff: Mapping[str, tuple[Any, Any]]) -> str:
    """Several changes, as a ``config`` event says them: "sessions 4 → 8, policy all → oldest".

    ``diff``: field -> (before, after), as :meth:`RunConfig.diff` gives them.
    """
    return ", ".join(change_phrase(k, *diff[k]) for k in worth_saying(diff))


def worth_saying(keys: Iterable[str]) -> list[str]:
    """``keys`` without the :data:`BACKSTAGE` fields, unless those are all there is."""
    keys = list(keys)
    return [k for k in keys if k not in BACKSTAGE] or keys


def segment_phrase(segment: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> str:
    """What opened a segment, for its "changed" cell: "policy oldest → all",
    "burst ×4 on S0 for 5 s", "ended: burst ×4 on S0 for 5 s", "start".

    ``previous``: the segment before it (the report's list in order), for the values
    the change replaced and the faults that ended; without it a change reads as the
    value it set ("sessions 6").
    """
    changes = dict(segment.get("changes") or {})
    fault = changes.pop("fault", None)
    before = (previous or {}).get("config") or {}
    parts = [
        change_phrase(k, before[k], changes[k])
        if k in before and before[k] != changes[k]
        else set_phrase(k, changes[k])
        for k in worth_saying(changes)
    ]
    if fault:
        parts.append(faults_phrase(fault))
    if segment.get("error"):
        return f"{', '.join(parts)} {NOT_APPLIED}" if parts else NOT_APPLIED
    if parts:
        return ", ".join(parts)
    ended = _ended(segment, previous)
    if ended:
        return "; ".join(f"{ENDED}{fault_phrase(f)}" for f in ended)
    if segment.get("caption") == "statistics reset":
        return "statistics reset"
    return "start" if segment.get("index") == 0 else "(no change)"


def _ended(segment: Mapping[str, Any], previous: Mapping[str, Any] | None) -> list[Any]:
    """The faults on in ``previous`` that are no longer on in ``segment``."""
    still = list(segment.get("faults") or [])
    gone = []
    for f in (previous or {}).get("faults") or []:
        if f in still:
            still.remove(f)
        else:
            gone.append(f)
    return gone
