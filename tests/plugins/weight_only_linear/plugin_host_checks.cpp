/*
 * WeightOnlyLinear's host code on the CPU (../host_harness.h: fake kernels and CUDA runtime, TensorRT's headers
 * only):
 *
 *   plugin_host_checks NODES_FILE
 *
 * NODES_FILE holds WeightOnlyLinear nodes as graph_passes writes them (test_plugin_host.py). For each: the fields as
 * TensorRT's ONNX parser builds them -> createPlugin(kBUILD) reads every attribute; getFieldsToSerialize ->
 * createPlugin(kRUNTIME), clone and attachToContext keep every field; output types and shapes for ranks 2 to 4 with
 * dynamic dims; supportsFormatCombination; configurePlugin, getWorkspaceSize, tactics; enqueue hands the kernels the
 * right operand of every position. Then fixed cases: invalid fields (null plugin, a message quoting the value), the
 * timing cache ID, sizes beyond int32, the failure paths of configurePlugin and enqueue, and the workspace
 * reservation: enqueue hands the kernels what getWorkspaceSize returned for the profile (kept through
 * serialization), so a need the bound misses fails with the kernels' workspace error instead of an overrun.
 */
#include "../host_harness.h"

#include <cmath>
#include <limits>

using namespace host;

namespace
{

PluginUnderTest const kPlugin{"WeightOnlyLinear", "node"};

std::vector<Attr> baseAttrs()
{
    return {{"INT", "bits", {"4"}}, {"INT", "group_size", {"128"}}, {"INT", "in_features", {"384"}},
        {"INT", "out_features", {"64"}}, {"INT", "layout", {"1"}}, {"INT", "has_zeros", {"0"}},
        {"INT", "has_bias", {"0"}}, {"INT", "activation", {"0"}}, {"STRING", "plugin_version", {"1"}},
        {"STRING", "plugin_namespace", {}}};
}

void setCandidates()
{
    fakes::gCandidates.clear();
    fakes::Candidate small;
    small.name = "fake_gemv";
    small.maxM = 16;
    small.score = 2;
    fakes::Candidate big;
    big.name = "fake_gemm";
    big.minM = 17;
    // A split plan: the need depends on the count of 16-row tiles, not monotonically.
    big.workspace = [](trt_woq_linear_params const& p) {
        int64_t const tiles = (p.m + 15) / 16;
        return size_t(tiles % 5 == 2 ? 7000 : 100) * size_t(p.n);
    };
    fakes::Candidate any;
    any.name = "fake_any";
    any.score = 0;
    fakes::Candidate w8a8;
    w8a8.name = "fake_w8a8";
    w8a8.formats = 1u << TRT_WOQ_WEIGHT_INT8;
    w8a8.modes = 1u << TRT_WOQ_ACT_MODE_W8A8_DYNAMIC;
    w8a8.epilogues = 1u << TRT_WOQ_EPILOGUE_NONE;
    w8a8.score = 3;
    w8a8.workspace = [](trt_woq_linear_params const& p) { return size_t(p.m) * size_t(p.k); };
    fakes::gCandidates = {small, big, any, w8a8};
}

// ------------------------------------------------------------------------------------------------ one node
void checkNode(Node const& node)
{
    gWhere = node.label;
    AttrMap const a = byName(node.attrs);
    int64_t const k = intOf(a, "in_features");
    int64_t const n = intOf(a, "out_features");
    int64_t const bits = intOf(a, "bits");
    int32_t const hasZeros = static_cast<int32_t>(intOf(a, "has_zeros"));
    int32_t const hasBias = static_cast<int32_t>(intOf(a, "has_bias"));
    int32_t const actAsym = static_cast<int32_t>(intOf(a, "act_asymmetric"));
    int32_t const nbIn = 3 + hasZeros + hasBias + actAsym;

    // Every attribute the creator lists reads back as written; the optional ones absent read as their default.
    // Round trip: serialize -> createPlugin(kRUNTIME); clone; attachToContext.
    NodePlugins const made = kPlugin.fromNode(node);
    if (made.plugin == nullptr)
    {
        return;
    }
    Views v = views(made.plugin.get());
    check(describe(v.runtime->getFieldsToSerialize()) == made.serialized, "getFieldsToSerialize twice");

    // Output types.
    std::vector<DataType> inTypes(static_cast<size_t>(nbIn), DataType::kHALF);
    inTypes[1] = DataType::kINT32;
    for (DataType t : {DataType::kHALF, DataType::kBF16})
    {
        inTypes[0] = t;
        DataType out = DataType::kFLOAT;
        check(v.build->getOutputDataTypes(&out, 1, inTypes.data(), nbIn) == 0 && out == t, "output type");
    }
    inTypes[0] = DataType::kFLOAT;
    DataType out{};
    check(v.build->getOutputDataTypes(&out, 1, inTypes.data(), nbIn) != 0, "FLOAT activation refused");
    check(v.build->getOutputDataTypes(&out, 1, inTypes.data(), nbIn + 1) != 0, "an extra input refused");

    // Output shapes: ranks 2 .. 4, leading dims symbolic, K constant or symbolic.
    for (int32_t rank = 2; rank <= 4; ++rank)
    {
        for (bool kConst : {true, false})
        {
            ExprBuilder eb;
            std::vector<DimsExprs> ins(static_cast<size_t>(nbIn));
            ins[0].nbDims = rank;
            for (int32_t d = 0; d + 1 < rank; ++d)
            {
                ins[0].d[d] = eb.symbol(3 + d);
            }
            ins[0].d[rank - 1] = kConst ? eb.constant(k) : eb.symbol(k);
            DimsExprs outs[1];
            bool const ok = v.build->getOutputShapes(ins.data(), nbIn, nullptr, 0, outs, 1, eb) == 0;
            bool same = ok && outs[0].nbDims == rank && outs[0].d[rank - 1]->isConstant()
                && outs[0].d[rank - 1]->getConstantValue() == n;
            for (int32_t d = 0; same && d + 1 < rank; ++d)
            {
                same = value(outs[0].d[d]) == 3 + d && !outs[0].d[d]->isConstant();
            }
            check(same, "output shape for rank " + std::to_string(rank) + (kConst ? " (K constant)" : " (K symbolic)"));
        }
        ExprBuilder eb;
        std::vector<DimsExprs> ins(static_cast<size_t>(nbIn));
        ins[0].nbDims = rank;
        for (int32_t d = 0; d < rank; ++d)
        {
            ins[0].d[d] = eb.symbol(2);
        }
        ins[0].d[rank - 1] = eb.constant(k + 64);
        DimsExprs outs[1];
        gLogger.messages.clear();
        check(v.build->getOutputShapes(ins.data(), nbIn, nullptr, 0, outs, 1, eb) != 0
                && gLogger.saw({std::to_string(k + 64), std::to_string(k)}),
            "a last dimension other than in_features refused, quoting it");
    }

    // Formats: every position refuses other formats; the types enqueue handles.
    checkFormats(v.build, nbIn,
        {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT32, DataType::kINT8}, TensorFormat::kHWC8,
        [&](int32_t pos) { return pos == 1 || (actAsym && pos == nbIn - 1); });

    // Configure a profile M in [1, 4096] over a rank-3 activation.
    int64_t const groups = intOf(a, "group_size") == -1 ? 1 : k / intOf(a, "group_size");
    int64_t const rows = bits == 8 ? n / 2 : n / 4;
    int64_t const cols = bits == 6 ? 3 * k / 4 : k / 2;
    std::vector<DynamicPluginTensorDesc> in(static_cast<size_t>(nbIn));
    in[0] = tensor(DataType::kBF16, dims({-1, -1, k}), dims({1, 1, k}), dims({1, 128, k}), dims({2, 2048, k}));
    in[1] = tensor(DataType::kINT32, dims({rows, cols}));
    for (int32_t i = 2; i < nbIn; ++i)
    {
        in[static_cast<size_t>(i)] = tensor(DataType::kBF16, dims({groups, n}));
    }
    if (hasBias)
    {
        in[static_cast<size_t>(3 + hasZeros)] = tensor(DataType::kBF16, dims({n}));
    }
    if (actAsym)
    {
        in[static_cast<size_t>(nbIn - 1)] = tensor(DataType::kINT32, dims({groups, n}));
    }
    DynamicPluginTensorDesc outDesc = tensor(DataType::kBF16, dims({-1, -1, n}));
    setCandidates();
    gLogger.messages.clear();
    bool const configured = v.build->configurePlugin(in.data(), nbIn, &outDesc, 1) == 0;
    if (!check(configured, "configurePlugin:" + gLogger.all()))
    {
        return;
    }
    // Workspace: at least every need over M in [1, 4096] of every candidate that supports that M.
    size_t need = 0;
    trt_woq_linear_params q{};
    q.n = n;
    q.k = k;
    q.weight_format = bits == 8 ? TRT_WOQ_WEIGHT_INT8 : bits == 6 ? TRT_WOQ_WEIGHT_FP6_E3M2 : TRT_WOQ_WEIGHT_INT4;
    q.act_mode = static_cast<trt_woq_act_mode>(intOf(a, "act_mode"));
    q.epilogue = static_cast<trt_woq_epilogue>(intOf(a, "activation"));
    for (q.m = 1; q.m <= 4096; ++q.m)
    {
        for (int32_t id = 0; id < trt_woq_linear_candidate_count(); ++id)
        {
            if (fakes::supports(id, q))
            {
                need = std::max(need, fakes::gCandidates[static_cast<size_t>(id)].workspace(q));
            }
        }
    }
    size_t const ws = v.build->getWorkspaceSize(in.data(), nbIn, &outDesc, 1);
    check(ws >= need, "workspace " + std::to_string(ws) + " < the largest need " + std::to_string(need));

    // Tactics: the candidates serving this node over the whole profile, as their tactics.
    std::vector<int32_t> wantTactics;
    for (int32_t id = 0; id < trt_woq_linear_candidate_count(); ++id)
    {
        q.m = 1;
        bool ok = fakes::supports(id, q);
        q.m = 4096;
        if (ok && fakes::supports(id, q))
        {
            wantTactics.push_back(fakes::tacticOf(fakes::gCandidates[static_cast<size_t>(id)].name));
        }
    }
    int32_t const nbTactics = v.build->getNbTactics();
    std::vector<int32_t> tactics(static_cast<size_t>(std::max(nbTactics, 0)));
    check(nbTactics == static_cast<int32_t>(wantTactics.size())
            && v.build->getValidTactics(tactics.data(), nbTactics) == 0 && tactics == wantTactics,
        "tactics");
    check(v.build->getTimingCacheID() != nullptr, "a timing cache ID after configurePlugin");

    // Runtime: every tactic and the default, at M = 3 and M = 4 * 100; enqueue's operands.
    std::vector<int32_t> runTactics = tactics;
    runTactics.push_back(0);
    runTactics.push_back(fakes::tacticOf("fake_gemv")); // serves M <= 16 only: the dispatch for larger M
    Views rv = views(made.runtime.get());
    for (int32_t tactic : runTactics)
    {
        for (Dims x : {dims({1, 3, k}), dims({4, 100, k})})
        {
            int64_t const m = x.d[0] * x.d[1];
            check(rv.runtime->setTactic(tactic) == 0, "setTactic " + std::to_string(tactic));
            Launch const l = launch(rv.runtime, in, x, outDesc, dims({x.d[0], x.d[1], n}), hasZeros, hasBias);
            if (l.params == nullptr)
            {
                continue;
            }
            trt_woq_linear_params const& p = *l.params;
            std::vector<void const*> const& ptrs = l.operands.inputs;
            int32_t const tid = trt_woq_linear_candidate_by_tactic(tactic);
            q.m = m;
            int32_t const wantId = tactic != 0 && fakes::supports(tid, q) ? tid : TRT_WOQ_CANDIDATE_AUTO;
            check(fakes::gRuns[0].id == wantId,
                "tactic " + std::to_string(tactic) + " at M=" + std::to_string(m) + " ran candidate "
                    + std::to_string(fakes::gRuns[0].id) + ", expected " + std::to_string(wantId));
            check(p.weight_sums == (actAsym ? ptrs[static_cast<size_t>(nbIn - 1)] : nullptr), "weight_sums pointer");
            check(p.output == l.operands.output && p.workspace == l.operands.workspace,
                "output and workspace pointers");
            check(p.m == m && p.n == n && p.k == k && p.group_size == intOf(a, "group_size")
                    && p.layout_version == intOf(a, "layout") && p.weight_format == q.weight_format,
                "sizes and format");
            check(p.act_type == TRT_WOQ_ACT_BF16 && p.act_mode == intOf(a, "act_mode")
                    && p.act_asymmetric == actAsym && p.op == TRT_WOQ_OP_LINEAR,
                "activation type and mode");
            check(p.epilogue == intOf(a, "activation"), "epilogue");
            if (p.epilogue == TRT_WOQ_EPILOGUE_CLIP)
            {
                check(p.clip_min == static_cast<float>(std::stod(a.at("clip_min").values[0]))
                        && p.clip_max == static_cast<float>(std::stod(a.at("clip_max").values[0])),
                    "clip bounds");
            }
            check(p.workspace_size <= ws, "enqueue's workspace_size " + std::to_string(p.workspace_size)
                    + " within getWorkspaceSize " + std::to_string(ws));
        }
    }
}

// ------------------------------------------------------------------------------------------------ fixed cases
void invalidFields()
{
    gWhere = "invalid fields";
    bool const baseValid = std::unique_ptr<IPluginV3>(kPlugin.create(baseAttrs())) != nullptr;
    check(baseValid, "the base node is valid:" + gLogger.all());
    for (char const* name : {"bits", "group_size", "in_features", "out_features", "layout", "has_zeros", "has_bias"})
    {
        kPlugin.expectRefused(without(baseAttrs(), name), {"required field", name}, std::string("missing ") + name);
    }
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "bits", {"5"}}), {"bits 5"}, "bits 5");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "group_size", {"96"}}), {"group_size 96"}, "group_size 96");
    kPlugin.expectRefused(
        with(baseAttrs(), {"INT", "group_size", {"256"}}), {"group_size 256", "384"}, "group_size 256 vs K");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "in_features", {"100"}}), {"in_features 100"}, "in_features 100");
    kPlugin.expectRefused(
        with(baseAttrs(), {"INT", "in_features", {"-128"}}), {"in_features -128"}, "in_features -128");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "out_features", {"6"}}), {"out_features 6"}, "out_features 6");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "layout", {"2"}}), {"layout 2"}, "layout 2 for INT4");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "has_zeros", {"2"}}), {"has_zeros 2"}, "has_zeros 2");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "has_bias", {"-1"}}), {"has_bias -1"}, "has_bias -1");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "activation", {"6"}}), {"activation 6"}, "activation 6");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "act_mode", {"2"}}), {"act_mode 2"}, "act_mode 2");
    kPlugin.expectRefused(with(baseAttrs(), {"INT", "act_mode", {"1"}}), {"bits 4"}, "W8A8 with INT4 weights");
    kPlugin.expectRefused(
        with(baseAttrs(), {"INT", "act_asymmetric", {"1"}}), {"act_asymmetric 1"}, "act_asymmetric alone");
    auto clip = with(baseAttrs(), {"INT", "activation", {"2"}});
    kPlugin.expectRefused(with(with(clip, {"FLOAT", "clip_min", {"1"}}), {"FLOAT", "clip_max", {"0"}}), {"clip_min 1"},
        "clip_min > clip_max");
    kPlugin.expectRefused(with(with(clip, {"FLOAT", "clip_min", {"nan"}}), {"FLOAT", "clip_max", {"0"}}),
        {"clip_min nan"}, "clip_min NaN");
    // graph_passes refuses a clip node without its bounds (WoqAttributes._read); so must the plugin, not clip to 0.
    kPlugin.expectRefused(
        with(clip, {"FLOAT", "clip_max", {"6"}}), {"activation 2", "clip_min"}, "clip without clip_min");
    kPlugin.expectRefused(
        with(clip, {"FLOAT", "clip_min", {"0"}}), {"activation 2", "clip_max"}, "clip without clip_max");
    check(std::unique_ptr<IPluginV3>(kPlugin.create(with(with(clip, {"FLOAT", "clip_min", {"-inf"}}),
              {"FLOAT", "clip_max", {"6"}})))
            != nullptr,
        "clip with clip_min -inf");

    gLogger.messages.clear();
    std::unique_ptr<IPluginV3> big(
        kPlugin.createAsGiven(with(baseAttrs(), {"INT64", "in_features", {"1099511627776"}})));
    check(big == nullptr && gLogger.saw({"1099511627776"}), "an int64 beyond int32 refused, quoting it");
    std::vector<Attr> asInt64 = baseAttrs();
    for (Attr& x : asInt64)
    {
        x.type = x.type == "INT" ? "INT64" : x.type;
    }
    check(std::unique_ptr<IPluginV3>(kPlugin.createAsGiven(asInt64)) != nullptr,
        "kINT64 fields (TensorRT's Python PluginField of an int) accepted");
    gLogger.messages.clear();
    check(std::unique_ptr<IPluginV3>(kPlugin.createAsGiven(with(baseAttrs(), {"FLOAT", "bits", {"4"}}))) == nullptr
            && gLogger.saw({"bits"}),
        "bits as a float refused");
    check(std::unique_ptr<IPluginV3>(kPlugin.createAsGiven(with(baseAttrs(), {"INTS", "bits", {"4", "4"}}))) == nullptr,
        "bits as two values refused");
    gLogger.messages.clear();
    check(std::unique_ptr<IPluginV3>(kPlugin.createAsGiven(with(baseAttrs(), {"STRING", "plugin_version", {"2"}})))
                == nullptr
            && gLogger.saw({"\"2\""}),
        "plugin_version 2 refused, quoting it");
    check(kPlugin.creator()->createPlugin("n", nullptr, TensorRTPhase::kBUILD) == nullptr, "null fields");
    PluginFieldCollection broken{3, nullptr};
    check(kPlugin.creator()->createPlugin(nullptr, &broken, TensorRTPhase::kBUILD) == nullptr,
        "fields count without fields");
}

// Configures `plugin` for M in [1, 64] over [M, K] fp16 with a packed weight of `w` and `groups` rows of scales;
// returns configurePlugin's status.
int32_t configure(IPluginV3* plugin, int64_t k, int64_t n, Dims w, int64_t groups = 3, int32_t nbIn = 3)
{
    std::vector<DynamicPluginTensorDesc> in(static_cast<size_t>(nbIn));
    in[0] = tensor(DataType::kHALF, dims({-1, k}), dims({1, k}), dims({8, k}), dims({64, k}));
    in[1] = tensor(DataType::kINT32, w);
    for (int32_t i = 2; i < nbIn; ++i)
    {
        in[static_cast<size_t>(i)] = tensor(DataType::kHALF, dims({groups, n}));
    }
    DynamicPluginTensorDesc out = tensor(DataType::kHALF, dims({-1, n}));
    return views(plugin).build->configurePlugin(in.data(), nbIn, &out, 1);
}

void timingCacheId()
{
    gWhere = "timing cache ID";
    setCandidates();
    // Two nodes alike but for the fused epilogue (a Llama MLP's gate_proj with SiLU and its up_proj) have the same
    // I/O shapes; the epilogue changes the kernels' cost and which candidates serve the node.
    std::string ids[2];
    int32_t i = 0;
    for (char const* act : {"0", "3"})
    {
        std::unique_ptr<IPluginV3> p(kPlugin.create(with(baseAttrs(), {"INT", "activation", {act}})));
        check(p && configure(p.get(), 384, 64, dims({16, 192})) == 0, "configure");
        char const* id = p ? views(p.get()).build->getTimingCacheID() : nullptr;
        ids[i++] = id ? id : "";
    }
    check(!ids[0].empty() && ids[0] != ids[1], "activation 0 and 3 share the timing cache ID \"" + ids[0] + "\"");
}

void sizesBeyondInt32()
{
    gWhere = "sizes beyond int32";
    setCandidates();
    // FP6, K = 2^30: the packed weight is [N / 4, 3 K / 4] = [1, 805306368]; 3 K overflows int32.
    auto attrs = with(with(with(with(baseAttrs(), {"INT", "bits", {"6"}}), {"INT", "layout", {"2"}}),
                           {"INT", "in_features", {"1073741824"}}),
        {"INT", "out_features", {"4"}});
    std::unique_ptr<IPluginV3> p(kPlugin.create(attrs));
    gLogger.messages.clear();
    bool const configured
        = p && configure(p.get(), int64_t(1) << 30, 4, dims({1, 805306368}), (int64_t(1) << 30) / 128) == 0;
    check(configured, "FP6 K = 2^30 with its packed weight [1, 805306368]:" + gLogger.all());

    // Workspace beyond 4 GiB: M up to 2^22 rows, the W8A8 fake needs M * K bytes.
    auto w8 = with(with(with(with(baseAttrs(), {"INT", "bits", {"8"}}), {"INT", "act_mode", {"1"}}),
                        {"INT", "in_features", {"8192"}}),
        {"INT", "group_size", {"-1"}});
    std::unique_ptr<IPluginV3> q(kPlugin.create(w8));
    std::vector<DynamicPluginTensorDesc> in(3);
    in[0] = tensor(DataType::kHALF, dims({-1, -1, 8192}), dims({1, 1, 8192}), dims({1, 1, 8192}),
        dims({1024, 4096, 8192}));
    in[1] = tensor(DataType::kINT32, dims({32, 4096}));
    in[2] = tensor(DataType::kHALF, dims({1, 64}));
    DynamicPluginTensorDesc out = tensor(DataType::kHALF, dims({-1, -1, 64}));
    check(q && views(q.get()).build->configurePlugin(in.data(), 3, &out, 1) == 0, "configure W8A8");
    size_t const ws = q ? views(q.get()).build->getWorkspaceSize(in.data(), 3, &out, 1) : 0;
    check(ws == size_t(1024) * 4096 * 8192, "workspace for M = 2^22, K = 8192: " + std::to_string(ws));
}

void failurePaths()
{
    gWhere = "failure paths";
    setCandidates();
    std::unique_ptr<IPluginV3> p(kPlugin.create(baseAttrs()));
    gLogger.messages.clear();
    check(configure(p.get(), 384, 64, dims({16, 100})) != 0 && gLogger.saw({"packed_weight is [16, 100]", "[16, 192]"}),
        "a wrong packed_weight shape refused, quoting both");
    gLogger.messages.clear();
    check(configure(p.get(), 384, 64, dims({16, 192}), 1) != 0 && gLogger.saw({"scales is [1, 64]", "[3, 64]"}),
        "scales of one group for group_size 128, K 384 refused, quoting both");
    gLogger.messages.clear();
    check(configure(p.get(), 384, 64, dims({16, 192}), 3, 4) != 0 && gLogger.saw({"expected 3 inputs"}),
        "an input count that does not match the flags refused");
    fakes::gNoDevice = true;
    gLogger.messages.clear();
    check(configure(p.get(), 384, 64, dims({16, 192})) != 0 && gLogger.saw({"cudaErrorNoDevice"}),
        "configurePlugin without a CUDA device fails with the CUDA error");
    fakes::gNoDevice = false;
    fakes::gCandidates.clear();
    gLogger.messages.clear();
    check(configure(p.get(), 384, 64, dims({16, 192})) == 0, "configure with no candidate at all (dispatch at run)");
    setCandidates();
    fakes::gCandidates.resize(1); // fake_gemv: M <= 16, the profile reaches 64
    gLogger.messages.clear();
    check(configure(p.get(), 384, 64, dims({16, 192})) != 0 && gLogger.saw({"no kernel serves", "M=64"}),
        "configurePlugin refuses a profile no kernel serves, naming M");

    setCandidates();
    check(configure(p.get(), 384, 64, dims({16, 192})) == 0, "configure");
    IPluginV3OneRuntime* rt = views(p.get()).runtime;
    gLogger.messages.clear();
    check(rt->setTactic(12345) != 0 && gLogger.saw({"tactic 12345", "0 = default", "fake_gemv = "}),
        "an unknown tactic refused, listing the node's tactics");
    PluginTensorDesc in[3]{};
    in[0].type = DataType::kHALF;
    in[0].format = TensorFormat::kLINEAR;
    in[0].dims = dims({5, 384});
    PluginTensorDesc out{};
    out.type = DataType::kHALF;
    out.dims = dims({5, 64});
    check(rt->setTactic(0) == 0 && rt->onShapeChange(in, 3, &out, 1) == 0, "onShapeChange");
    in[0].dims = dims({5, 320});
    check(rt->onShapeChange(in, 3, &out, 1) != 0, "onShapeChange refuses K 320");
    in[0].dims = dims({5, 384});
    void const* ptrs[3] = {&in[0], &in[1], &in[2]};
    void* o = &out;
    fakes::gRunStatus = TRT_WOQ_ERR_CUDA;
    gLogger.messages.clear();
    check(rt->enqueue(in, &out, ptrs, &o, nullptr, nullptr) != 0
            && gLogger.saw({"enqueue", "fake CUDA error", "M=5", "cudaErrorFakeLaunchFailure"}),
        "a kernel failure fails enqueue with the status and the CUDA error in TensorRT's log");
    fakes::gRunStatus = TRT_WOQ_OK;
    fakes::gRuns.clear();
    in[0].dims = dims({0, 384});
    check(rt->enqueue(in, &out, ptrs, &o, nullptr, nullptr) == 0 && fakes::gRuns.empty(), "M = 0 launches nothing");
}

// The serialized field of the reservations (docs/plugin.md): 11 int64 per profile.
constexpr char const* kRESERVATIONS = "workspace_reservations";

// onShapeChange + enqueue of the base node (K 384, N 64, fp16) at [m, 384]; the status, the calls in fakes::gRuns.
int32_t enqueueAt(IPluginV3* p, int64_t m)
{
    std::vector<PluginTensorDesc> const in{tensor(DataType::kHALF, dims({m, 384})).desc,
        tensor(DataType::kINT32, dims({16, 192})).desc, tensor(DataType::kHALF, dims({3, 64})).desc};
    IPluginV3OneRuntime* rt = views(p).runtime;
    return rt->setTactic(0) == 0 ? enqueueOnce(rt, in, tensor(DataType::kHALF, dims({m, 64})).desc) : -2;
}

void workspaceReservation()
{
    gWhere = "workspace reservation";
    setCandidates();
    // The dispatch's choice from M = 17 on, needing 1 MiB at M = 21 only: not a multiple of 16 rows, nor the
    // profile's min / opt / max, so getWorkspaceSize does not see it.
    fakes::Candidate spike;
    spike.name = "fake_spike";
    spike.minM = 17;
    spike.score = 9;
    spike.workspace = [](trt_woq_linear_params const& p) { return p.m == 21 ? size_t(1) << 20 : size_t(0); };
    fakes::gCandidates.push_back(spike);

    std::unique_ptr<IPluginV3> p(kPlugin.create(baseAttrs()));
    check(p && configure(p.get(), 384, 64, dims({16, 192})) == 0, "configure M in [1, 64]");
    std::vector<DynamicPluginTensorDesc> in(3);
    in[0] = tensor(DataType::kHALF, dims({-1, 384}), dims({1, 384}), dims({8, 384}), dims({64, 384}));
    in[1] = tensor(DataType::kINT32, dims({16, 192}));
    in[2] = tensor(DataType::kHALF, dims({3, 64}));
    DynamicPluginTensorDesc out = tensor(DataType::kHALF, dims({-1, 64}));
    size_t const ws = views(p.get()).build->getWorkspaceSize(in.data(), 3, &out, 1);
    check(ws == size_t(7000) * 64, "getWorkspaceSize " + std::to_string(ws) + ": fake_gemm's 7000 N at M in [17, 32]");

    for (int64_t m : {5, 20, 64})
    {
        bool const ran = enqueueAt(p.get(), m) == 0 && fakes::gRuns.size() == 1;
        check(ran && fakes::gRuns[0].params.workspace_size == ws,
            "enqueue at M=" + std::to_string(m) + " hands the kernels the reservation " + std::to_string(ws));
    }
    gLogger.messages.clear();
    check(enqueueAt(p.get(), 21) != 0 && fakes::gRuns.size() == 1 && fakes::gRuns[0].params.workspace_size == ws
            && gLogger.saw({"enqueue", "workspace missing or too small", "M=21", "needs 1048576",
                "reserved " + std::to_string(ws)}),
        "M=21, needing more than the reservation, fails with the kernels' workspace error in TensorRT's log:"
            + gLogger.all());
    gLogger.messages.clear();
    check(enqueueAt(p.get(), 65) != 0 && fakes::gRuns.empty()
            && gLogger.saw({"enqueue", "M=65", "none of the profiles", "HALF [1..64]"}),
        "M=65, outside the profile, refused, quoting it and the profile:" + gLogger.all());

    // Serialize -> createPlugin(kRUNTIME), attachToContext: the reservation travels.
    PluginFieldCollection const* ser = views(p.get()).runtime->getFieldsToSerialize();
    std::string const words = fieldValues(ser, kRESERVATIONS);
    std::string const want = std::to_string(TRT_WOQ_ACT_FP16) + ",1,0,0,8,0,0,64,0,0," + std::to_string(ws);
    check(words == want, std::string(kRESERVATIONS) + " serialized as \"" + words + "\", expected \"" + want + "\"");
    std::unique_ptr<IPluginV3> rt(kPlugin.createRuntime(ser));
    check(rt && describe(views(rt.get()).runtime->getFieldsToSerialize()) == describe(ser),
        "the runtime plugin serializes the same fields");
    std::unique_ptr<IPluginV3> attached(rt ? views(rt.get()).runtime->attachToContext(nullptr) : nullptr);
    for (IPluginV3* q : {rt.get(), attached.get()})
    {
        check(q && enqueueAt(q, 20) == 0 && fakes::gRuns.size() == 1 && fakes::gRuns[0].params.workspace_size == ws,
            "deserialized (and attached) plugin hands the kernels the reservation");
        check(q && enqueueAt(q, 21) != 0, "deserialized plugin: M=21 fails");
    }

    // Fields without it (serialized unconfigured) load; enqueue passes the current M's own need.
    std::unique_ptr<IPluginV3> fresh(kPlugin.create(baseAttrs()));
    PluginFieldCollection const* plain = views(fresh.get()).runtime->getFieldsToSerialize();
    check(fieldValues(plain, kRESERVATIONS).empty(), "no reservation field before configurePlugin");
    std::unique_ptr<IPluginV3> old(kPlugin.createRuntime(plain));
    check(old && enqueueAt(old.get(), 21) == 0 && fakes::gRuns.size() == 1
            && fakes::gRuns[0].params.workspace_size == size_t(1) << 20,
        "without a reservation enqueue passes the current M's need");

    // A malformed reservation field is refused, quoting it.
    kPlugin.expectRuntimeRefused(baseAttrs(),
        {"INTS", kRESERVATIONS, {"0", "1", "0", "0", "8", "0", "0", "64", "0", "0", "100"}},
        {kRESERVATIONS, "kINT64", "length 11"}, "a reservation field of kINT32 values refused");
    setCandidates();
}

} // namespace

int main(int argc, char** argv)
{
    return kPlugin.run(
        argc, argv, checkNode, {invalidFields, timingCacheId, sizesBeyondInt32, failurePaths, workspaceReservation});
}
