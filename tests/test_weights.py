"""Checkpoints load in every layout we accept, and every bad file fails in one clear line."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from batchscope.models.blurball import BlurBall
from batchscope.models.weights import CheckpointError, load_checkpoint


class NotATensor:
    """A class that weights_only loading must refuse to instantiate."""


@pytest.fixture(scope="module")
def trained() -> BlurBall:
    """A model whose weights differ from a fresh one's, so a load is observable."""
    torch.manual_seed(1)
    model = BlurBall()
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.uniform_(-1.0, 1.0)
    return model


def _assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


@pytest.mark.parametrize("layout", ["bare", "model_state_dict", "state_dict", "module_prefix"])
def test_round_trip(tmp_path: Path, trained: BlurBall, layout: str) -> None:
    state = trained.state_dict()
    saved = {
        "bare": state,
        "model_state_dict": {"model_state_dict": state, "epoch": 3},
        "state_dict": {"state_dict": state},
        "module_prefix": {"model_state_dict": {f"module.{k}": v for k, v in state.items()}},
    }[layout]
    path = tmp_path / "ckpt.pt"
    torch.save(saved, path)
    model = BlurBall()
    load_checkpoint(model, str(path))
    _assert_same_state(model, trained)


def _error(model: torch.nn.Module, path: Path) -> str:
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(model, path)
    message = str(caught.value)
    assert str(path) in message
    assert "\n" not in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    assert "not found" in _error(BlurBall(), tmp_path / "absent.pt")


def test_directory(tmp_path: Path) -> None:
    assert "not a file" in _error(BlurBall(), tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.pt"
    path.touch()
    assert "empty" in _error(BlurBall(), path)


def test_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are not weights\n")
    assert "not a torch checkpoint (torch.save writes a zip archive" in _error(BlurBall(), path)


def test_truncated_checkpoint(tmp_path: Path, trained: BlurBall) -> None:
    path = tmp_path / "cut.pt"
    torch.save(trained.state_dict(), path)
    path.write_bytes(path.read_bytes()[:1000])
    assert "not a torch checkpoint or corrupt" in _error(BlurBall(), path)


def test_arbitrary_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "object.pt"
    torch.save({"model_state_dict": NotATensor()}, path)
    message = _error(BlurBall(), path)
    assert "refused by weights_only" in message
    assert "NotATensor" in message


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_plain_pickle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "object.pkl"
    path.write_bytes(pickle.dumps(NotATensor()))
    assert "refused by weights_only" in _error(BlurBall(), path)


def test_not_a_dict_of_tensors(tmp_path: Path) -> None:
    path = tmp_path / "numbers.pt"
    torch.save({"model_state_dict": {"conv1.weight": 1.5}}, path)
    message = _error(BlurBall(), path)
    assert "not a dict of tensors" in message
    assert "conv1.weight" in message


def test_missing_and_unexpected_keys(tmp_path: Path, trained: BlurBall) -> None:
    state = dict(trained.state_dict())
    del state["conv1.weight"]
    state["extra.weight"] = torch.zeros(1)
    path = tmp_path / "keys.pt"
    torch.save(state, path)
    model = BlurBall()
    before = model.conv2.weight.clone()
    message = _error(model, path)
    assert "1 missing keys: conv1.weight" in message
    assert "1 unexpected keys: extra.weight" in message
    assert torch.equal(model.conv2.weight, before), "a failed load must not change the model"


def test_many_missing_keys_are_summarised(tmp_path: Path) -> None:
    path = tmp_path / "partial.pt"
    torch.save({"conv1.weight": torch.zeros(64, 9, 3, 3)}, path)
    assert "463 missing keys: bn1.weight, bn1.bias, bn1.running_mean (+460 more)" in _error(
        BlurBall(), path
    )


def test_wrong_shape(tmp_path: Path, trained: BlurBall) -> None:
    state = dict(trained.state_dict())
    state["final_layers.0.weight"] = torch.zeros(1, 16, 1, 1)
    path = tmp_path / "shape.pt"
    torch.save(state, path)
    message = _error(BlurBall(), path)
    assert "1 shape mismatches" in message
    assert "final_layers.0.weight expected (3, 16, 1, 1) got (1, 16, 1, 1)" in message


def test_numpy_scalars_in_the_metadata_load_with_weights_only(
    tmp_path: Path, trained: BlurBall
) -> None:
    import numpy as np

    path = tmp_path / "trainer.pt"
    torch.save(
        {
            "model_state_dict": trained.state_dict(),
            "epoch": np.int64(30),
            "val_loss": np.float32(0.0123),
            "f1": np.float64(0.91),
        },
        path,
    )
    model = BlurBall()
    load_checkpoint(model, path)
    for key, value in trained.state_dict().items():
        assert torch.equal(model.state_dict()[key], value)


def test_other_numpy_objects_stay_refused(tmp_path: Path, trained: BlurBall) -> None:
    import numpy as np

    path = tmp_path / "array.pt"
    torch.save({"model_state_dict": trained.state_dict(), "hist": np.arange(3)}, path)
    with pytest.raises(CheckpointError, match="refused by weights_only loading"):
        load_checkpoint(BlurBall(), path)


def test_the_error_type_imports_without_torch() -> None:
    import subprocess
    import sys

    code = "import sys, batchscope.models.weights; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False"
