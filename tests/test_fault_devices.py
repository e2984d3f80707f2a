"""A slow_device fault names its device (``device = N``) or slows every device (issue 43,
item 13), the same live and in the simulator. On 86228b5 it slowed device 0 only, live
and simulated, while the guide said every batch; ``device`` was an unknown field.
"""

from __future__ import annotations

import pytest

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.report.phrases import fault_phrase
from batchscope.experiment import ExperimentError, Fault, parse_experiment
from batchscope.profiles.profile import load_profile
from batchscope.sim.devices import load_devices, play_devices_experiment
from contract import SMALL_EMULATED, wait_for

FACTOR = 3.0


def _experiment(fault: str, devices: int = 2):
    return parse_experiment(
        f"""
name = "slow"
duration = 8
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
fps = 30
devices = {devices}
router = "pinned"
sessions = 4
policy = "oldest"
[[step]]
at = 2
slow_device = {{{fault}}}
"""
    )


def test_a_slow_device_fault_takes_a_device_and_checks_it():
    named = _experiment(f"factor = {FACTOR:g}, for_s = 4, device = 1")
    assert named.steps[0].faults == (Fault("slow_device", 4.0, factor=FACTOR, device=1),)
    every = _experiment(f"factor = {FACTOR:g}, for_s = 4")
    assert every.steps[0].faults[0].device is None
    with pytest.raises(ExperimentError, match=r"step 1: slow_device: device = 2: no such device"):
        _experiment("factor = 3, for_s = 4, device = 2")
    with pytest.raises(ExperimentError, match=r"device = 'x'"):
        _experiment('factor = 3, for_s = 4, device = "x"')
    # the phrases say which
    assert fault_phrase(named.steps[0].faults[0]) == "device 1 ×3 slower for 4 s"
    assert fault_phrase(every.steps[0].faults[0]) == "every device ×3 slower for 4 s"


@pytest.mark.parametrize("device", [None, 0, 1])
def test_the_simulator_slows_the_device_named_or_every_device(device):
    """Batches of 1 (oldest first): each batch that starts during the fault on a slowed
    device takes FACTOR × its curve's time; on the others, its curve's."""
    named = "" if device is None else f", device = {device}"
    experiment = _experiment(f"factor = {FACTOR:g}, for_s = 4{named}")
    played = play_devices_experiment(experiment, load_devices(["laptop-8gb"] * 2), "pinned")
    one = load_profile("laptop-8gb").curve("fp16", (256, 144)).ms(1) / 1000.0
    for d in (0, 1):
        slowed = device is None or device == d
        during = [end - start for start, n, end, dev, *_ in played.measured
                  if dev == d and 2.0 <= start < 6.0]  # fmt: skip
        outside = [end - start for start, n, end, dev, *_ in played.measured
                   if dev == d and not 2.0 <= start < 6.0 and n == 1]  # fmt: skip
        assert during and outside
        assert during == pytest.approx([one * (FACTOR if slowed else 1.0)] * len(during))
        assert outside == pytest.approx([one] * len(outside))


def test_live_a_slow_device_fault_slows_the_device_named_or_every_device():
    engine = Engine(RunConfig(**SMALL_EMULATED, devices=2, sessions=4, policy="all"))
    engine.open()
    engine.start()
    try:
        assert wait_for(lambda: min(s.delivered for s in engine.snapshot().sessions) > 5)
        workers = engine.workers()
        assert engine.inject(Fault("slow_device", 60.0, factor=2.0)) is None
        assert [w.slowdown for w in workers] == [2.0, 2.0]  # every device
        assert engine.inject(Fault("slow_device", 60.0, factor=FACTOR, device=1)) is None
        assert [w.slowdown for w in workers] == [2.0, 2.0 * FACTOR]  # composed on device 1
        error = engine.inject(Fault("slow_device", 60.0, factor=2.0, device=2))
        assert error is not None and "no device 2" in error
        assert [w.slowdown for w in workers] == [2.0, 2.0 * FACTOR]
        faults = [e.message for e in engine.events() if e.kind == "fault"]
        assert faults == ["every device ×2 slower for 60 s", "device 1 ×3 slower for 60 s"]
        # a device that joins while they are on is slowed as every device is
        assert engine.apply(engine.config.with_changes(devices=3)) is None
        assert [w.slowdown for w in engine.workers()] == [2.0, 2.0 * FACTOR, 2.0]
    finally:
        assert engine.stop(5.0) == []
