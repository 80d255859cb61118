"""The two execution routes of a region's JSON graph, and the TensorRT engine cache.

The payload of a region is ``{"graph": <BYOC JSON graph>, "precision": "fp32" | "fp16",
"max_workspace_mb": int}`` (JSON). ``walk`` evaluates a graph node by node with a converter
table; the routes differ in what a value is:

* ``TensorRTEngine`` (loader ``tensorrt.engine``): TensorRT network tensors. The network is
  built layer by layer with the TensorRT Python API on the first call (the constants arrive as
  the region's arguments), the serialized engine is cached on disk under a key of the graph,
  the constants, the TensorRT version, the GPU name and the precision (``engine_key``), and
  reused by every later load. Needs the ``tensorrt`` and ``cuda-python`` packages and a GPU.
* ``OnnxRuntimeEngine`` (loader ``tensorrt.onnxruntime``): ONNX node names. The graph becomes an
  ONNX model (every argument an input) run by onnxruntime: CPU here, the CUDA or TensorRT
  execution provider where ``onnxruntime-gpu`` finds a GPU. With fp16 precision the region's
  inputs and outputs are rounded through half precision at its boundaries (the BYOC paper's
  partial precision), the inside computes in fp32.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .ops import TO_ONNX, TO_TENSORRT, OnnxBuilder

ONNX_OPSET = 18  # reductions take their axes as an input


def decode(payload) -> dict[str, Any]:
    """The region payload as a dict (see the module docstring)."""
    text = payload.decode() if isinstance(payload, bytes) else payload
    return json.loads(text)


def walk(graph: Mapping[str, Any], params: Sequence[Any], convert: Callable) -> list:
    """The heads of ``graph`` evaluated with ``convert(op, args, attrs, constant_args)``,
    ``params`` standing for its argument nodes. ``constant_args`` gives, per operation
    argument, the index of the argument node it reads when that node is a constant."""
    nodes = graph["nodes"]
    values = dict(zip(graph["arg_nodes"], params))

    def output(ref):  # output ref[1] of a node with a tuple result, else its value
        value = values[ref[0]]
        return value[ref[1]] if "outputs" in nodes[ref[0]]["attrs"] else value

    for index, node in enumerate(nodes):
        if index in values:
            continue
        inputs = [output(ref) for ref in node["inputs"]]
        consts = [ref[0] if nodes[ref[0]]["op"] == "const" else None for ref in node["inputs"]]
        results: list = []

        def resolve(arg):
            kind, value = arg
            if kind == "param":
                return inputs[value]
            if kind == "op":
                return results[value]
            if kind == "tuple":
                return [resolve(item) for item in value]
            if kind == "unknown":
                raise ValueError(f"node {node['name']}: an argument the graph cannot name "
                                 f"({value})")
            return value

        body = node["attrs"]["body"]
        for position, operation in enumerate(body):
            args = [resolve(arg) for arg in operation["args"]]
            const_of = [consts[arg[1]] if arg[0] == "param" else None
                        for arg in operation["args"]]
            attrs = operation["attrs"]
            if position == len(body) - 1 and "outputs" in node["attrs"]:
                attrs = {**attrs, "outputs": node["attrs"]["outputs"]}  # a tuple result
            results.append(convert(operation["op"], args, attrs, const_of))
        values[index] = results[-1]
    return [output(head) for head in graph["heads"]]


def unsupported(graph: Mapping[str, Any], table: Mapping[str, Any]) -> list[str]:
    """The operators of ``graph`` a converter table lacks."""
    return sorted({op["op"] for node in graph["nodes"] for op in node["attrs"].get("body", [])
                   if op["op"] not in table})


# -- onnxruntime --------------------------------------------------------------------------------

def to_onnx(graph: Mapping[str, Any], precision: str = "fp32"):
    """The ONNX model of a region graph: one input per argument node (``arg<i>``), one output
    per head (``out<i>``); fp16 rounds the boundaries through half precision."""
    from onnx import helper

    missing = unsupported(graph, TO_ONNX)
    if missing:
        raise NotImplementedError(f"no ONNX converter for {', '.join(missing)}")
    builder = OnnxBuilder()
    names, inputs = [], []
    for index in graph["arg_nodes"]:
        node = graph["nodes"][index]
        name = f"arg{len(names)}"
        inputs.append(helper.make_tensor_value_info(name, _onnx_dtype(node["attrs"]["dtype"]),
                                                    node["attrs"]["shape"]))
        if precision == "fp16" and node["op"] == "input":
            name = _half_round(builder, name)
        names.append(name)
    heads = walk(graph, names, lambda op, args, attrs, _: TO_ONNX[op](builder, args, attrs))
    outputs = []
    for position, (head, ref) in enumerate(zip(heads, graph["heads"])):
        attrs = graph["nodes"][ref[0]]["attrs"]
        attrs = attrs["outputs"][ref[1]] if "outputs" in attrs else attrs
        if precision == "fp16":
            head = _half_round(builder, head)
        builder.nodes.append(helper.make_node("Identity", [head], [f"out{position}"]))
        outputs.append(helper.make_tensor_value_info(f"out{position}",
                                                     _onnx_dtype(attrs["dtype"]),
                                                     attrs["shape"]))
    model = helper.make_model(helper.make_graph(builder.nodes, "region", inputs, outputs,
                                                builder.initializers),
                              opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    model.ir_version = 8
    return model


def _onnx_dtype(dtype: str) -> int:
    from onnx import TensorProto

    return {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
            "int64": TensorProto.INT64, "int32": TensorProto.INT32}[dtype]


def _half_round(builder: OnnxBuilder, name: str) -> str:
    from onnx import TensorProto

    half = builder.node("Cast", [name], to=TensorProto.FLOAT16)
    return builder.node("Cast", [half], to=TensorProto.FLOAT)


def providers() -> list[str]:
    """onnxruntime's execution providers, GPU ones first where this build has them."""
    import onnxruntime

    available = onnxruntime.get_available_providers()
    return [p for p in ("TensorrtExecutionProvider", "CUDAExecutionProvider",
                        "CPUExecutionProvider") if p in available]


class OnnxRuntimeEngine:
    """A region run by onnxruntime (see the module docstring); built once per load."""

    def __init__(self, payload, constants):
        try:
            import onnxruntime
        except ImportError as err:
            raise RuntimeError("the onnxruntime route needs onnxruntime "
                               "(pip install edgebyoc-tensorrt[onnxruntime])") from err
        spec = decode(payload)
        self.model = to_onnx(spec["graph"], spec.get("precision", "fp32"))
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(self.model.SerializeToString(), options,
                                                    providers=providers())

    def __call__(self, *args):
        feed = {f"arg{i}": np.array(a, copy=False, order="C") for i, a in enumerate(args)}
        return self.session.run(None, feed)


# -- TensorRT -----------------------------------------------------------------------------------

def tensorrt_missing() -> str | None:
    """Why TensorRT engines cannot run here (``None`` when they can)."""
    try:
        import tensorrt  # noqa: F401
    except Exception as err:  # noqa: BLE001 - the wheels fail in many ways without libraries
        return f"the TensorRT Python package does not import ({type(err).__name__}: " \
               f"{str(err).strip().splitlines()[0] if str(err).strip() else 'no detail'})"
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return "cuda-python (cuda.bindings) is not installed"
    error, count = cudart.cudaGetDeviceCount()
    if int(error) != 0 or count == 0:
        return "no CUDA GPU is visible"
    return None


def cache_dir() -> Path:
    """Where serialized engines are kept (``EDGEBYOC_TENSORRT_CACHE`` or ~/.cache)."""
    return Path(os.environ.get("EDGEBYOC_TENSORRT_CACHE")
                or Path.home() / ".cache" / "edgebyoc" / "tensorrt")


def engine_key(graph: Mapping[str, Any], constants: Sequence[np.ndarray], trt_version: str,
               gpu: str, precision: str) -> str:
    """The cache key of an engine: the region's graph and constants, the TensorRT version, the
    GPU name and the precision; a change of any of them builds a new engine."""
    digest = hashlib.sha256(json.dumps(graph, sort_keys=True).encode())
    for value in constants:
        array = np.ascontiguousarray(value)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    digest.update(f"|{trt_version}|{gpu}|{precision}".encode())
    return digest.hexdigest()


def build_network(trt, network, graph: Mapping[str, Any], args: Sequence[np.ndarray]):
    """Define ``graph`` in a TensorRT ``network`` layer by layer: inputs as network inputs,
    constants as constant layers (and as weights where a layer needs them); marks the heads as
    outputs. ``trt`` is the ``tensorrt`` module (a stand-in in tests)."""
    missing = unsupported(graph, TO_TENSORRT)
    if missing:
        raise NotImplementedError(f"no TensorRT converter for {', '.join(missing)}")
    nodes = graph["nodes"]
    values, by_node = [], {}
    for position, index in enumerate(graph["arg_nodes"]):
        node, array = nodes[index], np.asarray(args[position])
        by_node[index] = array
        if node["op"] == "const":
            values.append(network.add_constant(tuple(array.shape),
                                               np.ascontiguousarray(array)).get_output(0))
        else:
            values.append(network.add_input(f"arg{position}", trt.float32,
                                            tuple(node["attrs"]["shape"])))

    def convert(op, op_args, attrs, const_of):
        weights = [by_node.get(index) if index is not None else None for index in const_of]
        return TO_TENSORRT[op](trt, network, op_args, attrs, weights)

    heads = walk(graph, values, convert)
    for position, tensor in enumerate(heads):
        tensor.name = f"out{position}"
        network.mark_output(tensor)
    return heads


class TensorRTEngine:
    """A region run by a TensorRT engine (see the module docstring)."""

    def __init__(self, payload, constants):
        reason = tensorrt_missing()
        if reason:
            raise RuntimeError(f"TensorRT cannot run here: {reason}; compile with --option "
                               f"runtime=onnxruntime to run the same graphs with onnxruntime")
        self.spec = decode(payload)
        self.context = None

    def _engine(self, args):
        import tensorrt as trt
        from cuda.bindings import runtime as cudart

        _, properties = cudart.cudaGetDeviceProperties(0)
        gpu = properties.name.decode(errors="replace").strip("\0")
        precision = self.spec.get("precision", "fp32")
        consts = [a for a, i in zip(args, self.spec["graph"]["arg_nodes"])
                  if self.spec["graph"]["nodes"][i]["op"] == "const"]
        path = cache_dir() / (engine_key(self.spec["graph"], consts, trt.__version__, gpu,
                                         precision) + ".engine")
        logger = trt.Logger(trt.Logger.WARNING)
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            builder = trt.Builder(logger)
            network = builder.create_network(0)
            build_network(trt, network, self.spec["graph"], args)
            config = builder.create_builder_config()
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE,
                                         int(self.spec.get("max_workspace_mb", 1024)) << 20)
            if precision == "fp16":
                config.set_flag(trt.BuilderFlag.FP16)
            serialized = builder.build_serialized_network(network, config)
            if serialized is None:
                raise RuntimeError("TensorRT could not build the engine")
            temporary = path.with_suffix(".tmp")
            temporary.write_bytes(bytes(serialized))
            temporary.replace(path)
        engine = trt.Runtime(logger).deserialize_cuda_engine(path.read_bytes())
        return engine, engine.create_execution_context()

    def __call__(self, *args):
        from cuda.bindings import runtime as cudart

        if self.context is None:
            self.engine, self.context = self._engine(args)
        graph = self.spec["graph"]
        buffers = [(f"arg{position}", np.array(a, np.float32, order="C"), True)
                   for position, (a, index) in enumerate(zip(args, graph["arg_nodes"]))
                   if graph["nodes"][index]["op"] == "input"]
        shapes = [graph["nodes"][h[0]]["attrs"] for h in graph["heads"]]
        outputs = [np.empty(a["outputs"][h[1]]["shape"] if "outputs" in a else a["shape"],
                            np.float32) for a, h in zip(shapes, graph["heads"])]
        buffers += [(f"out{i}", array, False) for i, array in enumerate(outputs)]
        pointers = []
        for name, array, is_input in buffers:
            _, pointer = cudart.cudaMalloc(array.nbytes)
            pointers.append(pointer)
            if is_input:
                cudart.cudaMemcpy(pointer, array.ctypes.data, array.nbytes,
                                  cudart.cudaMemcpyKind.cudaMemcpyHostToDevice)
            self.context.set_tensor_address(name, pointer)
        self.context.execute_async_v3(0)
        cudart.cudaDeviceSynchronize()
        for (name, array, is_input), pointer in zip(buffers, pointers):
            if not is_input:
                cudart.cudaMemcpy(array.ctypes.data, pointer, array.nbytes,
                                  cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)
            cudart.cudaFree(pointer)
        return outputs
