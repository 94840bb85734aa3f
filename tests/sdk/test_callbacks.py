"""The framework callbacks without their frameworks: each module says once, clearly, that its
framework is missing; the Keras callback (this repository's tests install no Keras backend) is
driven through Keras's documented callback sequence (``set_model``, ``set_params``,
``on_train_begin``, per epoch ``on_epoch_begin``, per batch ``on_train_batch_end(batch,
logs)``, ``on_train_end``) with a stand-in model of NumPy arrays. The Lightning and Hugging
Face callbacks run on their real frameworks in test_lightning_live.py and test_hf_live.py."""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import numpy
import pytest

from specon.sdk import REQUEST_FILE, Reporter
from specon.sdk.callbacks._keras import ArrayCheckpointer, build


@pytest.mark.parametrize(("module", "framework"), [("lightning", "Lightning"),
                                                    ("keras", "Keras"),
                                                    ("hf", "Hugging Face")])
def test_a_missing_framework_is_one_clear_import_error(module: str, framework: str) -> None:
    needs = {"lightning": ("pytorch_lightning", "lightning"), "keras": ("keras", "tensorflow"),
             "hf": ("transformers",)}[module]
    if any(importlib.util.find_spec(n) is not None for n in needs):
        pytest.skip(f"{needs[0]} is installed here")
    with pytest.raises(ImportError, match=f"the {framework} callback needs"):
        importlib.import_module(f"specon.sdk.callbacks.{module}")


class KerasStandIn:
    """Stands in for ``keras.callbacks.Callback``: what Keras sets on every callback."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.model: Any = None

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def set_model(self, model: Any) -> None:
        self.model = model

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):  # Keras's Callback: every hook, doing nothing
            return lambda *args, **kwargs: None
        raise AttributeError(name)


class Variable:
    def __init__(self, value: numpy.ndarray) -> None:
        self.value = value

    def assign(self, value: Any) -> None:
        self.value = numpy.array(value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> numpy.ndarray:
        return self.value


class Model:
    """A stand-in Keras model: weights and optimizer variables as NumPy arrays."""

    def __init__(self, seed: int) -> None:
        rng = numpy.random.default_rng(seed)
        self.weights = [rng.normal(size=(8, 4)).astype("float32"), numpy.zeros(4, "float32")]
        self.optimizer = type("Optimizer", (), {})()
        self.optimizer.variables = [Variable(numpy.array(0, "int64")),
                                    Variable(rng.normal(size=(8, 4)).astype("float32"))]
        self.trainable_variables = self.weights

    def get_weights(self) -> list[numpy.ndarray]:
        return [w.copy() for w in self.weights]

    def set_weights(self, weights: list[numpy.ndarray]) -> None:
        self.weights = [numpy.array(w) for w in weights]


def fit(callback: Any, model: Model, epochs: int, steps: int, initial_epoch: int = 0) -> None:
    """What ``model.fit`` does with a callback, in Keras's order."""
    callback.set_model(model)
    callback.set_params({"verbose": 0, "epochs": epochs, "steps": steps})
    callback.on_train_begin()
    for epoch in range(initial_epoch, epochs):
        callback.on_epoch_begin(epoch)
        for batch in range(steps):
            model.weights[0] += 0.01  # a training step
            model.optimizer.variables[0].value += 1
            loss = 1.0 / (1 + epoch * steps + batch)
            callback.on_train_batch_end(batch, {"loss": numpy.float32(loss), "accuracy": 0.5})
        callback.on_epoch_end(epoch, {})
    callback.on_train_end()


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(x) for x in out.getvalue().splitlines()]


def test_keras_reports_every_batch_with_its_global_step_and_total() -> None:
    out = io.StringIO()
    callback = build(KerasStandIn)(reporter=Reporter(None, out), checkpoint=False)
    fit(callback, Model(0), epochs=3, steps=4)
    records = lines(out)
    assert [r["step"] for r in records] == list(range(1, 13))
    assert records[5]["loss"] == pytest.approx(1 / 6)
    assert {r["metrics"]["total_steps"] for r in records} == {12}
    assert [r["metrics"]["epoch"] for r in records[3:5]] == [0, 1]


def test_keras_saves_on_request_exits_143_and_resumes(tmp_path: Path) -> None:
    out = io.StringIO()
    cls = build(KerasStandIn)
    first = cls(reporter=Reporter(None, out), checkpoint=False)
    first.checkpointer = ArrayCheckpointer(tmp_path, handle_sigterm=False, reporter=first.reporter)
    model = Model(1)
    (tmp_path / REQUEST_FILE).write_text(json.dumps({"id": "r1", "exit": True}))
    with pytest.raises(SystemExit) as stopped:
        fit(first, model, epochs=3, steps=4)
    assert stopped.value.code == 143
    assert [e["event"] for e in lines(out)] == ["progress", "checkpoint", "stop"]

    second = cls(reporter=Reporter(None, out), checkpoint=False)
    second.checkpointer = ArrayCheckpointer(tmp_path, handle_sigterm=False,
                                            reporter=second.reporter)
    fresh = Model(2)
    assert not numpy.array_equal(fresh.weights[0], model.weights[0])
    initial = second.resume(fresh)
    assert initial == 0 and second.step == 1
    for got, saved in zip(fresh.weights, model.weights, strict=True):
        assert got.dtype == saved.dtype and numpy.array_equal(got, saved)
    for got, saved in zip(fresh.optimizer.variables, model.optimizer.variables, strict=True):
        assert numpy.array_equal(numpy.asarray(got), numpy.asarray(saved))
    fit(second, fresh, epochs=3, steps=4, initial_epoch=initial)
    steps = [e["step"] for e in lines(out) if e["event"] == "progress"]
    assert steps == [1, *range(2, 14)]  # the interrupted epoch runs again, counting on
