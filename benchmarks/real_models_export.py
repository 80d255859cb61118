"""Export 33 real architectures to ONNX as users export them, for benchmarks/real_models.py.

torchvision classification, segmentation and detection, Hugging Face transformers built from
their default configurations, and timm: full-size architectures with random weights (batch
norm statistics calibrated by a few forward passes in training mode, so no layer's output
collapses), PyTorch's TorchScript exporter at opset 17 with a dynamic batch (and sequence)
axis, the way most user code calls it. Needs torch, torchvision, timm and transformers; run
with such a Python (on x86_64 here: ``pip install torch==2.14.1 torchvision==0.29.1 timm
transformers onnx``):

    python benchmarks/real_models_export.py OUTPUT_DIR [NAME ...]

Writes ``OUTPUT_DIR/<name>.onnx`` and ``OUTPUT_DIR/<name>.json`` (family, input shapes); a
model whose export fails gets ``<name>.error`` with the exporter's message instead.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
torch.manual_seed(0)

IMAGE = (1, 3, 224, 224)


def _tv(name, shape=IMAGE, **kwargs):
    def build():
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kwargs), shape
    return build


def _tv_segmentation(name, shape=(1, 3, 256, 256)):
    class Out(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)["out"]

    def build():
        import torchvision

        model = getattr(torchvision.models.segmentation, name)(weights=None,
                                                               weights_backbone=None)
        return Out(model), shape
    return build


def _tv_detection(name, shape=(1, 3, 320, 320)):
    class Out(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            result = self.inner(list(x))[0]
            return result["boxes"], result["scores"], result["labels"]

    def build():
        import torchvision

        # the ten best detections: with random weights thousands of candidates score about
        # the same, and which of them fill a long list hangs on the last bit of float
        # rounding (onnxruntime disagrees with itself there, optimizations on against off);
        # logits 12 times larger spread the scores as a trained model's are
        model = getattr(torchvision.models.detection, name)(weights=None,
                                                            weights_backbone=None,
                                                            detections_per_img=10)
        with torch.no_grad():
            for key, parameter in model.named_parameters():
                if any(part in key for part in ("classification_head", "cls_logits",
                                                "cls_score")):
                    parameter.mul_(12.0)
        return Out(model), shape
    return build


class _HuggingFace(torch.nn.Module):
    """A transformers model called with one keyword input, giving its main output tensor."""

    def __init__(self, inner, key):
        super().__init__()
        self.inner, self.key = inner, key

    def forward(self, x):
        out = self.inner(**{self.key: x})
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _hf(config_name, model_name, key, shape, dtype=torch.float32, encoder=False):
    def build():
        import transformers

        config = getattr(transformers, config_name)()
        model = getattr(transformers, model_name)(config)
        if encoder:
            model = model.get_encoder()
        return _HuggingFace(model, key), (shape, dtype)
    return build


def _timm(name, shape=IMAGE):
    def build():
        import timm

        return timm.create_model(name, pretrained=False), shape
    return build


TOKENS = (1, 128)
#: name -> (family, builder returning (module, input shape or (shape, dtype)))
MODELS = {
    "resnet18": ("torchvision", _tv("resnet18")),
    "resnet50": ("torchvision", _tv("resnet50")),
    "mobilenet_v2": ("torchvision", _tv("mobilenet_v2")),
    "mobilenet_v3_large": ("torchvision", _tv("mobilenet_v3_large")),
    "efficientnet_b0": ("torchvision", _tv("efficientnet_b0")),
    "squeezenet1_1": ("torchvision", _tv("squeezenet1_1")),
    "shufflenet_v2_x1_0": ("torchvision", _tv("shufflenet_v2_x1_0")),
    "densenet121": ("torchvision", _tv("densenet121")),
    "inception_v3": ("torchvision", _tv("inception_v3", (1, 3, 299, 299), aux_logits=False,
                                        init_weights=True)),
    "googlenet": ("torchvision", _tv("googlenet", aux_logits=False, init_weights=True)),
    "regnet_y_400mf": ("torchvision", _tv("regnet_y_400mf")),
    "convnext_tiny": ("torchvision", _tv("convnext_tiny")),
    "vit_b_16": ("torchvision", _tv("vit_b_16")),
    "swin_t": ("torchvision", _tv("swin_t")),
    "maxvit_t": ("torchvision", _tv("maxvit_t")),
    "fcn_resnet50": ("torchvision segmentation", _tv_segmentation("fcn_resnet50")),
    "deeplabv3_mobilenet_v3_large": ("torchvision segmentation",
                                     _tv_segmentation("deeplabv3_mobilenet_v3_large")),
    "lraspp_mobilenet_v3_large": ("torchvision segmentation",
                                  _tv_segmentation("lraspp_mobilenet_v3_large")),
    "ssdlite320_mobilenet_v3_large": ("torchvision detection",
                                      _tv_detection("ssdlite320_mobilenet_v3_large")),
    "fasterrcnn_mobilenet_v3_large_320_fpn": (
        "torchvision detection", _tv_detection("fasterrcnn_mobilenet_v3_large_320_fpn")),
    "bert": ("Hugging Face", _hf("BertConfig", "BertModel", "input_ids", TOKENS, torch.int64)),
    "distilbert": ("Hugging Face", _hf("DistilBertConfig", "DistilBertModel", "input_ids",
                                       TOKENS, torch.int64)),
    "gpt2": ("Hugging Face", _hf("GPT2Config", "GPT2Model", "input_ids", TOKENS, torch.int64)),
    "hf_vit": ("Hugging Face", _hf("ViTConfig", "ViTModel", "pixel_values", IMAGE)),
    "hf_swin": ("Hugging Face", _hf("SwinConfig", "SwinModel", "pixel_values", IMAGE)),
    "hf_mobilevit": ("Hugging Face", _hf("MobileViTConfig", "MobileViTModel", "pixel_values",
                                         (1, 3, 256, 256))),
    "wav2vec2": ("Hugging Face", _hf("Wav2Vec2Config", "Wav2Vec2Model", "input_values",
                                     (1, 16000))),
    "whisper_encoder": ("Hugging Face", _hf("WhisperConfig", "WhisperModel", "input_features",
                                            (1, 80, 3000), encoder=True)),
    "rexnet_100": ("timm", _timm("rexnet_100")),
    "efficientformer_l1": ("timm", _timm("efficientformer_l1")),
    "levit_128s": ("timm", _timm("levit_128s")),
    "mixer_b16_224": ("timm", _timm("mixer_b16_224")),
    "ghostnet_100": ("timm", _timm("ghostnet_100")),
}


def _random_input(shape, dtype):
    if dtype == torch.int64:
        return torch.randint(0, 1000, shape)
    return torch.randn(shape)


def _calibrate(model, x) -> None:
    """Batch-norm statistics from a few forward passes on random inputs (random weights leave
    them at 0 / 1: deep nets' activations then grow or vanish layer after layer)."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms or not x.dtype.is_floating_point:
        return
    model.eval()
    for norm in norms:  # only the statistics learn (a detector in training mode wants targets)
        norm.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.cat([x, _random_input(tuple(x.shape), x.dtype)]))


def export(name: str, directory: Path) -> None:
    family, build = MODELS[name]
    model, shape = build()
    shape, dtype = shape if isinstance(shape[0], tuple) else (shape, torch.float32)
    x = _random_input(shape, dtype)
    with torch.no_grad():  # zero-initialized layers (a classifier head, as torchvision's ViT
        for parameter in model.parameters():  # and timm's Mixer have) would make the output
            if parameter.dim() >= 2 and not parameter.any():  # constant: redrawn
                parameter.normal_(0.0, 0.02)
    _calibrate(model, x)
    model.eval()
    axes = {0: "batch"} if len(shape) != 2 or dtype != torch.int64 else {0: "batch", 1: "tokens"}
    # with gradients on, as a plain call is (under no_grad, nn.MultiheadAttention takes a
    # fused fast path the exporter cannot write: torchvision's ViT)
    torch.onnx.export(model, (x,), str(directory / f"{name}.onnx"), opset_version=17,
                      input_names=["input"], dynamic_axes={"input": axes}, dynamo=False)
    (directory / f"{name}.json").write_text(json.dumps(
        {"family": family, "input_shape": list(shape), "dtype": str(dtype).split(".")[-1]}))


def main() -> None:
    directory = Path(sys.argv[1])
    directory.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or list(MODELS):
        if (directory / f"{name}.onnx").exists():
            continue
        try:
            export(name, directory)
            print(f"exported {name}", flush=True)
        except Exception:  # noqa: BLE001 - the table names the model and the exporter's error
            (directory / f"{name}.error").write_text(traceback.format_exc()[-2000:])
            print(f"export failed: {name}", flush=True)


if __name__ == "__main__":
    main()
