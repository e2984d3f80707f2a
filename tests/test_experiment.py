"""Experiment files: the format (a contract) and one-line errors naming file, step, field."""

from __future__ import annotations

import pytest

from batchscope.experiment import (
    ExperimentError,
    list_experiments,
    load_experiment,
    parse_experiment,
)

GOOD = """
name = "two-steps"
caption = "a caption"
duration = 20
[base]
backend = "emulated"
profile = "laptop-8gb"
resolution = "256x144"
fps = 30
sources = ["synthetic"]
[[step]]
at = 0
sessions = 3
policy = "oldest"
[[step]]
at = 10
sessions = 6
max_batch = 4
policy = "dynamic"
caption = "six"
"""


def test_a_good_file_gives_each_steps_config():
    e = parse_experiment(GOOD, "two.toml")
    assert (e.name, e.caption, e.duration) == ("two-steps", "a caption", 20.0)
    assert e.base.resolution == (256, 144) and e.base.sources == ("synthetic",)
    assert e.base.fps == 30.0 and isinstance(e.base.fps, float)
    assert [s.at for s in e.steps] == [0.0, 10.0]
    assert e.steps[1].changes == {"sessions": 6, "max_batch": 4, "policy": "dynamic"}
    assert e.steps[1].caption == "six"
    assert (e.config_at(0).sessions, e.config_at(0).policy) == (3, "oldest")
    assert (e.config_at(1).sessions, e.config_at(1).max_batch) == (6, 4)
    assert e.config_at(1).resolution == (256, 144)  # carried from the base
    assert e.text == GOOD


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("duration = 5\n[[step]]\nat = 6\nsessions = 2", "bad.toml: step 1: at = 6: past"),
        (
            "duration = 5\n[[step]]\nat = 1\nsesions = 2",
            "bad.toml: step 1: unknown field 'sesions'",
        ),
        ("duration = 5\n[[step]]\nat = 2\n[[step]]\nat = 1", "step 2: at = 1: steps must come"),
        ("duration = 5\n[[step]]\nat = 2\n[[step]]\nat = 2", "step 2: at = 2: steps must come"),
        ("duration = 5\n[base]\nsessions = 0", "[base]: sessions = 0: must be at least 1"),
        ("duration = 5\n[[step]]\nat = 1\nfps = 5000", "step 1: fps = 5000.0: must be"),
        ("duration = 5\n[[step]]\nat = 1\npolicy = 'fastest'", "step 1: policy = 'fastest'"),
        ("duration = 5\n[[step]]\nat = 1\nresolution = '500x300'", "step 1: resolution"),
        ("duration = 5\n[[step]]\nat = 1\nchannels_last = 1", "channels_last = 1: must be true"),
        ("duration = 5\nspeed = 1", "bad.toml: unknown key 'speed'"),
        ("[base]\nsessions = 2", "bad.toml: duration is missing"),
        ("duration = -3", "duration = -3: must be a positive"),
        ("duration = 5\n[[step]]\nsessions = 2", "step 1: at = None"),
        ("duration = [", "bad.toml: not valid TOML"),
    ],
)
def test_bad_files_are_one_line_naming_file_step_and_field(text, message):
    with pytest.raises(ExperimentError) as exc:
        parse_experiment(text, "bad.toml")
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_unknown_names_and_missing_files_say_what_there_is(tmp_path):
    with pytest.raises(ExperimentError, match="no such experiment or file; built-in"):
        load_experiment("no-such-experiment")
    with pytest.raises(ExperimentError, match=r"missing\.toml: no such file"):
        load_experiment(str(tmp_path / "missing.toml"))
    (tmp_path / "latin1.toml").write_bytes(b"name = '\xe9'\n")
    with pytest.raises(ExperimentError, match="not UTF-8"):
        load_experiment(str(tmp_path / "latin1.toml"))


def test_every_built_in_experiment_loads():
    found = {
        kind_exp[1].name: kind_exp[1]
        for kind_exp in list_experiments()
        if not isinstance(kind_exp[1], ExperimentError)
    }
    spoiled = [e for _, e in list_experiments() if isinstance(e, ExperimentError)]
    assert spoiled == []
    assert {
        "bus-or-taxi",
        "starvation",
        "small-inputs",
        "adaptive-budget",
        "round-robin",
        "noisy-neighbour",
        "camera-stalls",
        "client-burst",
    } <= set(found)
    assert all(e.caption and e.steps for e in found.values())


def test_a_user_experiment_is_found_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    folder = tmp_path / "batchscope" / "experiments"
    folder.mkdir(parents=True)
    (folder / "mine.toml").write_text(GOOD)
    assert load_experiment("mine").name == "two-steps"
    assert ("user", "two-steps") in [(k, getattr(e, "name", "")) for k, e in list_experiments()]
