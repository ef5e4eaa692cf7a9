"""trt-woq: low-bit weight quantization of ONNX models for TensorRT (``python -m graph_passes``).

Subcommands: quantize, inspect, compare (ONNX Runtime), twin. ``python -m graph_passes SUBCOMMAND --help`` for each.
The TensorRT commands (build, compare against an engine) are ``python -m trt_woq``'s: it offers every subcommand.
Errors print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys

from graph_passes.config import FORMATS, QuantConfig
from graph_passes.errors import UserError
from graph_passes.registry.act_modes import ACT_MODES
from graph_passes.registry.formats import WEIGHT_FORMATS, all_bits, all_group_sizes
from graph_passes.registry.methods import METHODS

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # the shell's status for SIGINT
MAX_INPUT_ELEMENTS = 1 << 28  # per generated compare input: 1 GiB of float32


# ------------------------------------------------------------------------------------------------------ commands
def cmd_quantize(args) -> int:
    """Quantize the weights of MODEL's MatMul / Gemm / Conv nodes to INT8, INT4 or FP6 (weight-only or W8A8).

    Writes OUT (default MODEL.woq_<options>.onnx), with WeightOnlyLinear nodes for the TensorRT plugin (--format
    plugin) or standard DequantizeLinear + MatMul (--format qdq, opset 21). Prints a summary of the nodes rewritten and
    skipped (with reasons) and the weight bytes before / after. A node that cannot be quantized (non-constant weight,
    K not a multiple of 64 or of the group size, NaN/Inf, ...) is skipped and listed; when no node at all can be
    quantized nothing is written and the command fails. An existing OUT is refused unless --force; the input is never
    modified. Models with external data are read from beside MODEL, and OUT uses external data (OUT.data) when MODEL
    did or the weights come near protobuf's 2 GB limit. --method awq / gptq first run the calibration samples
    (--calib-data / --calib-script) through MODEL with ONNX Runtime and keep statistics of each linear's input.
    """
    from graph_passes.pipeline import quantize_model

    config = _config(args, progress=not args.quiet)
    report = quantize_model(args.model, args.output, config, force=args.force, report_path=args.report,
                            calib_feeds=_calib_feeds(args))
    print(report.format())
    print(f"wrote {report.output}" + (f" and {report.output}.data" if report.external_data else ""))
    return 0


def cmd_inspect(args) -> int:
    """Show which MatMul / Gemm / Conv nodes of MODEL the options would quantize, and why the others not.

    Reads only the graph (weights stay on disk, but conv weights are read to apply the integer-weight policy); prints
    quantize's summary of what would be rewritten and skipped (no rounding or byte figures: those need the
    quantized weights), then one line per node.
    """
    from graph_passes.pipeline import inspect_model

    config = _config(args, progress=False)
    report = inspect_model(args.model, config, report_path=args.report, force=args.force)
    print(report.format())
    for r in report.rewritten:
        shared = ", shared weight" if r.shared else ""
        casts = f", Casts to {r.act_dtype}" if r.casts else ""
        print(f"  rewrite  {r.node} [{r.pattern}] K={r.k} N={r.n} weight={r.weight}{casts}{shared}")
    for s in report.skipped:
        print(f"  skip     {s.node} [{s.op}] {s.reason}" + (f" ({s.detail})" if s.detail else ""))
    return 0


def cmd_compare(args) -> int:
    """Run ORIGINAL and QUANTIZED with ONNX Runtime on the same inputs; per output max abs / rel error and cosine.

    A plugin-format model runs through its Q/DQ twin. PASSED when every output is finite, non-empty and its cosine
    similarity reaches the threshold: --min-cosine, else a default by the quantized weights' bit width (INT8 0.999,
    FP6 0.96, INT4 0.85; W8A8 0.98: below the worst of 40 input seeds on the sample model, samples/llama, whose logits
    reach 0.99927 with INT8, 0.9695 with FP6 g128, 0.864 with INT4 per channel and 0.98508 with W8A8 per channel; a
    broken model lands far below). Exit status 0 PASSED, 1 FAILED. Inputs: real ones with --data / --data-script,
    else generated (masks all ones, ids within the embedding table, positions 0..seq-1). Against a TensorRT engine:
    python -m trt_woq compare.
    """
    if args.trt:
        raise UserError("--trt: the TensorRT comparison is `python -m trt_woq compare ORIGINAL QUANTIZED` "
                        "(same options)")
    try:
        from graph_passes.compare import compare
    except ImportError as exc:
        raise UserError(f"compare is not available: {exc}") from None
    report = compare(args.original, args.quantized, **compare_kwargs(args))
    print(report.format())
    return 0 if report.passed else 1


def compare_kwargs(args) -> dict:
    """Keyword arguments of graph_passes.compare.compare (and trt_woq's compare_trt) from the compare options,
    checked; the models, their external data references and the data files too."""
    from graph_passes.feeds import check_sources

    if not 0 <= args.seed < 2**32:
        raise UserError(f"--seed {args.seed}: must be in 0 .. 2**32 - 1")
    _check_model_files(args.original, args.quantized)
    check_sources(args.data, args.data_script)
    return {"input_shapes": _parse_shapes(args.input_shape), "seed": args.seed, "min_cosine": args.min_cosine,
            "data": args.data, "data_script": args.data_script, "samples": args.samples}


def cmd_build(args) -> int:
    """Build a TensorRT engine from MODEL: python -m trt_woq build (same options), the CLI that has TensorRT."""
    raise UserError("build needs TensorRT: run `python -m trt_woq build MODEL ...` (same options)")


# -------------------------------------------------------------------------------------------------------- parsing
def _config(args, progress: bool) -> QuantConfig:
    return QuantConfig(bits=args.bits, group_size=args.group_size, asymmetric=args.asymmetric, format=args.format,
                       method=args.method, act_dtype=args.act_dtype, act_mode=args.act_mode,
                       act_asymmetric=args.act_asymmetric, include=tuple(args.include or ()),
                       exclude=tuple(args.exclude or ()),
                       min_elements=args.min_elements, fuse_activations=not args.no_fuse_activations,
                       smooth_alpha=args.smooth_alpha, progress=progress)


def _calib_feeds(args) -> list | None:
    """The calibration samples of --calib-data / --calib-script (None when neither is given); refused when no option
    given reads them."""
    if not (args.calib_data or args.calib_script):
        if args.calib_samples is not None:
            raise UserError("--calib-samples counts samples of --calib-data / --calib-script; give one of them")
        return None
    if not METHODS.get(args.method).needs_calibration and args.smooth_alpha is None:
        option = "--calib-data" if args.calib_data else "--calib-script"
        readers = " / ".join(m.name for m in METHODS if m.needs_calibration)
        raise UserError(f"{option}: only --method {readers} and --smooth-alpha read calibration data; --method "
                        f"{args.method} without --smooth-alpha would ignore it")
    from graph_passes.feeds import load_feeds, model_input_specs
    from graph_passes.pipeline import read_graph

    return load_feeds(args.calib_data, args.calib_script, model_input_specs(read_graph(args.model)),
                      args.calib_samples, options=("--calib-data", "--calib-script", "--calib-samples"))


def _parse_shapes(items):
    if not items:
        return None
    shapes = {}
    for item in items:
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise UserError(f"--input-shape {item!r}: expected NAME:D0,D1,... (e.g. input_ids:1,128)")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d)
        except ValueError:
            raise UserError(f"--input-shape {item!r}: dims must be integers") from None
        if any(d < 1 for d in shape):
            raise UserError(f"--input-shape {item!r}: every dim must be >= 1")
        elements = 1
        for d in shape:
            elements *= d
        if elements > MAX_INPUT_ELEMENTS:
            raise UserError(f"--input-shape {item!r}: {elements} elements, more than the {MAX_INPUT_ELEMENTS} "
                            f"a generated input may have")
        shapes[name] = shape
    return shapes


def _check_model_files(*paths) -> None:
    """Each model (a readable ONNX file) and its external data references, checked before anything else runs, so
    that a bad path is what the user hears of first (not a missing TensorRT, say)."""
    from graph_passes.files import external_data_files
    from graph_passes.pipeline import read_graph

    for path in paths:
        external_data_files(read_graph(path), path)


def _parse_profile(items) -> dict:
    """NAME:D0,D1,... (static) or NAME:MIN/OPT/MAX with each a D0,D1,... shape -> {name: shape or (min, opt, max)}."""
    profile = {}
    for item in items:
        name, sep, spec = item.rpartition(":")
        try:
            shapes = [tuple(int(d) for d in part.split(",") if d) for part in spec.split("/")]
        except ValueError:
            shapes = []
        if not sep or not name or len(shapes) not in (1, 3) or any(not s for s in shapes):
            raise UserError(f"--profile {item!r}: expected NAME:D0,D1,... or NAME:MIN/OPT/MAX "
                            f"(e.g. input_ids:1,1/1,128/8,512)")
        profile[name] = shapes[0] if len(shapes) == 1 else tuple(shapes)
    return profile


def _doc(fn) -> tuple[str, str]:
    import inspect

    text = inspect.cleandoc(fn.__doc__ or "")
    return text.splitlines()[0], text


def _add_quant_options(p) -> None:
    formats = ", ".join(f"{f.bits} = {f.label}" for f in WEIGHT_FORMATS)
    p.add_argument("--bits", type=int, choices=all_bits(), default=4, help=f"weight format: {formats} (default 4)")
    p.add_argument("--group-size", type=int, choices=all_group_sizes(), default=128,
                   help="weights per scale along K; -1 = one scale per output channel (default 128)")
    p.add_argument("--asymmetric", action="store_true", help="store zero points (default symmetric)")
    p.add_argument("--format", choices=FORMATS, default="plugin",
                   help="plugin: WeightOnlyLinear nodes; qdq: DequantizeLinear + MatMul (default plugin)")
    p.add_argument("--method", choices=METHODS.names(), default="rtn",
                   help="; ".join(f"{m.name} = {m.summary}" for m in METHODS) + " (default rtn)")
    p.add_argument("--act-dtype", choices=("fp16", "bf16"), default="fp16",
                   help="compute dtype of the op in an FP32 graph (Casts around it); FP16/BF16 graphs keep "
                        "theirs (default fp16)")
    p.add_argument("--act-mode", choices=ACT_MODES.names(), default="weight_only",
                   help="; ".join(f"{m.name} = {m.summary}" for m in ACT_MODES) + " (default weight_only)")
    p.add_argument("--act-asymmetric", action="store_true",
                   help="w8a8: quantize activations with an offset per row block (default symmetric)")
    p.add_argument("--smooth-alpha", type=float, metavar="ALPHA",
                   help="w8a8: SmoothQuant smoothing with migration strength ALPHA in [0, 1] (0.5 is usual), from "
                        "the calibration data's per-channel activation ranges")
    p.add_argument("--include", action="append", metavar="REGEX",
                   help="quantize only nodes whose name matches (repeatable)")
    p.add_argument("--exclude", action="append", metavar="REGEX", help="skip nodes whose name matches (repeatable)")
    p.add_argument("--no-fuse-activations", action="store_true",
                   help="keep the Relu / Clip / SiLU / GELU after a quantized node as ONNX ops (plugin format)")
    p.add_argument("--min-elements", type=int, default=0, metavar="N",
                   help="skip weights with fewer than N elements (default 0)")
    p.add_argument("--report", metavar="FILE.json", type=_file_name, help="also write the summary as JSON")


def _file_name(text: str) -> str:
    """An output path as given; an empty one would otherwise read as "not given" (default output, no report)."""
    if not text:
        raise argparse.ArgumentTypeError("empty path; give a file name")
    return text


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse would print the usage first)
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def add_compare_arguments(p) -> None:
    p.add_argument("original", metavar="ORIGINAL", help="the float .onnx model (the reference)")
    p.add_argument("quantized", metavar="QUANTIZED", help="the quantized .onnx model (output of quantize)")
    p.add_argument("--data", metavar="FILE.npz", help="real inputs: one array per model input, named after it, "
                   "first axis = sample (sample i is array[i])")
    p.add_argument("--data-script", metavar="FILE.py[:FUNC]", help="real inputs: FUNC() (default load_data) "
                   "returns an iterable of {input name: array} dicts")
    p.add_argument("--samples", type=int, metavar="N", help="use at most N samples of the data (default all)")
    p.add_argument("--input-shape", action="append", metavar="NAME:D0,D1,...",
                   help="shape of a generated input with dynamic dims (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    p.add_argument("--min-cosine", type=float, help="FAILED (exit 1) when an output's cosine similarity is below "
                   "this (default by weight bit width, see above)")
    p.add_argument("--trt", action="store_true", help=argparse.SUPPRESS)  # answered with the trt_woq command


def add_build_arguments(p) -> None:
    p.add_argument("model", metavar="MODEL", help=".onnx file to build (plugin or Q/DQ format)")
    p.add_argument("-o", "--output", metavar="ENGINE", help="engine file (default MODEL.engine)")
    p.add_argument("--profile", action="append", metavar="NAME:MIN/OPT/MAX",
                   help="shape range of an input, each shape D0,D1,... (repeatable; one profile)")
    p.add_argument("--precision", choices=("auto", "strongly-typed", "fp16", "bf16", "fp32"), default="auto",
                   help="auto: strongly typed where TensorRT has it (default)")
    p.add_argument("--plugin", metavar="LIB", help="plugin library (default: the one installed with trt_woq)")
    p.add_argument("--timing-cache", metavar="FILE", help="TensorRT timing cache, read and updated")
    p.add_argument("--force", action="store_true", help="overwrite an existing engine")
    p.add_argument("-v", "--verbose", action="store_true", help="TensorRT's verbose log")


def cmd_twin(args) -> int:
    """Write the ONNX-Runtime-runnable twin of a plugin-format model, to evaluate it with any harness.

    Every WeightOnlyLinear node becomes its weight + MatMul (+ Add for the bias), every WeightOnlyConv node its
    weight + Conv: INT8 / INT4 as DequantizeLinear of the packed integers (opset 21), FP6 as the dequantized float
    weight (ONNX has no FP6 type). The twin computes with exactly what the packed file holds; compare runs the same
    twin.
    """
    from graph_passes.compare import write_twin

    count = write_twin(args.quantized, args.output, force=args.force)
    print(f"twin: {count} WeightOnlyLinear / WeightOnlyConv node(s) replaced; wrote {args.output}")
    return 0


def build_parser(commands: dict | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; ``commands`` replaces the functions (and help) of subcommands: trt_woq's CLI passes its
    TensorRT ``compare`` and ``build``."""
    commands = commands or {}
    parser = _Parser(prog="trt-woq", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    sub.required = True

    def command(name, default):
        """The subparser of ``name``: its help is the docstring of the function that runs it."""
        fn = commands.get(name, default)
        short, long = _doc(fn)
        p = sub.add_parser(name, help=short, description=long, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=fn)
        return p

    p = command("quantize", cmd_quantize)
    p.add_argument("model", metavar="MODEL", help="input .onnx file (external data beside it is read too)")
    p.add_argument("-o", "--output", metavar="OUT", type=_file_name, help="output .onnx file")
    _add_quant_options(p)
    p.add_argument("--calib-data", metavar="FILE.npz",
                   help="calibration inputs (for --method awq / gptq and --smooth-alpha): one array per model input, "
                        "named after it, with a leading sample axis (sample i is fed as array[i])")
    p.add_argument("--calib-script", metavar="FILE.py[:FUNC]",
                   help="calibration inputs: FUNC() (default load_data) returns an iterable of feed dicts "
                        "(polygraphy's data-loader convention)")
    p.add_argument("--calib-samples", type=int, metavar="N", help="use at most N calibration samples (default all)")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing output / report (never the input or its external data)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress (a bar on a terminal, a short log otherwise)")

    p = command("inspect", cmd_inspect)
    p.add_argument("model", metavar="MODEL", help="input .onnx file (external data beside it is read too)")
    _add_quant_options(p)
    p.add_argument("--force", action="store_true", help="overwrite an existing report")

    p = command("compare", cmd_compare)
    add_compare_arguments(p)

    p = command("twin", cmd_twin)
    p.add_argument("quantized", metavar="QUANTIZED", help="a plugin-format model (quantize --format plugin)")
    p.add_argument("-o", "--output", metavar="TWIN", required=True, help="output .onnx file")
    p.add_argument("--force", action="store_true", help="overwrite an existing output")

    p = command("build", cmd_build)
    add_build_arguments(p)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trt-woq")
    except PackageNotFoundError:
        return "(not installed: running from a source tree)"


def main(argv=None, parser=None, errors: tuple = ()) -> int:
    """Runs the CLI; ``parser`` and extra ``errors`` (printed as one line, exit 2) are trt_woq's CLI's."""
    from graph_passes.layouts import LayoutError

    try:
        args = (parser or build_parser()).parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error already printed on one line (2)
        return int(exc.code or 0)
    try:
        return args.func(args)
    except (UserError, LayoutError, OSError, *errors) as exc:
        print(f"trt-woq {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; the temporary files are already removed
        print(f"trt-woq {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _one_line(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.filename and exc.strerror:  # disk full, permissions: the file and why
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())
