"""Building a TensorRT engine from an ONNX file holding WeightOnlyLinear nodes, with TensorRT's Python API.

    from trt_woq.engine import build_engine
    blob = build_engine("model.woq.onnx", "model.engine",
                        profiles=[{"input_ids": ((1, 1), (1, 128), (8, 2048))}])

The plugin library is registered first (:func:`trt_woq.plugin.load_plugin`); the ONNX parser then turns every
``trt_woq::WeightOnlyLinear`` node into our plugin through its op_type, ``plugin_version`` and ``plugin_namespace``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from trt_woq.errors import EngineBuildError, TrtWoqError
from trt_woq.plugin import import_tensorrt, load_plugin

# Defaults for dynamic input dimensions when no profile is given: (min, opt, max) for the first dimension (batch)
# and for every other dynamic dimension (sequence length, ...). Logged when used.
DEFAULT_BATCH_RANGE = (1, 1, 8)
DEFAULT_DIM_RANGE = (1, 128, 2048)

PRECISIONS = ("auto", "strongly-typed", "fp16", "bf16", "fp32")

Shape = Sequence[int]
Profile = Mapping[str, "Shape | tuple[Shape, Shape, Shape]"]


def _normalize_profile(profile: Profile) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """name -> (min, opt, max); a single shape means min = opt = max."""
    out = {}
    for name, spec in profile.items():
        spec = list(spec)
        if spec and all(isinstance(d, (int,)) or hasattr(d, "__index__") for d in spec):
            shape = tuple(int(d) for d in spec)
            out[name] = (shape, shape, shape)
        elif len(spec) == 3:
            lo, opt, hi = (tuple(int(d) for d in s) for s in spec)
            if not (len(lo) == len(opt) == len(hi)) or any(not (a <= b <= c) for a, b, c in zip(lo, opt, hi)):
                raise TrtWoqError(f"profile for {name}: need min <= opt <= max of equal rank, got {lo}, {opt}, {hi}")
            out[name] = (lo, opt, hi)
        else:
            raise TrtWoqError(f"profile for {name}: give one shape or (min, opt, max), got {spec!r}")
    return out


def default_profile(input_shapes: Mapping[str, Sequence[int]]) -> dict:
    """(min, opt, max) for inputs with dynamic (-1) dims, from DEFAULT_BATCH_RANGE / DEFAULT_DIM_RANGE."""
    profile = {}
    for name, shape in input_shapes.items():
        lo, opt, hi = [], [], []
        for i, d in enumerate(shape):
            if d >= 0:
                r = (d, d, d)
            else:
                r = DEFAULT_BATCH_RANGE if i == 0 else DEFAULT_DIM_RANGE
            lo.append(r[0])
            opt.append(r[1])
            hi.append(r[2])
        profile[name] = (tuple(lo), tuple(opt), tuple(hi))
    return profile


def _make_logger(trt, verbose: bool):
    severity = trt.Logger.VERBOSE if verbose else trt.Logger.WARNING
    return trt.Logger(severity)


def build_engine(onnx_path: str | os.PathLike, engine_path: str | os.PathLike | None = None, *,
                 profiles: Sequence[Profile] | None = None, precision: str = "auto",
                 plugin_path: str | os.PathLike | None = None, workspace_bytes: int | None = None,
                 timing_cache: str | os.PathLike | None = None, optimization_level: int | None = None,
                 verbose: bool = False, log=print) -> bytes:
    """Build a serialized TensorRT engine from ``onnx_path``; also write it to ``engine_path`` if given.

    profiles: optimization profiles, each ``{input name: shape}`` (static) or ``{input name: (min, opt, max)}``.
        None: one profile from the model's input shapes, dynamic dims taken from DEFAULT_BATCH_RANGE (first dim)
        and DEFAULT_DIM_RANGE (others), logged through ``log``.
    precision: "auto" builds a strongly typed network where TensorRT has the flag (every tensor keeps the type the
        ONNX file gives it: the plugin runs in the fp16/bf16 the graph pass chose), else a weakly typed one with
        FP16 allowed; "strongly-typed" requires the flag; "fp16" / "bf16" / "fp32" build weakly typed networks with
        that precision allowed (refused by TensorRT versions without weak typing).
    plugin_path: the plugin library (default: :func:`trt_woq.plugin.plugin_library_path`).
    timing_cache: file read before and written after the build (created if missing).

    Raises :class:`~trt_woq.errors.TensorRTNotFoundError` without TensorRT,
    :class:`~trt_woq.errors.PluginLibraryNotFoundError` without the plugin library,
    :class:`~trt_woq.errors.EngineBuildError` when parsing or building fails (with TensorRT's messages).
    """
    if precision not in PRECISIONS:
        raise TrtWoqError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    onnx_path = Path(onnx_path)
    if not onnx_path.is_file():
        raise TrtWoqError(f"{onnx_path}: no such file")
    trt = import_tensorrt()
    load_plugin(plugin_path, require_tensorrt=True)
    logger = _make_logger(trt, verbose)
    builder = trt.Builder(logger)
    if builder is None:
        raise EngineBuildError("TensorRT could not create a builder (is a CUDA GPU visible?)")

    flag_enum = trt.NetworkDefinitionCreationFlag
    strongly_typed = hasattr(flag_enum, "STRONGLY_TYPED") and precision in ("auto", "strongly-typed")
    if precision == "strongly-typed" and not strongly_typed:
        raise EngineBuildError(f"this TensorRT ({getattr(trt, '__version__', '?')}) has no strongly typed networks")
    flags = 0
    if strongly_typed:
        flags |= 1 << int(flag_enum.STRONGLY_TYPED)
    elif hasattr(flag_enum, "EXPLICIT_BATCH"):
        flags |= 1 << int(flag_enum.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    # parse_from_file resolves external data relative to the model's folder.
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EngineBuildError(f"TensorRT could not parse {onnx_path}:\n  " + "\n  ".join(errors or ["(no message)"]))

    config = builder.create_builder_config()
    if not strongly_typed and precision in ("auto", "fp16", "bf16"):
        flag = getattr(trt.BuilderFlag, "BF16" if precision == "bf16" else "FP16", None)
        if flag is None:
            raise EngineBuildError(f"this TensorRT has no BuilderFlag for {precision}; use precision='auto'")
        config.set_flag(flag)
    if workspace_bytes is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_bytes))
    if optimization_level is not None:
        config.builder_optimization_level = int(optimization_level)

    inputs = {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}
    if profiles is None:
        dynamic = {k: v for k, v in inputs.items() if any(d < 0 for d in v)}
        profiles = [default_profile(dynamic)] if dynamic else []
        for name, (lo, opt, hi) in (profiles[0].items() if profiles else []):
            log(f"build_engine: input {name} {list(inputs[name])}: default profile min {list(lo)} opt {list(opt)} "
                f"max {list(hi)} (pass profiles= to choose)")
    for spec in profiles:
        prof = builder.create_optimization_profile()
        for name, (lo, opt, hi) in _normalize_profile(spec).items():
            if name not in inputs:
                raise TrtWoqError(f"profile names input {name!r}; the network's inputs are {', '.join(inputs)}")
            prof.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(prof)

    cache = None
    if timing_cache is not None:
        data = Path(timing_cache).read_bytes() if Path(timing_cache).is_file() else b""
        cache = config.create_timing_cache(data)
        config.set_timing_cache(cache, ignore_mismatch=False)

    blob = builder.build_serialized_network(network, config)
    if blob is None:
        raise EngineBuildError(f"TensorRT could not build an engine from {onnx_path} (see the messages above; "
                               f"verbose=True shows the plugin's)")
    data = bytes(blob)
    if cache is not None:
        Path(timing_cache).write_bytes(bytes(cache.serialize()))
    if engine_path is not None:
        Path(engine_path).write_bytes(data)
    return data
