"""A live resolution change keeps the frame caches within their budget, and says how far
the re-decode is.

Long files fill the budget (CACHE_BYTES, shared by the files of a run): decoding the new
caches beside the old ones would hold both for a while. Such a change decodes in place
instead: the sessions pause, the old caches are given back first, and a re-decode that
fails decodes the old resolution back. Here the budget is made small (3 MB) so that the
sample clips are "long".
"""

from __future__ import annotations

import io
import sys

import pytest

from batchscope.config import RunConfig
from batchscope.engine import live_change as live_change_module
from batchscope.engine import roster as roster_module
from batchscope.engine import sources as sources_module
from batchscope.engine.engine import Engine
from batchscope.engine.roster import cache_bytes
from batchscope.engine.sources import SourceError
from batchscope.paths import sample_videos
from contract import SMALL_EMULATED, wait_for

BUDGET = 3 * 2**20


@pytest.fixture
def small_budget(monkeypatch):
    for module in (sources_module, roster_module, live_change_module):
        monkeypatch.setattr(module, "CACHE_BYTES", BUDGET)


def running(resolution=(256, 144)) -> Engine:
    config = {**SMALL_EMULATED, "sources": (str(sample_videos()[0]),), "resolution": resolution}
    engine = Engine(RunConfig(**config, sessions=2))
    engine.open()
    engine.start()
    assert wait_for(lambda: sum(s.delivered for s in engine.snapshot().sessions) > 10)
    return engine


def test_a_change_with_long_files_re_decodes_in_place_within_the_budget(small_budget, monkeypatch):
    engine = running()
    try:
        assert "long file: looping its first" in engine.sources[0].source.note
        held_while_decoding, progress = [], []
        real_open = roster_module.open_source

        def watched(
            spec, resolution, cancel=None, budget_bytes=None, fit=None, progress=None, **run
        ):
            held_while_decoding.append(cache_bytes(engine.roster.slots))
            told = progress

            def tell(done, total):
                told(done, total)
                progress_seen.append(engine.progress)

            return real_open(spec, resolution, cancel, budget_bytes, fit, tell, **run)

        progress_seen = progress
        monkeypatch.setattr(roster_module, "open_source", watched)
        error = engine.apply(engine.config.with_changes(resolution=(512, 288)))
        assert error is None
        # the old cache (3 MB of 256x144 frames) was given back before the new one decoded
        assert held_while_decoding == [256 * 144 * 3]  # one black frame is left
        assert cache_bytes(engine.roster.slots) <= BUDGET
        assert engine.sources[0].source.resolution == (512, 288)
        assert any("re-decoding at 512x288 in place" in e.message for e in engine.events())
        assert progress_seen[0].startswith("decoding rally_a.mp4 at 512x288: 0%")
        assert engine.progress is None
        n = sum(s.delivered for s in engine.snapshot().sessions)
        assert wait_for(lambda: sum(s.delivered for s in engine.snapshot().sessions) > n + 10)
    finally:
        engine.stop()


def test_a_failed_in_place_re_decode_brings_the_old_resolution_back(small_budget, monkeypatch):
    engine = running()
    try:
        real_open = roster_module.open_source

        def failing(spec, resolution, *args, **kwargs):
            if resolution == (512, 288):
                raise SourceError(spec, "decoder gave up (injected)")
            return real_open(spec, resolution, *args, **kwargs)

        monkeypatch.setattr(roster_module, "open_source", failing)
        error = engine.apply(engine.config.with_changes(resolution=(512, 288)))
        assert error is not None and "decoder gave up" in error
        assert engine.config.resolution == (256, 144)
        assert engine.sources[0].source.resolution == (256, 144)
        assert engine.sources[0].source.n_frames > 1  # decoded again, not the released one
        n = sum(s.delivered for s in engine.snapshot().sessions)
        assert wait_for(lambda: sum(s.delivered for s in engine.snapshot().sessions) > n + 10)
    finally:
        engine.stop()


def test_short_files_decode_beside_the_old_ones_without_a_pause():
    engine = running()
    try:
        error = engine.apply(engine.config.with_changes(resolution=(512, 288)))
        assert error is None
        assert not any("in place" in e.message for e in engine.events())
        assert engine.sources[0].source.resolution == (512, 288)
    finally:
        engine.stop()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_cli_says_how_far_decoding_is_on_a_terminal_only(monkeypatch):
    from types import SimpleNamespace

    from batchscope.cli.run import decoding_progress

    engine = SimpleNamespace(progress=None)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with decoding_progress(engine, every_s=0.01):
        engine.progress = "decoding long.mp4 at 512x288: 40%"
        assert wait_for(lambda: "40%" in terminal.getvalue(), 5)
        engine.progress = None
    assert terminal.getvalue().startswith("\rbatchscope: decoding long.mp4 at 512x288: 40%")
    assert terminal.getvalue().endswith("\n")  # the next line starts clean
    plain = io.StringIO()  # a file or a pipe: nothing written
    monkeypatch.setattr(sys, "stderr", plain)
    with decoding_progress(engine, every_s=0.01):
        engine.progress = "decoding long.mp4 at 512x288: 40%"
    assert plain.getvalue() == ""
