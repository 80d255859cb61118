"""Running adreno kernels through pyopencl on the first OpenCL device (PoCL here, a phone's GPU
there).

``opencl_missing()`` says why nothing can run (no pyopencl, no platform, no device without
image support); ``Device`` holds the context and queue, created once per process; ``KernelRun``
is one compiled kernel with its argument roles: it builds the program once, uploads constant
operands once (the first call) and, per call, packs the texture inputs (``TextureLayout.image``),
launches and reads the output back. ``load_region`` is the plugin's ``RuntimeLoader``: the blob
of a region (``blob_payload``) back into a callable.
"""

from __future__ import annotations

import functools
import json
import zlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .kernels import Config, Epilogue, Kernel, RowReduction, Conv2D, MatMul, launch

INSTALL_HINT = "install pocl-opencl-icd (Debian) and pyopencl"

_KINDS = {"Conv2D": Conv2D, "MatMul": MatMul, "RowReduction": RowReduction}


def kernel_to_dict(kernel: Kernel) -> dict[str, Any]:
    """A kernel description as JSON-ready values (``kernel_from_dict`` reverses it)."""
    fields = {name: getattr(kernel, name) for name in kernel.__dataclass_fields__}
    fields["epilogue"] = dict(vars(kernel.epilogue))
    return {"type": type(kernel).__name__,
            "fields": {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}


def kernel_from_dict(data: Mapping[str, Any]) -> Kernel:
    cls = _KINDS[data["type"]]
    fields = dict(data["fields"])
    fields["epilogue"] = Epilogue(**fields["epilogue"])
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def opencl_missing() -> str | None:
    """Why no OpenCL kernel can run here (``None``: a device with image support exists)."""
    try:
        import pyopencl as cl
    except ImportError:
        return f"pyopencl is not installed ({INSTALL_HINT})"
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        return f"no OpenCL platform ({INSTALL_HINT})"
    if not any(d.image_support for d in devices):
        return "no OpenCL device supports images"
    return None


class Device:
    """The first OpenCL device with image support, its context and an in-order queue."""

    def __init__(self):
        import pyopencl as cl

        reason = opencl_missing()
        if reason:
            raise RuntimeError(f"adreno: cannot run OpenCL kernels: {reason}")
        self.cl = cl
        self.device = next(d for p in cl.get_platforms() for d in p.get_devices()
                           if d.image_support)
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.image_format = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)

    @property
    def name(self) -> str:
        return f"{self.device.platform.name} / {self.device.name}"

    @property
    def has_fp16(self) -> bool:
        return "cl_khr_fp16" in self.device.extensions

    @property
    def max_image(self) -> tuple[int, int]:
        return self.device.image2d_max_height, self.device.image2d_max_width

    def build(self, source: str):
        """The program of ``source``, compiled once per device and source."""
        return _build(self, source)

    def image(self, texels: np.ndarray):
        """A read-only image2d of float4 texels from ``[height][width][4]`` float32."""
        cl = self.cl
        texels = np.ascontiguousarray(texels, np.float32)
        height, width = texels.shape[:2]
        return cl.create_image(self.context,
                               cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                               self.image_format, shape=(width, height), hostbuf=texels)

    def buffer(self, array: np.ndarray):
        cl = self.cl
        array = np.ascontiguousarray(array, np.float32)
        if array.size == 0:
            array = np.zeros(1, np.float32)
        return cl.Buffer(self.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=array)


@functools.lru_cache(maxsize=None)
def device() -> Device:
    """The process's OpenCL device (created on first use)."""
    return Device()


@functools.lru_cache(maxsize=512)
def _build(dev: Device, source: str):
    return dev.cl.Program(dev.context, source).build()


@dataclass(frozen=True)
class Argument:
    """One argument of a region as the kernel takes it: ``role`` is ``texture`` (the kernel's
    ``index``-th texture input), ``buffer`` (bias, gamma, beta) or ``image`` (a constant already
    laid out as a texture at compile time); ``constant`` ones are uploaded once."""

    role: str
    index: int
    constant: bool


class KernelRun:
    """One kernel of one configuration, ready to run (see the module docstring)."""

    def __init__(self, kernel: Kernel, config: Config, source: str, name: str,
                 arguments: Sequence[Argument], dev: Device | None = None):
        self.kernel, self.config, self.arguments = kernel, config, tuple(arguments)
        self.dev = dev or device()
        self.function = getattr(self.dev.build(source), name)
        self.global_size, self.local_size = launch(kernel, config)
        self.layouts = [item.layout(p) for item, p in zip(kernel.inputs, config.patterns)]
        self._constants: dict[int, Any] = {}
        self.last_seconds = 0.0

    def _memory(self, position: int, argument: Argument, value: np.ndarray):
        if argument.constant and position in self._constants:
            return self._constants[position]
        if argument.role == "image":
            memory = self.dev.image(value)
        elif argument.role == "texture":
            item = self.kernel.inputs[argument.index]
            memory = self.dev.image(self.layouts[argument.index].image(item.texels(value)))
        else:
            memory = self.dev.buffer(value)
        if argument.constant:
            self._constants[position] = memory
        return memory

    def __call__(self, *values: np.ndarray) -> np.ndarray:
        cl = self.dev.cl
        if len(values) != len(self.arguments):
            raise ValueError(f"{self.kernel.name}: {len(values)} arguments, expected "
                             f"{len(self.arguments)}")
        memories = {a.role + str(a.index): self._memory(i, a, v)
                    for i, (a, v) in enumerate(zip(self.arguments, values))}
        textures = [memories.get(f"texture{i}", memories.get(f"image{i}"))
                    for i in range(len(self.kernel.inputs))]
        buffers = [memories[f"buffer{i}"] for i in range(len(memories) - len(textures))]
        if not buffers and self.kernel.op != "rows":
            buffers = [self.dev.buffer(np.zeros(1, np.float32))]  # the unused bias pointer
        out = np.empty(self.kernel.output_shape, np.float32)
        out_buffer = cl.Buffer(self.dev.context, cl.mem_flags.WRITE_ONLY, out.nbytes)
        event = self.function(self.dev.queue, self.global_size, self.local_size,
                              *textures, *buffers, out_buffer)
        cl.enqueue_copy(self.dev.queue, out, out_buffer, wait_for=[event])
        self.last_seconds = (event.profile.end - event.profile.start) * 1e-9
        return out


def blob_payload(kernel: Kernel, config: Config, source: str, name: str,
                 arguments: Sequence[Argument], extra: Mapping[str, Any] | None = None
                 ) -> bytes:
    """A region's blob: zlib-compressed JSON of the kernel, its configuration, OpenCL source,
    entry name, launch geometry and argument roles (plus ``extra``: the fp16 variant, the
    cost model's figures)."""
    global_size, local_size = launch(kernel, config)
    data = {"format": "edgebyoc-adreno/1", "kernel": kernel_to_dict(kernel),
            "config": config.to_dict(), "source": source, "entry": name,
            "global_size": list(global_size), "local_size": list(local_size),
            "arguments": [vars(a) for a in arguments], **(extra or {})}
    return zlib.compress(json.dumps(data, sort_keys=True).encode())


def read_blob(blob: bytes) -> dict[str, Any]:
    """The region description in a blob (``ValueError`` when it is not one of ours)."""
    try:
        data = json.loads(zlib.decompress(blob).decode())
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not an edgebyoc-adreno region blob ({err})") from err
    if not isinstance(data, dict) or data.get("format") != "edgebyoc-adreno/1":
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"not an edgebyoc-adreno region blob (format {found!r})")
    return data


def load_region(blob: bytes, constants: Mapping[str, Any]) -> KernelRun:  # noqa: ARG001
    """The ``adreno.opencl`` RuntimeLoader: the region's program is built here, once per load;
    its constants arrive with the first call (they are the region's constant arguments) and
    stay on the device."""
    data = read_blob(blob)
    return KernelRun(kernel_from_dict(data["kernel"]), Config.from_dict(data["config"]),
                     data["source"], data["entry"],
                     [Argument(**a) for a in data["arguments"]])
