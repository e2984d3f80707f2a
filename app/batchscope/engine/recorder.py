"""Recording a run to a folder, flushed every second.

Layout of a recording (times in s since the engine started):

- ``config.json``   the config when recording started
- ``events.jsonl``  one JSON object per event (config changes, errors, OOM)
- ``items.csv``     one row per processed window: session, batch, arrival, start,
                    prep_end, compute_end, result, and its scoring against ground truth
                    (engine/accuracy.py): scored and hit (0/1), error_px and fresh_px
                    (empty where they do not apply); host_ms and late_ms (how late the
                    host served it: the worker's share inside its wait, and in all)
- ``batches.csv``   one row per batch: start, size, prep_ms, compute_ms, post_ms, end,
                    reason (why it left: all waiting, full, deadline, …), cap (the
                    policy's cap then; 0: none), padded (empty rows run to fill a
                    fixed batch shape; 0 for the other policies), late_ms (how late
                    the worker woke for it), device (which device ran it: its index in
                    the run's devices, 0 with one)
- ``timeline.csv``  one row per monitor sample: t, throughput_wps, busy, mean_batch,
                    fps per session (JSON), memory MB (JSON)
- ``report.json``   the report when recording stops (it covers the interval since the
                    last statistics reset, like every report)

Why a thread of its own and plain appends: a crash or ``kill -9`` must lose
at most the last second, so every file is appended and flushed once per
second and no file is ever rewritten except ``report.json`` at the end.

A write that fails (a full disk, a removed drive) stops the recording, not the run: the
file is cut back to its last whole line (what fitted stays, and every file still parses),
``on_error`` says so once, at that moment, and nothing more is appended;
``report.json`` is still tried at the end, and removed rather than left half-written.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from batchscope.engine.metrics import MetricsStore
from batchscope.engine.rules import REASONS

FLUSH_PERIOD_S = 1.0


class RecordingError(ValueError):
    """The folder cannot take a recording; one line naming it and why."""


def check_folder(folder: str | Path) -> None:
    """RecordingError unless a recording can start in ``folder``; makes nothing, so a
    command can ask before its run starts. A probe file (made and removed) in the folder,
    or in the nearest one above that exists: permission bits say nothing to root."""
    folder = Path(folder)
    base = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not base.is_dir():
        raise RecordingError(f"{folder}: cannot record here ({base} is not a folder)")
    try:
        if base == folder and any(folder.iterdir()):
            raise RecordingError(f"{folder}: folder is not empty; choose a new one")
        with tempfile.NamedTemporaryFile(dir=base, prefix=".batchscope-probe-"):
            pass
    except OSError as exc:
        raise RecordingError(f"{folder}: cannot record here ({exc.strerror})") from None


class Recorder:
    """Appends what the store gains to a folder, once a second, on a thread of its own.

    It reads only the store (under its lock, copying), writes times relative to
    ``t0`` (the engine's clock origin), and reports a failing flush through
    ``on_error`` without stopping the run; a failed write ends the recording
    (:attr:`failures` say why). ``stop()`` sets the stop event, joins, flushes the rest
    and writes the report.
    """

    def __init__(
        self,
        folder: str | Path,
        store: MetricsStore,
        t0: float,
        config_json: dict[str, Any],
        on_error: Callable[[str], object],
    ) -> None:
        self.folder = Path(folder)
        self._claim_folder()
        self._store = store
        self._on_error = on_error
        self._t0 = t0
        self._items_seen = store.items.total
        self._batches_seen = store.batches.total
        self._events_seen: Any = None  # all events so far go in: they explain the run
        self._timeline_seen = _marker(list(store.timeline))
        self.lost_items = 0
        self.failures: list[str] = []  # what could not be written (a full disk), in order
        self._marks: dict[str, Any] = {}
        self._fds: dict[str, int] = {}
        self._open_files(config_json)
        self._sizes = dict.fromkeys(self._fds, 0)  # bytes of whole lines in each file
        self._buffers = {name: io.StringIO() for name in self._fds}
        self._csv = {
            name: csv.writer(buf, lineterminator="\n") for name, buf in self._buffers.items()
        }
        self._write_headers()
        failure = self._write_out()
        if failure is not None:
            self._close()
            raise RecordingError(f"{self.folder}: cannot record here ({failure[1].strerror})")
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="batchscope-recorder", daemon=True)
        self._thread.start()

    def _claim_folder(self) -> None:
        """RecordingError unless the folder is made or empty and takes a file (a probe,
        made and removed)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if any(self.folder.iterdir()):
                raise RecordingError(f"{self.folder}: folder is not empty; choose a new one")
            probe = self.folder / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise RecordingError(f"{self.folder}: cannot record here ({exc.strerror})") from None

    def _open_files(self, config_json: dict[str, Any]) -> None:
        """Write ``config.json`` and open the files appended to; RecordingError (and
        none left open) when the folder refuses."""
        try:
            _write_file(self.folder / "config.json", json.dumps(config_json, indent=2) + "\n")
            # One unbuffered O_APPEND descriptor per file and one write() per flush: a
            # process killed mid-run leaves whole lines, but for the last one when the kill
            # lands inside a write (Linux ends a write to a file short when a fatal signal
            # arrives between two pages); everything before it is whole.
            for name in ("events.jsonl", "items.csv", "batches.csv", "timeline.csv"):
                self._fds[name] = os.open(
                    self.folder / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
                )
        except OSError as exc:
            self._close()
            raise RecordingError(f"{self.folder}: cannot record here ({exc.strerror})") from None

    def _write_headers(self) -> None:
        """The CSV files' header rows, into their buffers (written out before the thread starts)."""
        self._csv["items.csv"].writerow(
            [
                "session",
                "batch",
                "arrival",
                "start",
                "prep_end",
                "compute_end",
                "result",
                *_SCORES,
                "host_ms",
                "late_ms",
            ]
        )
        self._csv["batches.csv"].writerow(
            [
                "start",
                "size",
                "prep_ms",
                "compute_ms",
                "post_ms",
                "end",
                "reason",
                "cap",
                "padded",
                "late_ms",
                "device",
            ]
        )
        self._csv["timeline.csv"].writerow(
            ["t", "throughput_wps", "busy", "mean_batch", "fps", "memory_mb"]
        )

    def _run(self) -> None:
        while not self.failures and not self._stop.wait(FLUSH_PERIOD_S):
            try:
                self.flush()
            except Exception as exc:  # report, keep the thread alive
                self._on_error(f"recorder: {type(exc).__name__}: {exc}")

    def flush(self) -> None:
        """Append everything new since the last flush and push it to the OS.

        Called once a second by the recorder thread. A statistics reset in between
        loses nothing: the rings keep cleared records until they are overwritten.
        """
        with self._flush_lock:
            if not self.failures:  # a failed write ended the recording
                self._flush()

    def _flush(self) -> None:
        store = self._store
        with store.lock:
            new_items = store.items.total - self._items_seen
            items = store.items.appended_since(self._items_seen)
            self._items_seen = store.items.total
            batches = store.batches.appended_since(self._batches_seen)
            self._batches_seen = store.batches.total
            events = list(store.events)
            timeline = list(store.timeline)
        self.lost_items += new_items - len(items)
        t0 = self._t0
        self._csv["items.csv"].writerows(
            (
                int(r["session"]),
                int(r["batch"]),
                *(_t(r[k] - t0) for k in _ITEM_TIMES),
                int(r["scored"]),
                int(r["visible"]),
                int(r["detected"]),
                int(r["hit"]),
                _px(r["error_px"]),
                _px(r["fresh_px"]),
                _ms(r["host_wait"] + r["host_device"]),
                _ms(r["host_late"]),
            )
            for r in items
        )
        self._csv["batches.csv"].writerows(
            (
                _t(b["start"] - t0),
                int(b["size"]),
                _ms(b["prep_s"]),
                _ms(b["compute_s"]),
                _ms(b["post_s"]),
                _t(b["end"] - t0),
                REASONS[int(b["reason"])],
                int(b["cap"]),
                int(b["padded"]),
                _ms(b["host_wait"]),
                int(b["device"]),
            )
            for b in batches
        )
        # events and timeline are bounded deques: count what was appended since last time
        new_events = events[max(0, len(events) - _appended(events, self._events_seen)) :]
        for ev in new_events:
            self._buffers["events.jsonl"].write(json.dumps(ev.__dict__) + "\n")
        self._events_seen = _marker(events)
        for s in timeline[max(0, len(timeline) - _appended(timeline, self._timeline_seen)) :]:
            self._csv["timeline.csv"].writerow(
                (
                    s.t,
                    round(s.throughput_wps, 3),
                    round(s.busy, 4),
                    round(s.mean_batch, 3),
                    json.dumps({str(k): round(v, 2) for k, v in s.fps.items()}),
                    json.dumps({k: round(v, 1) for k, v in s.memory.items()}),
                )
            )
        self._timeline_seen = _marker(timeline)
        failure = self._write_out()
        if failure is not None:
            name, exc = failure
            self._fail(
                f"recording to {self.folder} stopped: cannot write {name} ({exc.strerror});"
                " the files keep the whole lines written before"
            )

    def _write_out(self) -> tuple[str, OSError] | None:
        """Append each buffer to its file; at the first failure, (file name, error), the
        file cut back to its last whole line and every buffer dropped."""
        for name, buf in self._buffers.items():
            data = buf.getvalue().encode()
            buf.seek(0)
            buf.truncate()
            if not data:
                continue
            try:
                self._sizes[name] = _append_lines(self._fds[name], data, self._sizes[name])
            except OSError as exc:
                for rest in self._buffers.values():
                    rest.seek(0)
                    rest.truncate()
                return name, exc
        return None

    def mark(self, **fields: Any) -> None:
        """Top-level fields for ``report.json`` (``interrupted=True``: Ctrl-C ended the run)."""
        self._marks.update(fields)

    def _fail(self, message: str) -> None:
        self.failures.append(message)
        self._on_error(message)

    def _close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = {}

    def stop(self, report: dict[str, Any] | None = None) -> Path:
        """Stop recording: last flush, the report, files closed. Returns the folder.

        Never raises for a full disk: :attr:`failures` and ``on_error`` say what is missing.
        """
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.flush()
        self._close()
        if report is not None:
            extra: dict[str, Any] = dict(self._marks)
            if self.lost_items:
                extra["recording_lost_items"] = self.lost_items
            if self.failures:
                extra["recording_error"] = self.failures[0]
            try:
                _write_file(
                    self.folder / "report.json", json.dumps({**report, **extra}, indent=2) + "\n"
                )
            except OSError as exc:
                self._fail(f"recording to {self.folder}: report.json not written ({exc.strerror})")
        return self.folder

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


def _append_lines(fd: int, data: bytes, size: int) -> int:
    """Append ``data`` (whole lines) to ``fd``, a file of ``size`` bytes; its new size.

    A write may take part of the data (a disk filling up takes what fits); the rest is
    written again until all is in. If a write fails, the file is cut back to the last
    whole line it took and the OSError raised: a reader never meets half a row.
    """
    done = 0
    try:
        while done < len(data):
            n = os.write(fd, data[done:])
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += n
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size + data.rfind(b"\n", 0, done) + 1)
        raise
    return size + done


def _write_file(path: Path, text: str) -> None:
    """``text`` to a new file at ``path``, whole or not at all (a failure removes it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _append_lines(fd, text.encode(), 0)
    except OSError:
        path.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


_ITEM_TIMES = ("arrival", "start", "prep_end", "compute_end", "result")
_SCORES = ("scored", "visible", "detected", "hit", "error_px", "fresh_px")


def _px(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.2f}"


def _t(seconds: float) -> str:
    return f"{seconds:.6f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000.0:.3f}"


def _marker(seq: list[Any]) -> Any:
    """The newest element seen, to find where to resume in a bounded deque."""
    return seq[-1] if seq else None


def _appended(seq: list[Any], marker: Any) -> int:
    """How many elements of ``seq`` come after ``marker`` (all of them if it is gone)."""
    for i in range(len(seq) - 1, -1, -1):
        if seq[i] is marker:
            return len(seq) - 1 - i
    return len(seq)
