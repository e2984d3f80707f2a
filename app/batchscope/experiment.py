"""Experiment files: a base config and timed steps, in TOML (a contract).

The same file runs in the app (``gui --experiment``), on the live worker
headless (``run --experiment``) and in the simulator (``simulate
--experiment``). Format::

    name = "bus-or-taxi"
    caption = "3 sessions, oldest first: the laptop GPU keeps up."
    duration = 30                  # s, when the experiment ends
    [base]                         # any RunConfig field, CLI spelling with underscores
    backend = "emulated"
    resolution = "512x288"
    sources = ["synthetic"]        # optional; default: the sample videos
    [[step]]
    at = 0                         # s since the start
    sessions = 3
    policy = "oldest"
    caption = "…"                  # optional: the banner text from this step on

Every error is one line naming the file, the step and the field
(:class:`ExperimentError`), found before anything starts: each step's
config is built and validated here, in order.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from batchscope.config import ConfigError, RunConfig, parse_resolution
from batchscope.paths import assets_dir, user_config_dir

#: RunConfig fields an experiment may set (``extra`` is internal).
CONFIG_FIELDS = tuple(f.name for f in fields(RunConfig) if f.name != "extra")
BOOL_FIELDS = tuple(f.name for f in fields(RunConfig) if f.type in ("bool", bool))
#: the fields that hold a list of names (a tuple in the config), and what they name
LIST_FIELDS = {"sources": "sources", "profiles": "profiles", "device_list": "devices"}
TEXT_FIELDS = ("policy", "backend", "device", "profile", "precision", "checkpoint", "fit")
#: A step's fault keys and the fields each takes (all end by themselves after ``for_s``).
FAULT_FIELDS: dict[str, tuple[str, ...]] = {
    "stall": ("session", "for_s"),  # the session's source sends nothing
    "burst": ("session", "factor", "for_s"),  # it sends factor × its fps
    "slow_device": ("factor", "for_s"),  # every batch takes factor × longer (see below)
    "source_error": ("session", "for_s"),  # the source fails, then recovers
}
#: The fields a fault may leave out: a slow_device names its device (``device = N``: that
#: device's batches only) or, without one, slows every device.
OPTIONAL_FAULT_FIELDS: dict[str, tuple[str, ...]] = {"slow_device": ("device",)}
EVENT_KEYS = tuple(FAULT_FIELDS)
TOP_KEYS = ("name", "caption", "duration", "base", "step")


class ExperimentError(ValueError):
    """A malformed experiment; ``str()`` is one line: file, step, field and reason."""


@dataclass(frozen=True)
class Fault:
    """Something that happens to a run for ``for_s`` seconds, then ends by itself."""

    kind: str  # a key of FAULT_FIELDS
    for_s: float
    session: int | None = None
    factor: float | None = None
    device: int | None = None  # a slow_device's device (None: every device)

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def make_fault(kind: str, table: Any, where: str, sessions: int, devices: int = 1) -> Fault:
    """A validated fault from a step's ``kind = {…}`` table; ExperimentError naming the key.

    ``sessions``, ``devices``: the step's, which a fault's session and device must name."""
    key = f"{where}: {kind}"
    if not isinstance(table, dict):
        raise ExperimentError(f"{key}: write it as a table, e.g. {kind} = {{{_example(kind)}}}")
    wanted, optional = FAULT_FIELDS[kind], OPTIONAL_FAULT_FIELDS.get(kind, ())
    for name in table:
        if name not in (*wanted, *optional):
            takes = ", ".join(wanted) + "".join(f" and optionally {o}" for o in optional)
            raise ExperimentError(f"{key}: unknown field {name!r}; {kind} takes {takes}")
    for name in wanted:
        if name not in table:
            raise ExperimentError(f"{key}: {name} is missing (e.g. {kind} = {{{_example(kind)}}})")
    for_s, session, factor = table["for_s"], table.get("session"), table.get("factor")
    if not _positive(for_s):
        raise ExperimentError(f"{key}: for_s = {for_s!r}: must be a positive number of s")
    if "factor" in wanted and not _positive(factor):
        raise ExperimentError(f"{key}: factor = {factor!r}: must be a number greater than 0")
    if "session" in wanted and (
        isinstance(session, bool) or not isinstance(session, int) or not 0 <= session < sessions
    ):
        raise ExperimentError(
            f"{key}: session = {session!r}: no such session (this step has sessions 0 to "
            f"{sessions - 1})"
        )
    device = table.get("device")
    if device is not None and (
        isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < devices
    ):
        raise ExperimentError(
            f"{key}: device = {device!r}: no such device (this step has devices 0 to "
            f"{devices - 1}; leave device out to slow every device)"
        )
    return Fault(kind, float(for_s), session, None if factor is None else float(factor), device)


def _positive(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value > 0
    )


def _example(kind: str) -> str:
    sample = {"session": "session = 0", "factor": "factor = 3", "for_s": "for_s = 5"}
    return ", ".join(sample[f] for f in FAULT_FIELDS[kind])


@dataclass(frozen=True)
class Step:
    at: float  # s since the start
    changes: dict[str, Any]  # RunConfig fields (validated), in the file's order
    caption: str = ""
    index: int = 0  # position in the file (0-based)
    faults: tuple[Fault, ...] = ()


@dataclass(frozen=True)
class Experiment:
    name: str
    caption: str
    duration: float  # s
    base: RunConfig  # the config before the first step
    steps: tuple[Step, ...]
    source: str = ""  # where it came from: a path, or "built-in NAME"
    text: str = ""  # the file itself, for reports
    configs: tuple[RunConfig, ...] = field(default=(), repr=False)  # after each step

    def config_at(self, index: int) -> RunConfig:
        """The config once step ``index`` has been applied."""
        return self.configs[index]

    def most(self, field_name: str) -> int:
        """The largest ``sessions`` or ``devices`` any of its configs has (the session ids
        a run of it uses: 0 .. most("sessions") - 1)."""
        return max(getattr(c, field_name) for c in (self.base, *self.configs))


def experiments_dirs() -> list[tuple[str, Path]]:
    """(kind, folder) where experiments are found: built-in, then the user's."""
    return [("built-in", assets_dir() / "experiments"), ("user", user_config_dir() / "experiments")]


def list_experiments() -> list[tuple[str, Experiment | ExperimentError]]:
    """Every experiment file found, as (kind, experiment or the error that spoils it)."""
    out: list[tuple[str, Experiment | ExperimentError]] = []
    for kind, folder in experiments_dirs():
        for path in sorted(folder.glob("*.toml")):
            try:
                out.append((kind, load_experiment_file(path, label=_label(kind, path))))
            except ExperimentError as exc:
                out.append((kind, exc))
    return out


def load_experiment(name_or_path: str) -> Experiment:
    """An experiment by name (built-in or user) or by path to a TOML file."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists() or "/" in name_or_path:
        return load_experiment_file(path)
    for kind, folder in experiments_dirs():
        candidate = folder / f"{name_or_path}.toml"
        if candidate.is_file():
            return load_experiment_file(candidate, label=_label(kind, candidate))
    names = sorted({p.stem for _, folder in experiments_dirs() for p in folder.glob("*.toml")})
    raise ExperimentError(
        f"experiment {name_or_path!r}: no such experiment or file; "
        f"built-in and user experiments: {', '.join(names) or 'none'}"
    )


def load_experiment_file(path: Path, label: str | None = None) -> Experiment:
    where = label or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExperimentError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ExperimentError(f"{where}: cannot read ({reason})") from None
    return parse_experiment(text, where)


def parse_experiment(text: str, where: str = "<experiment>") -> Experiment:
    """The experiment in ``text``; ExperimentError naming ``where``, step and field if bad."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{where}: not valid TOML ({exc})") from None
    for key in data:
        if key not in TOP_KEYS:
            raise ExperimentError(
                f"{where}: unknown key {key!r}; an experiment has {', '.join(TOP_KEYS)}"
            )
    name = _text(data.get("name", Path(where).stem), where, "name")
    caption = _text(data.get("caption", ""), where, "caption")
    duration = data.get("duration")
    if duration is None:
        raise ExperimentError(f"{where}: duration is missing (seconds, when it ends)")
    if (
        isinstance(duration, bool)
        or not isinstance(duration, int | float)
        or not (math.isfinite(duration) and duration > 0)
    ):
        raise ExperimentError(f"{where}: duration = {duration!r}: must be a positive number of s")
    base_table = data.get("base", {})
    if not isinstance(base_table, dict):
        raise ExperimentError(f"{where}: [base] must be a table of config fields")
    base_changes = _fields(base_table, f"{where}: [base]")
    base = _config(RunConfig(duration_s=float(duration)), base_changes, f"{where}: [base]")
    raw_steps = data.get("step", [])
    if not isinstance(raw_steps, list) or not all(isinstance(s, dict) for s in raw_steps):
        raise ExperimentError(f"{where}: steps are [[step]] tables")
    steps, configs = [], []
    config, last_at = base, -math.inf
    for i, raw in enumerate(raw_steps):
        at_where = f"{where}: step {i + 1}"
        raw = dict(raw)
        at = raw.pop("at", None)
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            raise ExperimentError(f"{at_where}: at = {at!r}: give the step's time in s (at = 10)")
        if at < 0:
            raise ExperimentError(f"{at_where}: at = {at!r}: must be 0 or more s")
        if at <= last_at:
            raise ExperimentError(
                f"{at_where}: at = {at!r}: steps must come in increasing time "
                f"(the step before is at {last_at:g} s)"
            )
        if at > duration:
            raise ExperimentError(
                f"{at_where}: at = {at!r}: past the experiment's duration ({duration:g} s)"
            )
        step_caption = _text(raw.pop("caption", ""), at_where, "caption")
        raw_faults = {k: raw.pop(k) for k in list(raw) if k in FAULT_FIELDS}
        changes = _fields(raw, at_where)
        config = _config(config, changes, at_where)
        faults = tuple(
            make_fault(k, v, at_where, config.sessions, config.devices)
            for k, v in raw_faults.items()
        )
        steps.append(Step(float(at), changes, step_caption, i, faults))
        configs.append(config)
        last_at = at
    return Experiment(
        name=name,
        caption=caption,
        duration=float(duration),
        base=base,
        steps=tuple(steps),
        source=where,
        text=text,
        configs=tuple(configs),
    )


def _label(kind: str, path: Path) -> str:
    return str(path) if kind == "user" else f"{path.stem} (built-in)"


def _text(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str):
        raise ExperimentError(f"{where}: {key} = {value!r}: must be text in quotes")
    return value


def _fields(table: dict[str, Any], where: str) -> dict[str, Any]:
    """RunConfig changes from a TOML table: known names, TOML types turned into config types."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in EVENT_KEYS:
            continue
        if key not in CONFIG_FIELDS:
            raise ExperimentError(
                f"{where}: unknown field {key!r}; use RunConfig fields such as "
                "sessions, policy, max_batch, max_delay_ms, batch, slo_ms, fps, precision, "
                "resolution, backend, device, profile, sources"
            )
        out[key] = _convert(key, value, where)
    return out


def _convert(key: str, value: Any, where: str) -> Any:
    try:
        if key == "resolution":
            if isinstance(value, list) and len(value) == 2:
                value = f"{value[0]}x{value[1]}"
            return parse_resolution(value if isinstance(value, str) else str(value))
        if key in LIST_FIELDS:  # sources, each device's profile or real device
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(key, value, f"a list of {LIST_FIELDS[key]} in quotes")
            return tuple(value)
        if key in BOOL_FIELDS and not isinstance(value, bool):
            raise ConfigError(key, value, "must be true or false")
        if key in TEXT_FIELDS and not isinstance(value, str):
            raise ConfigError(key, value, "must be text in quotes")
        if key == "fps" and value == "source":
            return None
        if key == "max_batch" and value in ("none", "unlimited"):
            return None
        if key in ("fps", "max_delay_ms", "slo_ms", "duration_s") and isinstance(value, int):
            return float(value)
    except ConfigError as exc:
        raise ExperimentError(f"{where}: {exc.field} = {exc.value!r}: {exc.reason}") from None
    return value


def _config(config: RunConfig, changes: dict[str, Any], where: str) -> RunConfig:
    try:
        return config.with_changes(**changes)
    except ConfigError as exc:
        raise ExperimentError(f"{where}: {exc.field} = {exc.value!r}: {exc.reason}") from None
    except TypeError as exc:  # a value of the wrong kind that validation could not compare
        raise ExperimentError(f"{where}: {exc}") from None
