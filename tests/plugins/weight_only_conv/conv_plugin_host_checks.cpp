/*
 * WeightOnlyConv's host code on the CPU (../host_harness.h: fake kernels and CUDA runtime, TensorRT's headers
 * only):
 *
 *   conv_plugin_host_checks NODES_FILE
 *
 * NODES_FILE holds WeightOnlyConv nodes as graph_passes writes them (test_conv_plugin_host.py). For each: the fields
 * as TensorRT's ONNX parser builds them -> createPlugin(kBUILD) reads every attribute; getFieldsToSerialize ->
 * createPlugin(kRUNTIME), clone and attachToContext keep every field; the output shape against
 * OH = (H + top + bottom - dh (kh - 1) - 1) // sh + 1 for symbolic and constant H / W; supportsFormatCombination;
 * configurePlugin, getWorkspaceSize; enqueue hands the kernels the geometry and the operand of every position. Then
 * fixed cases: invalid fields and operand shapes (null plugin or failed call, a message quoting the value); the
 * workspace of a need that is not monotonic in the image size: getWorkspaceSize covers every input of the profile,
 * enqueue hands the kernels the reservation (kept through serialization), and where the profile is too large to
 * visit whole, an input needing more fails enqueue with the kernels' workspace error in TensorRT's log.
 */
#include "../host_harness.h"

using namespace host;

namespace
{

PluginUnderTest const kPlugin{"WeightOnlyConv", "conv"};

int64_t floorDiv(int64_t a, int64_t b)
{
    return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

struct Geometry
{
    int64_t c, kh, kw, sh, sw, top, left, bottom, right, dh, dw;
    explicit Geometry(AttrMap const& a)
        : c(intOf(a, "in_channels"))
        , kh(intOf(a, "kernel_shape", 0, 0))
        , kw(intOf(a, "kernel_shape", 0, 1))
        , sh(intOf(a, "strides", 0, 0))
        , sw(intOf(a, "strides", 0, 1))
        , top(intOf(a, "pads", 0, 0))
        , left(intOf(a, "pads", 0, 1))
        , bottom(intOf(a, "pads", 0, 2))
        , right(intOf(a, "pads", 0, 3))
        , dh(intOf(a, "dilations", 0, 0))
        , dw(intOf(a, "dilations", 0, 1))
    {
    }
    int64_t oh(int64_t h) const
    {
        return floorDiv(h + top + bottom - dh * (kh - 1) - 1, sh) + 1;
    }
    int64_t ow(int64_t w) const
    {
        return floorDiv(w + left + right - dw * (kw - 1) - 1, sw) + 1;
    }
};

void setCandidates()
{
    fakes::gCandidates.clear();
    fakes::Candidate conv;
    conv.name = "fake_conv";
    conv.ops = 1u << TRT_WOQ_OP_CONV2D;
    conv.workspace = [](trt_woq_linear_params const& p) { return size_t(p.m) * size_t(p.k) * 2; };
    fakes::Candidate linear;
    linear.name = "fake_linear";
    linear.score = 5;
    fakes::gCandidates = {linear, conv};
}

// ------------------------------------------------------------------------------------------------ one node
void checkNode(Node const& node)
{
    gWhere = node.label;
    AttrMap const a = byName(node.attrs);
    Geometry const g(a);
    int64_t const k = intOf(a, "in_features");
    int64_t const n = intOf(a, "out_features");
    int64_t const bits = intOf(a, "bits");
    int32_t const hasZeros = static_cast<int32_t>(intOf(a, "has_zeros"));
    int32_t const hasBias = static_cast<int32_t>(intOf(a, "has_bias"));
    int32_t const nbIn = 3 + hasZeros + hasBias;

    NodePlugins const made = kPlugin.fromNode(node);
    if (made.plugin == nullptr)
    {
        return;
    }
    Views v = views(made.plugin.get());

    // Output types.
    std::vector<DataType> inTypes(static_cast<size_t>(nbIn), DataType::kBF16);
    inTypes[1] = DataType::kINT32;
    DataType out = DataType::kFLOAT;
    check(v.build->getOutputDataTypes(&out, 1, inTypes.data(), nbIn) == 0 && out == DataType::kBF16, "output type");
    inTypes[0] = DataType::kFLOAT;
    check(v.build->getOutputDataTypes(&out, 1, inTypes.data(), nbIn) != 0, "FLOAT activation refused");

    // Output shapes: H and W symbolic (probed at several sizes) or constant; batch passed through.
    for (int64_t h : {g.dh * (g.kh - 1) + 1, int64_t(7), int64_t(16), int64_t(33)})
    {
        for (int64_t w : {g.dw * (g.kw - 1) + 1, int64_t(9), int64_t(32)})
        {
            if (g.oh(h) < 1 || g.ow(w) < 1)
            {
                continue;
            }
            for (bool constant : {false, true})
            {
                ExprBuilder eb;
                std::vector<DimsExprs> ins(static_cast<size_t>(nbIn));
                ins[0].nbDims = 4;
                ins[0].d[0] = eb.symbol(3);
                ins[0].d[1] = eb.constant(g.c);
                ins[0].d[2] = constant ? eb.constant(h) : eb.symbol(h);
                ins[0].d[3] = constant ? eb.constant(w) : eb.symbol(w);
                DimsExprs outs[1];
                bool const ok = v.build->getOutputShapes(ins.data(), nbIn, nullptr, 0, outs, 1, eb) == 0;
                check(ok && outs[0].nbDims == 4 && value(outs[0].d[0]) == 3 && outs[0].d[1]->isConstant()
                        && outs[0].d[1]->getConstantValue() == n && value(outs[0].d[2]) == g.oh(h)
                        && value(outs[0].d[3]) == g.ow(w),
                    "output shape for " + std::to_string(h) + " x " + std::to_string(w) + ": expected "
                        + std::to_string(g.oh(h)) + " x " + std::to_string(g.ow(w)) + ", got "
                        + (ok ? std::to_string(value(outs[0].d[2])) + " x " + std::to_string(value(outs[0].d[3]))
                              : std::string("a failure")));
            }
        }
    }
    {
        ExprBuilder eb;
        std::vector<DimsExprs> ins(static_cast<size_t>(nbIn));
        ins[0].nbDims = 4;
        ins[0].d[0] = eb.symbol(1);
        ins[0].d[1] = eb.constant(g.c + 8);
        ins[0].d[2] = eb.symbol(16);
        ins[0].d[3] = eb.symbol(16);
        DimsExprs outs[1];
        check(v.build->getOutputShapes(ins.data(), nbIn, nullptr, 0, outs, 1, eb) != 0, "C other than in_channels");
        ins[0].nbDims = 3;
        check(v.build->getOutputShapes(ins.data(), nbIn, nullptr, 0, outs, 1, eb) != 0, "rank 3 refused");
    }

    // Formats.
    checkFormats(v.build, nbIn, {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT32},
        TensorFormat::kCHW32, [](int32_t pos) { return pos == 1; });

    // Configure: batch 1 .. 3, H / W from the smallest that fits to 24 (a static C); workspace over every input.
    int64_t const groups = intOf(a, "group_size") == -1 ? 1 : k / intOf(a, "group_size");
    int64_t const hMin = std::max<int64_t>(g.dh * (g.kh - 1) + 1 - g.top - g.bottom, 1);
    int64_t const wMin = std::max<int64_t>(g.dw * (g.kw - 1) + 1 - g.left - g.right, 1);
    std::vector<DynamicPluginTensorDesc> in(static_cast<size_t>(nbIn));
    in[0] = tensor(DataType::kHALF, dims({-1, g.c, -1, -1}), dims({1, g.c, hMin, wMin}), dims({2, g.c, 16, 16}),
        dims({3, g.c, 24, 24}));
    in[1] = tensor(DataType::kINT32, dims({bits == 8 ? n / 2 : n / 4, k / 2}));
    for (int32_t i = 2; i < nbIn; ++i)
    {
        in[static_cast<size_t>(i)] = tensor(DataType::kHALF, dims({groups, n}));
    }
    if (hasBias)
    {
        in[static_cast<size_t>(nbIn - 1)] = tensor(DataType::kHALF, dims({n}));
    }
    DynamicPluginTensorDesc outDesc = tensor(DataType::kHALF, dims({-1, n, -1, -1}));
    setCandidates();
    gLogger.messages.clear();
    bool const configured = v.build->configurePlugin(in.data(), nbIn, &outDesc, 1) == 0;
    if (!check(configured, "configurePlugin:" + gLogger.all()))
    {
        return;
    }
    size_t const ws = v.build->getWorkspaceSize(in.data(), nbIn, &outDesc, 1);
    check(ws == size_t(3) * g.oh(24) * g.ow(24) * k * 2, "workspace " + std::to_string(ws));

    // Runtime: enqueue's operands and geometry.
    Views rv = views(made.runtime.get());
    for (Dims x : {dims({1, g.c, hMin, wMin}), dims({3, g.c, 17, 24})})
    {
        Launch const l
            = launch(rv.runtime, in, x, outDesc, dims({x.d[0], n, g.oh(x.d[2]), g.ow(x.d[3])}), hasZeros, hasBias);
        if (l.params == nullptr)
        {
            continue;
        }
        trt_woq_linear_params const& p = *l.params;
        trt_woq_conv_geometry const& cg = p.conv;
        check(p.weight_sums == nullptr && p.output == l.operands.output && p.workspace == l.operands.workspace,
            "output and workspace");
        check(p.op == TRT_WOQ_OP_CONV2D && p.act_type == TRT_WOQ_ACT_FP16 && p.act_mode == 0
                && p.epilogue == intOf(a, "activation") && p.group_size == intOf(a, "group_size")
                && p.layout_version == intOf(a, "layout"),
            "op and options");
        check(p.m == x.d[0] * g.oh(x.d[2]) * g.ow(x.d[3]) && p.n == n && p.k == k, "M, N, K");
        check(cg.batch == x.d[0] && cg.in_channels == g.c && cg.in_h == x.d[2] && cg.in_w == x.d[3]
                && cg.kernel_h == g.kh && cg.kernel_w == g.kw && cg.stride_h == g.sh && cg.stride_w == g.sw
                && cg.pad_top == g.top && cg.pad_left == g.left && cg.pad_bottom == g.bottom
                && cg.pad_right == g.right && cg.dilation_h == g.dh && cg.dilation_w == g.dw
                && cg.out_h == g.oh(x.d[2]) && cg.out_w == g.ow(x.d[3]) && cg.k_order == intOf(a, "k_order")
                && cg.activation_nhwc == 0,
            "conv geometry");
        check(p.workspace_size <= ws, "enqueue's workspace_size within getWorkspaceSize");
    }
}

// ------------------------------------------------------------------------------------------------ fixed cases
std::vector<Attr> baseAttrs()
{
    return {{"INT", "bits", {"4"}}, {"INT", "group_size", {"64"}}, {"INT", "in_features", {"576"}},
        {"INT", "out_features", {"32"}}, {"INT", "layout", {"1"}}, {"INT", "has_zeros", {"0"}},
        {"INT", "has_bias", {"0"}}, {"INT", "activation", {"0"}}, {"INT", "in_channels", {"64"}},
        {"INTS", "kernel_shape", {"3", "3"}}, {"INTS", "strides", {"1", "1"}}, {"INTS", "pads", {"1", "1", "1", "1"}},
        {"INTS", "dilations", {"1", "1"}}};
}

void invalidFields()
{
    gWhere = "invalid fields";
    bool const baseValid = std::unique_ptr<IPluginV3>(kPlugin.create(baseAttrs())) != nullptr;
    check(baseValid, "the base node is valid:" + gLogger.all());
    for (char const* name : {"bits", "group_size", "in_features", "out_features", "layout", "has_zeros", "has_bias",
             "in_channels", "kernel_shape", "strides", "pads", "dilations"})
    {
        kPlugin.expectRefused(without(baseAttrs(), name), {"required field", name}, std::string("missing ") + name);
    }
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "bits", {"6"}}), {"bits 6"}, "FP6");
    kPlugin.expectRefused(
        with(baseAttrs(), {"INT", "in_channels", {"32"}}), {"in_channels 32", "576"}, "C x kh x kw != K");
    kPlugin.expectRefused(with(baseAttrs(), {"INTS", "kernel_shape", {"0", "3"}}), {"kernel_shape [0, 3]"}, "kernel 0");
    kPlugin.expectRefused(with(baseAttrs(), {"INTS", "strides", {"1", "0"}}), {"strides [1, 0]"}, "stride 0");
    kPlugin.expectRefused(with(baseAttrs(), {"INTS", "dilations", {"-1", "1"}}), {"dilations [-1, 1]"}, "dilation -1");
    kPlugin.expectRefused(with(baseAttrs(), {"INTS", "pads", {"1", "-1", "1", "1"}}), {"pads"}, "pad -1");
    kPlugin.expectRefused(with(baseAttrs(), {"INTS", "pads", {"1", "1"}}), {"pads", "length 2"}, "two pads");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "k_order", {"2"}}), {"k_order 2"}, "k_order 2");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "group_size", {"48"}}), {"group_size 48"}, "group_size 48");
    auto clip = with(baseAttrs(), {"INT", "activation", {"2"}});
    kPlugin.expectRefused(with(with(clip, {"FLOAT", "clip_min", {"2"}}), {"FLOAT", "clip_max", {"1"}}), {"clip_min 2"},
        "clip_min > clip_max");
    kPlugin.expectRefused(
        with(clip, {"FLOAT", "clip_max", {"6"}}), {"activation 2", "clip_min"}, "clip without clip_min");
    kPlugin.expectRefused(
        with(clip, {"FLOAT", "clip_min", {"0"}}), {"activation 2", "clip_max"}, "clip without clip_max");
}

void operandShapes()
{
    gWhere = "operand shapes";
    setCandidates();
    for (int32_t bad = 1; bad <= 4; ++bad)
    {
        auto attrs = with(with(baseAttrs(), {"INT", "has_zeros", {"1"}}), {"INT", "has_bias", {"1"}});
        std::unique_ptr<IPluginV3> p(kPlugin.create(attrs));
        std::vector<DynamicPluginTensorDesc> in(5);
        in[0] = tensor(DataType::kHALF, dims({-1, 64, -1, -1}), dims({1, 64, 8, 8}), dims({1, 64, 8, 8}),
            dims({2, 64, 16, 16}));
        in[1] = tensor(DataType::kINT32, dims({8, 288}));
        in[2] = tensor(DataType::kHALF, dims({9, 32}));
        in[3] = tensor(DataType::kHALF, dims({9, 32}));
        in[4] = tensor(DataType::kHALF, dims({32}));
        std::string const names[] = {"", "packed_weight", "scales", "zeros", "bias"};
        std::string const wrong[] = {"", "[8, 144]", "[1, 32]", "[9, 16]", "[64]"};
        Dims const wrongDims[] = {{}, dims({8, 144}), dims({1, 32}), dims({9, 16}), dims({64})};
        in[static_cast<size_t>(bad)].desc.dims = wrongDims[bad];
        in[static_cast<size_t>(bad)].min = in[static_cast<size_t>(bad)].opt = in[static_cast<size_t>(bad)].max
            = wrongDims[bad];
        DynamicPluginTensorDesc out = tensor(DataType::kHALF, dims({-1, 32, -1, -1}));
        gLogger.messages.clear();
        bool const refused = p && views(p.get()).build->configurePlugin(in.data(), 5, &out, 1) != 0;
        check(refused && gLogger.saw({names[bad], wrong[bad]}),
            names[bad] + " " + wrong[bad] + " for K 576, N 32, group 64 refused, quoting it:" + gLogger.all());
    }
}

// ------------------------------------------------------------------------------------------------ workspace
// The serialized field of the reservations (docs/plugin.md): 11 int64 per profile.
constexpr char const* kRESERVATIONS = "workspace_reservations";
constexpr int32_t kWORDS = 11;

std::string dimsText(Dims const& d)
{
    std::string s = "[";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s += (i ? ", " : "") + std::to_string(d.d[i]);
    }
    return s + "]";
}

// A need like conv_wgmma's: a channels-last copy of the input plus, for one M tile count in seven, split-K partials
// (16 MiB): not monotonic in H and W, and at none of the profile's min / opt / max inputs below.
size_t spikyNeed(trt_woq_linear_params const& p)
{
    trt_woq_conv_geometry const& g = p.conv;
    size_t const copy = size_t(g.batch) * size_t(g.in_channels) * size_t(g.in_h) * size_t(g.in_w) * 2;
    return copy + ((p.m + 15) / 16 % 7 == 3 ? size_t(1) << 24 : 0);
}

void setSpikyCandidates()
{
    setCandidates();
    fakes::gCandidates[1].workspace = spikyNeed;
}

// The base node's (3 x 3, pads 1: OH = H, OW = W) need at [b, 64, h, w].
size_t needAt(int64_t b, int64_t h, int64_t w)
{
    trt_woq_linear_params p{};
    p.m = b * h * w;
    p.conv.batch = static_cast<int32_t>(b);
    p.conv.in_channels = 64;
    p.conv.in_h = static_cast<int32_t>(h);
    p.conv.in_w = static_cast<int32_t>(w);
    return spikyNeed(p);
}

struct Profile
{
    DataType type;
    Dims min, opt, max;
};

std::vector<DynamicPluginTensorDesc> baseInputs(Profile const& pr)
{
    std::vector<DynamicPluginTensorDesc> in(3);
    in[0] = tensor(pr.type, dims({-1, 64, -1, -1}), pr.min, pr.opt, pr.max);
    in[1] = tensor(DataType::kINT32, dims({8, 288}));
    in[2] = tensor(pr.type, dims({9, 32}));
    return in;
}

int32_t configureBase(IPluginV3* p, Profile const& pr)
{
    std::vector<DynamicPluginTensorDesc> in = baseInputs(pr);
    DynamicPluginTensorDesc out = tensor(pr.type, dims({-1, 32, -1, -1}));
    return views(p).build->configurePlugin(in.data(), 3, &out, 1);
}

size_t workspaceOf(IPluginV3* p, Profile const& pr)
{
    std::vector<DynamicPluginTensorDesc> in = baseInputs(pr);
    DynamicPluginTensorDesc out = tensor(pr.type, dims({-1, 32, -1, -1}));
    return views(p).build->getWorkspaceSize(in.data(), 3, &out, 1);
}

// Enqueues the base node on `x` (onShapeChange first); the status, the stand-in library's calls in fakes::gRuns.
int32_t enqueueBase(IPluginV3* p, Dims x, DataType type = DataType::kHALF)
{
    std::vector<PluginTensorDesc> const in{
        tensor(type, x).desc, tensor(DataType::kINT32, dims({8, 288})).desc, tensor(type, dims({9, 32})).desc};
    return enqueueOnce(views(p).runtime, in, tensor(type, dims({x.d[0], 32, x.d[2], x.d[3]})).desc);
}

void workspaceReservations()
{
    gWhere = "workspace reservations";
    setSpikyCandidates();
    Profile const small{DataType::kHALF, dims({1, 64, 8, 8}), dims({1, 64, 16, 16}), dims({2, 64, 20, 20})};
    size_t every = 0;
    size_t visitedBefore = 0;  // min, opt and max H / W, every batch
    for (int64_t b = 1; b <= 2; ++b)
    {
        for (int64_t h = 8; h <= 20; ++h)
        {
            for (int64_t w = 8; w <= 20; ++w)
            {
                every = std::max(every, needAt(b, h, w));
            }
        }
        for (int64_t e : {8, 16, 20})
        {
            visitedBefore = std::max(visitedBefore, needAt(b, e, e));
        }
    }
    check(every > visitedBefore, "the stand-in's largest need lies between the profile's min / opt / max inputs");

    // (a) The bound covers every input of the profile; enqueue hands the kernels exactly that.
    std::unique_ptr<IPluginV3> p(kPlugin.create(baseAttrs()));
    gLogger.messages.clear();
    check(p && configureBase(p.get(), small) == 0, "configure:" + gLogger.all());
    size_t const ws = workspaceOf(p.get(), small);
    check(ws == every, "getWorkspaceSize " + std::to_string(ws) + ", the largest need over the profile "
            + std::to_string(every));
    check(!gLogger.saw({"fails at enqueue"}), "no warning for a profile visited whole:" + gLogger.all());
    for (Dims x : {dims({1, 64, 8, 20}), dims({2, 64, 20, 20}), dims({1, 64, 9, 11})})
    {
        bool const ran = enqueueBase(p.get(), x) == 0 && fakes::gRuns.size() == 1;
        check(ran && fakes::gRuns[0].params.workspace_size == ws,
            "enqueue at " + dimsText(x) + " hands the kernels the reservation " + std::to_string(ws) + ", got "
                + (ran ? std::to_string(fakes::gRuns[0].params.workspace_size) : std::string("a failure")));
    }

    // Serialize -> createPlugin(kRUNTIME), clone, attachToContext: the reservation travels.
    PluginFieldCollection const* ser = views(p.get()).runtime->getFieldsToSerialize();
    std::string const serialized = describe(ser);
    std::string const words = fieldValues(ser, kRESERVATIONS);
    std::string const want = std::to_string(TRT_WOQ_ACT_FP16) + ",1,8,8,1,16,16,2,20,20," + std::to_string(ws);
    check(words == want, std::string(kRESERVATIONS) + " serialized as \"" + words + "\", expected \"" + want
            + "\"");
    std::unique_ptr<IPluginV3> rt(kPlugin.createRuntime(ser));
    check(rt && describe(views(rt.get()).runtime->getFieldsToSerialize()) == serialized,
        "the runtime plugin serializes the same fields");
    std::unique_ptr<IPluginV3> attached(rt ? views(rt.get()).runtime->attachToContext(nullptr) : nullptr);
    for (IPluginV3* q : {rt.get(), attached.get()})
    {
        bool const ran = q && enqueueBase(q, dims({1, 64, 8, 20})) == 0 && fakes::gRuns.size() == 1;
        check(ran && fakes::gRuns[0].params.workspace_size == ws,
            "deserialized (and attached) plugin hands the kernels the reservation " + std::to_string(ws));
    }
    check(rt && workspaceOf(rt.get(), small) == ws, "getWorkspaceSize of the deserialized plugin");

    // An input outside every profile reserved for, or of another type: refused, nothing launched.
    gLogger.messages.clear();
    check(enqueueBase(rt.get(), dims({3, 64, 16, 16})) != 0 && fakes::gRuns.empty()
            && gLogger.saw({"enqueue", "[3, 64, 16, 16]", "none of the profiles", "HALF [1..2, 8..20, 8..20]"}),
        "an input outside the profile refused, quoting it and the profile:" + gLogger.all());
    gLogger.messages.clear();
    check(enqueueBase(rt.get(), dims({1, 64, 16, 16}), DataType::kBF16) != 0 && fakes::gRuns.empty(),
        "a BF16 input against a HALF reservation refused");

    // Fields without the reservation (a plugin serialized unconfigured) load; enqueue passes the input's own need.
    std::unique_ptr<IPluginV3> fresh(kPlugin.create(baseAttrs()));
    PluginFieldCollection const* plain = views(fresh.get()).runtime->getFieldsToSerialize();
    check(fieldValues(plain, kRESERVATIONS).empty(), "no reservation field before configurePlugin");
    std::unique_ptr<IPluginV3> old(kPlugin.createRuntime(plain));
    bool const ran = old && enqueueBase(old.get(), dims({1, 64, 8, 20})) == 0 && fakes::gRuns.size() == 1;
    check(ran && fakes::gRuns[0].params.workspace_size == needAt(1, 8, 20),
        "without a reservation enqueue passes the input's own need " + std::to_string(needAt(1, 8, 20)));

    // Two profiles configured on one plugin: each keeps its reservation; an input in both gets the smaller.
    Profile const large{DataType::kHALF, dims({1, 64, 8, 8}), dims({2, 64, 24, 24}), dims({4, 64, 40, 40})};
    check(configureBase(p.get(), large) == 0, "configure a second profile");
    size_t const wsLarge = workspaceOf(p.get(), large);
    check(wsLarge > ws && workspaceOf(p.get(), small) == ws, "each profile's getWorkspaceSize");
    check(enqueueBase(p.get(), dims({1, 64, 8, 20})) == 0 && fakes::gRuns.size() == 1
            && fakes::gRuns[0].params.workspace_size == ws,
        "an input in both profiles gets the smaller reservation");
    check(enqueueBase(p.get(), dims({3, 64, 8, 20})) == 0 && fakes::gRuns.size() == 1
            && fakes::gRuns[0].params.workspace_size == wsLarge,
        "an input in the second profile only gets its reservation");
    std::string const two = fieldValues(views(p.get()).runtime->getFieldsToSerialize(), kRESERVATIONS);
    check(std::count(two.begin(), two.end(), ',') == 2 * kWORDS - 1, "two profiles serialized: " + two);

    // (b) A profile too large to visit whole: a warning at configurePlugin; an input needing more than the
    // reservation fails enqueue with the kernels' workspace error, the stand-in having seen the reservation.
    Profile const huge{DataType::kHALF, dims({1, 64, 8, 8}), dims({1, 64, 64, 64}), dims({1, 64, 200, 200})};
    std::unique_ptr<IPluginV3> h(kPlugin.create(baseAttrs()));
    gLogger.messages.clear();
    check(h && configureBase(h.get(), huge) == 0, "configure a profile of 193 x 193 inputs");
    check(gLogger.saw({"[1, 64, 8, 8] .. [1, 64, 200, 200]", "16384", "fails at enqueue"}),
        "configurePlugin warns that the bound is sampled:" + gLogger.all());
    size_t const wsHuge = workspaceOf(h.get(), huge);
    check(needAt(1, 8, 20) > wsHuge, "the stand-in needs more at [1, 64, 8, 20] than the sampled bound");
    gLogger.messages.clear();
    bool const failed = enqueueBase(h.get(), dims({1, 64, 8, 20})) != 0;
    check(failed && fakes::gRuns.size() == 1 && fakes::gRuns[0].params.workspace_size == wsHuge,
        "the stand-in library saw workspace_size = the reservation " + std::to_string(wsHuge));
    check(gLogger.saw({"enqueue", "workspace missing or too small", "[1, 64, 8, 20]",
              "needs " + std::to_string(needAt(1, 8, 20)), "reserved " + std::to_string(wsHuge)}),
        "the workspace error in TensorRT's log, quoting the need and the reservation:" + gLogger.all());
    check(enqueueBase(h.get(), dims({1, 64, 200, 200})) == 0 && fakes::gRuns[0].params.workspace_size == wsHuge,
        "the profile's largest input runs within the reservation");

    // A malformed reservation field is refused, quoting it.
    kPlugin.expectRuntimeRefused(baseAttrs(), {"INT64", kRESERVATIONS, {"0", "1", "8", "8", "1"}},
        {kRESERVATIONS, "length 5"}, "a reservation field of 5 values refused, quoting its length");
    setCandidates();
}

} // namespace

int main(int argc, char** argv)
{
    return kPlugin.run(argc, argv, checkNode, {invalidFields, operandShapes, workspaceReservations});
}
