"""Walks every registry of graph_passes.registry: each entry must carry everything its axis needs, checked on data.

Weight formats: packer round trip on odd-ish random shapes, float64 reference equal to the quantizer's own
dequantization, Q/DQ twin values (or a refusal for a float-twin format), a device converter test that exists, tests.
Ops: every reference resolves, the onnx.reference class names the op, a rewriter per output format, tests.
Activation modes, epilogues: a float64 reference that keeps the shape, tests. Methods: quantize every format, tests.
The checks return a list of problems; a deliberately incomplete fake entry per axis must produce some.
"""

from __future__ import annotations

import re
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from graph_passes.config import FORMATS
from graph_passes.errors import QuantizationError
from graph_passes.layouts import LayoutError, interleaved_v1
from graph_passes.registry import Ref
from graph_passes.registry.act_modes import ACT_MODES, ActMode
from graph_passes.registry.epilogues import EPILOGUES, Epilogue
from graph_passes.registry.formats import INT4, WEIGHT_FORMATS, QdqTwin, WeightFormat
from graph_passes.registry.methods import METHODS, RTN, QuantMethod
from graph_passes.registry.ops import LINEAR, OPS, OpKind

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "plugins/kernels/include/trt_woq/kernels.h"


# ----------------------------------------------------------------------------------------------------- the checks
def test_id_problems(ids) -> list[str]:
    """Each pytest id ``path::function`` names an existing file defining that test function."""
    if not ids:
        return ["lists no test"]
    problems = []
    for tid in ids:
        path, sep, func = tid.partition("::")
        file = ROOT / path
        if not sep or not file.is_file():
            problems.append(f"test {tid!r}: no such file")
        elif not re.search(rf"^def {re.escape(func)}\(", file.read_text(), re.M):
            problems.append(f"test {tid!r}: no such test function in {path}")
    return problems


test_id_problems.__test__ = False  # a helper, not a test


def _unit_shape(fmt: WeightFormat) -> tuple[int, int]:
    """The smallest (K, N) the format's layout packs; every shape it packs is a multiple of it."""
    for k in range(1, 1025):
        for n in range(1, 65):
            try:
                fmt.check_shape(k, n)
            except LayoutError:
                continue
            return k, n
    raise AssertionError(f"{fmt.name}: the layout takes no K <= 1024, N <= 64")


def format_problems(fmt: WeightFormat, rng: np.random.Generator) -> list[str]:
    problems = [f"{fmt.name}: {p}" for p in test_id_problems(fmt.tests)]
    problems += [f"{fmt.name} converter: {p}" for p in test_id_problems((fmt.converter_test,) if fmt.converter_test
                                                                         else ())]
    k_unit, n_unit = _unit_shape(fmt)
    # Packer round trip on odd multiples of the unit shape (ragged against any power-of-two tiling).
    for km, nm in ((1, 1), (3, 5), (5, 3), (7, 9)):
        k, n = k_unit * km, n_unit * nm
        u = rng.integers(0, 1 << fmt.bits, size=(k, n), dtype=np.uint8)
        packed = fmt.pack(u)
        if packed.dtype != np.int32:
            problems.append(f"{fmt.name}: packed dtype {packed.dtype}, the op contract needs int32")
        if not np.array_equal(fmt.unpack(packed, k, n), u):
            problems.append(f"{fmt.name}: pack -> unpack round trip fails at K={k}, N={n}")
            break
    # Quantizer + float64 reference, for every group size and zero-point mode, on a ragged multiple of the groups.
    for g in fmt.group_sizes:
        k = int(np.lcm(k_unit, g if g > 0 else 1)) * 3
        n = n_unit * 5
        w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
        for asym in (False, True) if fmt.asymmetric else (False,):
            qw = fmt.quantize(w, g, asym, "fp32", name=f"{fmt.name} g{g}")
            ref = fmt.dequantize(fmt.pack(qw.u), qw.scales, qw.zeros, k, n, g)
            if ref.dtype != np.float64 or ref.shape != (k, n):
                problems.append(f"{fmt.name}: reference gives {ref.dtype} {ref.shape}, expected float64 {(k, n)}")
            elif not np.array_equal(ref, qw.dequantize()):
                problems.append(f"{fmt.name} g{g} asym={asym}: the reference from the packed tensors differs from "
                                f"the quantizer's dequantization")
            elif not np.linalg.norm(ref - w) < 0.5 * np.linalg.norm(w):
                problems.append(f"{fmt.name} g{g} asym={asym}: reconstruction error above 50 %")
    problems += _qdq_problems(fmt, rng)
    return problems


def _qdq_problems(fmt: WeightFormat, rng: np.random.Generator) -> list[str]:
    if fmt.qdq is None:  # a float-twin format must refuse Q/DQ with a message
        try:
            fmt.qdq_tensor("w", np.zeros((2, 3), np.uint8), signed=True)
        except QuantizationError:
            return []
        return [f"{fmt.name}: no Q/DQ types, yet qdq_tensor does not refuse"]
    from onnx import numpy_helper

    problems = []
    half = 1 << (fmt.bits - 1)
    u = rng.integers(0, 1 << fmt.bits, size=(5, 7))  # odd element count: a half-filled last byte for 4 bits
    for signed, values in ((True, u - half), (False, u)):
        back = numpy_helper.to_array(fmt.qdq_tensor("w", values, signed))
        if back.shape != values.shape or not np.array_equal(back.astype(np.int64), values):
            problems.append(f"{fmt.name}: Q/DQ tensor (signed={signed}) does not hold the values written")
    return problems


def op_problems(op: OpKind) -> list[str]:
    problems = [f"{op.name}: {p}" for p in test_id_problems(op.tests)]
    refs = {"match": op.match, "reference": op.reference, "reference_op": op.reference_op,
            **{f"rewriter {f}": op.rewriter(f) for f in FORMATS}}
    for label, ref in refs.items():
        try:
            if not callable(ref.resolve()):
                problems.append(f"{op.name}: {label} {ref.target} is not callable")
        except (ImportError, AttributeError, ValueError) as exc:
            problems.append(f"{op.name}: {label} {ref.target} does not resolve ({exc})")
    if not problems:
        cls = op.reference_op.resolve()()
        if cls.__name__ != op.op_type or getattr(cls, "op_domain", None) != op.domain:
            problems.append(f"{op.name}: reference op class {cls.__name__} / {getattr(cls, 'op_domain', None)} is "
                            f"not {op.op_type} / {op.domain}")
    return problems


def _float64_same_shape(name: str, out, like: np.ndarray) -> list[str]:
    out = np.asarray(out)
    if out.dtype != np.float64 or out.shape != like.shape or not np.isfinite(out).all():
        return [f"{name}: reference must return finite float64 {like.shape}, got {out.dtype} {out.shape}"]
    return []


def act_mode_problems(mode: ActMode, rng: np.random.Generator) -> list[str]:
    x = rng.standard_normal((3, 5, 128))
    return ([f"{mode.name}: {p}" for p in test_id_problems(mode.tests)]
            + _float64_same_shape(mode.name, mode.reference(x, 64), x))


def epilogue_problems(ep: Epilogue, rng: np.random.Generator) -> list[str]:
    y = rng.standard_normal((3, 5, 68)) * 4
    problems = [f"{ep.name}: {p}" for p in test_id_problems(ep.tests)] + _float64_same_shape(ep.name,
                                                                                             ep.reference(y), y)
    if not all(isinstance(p, tuple) and p and all(isinstance(o, str) for o in p) for p in ep.onnx_patterns):
        problems.append(f"{ep.name}: onnx_patterns must be non-empty tuples of op types")
    if not problems and not np.array_equal(ep.reference(y)[1], ep.reference(y[1])):
        problems.append(f"{ep.name}: reference is not elementwise")
    return problems


def method_problems(method: QuantMethod, rng: np.random.Generator) -> list[str]:
    problems = [f"{method.name}: {p}" for p in test_id_problems(method.tests)]
    if method.needs_calibration:  # its own tests feed statistics; here only that they exist
        return problems
    for fmt in WEIGHT_FORMATS:
        k_unit, n_unit = _unit_shape(fmt)
        k, n = int(np.lcm(k_unit, max(fmt.group_sizes))) * 3, n_unit * 3
        w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
        g = max(fmt.group_sizes)
        qw = method.quantize(w, fmt, g, False, "fp16", (1.0,), name="w", stats=None)
        ref = fmt.dequantize(fmt.pack(qw.u), qw.scales, qw.zeros, k, n, g)
        if not np.linalg.norm(ref - w) < 0.5 * np.linalg.norm(w):
            problems.append(f"{method.name} with {fmt.name}: reconstruction error above 50 %")
    return problems


# ------------------------------------------------------------------------------------------------ the real entries
@pytest.mark.parametrize("fmt", list(WEIGHT_FORMATS), ids=WEIGHT_FORMATS.names())
def test_weight_format_complete(fmt, rng):
    assert format_problems(fmt, rng) == []


@pytest.mark.parametrize("op", list(OPS), ids=OPS.names())
def test_op_complete(op):
    assert op_problems(op) == []


@pytest.mark.parametrize("mode", list(ACT_MODES), ids=ACT_MODES.names())
def test_act_mode_complete(mode, rng):
    assert act_mode_problems(mode, rng) == []


@pytest.mark.parametrize("ep", list(EPILOGUES), ids=EPILOGUES.names())
def test_epilogue_complete(ep, rng):
    assert epilogue_problems(ep, rng) == []


@pytest.mark.parametrize("method", list(METHODS), ids=METHODS.names())
def test_method_complete(method, rng):
    assert method_problems(method, rng) == []


def test_c_enums_match_the_header():
    """Each entry's C enum name and value as kernels.h declares them (ABI >= 2 has one enum per axis)."""
    text = HEADER.read_text()
    abi = int(re.search(r"#define\s+TRT_WOQ_ABI_VERSION\s+(\d+)", text).group(1))
    if abi < 2:
        pytest.skip(f"{HEADER.relative_to(ROOT)} is ABI {abi}: the per-axis enums arrive with ABI 2")
    for registry in (WEIGHT_FORMATS, OPS, ACT_MODES, EPILOGUES):
        for e in registry:
            m = re.search(rf"\b{e.c_name}\s*=\s*(\d+)", text)
            assert m and int(m.group(1)) == e.c_enum, f"{registry.axis} {e.name}: {e.c_name} = {e.c_enum} not in header"


def test_registry_refuses_duplicates_and_names_the_choices():
    from graph_passes.errors import UserError
    from graph_passes.registry import Registry

    reg = Registry("epilogue", "--epilogue")
    reg.add(EPILOGUES.get("none"))
    with pytest.raises(ValueError, match="registered twice"):
        reg.add(EPILOGUES.get("none"))
    with pytest.raises(ValueError, match="C enum value 0 is taken"):
        reg.add(replace(EPILOGUES.get("none"), name="other"))
    with pytest.raises(UserError, match="--epilogue: unknown epilogue 'relu'; known: none"):
        reg.get("relu")


# ------------------------------------------------------------------------------------- incomplete entries are caught
def test_incomplete_fakes_are_caught(rng):
    lossy = types.SimpleNamespace(**{a: getattr(interleaved_v1, a) for a in dir(interleaved_v1)
                                     if not a.startswith("__")})
    lossy.unpack = lambda packed, k, n, bits: interleaved_v1.unpack(packed, k, n, bits) & 0x7  # drops the top bit
    lossy.dequantize_reference = lambda *args: interleaved_v1.dequantize_reference(*args) * 1.01
    swapped = QdqTwin(signed=INT4.qdq.unsigned, unsigned=INT4.qdq.signed)
    fake_fmt = replace(INT4, name="fake4", layout=lossy, converter_test="tests/nowhere/test_x.py::test_convert",
                       qdq=swapped)
    problems = " | ".join(format_problems(fake_fmt, rng))
    assert "round trip fails" in problems and "converter: test 'tests/nowhere/test_x.py::test_convert': no such file" \
        in problems and "differs" in problems and "does not hold the values" in problems

    fake_op = replace(LINEAR, name="fake_op", tests=(), to_qdq=Ref("graph_passes.op:no_such_function"))
    problems = " | ".join(op_problems(fake_op))
    assert "lists no test" in problems and "rewriter qdq graph_passes.op:no_such_function does not resolve" in problems

    fake_mode = ActMode(name="fake_mode", c_name="X", c_enum=9, reference=lambda x, g: x.astype(np.float32),
                        tests=("tests/graph_passes/test_op.py::test_not_there",))
    problems = " | ".join(act_mode_problems(fake_mode, rng))
    assert "no such test function" in problems and "finite float64" in problems

    fake_ep = Epilogue(name="fake_ep", c_name="X", c_enum=9, reference=lambda y: y - y.mean(), onnx_patterns=((),),
                       tests=())
    problems = " | ".join(epilogue_problems(fake_ep, rng))
    assert "lists no test" in problems and "onnx_patterns" in problems

    def scales_too_large(*args, **kwargs):
        qw = RTN.quantize(*args, **kwargs)
        return replace(qw, scales=qw.scales * 4)

    fake_method = replace(RTN, name="fake_method", tests=(), quantize=scales_too_large)
    problems = " | ".join(method_problems(fake_method, rng))
    assert "lists no test" in problems and "reconstruction error above 50 %" in problems


def test_cli_and_config_choices_come_from_the_registries():
    from graph_passes.__main__ import build_parser
    from graph_passes.config import QuantConfig
    from graph_passes.errors import UserError
    from graph_passes.registry.formats import all_bits, all_group_sizes

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["quantize"]
    choices = {a.dest: tuple(a.choices) for a in sub._actions if a.choices}
    assert choices["bits"] == all_bits() and choices["group_size"] == all_group_sizes()
    assert choices["method"] == METHODS.names() and choices["format"] == FORMATS
    for fmt in WEIGHT_FORMATS:
        assert QuantConfig(bits=fmt.bits, group_size=fmt.group_sizes[0]).weight_format is fmt
    with pytest.raises(UserError, match="--method: unknown quantization method 'awq2'; known: rtn, awq, gptq"):
        QuantConfig(method="awq2")
