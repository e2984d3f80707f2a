"""The HTML report: self-contained, every user-controlled text escaped, plots as data URIs."""

from __future__ import annotations

import base64
from html.parser import HTMLParser
from pathlib import Path

import pytest

from batchscope.cli import main
from batchscope.experiment import load_experiment
from batchscope.render.page import build_html
from batchscope.sim.simulated_experiment import simulate_experiment

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"

HOSTILE = f'''name = "{IMG}"
caption = "{SCRIPT}"
duration = 6
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "512x288"
fps = 30
[[step]]
at = 0
sessions = 3
policy = "oldest"
caption = "{IMG} & {SCRIPT}"
[[step]]
at = 3
resolution = "1024x576"
caption = "\\"quoted\\" 'single' {SCRIPT}"
'''


class Markup(HTMLParser):
    """Every tag and attribute, as a browser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(k, v or "") for k, v in attrs]


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    path = tmp_path / "<b onmouseover=x>evil.toml"
    path.write_text(HOSTILE)
    return path


def parse(text: str) -> Markup:
    markup = Markup()
    markup.feed(text)
    return markup


def test_user_text_is_escaped_and_nothing_runs_or_loads(hostile):
    experiment = load_experiment(str(hostile))
    report = simulate_experiment(experiment)
    report["experiment"] = {
        "name": experiment.name,
        "caption": experiment.caption,
        "duration": experiment.duration,
        "source": experiment.source,
        "text": experiment.text,
    }
    report["events"] = [{"t": 1.0, "kind": "error", "message": f"bad {IMG}"}]
    text = build_html(report)
    markup = parse(text)
    assert "script" not in markup.tags
    assert not [k for k, _ in markup.attrs if k.startswith("on")]
    assert markup.tags.count("img") >= 2 + 2 * len(report["segments"])  # summary + per segment
    for key, value in markup.attrs:
        if key in ("src", "href"):
            assert value.startswith("data:image/png;base64,"), value[:40]
            assert "http" not in value[:40]
    assert "<script" not in text.lower() and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "&lt;b onmouseover=x&gt;evil.toml" in text  # the file name
    assert "&quot;quoted&quot; &#x27;single&#x27;" in text  # the TOML text and the caption
    assert "1024x576" in text and "Not applied" in text  # the failed step's error
    assert "<style>" in text and "@import" not in text and "url(" not in text


def test_plots_are_png_images(hostile):
    report = simulate_experiment(load_experiment(str(hostile)))
    markup = parse(build_html(report))
    images = [v for k, v in markup.attrs if k == "src"]
    assert images
    for src in images:
        png = base64.b64decode(src.removeprefix("data:image/png;base64,"))
        assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_experiment_writes_the_report(tmp_path, capsys):
    out = tmp_path / "bus.html"
    assert main(["simulate", "--experiment", "bus-or-taxi", "--report", str(out)]) == 0
    assert f"report written to {out}" in capsys.readouterr().out
    text = out.read_text()
    assert "BatchScope report: bus-or-taxi" in text
    assert "6 sessions want 180 windows/s" in text
    for fact in ("laptop-8gb", "fp16", "512x288", "batchscope 0.1.0", "torch", "python"):
        assert fact in text
    assert "[[step]]" in text  # the experiment file itself


def test_an_unwritable_report_is_one_line(tmp_path, capsys):
    target = tmp_path / "missing" / "r.html"
    code = main(["simulate", "--experiment", "bus-or-taxi", "--report", str(target)])
    err = capsys.readouterr().err
    # refused before the simulations run (issue 44): the flag, the path, the reason
    assert code == 2 and err.strip() == (
        f"batchscope: error: --report {target}: the folder {target.parent} does not exist"
    )
