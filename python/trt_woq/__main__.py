"""trt-woq with TensorRT (``python -m trt_woq``, console script ``trt-woq``).

Every subcommand of ``python -m graph_passes`` (quantize, inspect: the same code and options), plus the ones that
need TensorRT: ``build`` (an engine from a quantized model) and ``compare`` (the quantized model as a TensorRT engine
with the WeightOnlyLinear plugin against the original in ONNX Runtime). ``python -m trt_woq SUBCOMMAND --help``.
Errors print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import os
import sys

from graph_passes import __main__ as cli
from trt_woq.errors import TrtWoqError


def cmd_compare(args) -> int:
    """Run ORIGINAL with ONNX Runtime and QUANTIZED as a TensorRT engine (with the plugin) on the same inputs.

    The engine is built for the shapes of the inputs. Same inputs, figures and PASSED / FAILED rule as
    python -m graph_passes compare: every output finite, non-empty, cosine >= --min-cosine, by default INT8 0.999
    and INT4 0.85 (below the worst of 40 input seeds on the sample model, whose logits reach 0.99927 with INT8 and
    0.864 with INT4 per channel). Exit status 0 PASSED, 1 FAILED. The plugin library: TRT_WOQ_PLUGIN_PATH or the one
    installed with trt_woq.
    """
    from trt_woq.compare import compare_trt

    report = compare_trt(args.original, args.quantized, **cli.compare_kwargs(args))
    print(report.format())
    return 0 if report.passed else 1


def cmd_build(args) -> int:
    """Build a TensorRT engine from MODEL (needs TensorRT; the plugin format also the trt_woq plugin library).

    Calls trt_woq.engine.build_engine. Without --profile, dynamic dims get the runtime's default ranges. An existing
    ENGINE is refused unless --force; ENGINE and the timing cache may never be MODEL or its external data.
    """
    from graph_passes.errors import UserError
    from graph_passes.files import same_file
    from graph_passes.pipeline import outputs_for
    from trt_woq.engine import build_engine

    engine = args.output or (os.path.splitext(args.model)[0] + ".engine")
    outputs = outputs_for(args.model, args.force)
    outputs.add(engine, "engine", "choose another engine path (-o)")
    if args.timing_cache:  # read and rewritten in place (not one of the outputs renamed into place)
        fix = "choose another --timing-cache file"
        outputs.refuse_inputs(args.timing_cache, fix)
        if os.path.isdir(args.timing_cache):
            raise UserError(f"{args.timing_cache}: is a folder; {fix}")
        if same_file(args.timing_cache, engine):
            raise UserError(f"{args.timing_cache}: is also the engine; {fix}")
        folder = os.path.dirname(os.path.abspath(args.timing_cache))
        if not os.path.isdir(folder):
            raise UserError(f"{args.timing_cache}: folder {folder} does not exist; {fix}")
    if args.plugin and not os.path.isfile(args.plugin):
        raise UserError(f"{args.plugin}: no such file; --plugin takes the WeightOnlyLinear plugin library")
    kwargs = {"precision": args.precision, "verbose": args.verbose}
    if args.plugin:
        kwargs["plugin_path"] = args.plugin
    if args.timing_cache:
        kwargs["timing_cache"] = args.timing_cache
    if args.profile:
        kwargs["profiles"] = [cli._parse_profile(args.profile)]
    with outputs:
        build_engine(args.model, outputs.path_for(engine), **kwargs)
        outputs.commit()
    print(f"wrote {engine}")
    return 0


def build_parser():
    parser = cli.build_parser({"compare": cmd_compare, "build": cmd_build})
    parser.description = __doc__
    return parser


def main(argv=None) -> int:
    return cli.main(argv, build_parser(), (TrtWoqError,))


if __name__ == "__main__":
    sys.exit(main())
