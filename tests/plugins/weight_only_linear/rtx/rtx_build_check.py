"""TensorRT-RTX build check: parse ONNX files holding WeightOnlyLinear nodes with TensorRT-RTX's ONNX parser, our
plugin library loaded, and build a serialized engine (TensorRT-RTX builds on SM90 but cannot run engines there).

    python3 rtx_build_check.py --plugin LIB [--plugin LIB2 ...] [--onnx MODEL ...] [--out DIR]

Each (plugin library, model) pair runs in a child process with TRT_WOQ_PLUGIN_TRACE=1 (the plugin prints every
entry point TensorRT calls) and, when --preload names terminate_backtrace.so, a native backtrace on terminate /
abort / segfault. The child prints STEP markers; the parent reports the last step reached, the exit status, the
last plugin calls and the backtrace, so a crash says where it happened. Without --onnx a minimal model is written
(X [batch, 256] fp16 -> WeightOnlyLinear INT4 g128 + bias -> Y), and with --node-models one W8A8 WeightOnlyLinear
and one WeightOnlyConv model (write_node_model).
Ends with "RTX build check: N passed, N failed".
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]


def write_minimal_model(path: Path, k: int = 256, n: int = 128, bits: int = 4, group: int = 128) -> Path:
    sys.path.insert(0, str(REPO))
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from graph_passes.layouts import interleaved_v1

    rng = np.random.default_rng()
    u = rng.integers(0, 1 << bits, size=(k, n)).astype(np.uint8)
    packed = interleaved_v1.pack(u, bits)
    scales = (rng.uniform(0.5, 2.0, size=(k // group, n)) * 0.01).astype(np.float16)
    bias = rng.normal(0, 0.1, size=n).astype(np.float16)
    node = helper.make_node(
        "WeightOnlyLinear", ["X", "packed_weight", "scales", "bias"], ["Y"], name="woq0", domain="trt_woq",
        bits=bits, group_size=group, in_features=k, out_features=n, layout=1, has_zeros=0, has_bias=1,
        plugin_version="1", plugin_namespace="")
    graph = helper.make_graph(
        [node], "woq_minimal",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT16, ["batch", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, ["batch", n])],
        initializer=[numpy_helper.from_array(packed, "packed_weight"), numpy_helper.from_array(scales, "scales"),
                     numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("trt_woq", 1)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


NODE_MODELS = ("w8a8", "conv")


def write_node_model(path: Path, kind: str) -> Path:
    """A one-node model from the op contract's node builder, as the conformance harness's cases are made
    (tests/plugins/conformance/make_cases.py): ``w8a8``, X [batch, 256] fp16 -> WeightOnlyLinear INT8 g128 with
    W8A8 asymmetric activations + bias -> Y; ``conv``, X [batch, 128, 9, 11] fp16 -> WeightOnlyConv INT4 g128 3x3
    stride 2, pads 1, + bias, fused SiLU -> Y."""
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests" / "plugins" / "conformance"))
    import make_cases
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from graph_passes import op as woq_op
    from graph_passes import op_conv
    from graph_passes.registry.epilogues import EPILOGUES

    rng = np.random.default_rng()
    if kind == "w8a8":
        k, n, bits, g = 256, 128, 8, 128
        attrs = woq_op.WoqAttributes(bits=bits, group_size=g, in_features=k, out_features=n, has_bias=1,
                                     act_mode=make_cases.W8A8, act_asymmetric=1)
        x_shape, y_shape = ["batch", k], ["batch", n]
    else:
        c, n, bits, g, (h, w) = 128, 64, 4, 128, (9, 11)
        attrs = op_conv.ConvAttributes(bits=bits, group_size=g, in_features=c * 9, out_features=n, has_bias=1,
                                       in_channels=c, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                                       ).with_epilogue(EPILOGUES.get("silu"))
        oh, ow = attrs.output_hw(h, w)
        x_shape, y_shape = ["batch", c, h, w], ["batch", n, oh, ow]
    u, scales, zeros, bias = make_cases.random_weights(rng, bits, g, False, attrs.in_features, n, "fp16", True)
    node, inits = make_cases.node_and_inits(f"{kind}0", attrs, u, scales, zeros, bias, "fp16")
    node.input[0], node.output[0] = "X", "Y"
    graph = helper.make_graph([node], f"woq_{kind}", [helper.make_tensor_value_info("X", TensorProto.FLOAT16, x_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, y_shape)],
                              initializer=list(inits.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("trt_woq", 1)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def step(name: str) -> None:
    print(f"STEP {name}", flush=True)


def child(plugin: str, onnx_path: str, engine_out: str | None) -> int:
    """Runs in the child process: load, parse, build. Returns 0 when a serialized engine was produced."""
    step("import tensorrt_rtx")
    import tensorrt_rtx as trt

    print(f"tensorrt_rtx {trt.__version__}", flush=True)

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            if int(severity) <= int(trt.ILogger.Severity.INFO) or "WeightOnlyLinear" in msg or "plugin" in msg.lower():
                print(f"[TRT {str(severity).split('.')[-1]}] {msg}", flush=True)

    logger = Logger()
    step("builder")
    builder = trt.Builder(logger)
    step("load_library")
    registry = builder.get_plugin_registry() if hasattr(builder, "get_plugin_registry") else trt.get_plugin_registry()
    handle = registry.load_library(plugin)
    print(f"load_library -> {handle}", flush=True)
    step("get_creator")
    getter = getattr(registry, "get_creator", None) or getattr(registry, "get_plugin_creator")
    creator = getter("WeightOnlyLinear", "1", "")
    print(f"creator: {creator} interface {getattr(creator, 'interface_info', None)}", flush=True)
    if creator is None:
        return 3
    step("create_network")
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    step("parse")
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(onnx_path)
    for i in range(parser.num_errors):
        print(f"parser error: {parser.get_error(i)}", flush=True)
    if not ok:
        return 4
    print(f"network: {network.num_layers} layers, {network.num_inputs} inputs", flush=True)
    step("config")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        t = network.get_input(i)
        shape = list(t.shape)
        lo = [1 if d < 0 else d for d in shape]
        opt = [8 if d < 0 else d for d in shape]
        hi = [64 if d < 0 else d for d in shape]
        profile.set_shape(t.name, lo, opt, hi)
        print(f"profile {t.name}: {lo} {opt} {hi} ({t.dtype})", flush=True)
    config.add_optimization_profile(profile)
    step("build_serialized_network")
    blob = builder.build_serialized_network(network, config)
    if blob is None:
        print("build_serialized_network returned None", flush=True)
        return 5
    size = blob.nbytes if hasattr(blob, "nbytes") else len(bytes(blob))
    print(f"serialized engine: {size} bytes", flush=True)
    if engine_out:
        Path(engine_out).write_bytes(bytes(blob))
    step("done")
    return 0


def run_pair(plugin: str, onnx_path: Path, preload: str | None, log: Path,
             expect_log: str | None = None) -> tuple[bool, str]:
    env = dict(os.environ, TRT_WOQ_PLUGIN_TRACE="1", TRT_WOQ_PLUGIN_LOG_STDERR="1", PYTHONUNBUFFERED="1")
    if expect_log:
        del env["TRT_WOQ_PLUGIN_LOG_STDERR"]  # the message must arrive through TensorRT's logger
    if preload:
        env["LD_PRELOAD"] = preload
    proc = subprocess.run([sys.executable, __file__, "--child", plugin, str(onnx_path)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    with log.open("a") as f:
        f.write(f"===== {plugin} x {onnx_path}\n{proc.stdout}\n")
    lines = proc.stdout.splitlines()
    steps = [ln[5:] for ln in lines if ln.startswith("STEP ")]
    rc = proc.returncode
    status = f"exit {rc}" if rc >= 0 else f"killed by {signal.Signals(-rc).name}"
    summary = f"{Path(plugin).parent.name}/{Path(plugin).name} x {onnx_path.name}: {status}, last step " \
              f"{steps[-1] if steps else '(none)'}"
    if expect_log:
        delivered = [ln for ln in lines if ln.startswith("[TRT") and expect_log in ln]
        summary += f"; plugin message {expect_log!r} through TensorRT's logger: " + \
            (delivered[0] if delivered else "NOT delivered")
        return bool(delivered) and rc >= 0, summary
    if rc != 0:
        traces = [ln for ln in lines if ln.startswith("[trt_woq trace]")]
        tail = [ln for ln in lines if not ln.startswith("[trt_woq trace]")][-25:]
        summary += "\n  last plugin calls: " + ", ".join(t.split("] ", 1)[1] for t in traces[-8:])
        summary += "\n  " + "\n  ".join(tail)
    return rc == 0 and steps[-1:] == ["done"], summary


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plugin", action="append", required=True, help="plugin library (repeatable)")
    ap.add_argument("--onnx", action="append", type=Path, default=[], help="ONNX model (repeatable)")
    ap.add_argument("--node-models", action="store_true", help="also a one-node W8A8 model and a WeightOnlyConv one")
    ap.add_argument("--preload", help="terminate_backtrace.so to LD_PRELOAD in the child")
    ap.add_argument("--out", type=Path, default=Path("."), help="folder for logs and the minimal model")
    ap.add_argument("--expect-log", help="invalid-node mode: pass when the plugin's message containing this text "
                                         "reaches TensorRT's logger (the build itself is expected to fail)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    models = list(args.onnx) or [write_minimal_model(args.out / "woq_minimal.onnx")]
    if args.node_models:
        models += [write_node_model(args.out / f"woq_{kind}.onnx", kind) for kind in NODE_MODELS]
    passed = failed = 0
    (args.out / "rtx_children.log").write_text("")
    for plugin in args.plugin:
        for model in models:
            ok, summary = run_pair(plugin, model, args.preload, args.out / "rtx_children.log", args.expect_log)
            print(("PASS " if ok else "FAIL ") + summary, flush=True)
            passed += ok
            failed += not ok
    print(f"RTX build check: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
