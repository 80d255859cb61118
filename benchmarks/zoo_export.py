"""Export the model zoo's architectures to ONNX (opset 17, PyTorch's TorchScript exporter, as
users run it): small configurations with random weights, from the packages installed (torch,
transformers). Run by benchmarks/model_zoo.py with a Python that has them.

Run: python benchmarks/zoo_export.py OUTPUT_DIR
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")


class Unwrap(torch.nn.Module):
    """A Hugging Face model called with one keyword input, giving its main output tensor."""

    def __init__(self, inner, key):
        super().__init__()
        self.inner, self.key = inner.eval(), key

    def forward(self, x):
        out = self.inner(**{self.key: x})
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits


class ShuffleUnit(torch.nn.Module):
    """ShuffleNetV2's stride-1 unit as torchvision writes it (split, branch, concat, channel
    shuffle through x.size())."""

    def __init__(self, c=16):
        super().__init__()
        h = c // 2
        nn = torch.nn
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.branch = nn.Sequential(nn.Conv2d(h, h, 1), nn.BatchNorm2d(h), nn.ReLU(),
                                    nn.Conv2d(h, h, 3, padding=1, groups=h), nn.BatchNorm2d(h),
                                    nn.Conv2d(h, h, 1), nn.ReLU())

    def forward(self, x):
        x = self.stem(x)
        a, b = x.chunk(2, dim=1)
        out = torch.cat((a, self.branch(b)), dim=1)
        batch, channels, height, width = out.size()
        out = out.view(batch, 2, channels // 2, height, width).transpose(1, 2).contiguous()
        return out.view(batch, -1, height, width).mean((2, 3))


class SmallCNN(torch.nn.Module):
    """A ResNet-style classifier: stem, a residual block with batch norm, a strided
    depthwise-separable block, global pooling and a linear head."""

    def __init__(self, c=16, classes=10):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
                                   nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))
        self.down = nn.Sequential(nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c),
                                  nn.Conv2d(c, 2 * c, 1), nn.ReLU6())
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(self.down(x).mean((2, 3)))


class SmallFCN(torch.nn.Module):
    """A segmentation net as FCN / DeepLab heads are built: a strided encoder, a 3x3 head and
    a bilinear upsampling back to the input's size (read from the input, as torchvision's
    segmentation models do)."""

    def __init__(self, c=16, classes=5):
        super().__init__()
        nn = torch.nn
        self.encoder = nn.Sequential(nn.Conv2d(3, c, 3, stride=2, padding=1), nn.ReLU(),
                                     nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.BatchNorm2d(c),
                                  nn.ReLU(), nn.Conv2d(c, classes, 1))

    def forward(self, x):
        y = self.head(self.encoder(x))
        return torch.nn.functional.interpolate(y, size=x.shape[-2:], mode="bilinear",
                                               align_corners=False)


def architectures():
    """(name, module, example input, input name)."""
    import transformers as tf

    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128)
    ids = torch.randint(0, 100, (1, 16))
    image = torch.randn(1, 3, 64, 64)
    yield "bert", Unwrap(tf.BertModel(tf.BertConfig(**small, vocab_size=100,
                                                    max_position_embeddings=64)),
                         "input_ids"), ids, "input_ids"
    yield "distilbert", Unwrap(tf.DistilBertModel(tf.DistilBertConfig(
        dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=100,
        max_position_embeddings=64)), "input_ids"), ids, "input_ids"
    yield "gpt2", Unwrap(tf.GPT2Model(tf.GPT2Config(n_embd=64, n_layer=2, n_head=4,
                                                    vocab_size=100, n_positions=64)),
                         "input_ids"), ids, "input_ids"
    yield "vit", Unwrap(tf.ViTModel(tf.ViTConfig(**small, image_size=64, patch_size=16)),
                        "pixel_values"), image, "pixel_values"
    yield "swin", Unwrap(tf.SwinModel(tf.SwinConfig(image_size=64, patch_size=4, embed_dim=24,
                                                    depths=[1, 1], num_heads=[2, 2],
                                                    window_size=4)),
                         "pixel_values"), image, "pixel_values"
    yield "mobilevit", Unwrap(tf.MobileViTModel(tf.MobileViTConfig(
        image_size=64, hidden_sizes=[32, 48, 64],
        neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 80])), "pixel_values"), image, "pixel_values"
    yield "shufflenet_unit", ShuffleUnit(), torch.randn(1, 3, 32, 32), "x"
    yield "small_cnn", SmallCNN(), torch.randn(1, 3, 32, 32), "x"
    yield "small_fcn", SmallFCN(), torch.randn(1, 3, 32, 32), "x"


def randomize(module: torch.nn.Module) -> torch.nn.Module:
    """Every parameter drawn anew (N(0, 0.1); norm scales around 1): a fresh model's zero
    biases and unit norms can make an output constant (MobileViT's is all zeros), which no
    comparison would test."""
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            parameter.normal_(1.0 if name.endswith(("norm.weight", "bn.weight", "ln.weight"))
                              else 0.0, 0.1)
    return module


def export(name: str, module: torch.nn.Module, example: torch.Tensor, input_name: str,
           output: Path) -> Path:
    """``module`` with fresh random weights as ``output/<name>.onnx``, the way users export:
    opset 17, TorchScript exporter, dynamic batch (and token) axes, so the shapes become
    computations in the graph."""
    module = randomize(module)
    axes = {input_name: {0: "batch"} if example.dim() == 4 else {0: "batch", 1: "tokens"}}
    path = output / f"{name}.onnx"
    torch.onnx.export(module.eval(), (example,), path, input_names=[input_name],
                      output_names=["y"], opset_version=17, dynamo=False, dynamic_axes=axes)
    return path


def main(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for name, module, example, input_name in architectures():
        export(name, module, example, input_name, output)
        print(f"{name} {input_name}={','.join(str(d) for d in example.shape)}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
