"""Running a host executable on the Relax VM: checked inputs in, numpy outputs out.

``HostRunner.run`` is what ``CompiledModel.run`` calls, so its per-call cost is the whole latency
of a small model run in a loop. Everything that does not depend on the call's values is
worked out once, in ``__init__`` and on the first run:

* per input, its name, shape, numpy dtype and index limits (``_InputSlot``);
* an aligned staging tensor per input, used only when the caller's array cannot be handed to
  the kernels as it is (another dtype, not C-contiguous, read-only, or its data not on a
  ``KERNEL_ALIGNMENT`` boundary); an aligned, contiguous, writable array of the model's dtype
  is passed without a copy, through DLPack;
* outputs come back without a copy (``numpy.from_dlpack`` of the VM's result, which owns fresh
  memory every run), except an output the program returns as a view of an input, a constant
  or another output (a reshape of an input, a constant output): the first run finds those
  (``numpy.may_share_memory``) and they are copied on every run, so no output changes when
  the caller later writes to an input, to another output, or runs the model again.

The checks of user input (#16: names, count, shapes, dtype conversions that change no value,
index inputs within the axis they index) run on every call. A lock serializes runs of one
runner: the Relax VM and the staging tensors are not safe to share between concurrent calls.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import EdgebyocError, InputError, first_line
from ..frontend import TensorSpec
from ..resources import configure_thread_pool

#: bytes a tensor's data is aligned to when the kernels receive it without a copy (TVM's
#: ``kAllocAlignment``: its own tensors are allocated so; LLVM may use aligned vector loads)
KERNEL_ALIGNMENT = 64


def _converted(spec: TensorSpec, array: np.ndarray) -> np.ndarray:
    """``array`` as ``spec``'s dtype when that changes no value: floats to another float width
    and numbers to floats; integers only within the target's range. Otherwise ``InputError``."""
    target = np.dtype(spec.dtype)
    if array.dtype.kind not in "biuf" or not np.can_cast(array.dtype, target,
                                                          casting="same_kind"):
        raise InputError(f"input {spec.name!r}: dtype {array.dtype}, the model expects "
                         f"{spec.dtype}")
    if target.kind in "iu" and array.size:
        info = np.iinfo(target)
        low, high = array.min(), array.max()
        if low < info.min or high > info.max:
            raise InputError(f"input {spec.name!r}: values {low} to {high} do not fit the "
                             f"model's {spec.dtype} ({info.min} to {info.max}); refusing to "
                             f"wrap them")
    return array.astype(target)


def _check_indices(spec: TensorSpec, array: np.ndarray, limits: np.ndarray) -> None:
    """``InputError`` for an index input's value outside the axis it indexes."""
    wide = array.astype(np.int64)
    outside = (wide < -limits) | (wide >= limits)
    if outside.any():
        where = tuple(np.argwhere(outside)[0])
        extent = int(limits if limits.ndim == 0 else limits[where[-1]])
        raise InputError(f"input {spec.name!r}: index {int(wide[where])} is outside the axis "
                         f"of {extent} it indexes (allowed {-extent} to {extent - 1})")


class _InputSlot:
    """One model input's checks and its staging tensor, worked out once."""

    __slots__ = ("spec", "name", "shape", "dtype", "strides", "limits", "staging",
                 "staging_view", "last_seen")

    def __init__(self, spec: TensorSpec, tvm: Any):
        self.spec, self.name = spec, spec.name
        self.shape, self.dtype = tuple(spec.shape), np.dtype(spec.dtype)
        # a compact array's strides, as the kernels' argument check wants them: numpy gives a
        # C-contiguous array others where an extent is 0 (all 0) or 1 (any)
        self.strides = tuple(int(np.prod(self.shape[i + 1:], dtype=np.int64)) *
                             self.dtype.itemsize for i in range(len(self.shape)))
        self.limits = spec.index_limits()
        self.last_seen: tuple[weakref.ref, bool] | None = None
        self.staging = self.staging_view = None
        try:  # an aligned tensor the kernels own, written through a numpy view of it
            self.staging = tvm.runtime.empty(self.shape, spec.dtype, tvm.cpu())
            self.staging_view = np.from_dlpack(self.staging)
        except Exception:  # noqa: BLE001 - a dtype numpy cannot view: a tensor per call
            self.staging = self.staging_view = None

    def checked(self, array: Any) -> np.ndarray:
        """``array`` checked against the input's shape, dtype and index limits."""
        if type(array) is not np.ndarray:
            array = np.asarray(array)
        if array.shape != self.shape:
            raise InputError(f"input {self.name!r}: shape {list(array.shape)}, the model "
                             f"expects {list(self.shape)}")
        if array.dtype != self.dtype:
            array = _converted(self.spec, array)
        if self.limits is not None and array.size:
            _check_indices(self.spec, array, self.limits)
        return array

    def argument(self, array: np.ndarray, tvm: Any) -> Any:
        """What the VM receives for the checked ``array``: the array itself when the kernels
        can read it in place, else a copy in the staging tensor (or a new tensor)."""
        if array.strides == self.strides and array.flags.writeable and self._aligned(array):
            return array  # (DLPack cannot pass a read-only array)
        if self.staging_view is None:
            return tvm.runtime.tensor(array.copy(order="C"))
        np.copyto(self.staging_view, array)
        return self.staging

    def _aligned(self, array: np.ndarray) -> bool:
        """Whether ``array``'s data starts on a ``KERNEL_ALIGNMENT`` boundary; remembered for
        the last array seen (``ctypes.data`` costs a microsecond, and loops often pass the
        same buffer): a live array's data does not move (``resize`` changes the shape, which
        is checked first)."""
        last = self.last_seen
        if last is not None and last[0]() is array:
            return last[1]
        aligned = array.ctypes.data % KERNEL_ALIGNMENT == 0
        self.last_seen = (weakref.ref(array), aligned)
        return aligned

    def prepare(self, array: Any, tvm: Any) -> Any:
        """``checked`` and then ``argument``: what the VM receives for the caller's value."""
        return self.argument(self.checked(array), tvm)


class HostRunner:
    """Runs a host executable on the Relax VM with checked inputs; returns numpy outputs."""

    def __init__(self, module: Any, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                 constants: Sequence[np.ndarray] = ()):
        import tvm
        import tvm_ffi
        from tvm import relax

        configure_thread_pool()

        self.inputs, self.outputs = list(inputs), list(outputs)
        self._tvm = tvm
        self._array_type = tvm_ffi.Array
        self._vm = relax.VirtualMachine(module, tvm.cpu())
        self._main = self._vm["main"]
        # the metadata module's data entries: allocated once, passed to every run
        self._constants = [tvm.runtime.tensor(np.ascontiguousarray(c)) for c in constants]
        self._slots = [_InputSlot(spec, tvm) for spec in self.inputs]
        self._names = frozenset(spec.name for spec in self.inputs)
        self._output_checks = [(spec.name, np.dtype(spec.dtype), tuple(spec.shape),
                                -1 not in spec.shape) for spec in self.outputs]
        self._copied_outputs: tuple[bool, ...] | None = None  # decided by the first run
        self._lock = threading.Lock()

    def _ordered(self, given: Any) -> list[Any]:
        """``given`` (dict by name, list in order, or one array) as a list in input order."""
        if type(given) is dict and len(given) == len(self._slots):
            try:  # the common call: a dict of exactly the model's inputs
                return [given[slot.name] for slot in self._slots]
            except KeyError:
                pass  # a name missing: the error below says which
        if isinstance(given, np.ndarray):
            given = [given]
        if isinstance(given, Mapping):
            if len(given) != len(self._slots) or not self._names.issuperset(given):
                names = [s.name for s in self.inputs]
                missing = [n for n in names if n not in given]
                extra = [k for k in given if k not in self._names]
                raise InputError(f"inputs do not match the model: missing {missing or 'none'}, "
                                 f"unknown {extra or 'none'} (model inputs: {names})")
            return [given[slot.name] for slot in self._slots]
        arrays = list(given)
        if len(arrays) != len(self._slots):
            raise InputError(f"the model takes {len(self.inputs)} input(s) "
                             f"({[s.name for s in self.inputs]}), got {len(arrays)}")
        return arrays

    def check_inputs(self, given: Any) -> list[np.ndarray]:
        """Normalise ``given`` (dict by name, list in order, or one array) to ordered, checked
        arrays of the model's dtypes (C-contiguous)."""
        checked = []
        for slot, array in zip(self._slots, self._ordered(given)):
            array = slot.checked(array)
            # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
            checked.append(array if array.flags.c_contiguous else array.copy(order="C"))
        return checked

    def run(self, given: Any) -> dict[str, np.ndarray]:
        arrays = self._ordered(given)
        tvm = self._tvm
        with self._lock:
            arguments = [slot.prepare(a, tvm) for slot, a in zip(self._slots, arrays)]
            try:
                result = self._main(*arguments, *self._constants)
            except MemoryError as err:
                raise EdgebyocError("running the model failed: out of memory (the machine "
                                    "could not give the run its tensors)") from err
            except Exception as err:  # noqa: BLE001 - a kernel or VM check failed at run time
                raise EdgebyocError(f"running the model failed: {type(err).__name__}: "
                                    f"{first_line(err)}") from err
            values = list(result) if isinstance(result, self._array_type) else [result]
            if len(values) != len(self._output_checks):
                raise EdgebyocError(f"the compiled model returned {len(values)} output(s), its "
                                    f"manifest lists {len(self.outputs)}; the artifact is "
                                    f"inconsistent (recompile the model)")
            outputs = [_as_numpy(value) for value in values]
            if self._copied_outputs is None:
                self._copied_outputs = self._views(outputs, arguments)
        named = {}
        for (name, dtype, shape, static), array, copy in zip(self._output_checks, outputs,
                                                             self._copied_outputs):
            if array.dtype != dtype or (array.shape != shape if static else (
                    array.ndim != len(shape) or any(
                        want not in (-1, got) for want, got in zip(shape, array.shape)))):
                raise EdgebyocError(f"output {name!r}: the compiled model returned "
                                    f"{array.dtype} {list(array.shape)}, its manifest says "
                                    f"{dtype} {list(shape)}; the artifact is "
                                    f"inconsistent (recompile the model)")
            named[name] = array.copy() if copy else array
        return named

    def _views(self, outputs: list[np.ndarray], arguments: list[Any]) -> tuple[bool, ...]:
        """Per output, whether the program returns it as a view of memory that outlives the
        run or that another output shares: an input, a constant, an earlier output."""
        held = [a for a in arguments if isinstance(a, np.ndarray)]
        held += [slot.staging_view for slot in self._slots if slot.staging_view is not None]
        for constant in self._constants:
            try:
                held.append(np.from_dlpack(constant))
            except Exception:  # noqa: BLE001 - a dtype numpy cannot view: compare nothing
                pass
        copies = []
        for index, output in enumerate(outputs):
            others = held + outputs[:index]
            copies.append(any(np.may_share_memory(output, other) for other in others))
        return tuple(copies)

    def time(self, given: Any, repeat: int = 10, number: int = 1) -> list[float]:
        """Per-run wall times in seconds (``repeat`` samples of ``number`` runs each)."""
        arrays = [self._tvm.runtime.tensor(a) for a in self.check_inputs(given)]
        evaluator = self._vm.time_evaluator("main", self._tvm.cpu(), number=number,
                                            repeat=repeat)
        return list(evaluator(*arrays, *self._constants).results)


def _as_numpy(value: Any) -> np.ndarray:
    """A VM result as numpy: tensors without a copy, shape values as int64 vectors."""
    try:
        return np.from_dlpack(value)
    except (AttributeError, BufferError, TypeError, RuntimeError):
        pass  # a shape value, or a dtype numpy's DLPack lacks
    if hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(list(value), dtype=np.int64)
