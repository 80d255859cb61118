"""``CompiledModel.run`` without per-call copies: inputs passed in place when the kernels can
read them, outputs without a copy unless the program returns a view of memory that outlives the
run (runtime/host_runner.py). Correctness only; the per-call time is benchmarks/run_overhead.py."""

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgebyoc
from edgebyoc.errors import InputError
from edgebyoc.plugins import PluginRegistry

HOST_ONLY = PluginRegistry(search_path=[])


def _compile(tmp_path, nodes, inputs, outputs, initializers=(), input_shapes=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return edgebyoc.compile(path, registry=HOST_ONLY, input_shapes=input_shapes)


def _value(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


@pytest.fixture(scope="module")
def matmul(tmp_path_factory):
    weight = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    compiled = _compile(tmp_path_factory.mktemp("mm"), [helper.make_node("MatMul", ["x", "w"],
                                                                         ["y"])],
                        [_value("x", [16, 16])], [_value("y", [16, 16])],
                        [numpy_helper.from_array(weight, "w")])
    return compiled, weight


def _misaligned(array):
    """``array``'s values in memory 4 bytes past a 64-byte boundary."""
    raw = np.empty(array.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 4
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    assert out.ctypes.data % 64 == 4
    return out


def test_every_input_form_gives_the_same_result(matmul):
    compiled, weight = matmul
    x = np.random.default_rng(1).random((16, 16)).astype(np.float32)
    want = x @ weight
    readonly = x.copy()
    readonly.flags.writeable = False
    for given in (x, _misaligned(x), readonly, np.asfortranarray(x), x.astype(np.float64),
                  [x.tolist()], {"x": x}, [x]):
        np.testing.assert_allclose(compiled.run(given)["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x, np.random.default_rng(1).random((16, 16)).astype(
        np.float32))  # the kernels never wrote into the caller's array


def test_outputs_of_one_run_survive_the_next(matmul):
    compiled, weight = matmul
    x = np.ones((16, 16), np.float32)
    first = compiled.run(x)["y"]
    kept = first.copy()
    second = compiled.run(2 * x)["y"]
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(second, 2 * kept, rtol=1e-6)
    first[...] = 0  # writing to an output changes nothing the model holds
    np.testing.assert_allclose(compiled.run(x)["y"], kept, rtol=1e-6)


def test_outputs_that_view_inputs_or_constants_are_copied(tmp_path):
    constant = np.arange(6, dtype=np.float32)
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("Identity", ["c"], ["const_out"]),
             helper.make_node("Identity", ["flat"], ["flat_again"])]
    compiled = _compile(tmp_path, nodes, [_value("x", [2, 3])],
                        [_value("flat", [6]), _value("const_out", [6]),
                         _value("flat_again", [6])],
                        [numpy_helper.from_array(np.array([6], np.int64), "shape"),
                         numpy_helper.from_array(constant, "c")])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 10
    out = compiled.run(x)
    np.testing.assert_array_equal(out["flat"], x.ravel())
    out["const_out"][...] = -1  # must not reach the model's constant
    out["flat"][...] = -2  # nor the other output
    x[...] = 0  # nor do later writes to the input reach the outputs
    np.testing.assert_array_equal(out["flat_again"], np.arange(6) + 10)
    np.testing.assert_array_equal(compiled.run(x)["const_out"], constant)
    for name, output in out.items():
        assert not np.may_share_memory(output, x), name


def test_input_checks_still_hold(matmul):
    compiled, _ = matmul
    with pytest.raises(InputError, match=r"shape \[4\], the model expects \[16, 16\]"):
        compiled.run(np.zeros(4, np.float32))
    with pytest.raises(InputError, match="missing none, unknown \\['z'\\]"):
        compiled.run({"x": np.zeros((16, 16), np.float32), "z": 1})
    with pytest.raises(InputError, match="takes 1 input"):
        compiled.run([np.zeros((16, 16), np.float32)] * 2)


def test_concurrent_runs_of_one_model(matmul):
    compiled, weight = matmul
    rng = np.random.default_rng(2)
    inputs = [_misaligned(rng.random((16, 16)).astype(np.float32)) for _ in range(4)]
    failures = []

    def work(x):
        for _ in range(50):
            got = compiled.run(x)["y"]
            if not np.allclose(got, x @ weight, rtol=1e-5, atol=1e-5):
                failures.append(got)

    threads = [threading.Thread(target=work, args=(x,)) for x in inputs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def _aligned_with_strides(shape, strides):
    """A writable float32 array of ``shape`` on a 64-byte boundary with ``strides`` (what
    numpy gives an array with an extent 0 or 1, C-contiguous all the same)."""
    raw = np.zeros(4096, np.uint8)
    start = (-raw.ctypes.data) % 64
    base = raw[start:].view(np.float32)
    out = np.lib.stride_tricks.as_strided(base, shape, strides, writeable=True)
    assert out.ctypes.data % 64 == 0 and out.flags.c_contiguous
    return out


@pytest.mark.parametrize("shape, strides", [((0, 3, 4), (0, 0, 0)), ((1, 3, 4), (4096, 16, 4))])
def test_arrays_whose_strides_are_not_compact_are_staged(tmp_path, shape, strides):
    """numpy calls an array with an extent of 0 or 1 C-contiguous whatever its strides (a
    zero-size one has all strides 0): handed in place, the kernels refused it ("expected to
    be compact array", ONNX node test ``test_reshape_allowzero_reordered`` failed whenever
    the empty input happened to sit on a 64-byte boundary); such an array is copied."""
    compiled = _compile(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                        [_value("x", list(shape))], [_value("y", list(shape))],
                        input_shapes={"x": list(shape)})  # an extent 0 reads as unknown
    x = _aligned_with_strides(shape, strides)
    if x.size:
        x[...] = np.arange(-6, 6, dtype=np.float32).reshape(shape)
    y = compiled.run({"x": x})["y"]
    assert y.shape == shape and np.array_equal(y, np.maximum(x, 0))


@pytest.mark.parametrize("user_setting", [None, "7"])
def test_the_thread_pool_spins_briefly_unless_the_user_says_otherwise(user_setting):
    """Compiling sets TVM's pool spin count (read once, when the pool starts) to
    ``THREAD_POOL_SPIN_COUNT`` and the thread count to every logical CPU, unless the user set
    them: a child process, so that no pool has started yet."""
    import os
    import subprocess
    import sys

    from edgebyoc.resources import THREAD_POOL_SPIN_COUNT

    env = {k: v for k, v in os.environ.items()
           if k not in ("TVM_THREAD_POOL_SPIN_COUNT", "TVM_NUM_THREADS")}
    if user_setting is not None:
        env["TVM_THREAD_POOL_SPIN_COUNT"] = user_setting
    script = ("import os, edgebyoc\n"
              "from edgebyoc.plugins import PluginRegistry\n"
              "from edgebyoc.testing.models import small_convnet\n"
              "edgebyoc.compile(small_convnet(), registry=PluginRegistry(search_path=[]))\n"
              "print(os.environ['TVM_THREAD_POOL_SPIN_COUNT'], os.environ['TVM_NUM_THREADS'])")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [user_setting or str(THREAD_POOL_SPIN_COUNT), str(os.cpu_count())]
