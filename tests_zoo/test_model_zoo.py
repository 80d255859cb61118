"""The model zoo (#32), run by tox's ``zoo`` environment (torch and transformers installed):
architectures users bring, built with random weights (``benchmarks/zoo_export.py``: BERT,
DistilBERT, GPT-2, ViT, Swin, MobileViT, a ShuffleNetV2 unit, a ResNet-style CNN, an
FCN-style segmentation net; small configurations), exported as users export them (opset 17,
dynamic batch / token axes), each compiled for the host at a fixed input shape and verified
against onnxruntime, then compiled for every installed target and verified wherever the
target offloads something (the offloaded share printed; ``pytest -s`` shows it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import edgebyoc
from edgebyoc.errors import EdgebyocError
from edgebyoc.plugins import default_registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import zoo_export  # noqa: E402

ARCHITECTURES = {name: (module, example, input_name)
                 for name, module, example, input_name in zoo_export.architectures()}

#: options a target needs to run on this machine: TensorRT's engines need the TensorRT
#: package and a GPU, so the same graphs run through onnxruntime (the plugin's own route)
RUN_HERE = {"tensorrt": {"runtime": "onnxruntime"}}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zoo")
    torch.manual_seed(0)
    return {name: (zoo_export.export(name, module, example, key, folder),
                   {key: list(example.shape)})
            for name, (module, example, key) in ARCHITECTURES.items()}


def installed_targets() -> list[str]:
    registry = default_registry()
    return sorted(t for t in registry.target_names() if t != "host")


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_it_verifies_on_the_host_and_on_every_target_that_takes_part_of_it(exported, name):
    path, shapes = exported[name]
    compiled = edgebyoc.compile(path, input_shapes=shapes, progress=False)
    result, _ = edgebyoc.verify(compiled, seed=0)
    assert result.passed, result.outputs
    assert result.reference.startswith("onnxruntime")
    for target in installed_targets():
        try:
            ours = edgebyoc.compile(path, target=target, options=RUN_HERE.get(target),
                                    input_shapes=shapes, progress=False)
        except EdgebyocError as err:  # a target that refuses the model says why, in one line
            message = str(err)
            assert "Traceback" not in message and message.strip(), message
            print(f"{name} on {target}: refused: {message.splitlines()[0][:160]}")
            continue
        summary = ours.report["summary"]
        offloaded = summary.get("offloaded_operators", 0)
        print(f"{name} on {target}: {offloaded} of {summary.get('operators', '?')} operators "
              f"offloaded")
        if offloaded:
            verdict, _ = edgebyoc.verify(ours, seed=0)
            assert verdict.passed, (target, verdict.outputs)
