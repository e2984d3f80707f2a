"""A run's figures as a Prometheus endpoint on loopback (``run --metrics-port``, the app's
View → Serve metrics…), for the dashboards Triton and Ray Serve users already have.

Why prometheus_client: it is the exposition format and the HTTP server, both of which
we would otherwise write and keep right. Why a custom collector rather than its
``Histogram.observe`` in the worker: the worker's hot path must not pay for a scrape
nobody may make. :class:`RunCollector` reads, on each scrape, the records the store's
rings gained since the last one (a cursor on ``Ring.total``, as the recorder keeps) and
adds them to its own histograms and counters, so every figure covers the whole run from
its first window, statistics resets or not. Records a ring overwrote before a scrape
read them (more than its capacity between two scrapes: 262,144 windows, 65,536
batches) are counted in ``batchscope_records_missed_total``, never guessed.

Nothing listens unless asked; the server binds 127.0.0.1 only, on a private
registry (not prometheus_client's global one), and :meth:`MetricsServer.stop` ends it.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from batchscope.engine.metrics import MetricsStore
from batchscope.engine.stats import busy_fraction, pick

if TYPE_CHECKING:
    from batchscope.engine.engine import Engine

HOST = "127.0.0.1"
#: a window's latency (result ready − arrival, s): 1 ms … 2 s, with a frame at 30 fps
LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.033, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
#: windows per batch, up to the 256 sessions a run may have
BATCH_SIZE_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
#: the store's rings read, by the name ``batchscope_records_missed_total`` gives each
RINGS = {"window": "items", "batch": "batches", "overwrite": "overwrites", "expiry": "expiries"}
BUSY_WINDOW_S = 1.0  # a device's busy share is over the last second, as the dashboard's

#: every metric's name (as the exposition writes a counter: with ``_total``), for the docs
#: and the tests
METRICS = (
    "batchscope_latency_seconds",
    "batchscope_session_fps",
    "batchscope_windows_delivered_total",
    "batchscope_windows_overwritten_total",
    "batchscope_windows_expired_total",
    "batchscope_batch_size",
    "batchscope_device_busy",
    "batchscope_records_missed_total",
)


class MetricsPortError(ValueError):
    """The port cannot be served (in use, or not allowed); one line saying which and why."""


class Histograms:
    """Histograms keyed by a label value (a session, a device): each key's count per
    bucket (the last: above every bound) and sum, added to in bulk from record arrays."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = np.asarray(bounds, dtype=np.float64)
        self.counts: dict[int, np.ndarray] = {}
        self.sums: dict[int, float] = {}

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Count ``values[i]`` under ``keys[i]``; a value on a bound falls in its bucket
        (Prometheus' ``le``: less than or equal)."""
        if keys.size == 0:
            return
        bucket = np.searchsorted(self.bounds, values, side="left")
        for key in np.unique(keys).tolist():
            mine = keys == key
            counts = self.counts.get(key)
            if counts is None:
                counts = self.counts[key] = np.zeros(self.bounds.size + 1, dtype=np.int64)
            counts += np.bincount(bucket[mine], minlength=self.bounds.size + 1)
            self.sums[key] = self.sums.get(key, 0.0) + float(values[mine].sum())

    def family(self, name: str, documentation: str, label: str) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, documentation, labels=[label])
        edges = [floatToGoString(b) for b in self.bounds.tolist()] + ["+Inf"]
        for key in sorted(self.counts):
            cumulative = np.cumsum(self.counts[key]).tolist()
            family.add_metric(
                [str(key)], list(zip(edges, cumulative, strict=True)), sum_value=self.sums[key]
            )
        return family


def _count(counts: dict[int, int], keys: np.ndarray) -> None:
    """Add one to ``counts[k]`` for each ``k`` in ``keys``."""
    found, n = np.unique(keys, return_counts=True)
    for key, times in zip(found.tolist(), n.tolist(), strict=True):
        counts[key] = counts.get(key, 0) + times


def _counter(name: str, documentation: str, label: str, counts: dict[int, int]) -> Metric:
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key in sorted(counts):
        family.add_metric([str(key)], counts[key])
    return family


class RunCollector(Collector):
    """The figures of one engine's run, read from its store on each scrape (any thread)."""

    def __init__(self, engine: Engine | None = None) -> None:
        self._lock = threading.Lock()  # concurrent scrapes: one reads the rings at a time
        self._engine: Engine | None = None
        if engine is not None:
            self.watch(engine)

    def watch(self, engine: Engine) -> None:
        """Serve ``engine``'s run, from its first record (a cursor at 0 on every ring)."""
        with self._lock:
            self._engine = engine
            self._seen = dict.fromkeys(RINGS, 0)
            self._missed = dict.fromkeys(RINGS, 0)
            self._latency = Histograms(LATENCY_BUCKETS_S)
            self._batch_size = Histograms(BATCH_SIZE_BUCKETS)
            self._delivered: dict[int, int] = {}
            self._overwritten: dict[int, int] = {}
            self._expired: dict[int, int] = {}

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            engine = self._engine
            if engine is None:
                return []
            return self._collect(engine)

    def _collect(self, engine: Engine) -> list[Metric]:
        store: MetricsStore = engine.store
        with store.lock:  # copies of what is new, as the recorder takes them
            new = {}
            for name, ring_name in RINGS.items():
                ring = getattr(store, ring_name)
                new[name] = ring.appended_since(self._seen[name])
                self._missed[name] += ring.total - self._seen[name] - len(new[name])
                self._seen[name] = ring.total
            fps = dict(store.timeline[-1].fps) if store.timeline else {}
            now = engine.clock()
            recent = store.batches.since("end", now - BUSY_WINDOW_S)
        items, batches = new["window"], new["batch"]
        self._latency.add(items["session"], items["result"] - items["arrival"])
        _count(self._delivered, items["session"])
        self._batch_size.add(batches["device"], batches["size"].astype(np.float64))
        _count(self._overwritten, new["overwrite"]["session"])
        _count(self._expired, new["expiry"]["session"])

        fps_family = GaugeMetricFamily(
            "batchscope_session_fps",
            "Results a session received over the last second (the dashboard's live fps)",
            labels=["session"],
        )
        for sid in sorted(fps):
            fps_family.add_metric([str(sid)], fps[sid])
        recent = pick(recent, recent["end"] > now - BUSY_WINDOW_S)
        devices = max(engine.config.devices, int(recent["device"].max(initial=-1)) + 1)
        busy = GaugeMetricFamily(
            "batchscope_device_busy",
            "Share of the last second a device spent computing batches (0-1)",
            labels=["device"],
        )
        for device in range(devices):
            compute_s = float(recent["compute_s"][recent["device"] == device].sum())
            busy.add_metric([str(device)], busy_fraction(compute_s, BUSY_WINDOW_S))
        missed = CounterMetricFamily(
            "batchscope_records_missed",
            "Records a ring overwrote before a scrape read them (scrape more often)",
            labels=["record"],
        )
        for name, n in self._missed.items():
            missed.add_metric([name], n)
        return [
            self._latency.family(
                "batchscope_latency_seconds",
                "A window's latency: its result ready less its arrival (s)",
                "session",
            ),
            fps_family,
            _counter(
                "batchscope_windows_delivered",
                "Windows whose result a session received",
                "session",
                self._delivered,
            ),
            _counter(
                "batchscope_windows_overwritten",
                "Windows replaced by a newer one before the worker took them",
                "session",
                self._overwritten,
            ),
            _counter(
                "batchscope_windows_expired",
                "Windows discarded for waiting longer than drop_after_ms",
                "session",
                self._expired,
            ),
            self._batch_size.family(
                "batchscope_batch_size",
                "Windows per batch, by the device that ran it",
                "device",
            ),
            busy,
            missed,
        ]


class MetricsServer:
    """The endpoint ``http://127.0.0.1:PORT/metrics`` for a run, on a thread of its own.

    Binds at construction (port 0: one the OS picks, :attr:`port` says which), so a
    port in use is refused before a run starts (:class:`MetricsPortError`); it serves
    nothing until :meth:`watch` names the engine. :meth:`stop` shuts it down and frees
    the port.
    """

    def __init__(self, port: int = 0, engine: Engine | None = None) -> None:
        if not 0 <= port <= 65535:
            raise MetricsPortError("give a port from 0 (any free one) to 65535")
        self.collector = RunCollector(engine)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        try:
            self._server, self._thread = start_http_server(port, addr=HOST, registry=self.registry)
        except OSError as exc:
            why = (
                "is in use"
                if exc.errno == errno.EADDRINUSE
                else f"cannot be served ({exc.strerror})"
            )
            raise MetricsPortError(
                f"{HOST}:{port} {why}; choose another port, or 0 for any free one"
            ) from None
        self._thread.name = "batchscope-metrics"  # prometheus_client leaves it unnamed
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/metrics"

    def watch(self, engine: Engine) -> None:
        self.collector.watch(engine)

    def stop(self, timeout: float = 2.0) -> None:
        """Stop serving and close the socket: nothing listens on the port afterwards."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout)
