/*
 * Conformance harness for libtrt_woq_plugin.so: drives its plugins (WeightOnlyLinear, WeightOnlyConv) the way
 * TensorRT does, without TensorRT, and checks every answer.
 *
 *   plugin_conformance PLUGIN_LIBRARY CASES_DIR [--verbose]
 *   plugin_conformance --list CASES_DIR          the cases as read, one line each (no GPU needed)
 *
 * CASES_DIR is written by make_cases.py: cases.txt names the cases; NAME.case holds one plugin node (its plugin, its
 * ONNX attributes with their types, its constant inputs, the float64 weight W[K, N] of the op's math, the
 * optimization profiles and the input shapes to run in each). Per case:
 *   1. The creator found by name / version / namespace in getCreators; getFieldNames lists every attribute of the
 *      node; the fields built as TensorRT's ONNX parser builds them (only the listed names; INT -> one kINT32,
 *      INTS -> a kINT32 array, FLOAT -> kFLOAT32, STRING -> kCHAR with the NUL counted).
 *   2. createPlugin(kBUILD); the three capability interfaces; name / version / namespace.
 *   3. Build phase: getOutputDataTypes; getOutputShapes through a test IExprBuilder whose symbols carry the sizes of
 *      a run, so the plugin's symbolic output is evaluated and compared; supportsFormatCombination over every
 *      (type, format) of every position; per profile configurePlugin, getWorkspaceSize, getNbTactics /
 *      getValidTactics.
 *   4. getFieldsToSerialize -> createPlugin(kRUNTIME) -> clone -> attachToContext.
 *   5. Runtime: every run of the profile with every tactic (and 0 = default): setTactic, onShapeChange, enqueue
 *      on a non-blocking stream (the legacy default stream once) into a NaN-poisoned output, against a float64
 *      reference (reference.h) of fresh random activations.
 * Plus: invalid field collections the case lists (createPlugin returns null and logs a message quoting the
 * value), kINT64 fields, an unknown tactic, a wrong packed_weight shape; every tactic maps back to its kernel
 * candidate through the kernels library's lookups.
 * Prints one line per check that fails, a summary per case, then "N passed, N failed"; exit status 1 on failure.
 */
#include "../trt_test_support.h"
#include "reference.h"

#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace nvinfer1;
using namespace conformance;
using namespace trt_test;

namespace
{

#define CUDA_CHECK(call)                                                                                               \
    do                                                                                                                 \
    {                                                                                                                  \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
        {                                                                                                              \
            std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, #call);             \
            std::exit(2);                                                                                              \
        }                                                                                                              \
    } while (0)

class TestResourceContext : public IPluginResourceContext
{
public:
    IGpuAllocator* getGpuAllocator() const noexcept override
    {
        return nullptr;
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return nullptr;
    }
};

// ------------------------------------------------------------------------------------------------ cases
Dims parseDims(std::string const& s)
{
    Dims d{};
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, 'x'))
    {
        d.d[d.nbDims++] = std::stoll(item);
    }
    return d;
}

std::string dimsText(Dims const& d)
{
    std::string s;
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s += (i ? "x" : "") + std::to_string(d.d[i]);
    }
    return s;
}

int64_t volume(Dims const& d)
{
    int64_t v = 1;
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        v *= d.d[i];
    }
    return v;
}

struct ConstInput
{
    bool int32{false}; // else the activation type
    Dims dims{};
    std::vector<uint8_t> bytes;
};

struct Run
{
    Dims x{};
    Dims y{};
    bool w8a8{false}; // the op's W8A8 math (docs/op.md); else X @ W as given
};

struct Profile
{
    Dims min{}, opt{}, max{};
    bool needTactics{false}; // the kernels serve this M range with at least one candidate
    std::vector<Run> runs;
};

struct Invalid
{
    std::string expect;        // text the plugin's log message must contain
    std::vector<Attr> set;     // attributes replaced (or added)
    std::vector<std::string> drop;
    std::string asFloat;       // an INT attribute passed as kFLOAT32
};

struct Case
{
    std::string name;
    std::string plugin;
    bool bf16{false};
    std::vector<Attr> attrs;
    std::vector<ConstInput> inputs; // positions 1..
    int32_t xconst{0};              // the activation axis that is a build-time constant: -1 = the last (K), 1 = C
    int32_t constAxis(Dims const& x) const
    {
        return xconst < 0 ? x.nbDims + xconst : xconst;
    }
    int64_t k{0}, n{0};
    std::vector<double> wref;       // [K, N]
    std::vector<Profile> profiles;
    std::vector<Invalid> invalid;

    Attr const* find(std::string const& a) const
    {
        for (Attr const& x : attrs)
        {
            if (x.name == a)
            {
                return &x;
            }
        }
        return nullptr;
    }
    int64_t intAttr(std::string const& a, int64_t dflt = 0) const
    {
        Attr const* x = find(a);
        return x && !x->values.empty() ? std::stoll(x->values[0]) : dflt;
    }
    double floatAttr(std::string const& a, double dflt) const
    {
        Attr const* x = find(a);
        return x && !x->values.empty() ? std::stod(x->values[0]) : dflt;
    }
    int64_t intsAttr(std::string const& a, size_t i) const
    {
        return std::stoll(find(a)->values.at(i));
    }
    bool conv() const
    {
        return plugin == "WeightOnlyConv";
    }
    int32_t nbInputs() const
    {
        return 1 + static_cast<int32_t>(inputs.size());
    }
    int32_t biasPosition() const
    {
        return intAttr("has_bias") ? static_cast<int32_t>(3 + intAttr("has_zeros")) : -1;
    }
    int64_t groups() const
    {
        int64_t const g = intAttr("group_size", -1);
        return g == -1 ? 1 : k / g;
    }
};

template <typename T>
std::vector<T> readFile(std::string const& path, size_t count)
{
    std::vector<T> v(count);
    std::ifstream f(path, std::ios::binary);
    if (!f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(T))))
    {
        std::printf("cannot read %zu values from %s\n", count, path.c_str());
        std::exit(2);
    }
    return v;
}

Case loadCase(std::string const& dir, std::string const& name)
{
    Case c;
    c.name = name;
    std::string const base = dir + "/" + name;
    std::ifstream f(base + ".case");
    if (!f)
    {
        std::printf("cannot open %s.case\n", base.c_str());
        std::exit(2);
    }
    std::string line;
    while (std::getline(f, line))
    {
        std::istringstream s(line);
        std::string key;
        s >> key;
        if (key == "plugin")
        {
            s >> c.plugin;
        }
        else if (key == "act")
        {
            std::string act;
            s >> act;
            c.bf16 = act == "bf16";
        }
        else if (key == "attr")
        {
            c.attrs.push_back(readAttr(s));
        }
        else if (key == "input")
        {
            std::string type;
            std::string dims;
            s >> type >> dims;
            ConstInput in;
            in.int32 = type == "i32";
            in.dims = parseDims(dims);
            size_t const bytes = static_cast<size_t>(volume(in.dims)) * (in.int32 ? 4 : 2);
            in.bytes = readFile<uint8_t>(base + ".in" + std::to_string(c.inputs.size() + 1), bytes);
            c.inputs.push_back(std::move(in));
        }
        else if (key == "wref")
        {
            s >> c.k >> c.n;
            c.wref = readFile<double>(base + ".wref.f64", static_cast<size_t>(c.k * c.n));
        }
        else if (key == "xconst")
        {
            s >> c.xconst;
        }
        else if (key == "profile")
        {
            std::string need, lo, opt, hi;
            s >> need >> lo >> opt >> hi;
            Profile p;
            p.needTactics = need == "need";
            p.min = parseDims(lo);
            p.opt = parseDims(opt);
            p.max = parseDims(hi);
            c.profiles.push_back(p);
        }
        else if (key == "run" && !c.profiles.empty())
        {
            std::string x, y, mode;
            s >> x >> y >> mode;
            c.profiles.back().runs.push_back({parseDims(x), parseDims(y), mode == "w8a8"});
        }
        else if (key == "invalid")
        {
            Invalid bad;
            std::getline(s >> std::ws, bad.expect);
            c.invalid.push_back(bad);
        }
        else if (key == "set" && !c.invalid.empty())
        {
            c.invalid.back().set.push_back(readAttr(s));
        }
        else if (key == "drop" && !c.invalid.empty())
        {
            std::string a;
            s >> a;
            c.invalid.back().drop.push_back(a);
        }
        else if (key == "as_float" && !c.invalid.empty())
        {
            s >> c.invalid.back().asFloat;
        }
    }
    if (c.plugin.empty() || c.wref.empty() || c.profiles.empty()
        || std::any_of(c.profiles.begin(), c.profiles.end(), [](Profile const& p) { return p.runs.empty(); }))
    {
        std::printf("%s.case: plugin, wref and profiles with runs are required\n", base.c_str());
        std::exit(2);
    }
    return c;
}

// ------------------------------------------------------------------------------------------------ the plugin API
using GetCreatorsFn = IPluginCreatorInterface* const* (*) (int32_t&);
using SetLoggerFinderFn = void (*)(ILoggerFinder*);

struct Device
{
    cudaStream_t stream{nullptr};
    std::mt19937_64 rng{std::random_device{}()};
    bool defaultStreamUsed{false};
};

struct Buffers
{
    std::vector<void*> ptrs;
    Buffers() = default;
    Buffers(Buffers const&) = delete;
    Buffers& operator=(Buffers const&) = delete;
    ~Buffers()
    {
        for (void* p : ptrs)
        {
            cudaFree(p);
        }
    }
    void* alloc(size_t bytes)
    {
        void* d{nullptr};
        CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(bytes, 16)));
        ptrs.push_back(d);
        return d;
    }
    void* upload(void const* host, size_t bytes)
    {
        void* d = alloc(bytes);
        CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
        return d;
    }
};

// Relative Frobenius error and a count of non-finite outputs (the NaN poison left unwritten, or an overflow).
struct Compare
{
    double rel{0};
    size_t nonFinite{0};
};

Compare compare(bool bf16, std::vector<uint16_t> const& out, std::vector<double> const& ref)
{
    Compare r;
    double num = 0;
    double den = 0;
    for (size_t i = 0; i < ref.size(); ++i)
    {
        double const v = storedToDouble(out[i], bf16);
        if (!std::isfinite(v))
        {
            ++r.nonFinite;
            continue;
        }
        num += (v - ref[i]) * (v - ref[i]);
        den += ref[i] * ref[i];
    }
    r.rel = std::sqrt(num / std::max(den, 1e-300));
    return r;
}

double norm(std::vector<double> const& v)
{
    double s = 0;
    for (double x : v)
    {
        s += x * x;
    }
    return std::sqrt(s);
}

// ------------------------------------------------------------------------------------------------ reference
struct Reference
{
    std::vector<double> y; // in the output's layout
    double tol{0};
};

// The float64 reference of one run and its error bound (relative Frobenius), from the activation's stored values.
//
// Bounds, with u the output type's unit roundoff (fp16 2^-11, bf16 2^-8):
//  * weight-only math (and W8A8 at M <= 16, which docs/op.md runs as the weight-only GEMV): 4u. The kernels round
//    each dequantized weight to the activation type (relative error <= u per weight, independent signs, so about
//    u / sqrt(K) relative on a sum of K terms), accumulate in FP32, apply the epilogue in FP32 (Lipschitz <= 1.13
//    for GELU, 1.1 for SiLU, 1 for the others) and round once (<= u); 4u leaves room for an unlucky draw on top.
//  * W8A8 math at M > 16 (docs/op.md, W8A8): the integer products are exact and the reference quantizes the
//    activations exactly as the kernel (bit for bit, activations.py), so the only errors are the FP32 epilogue and
//    the final rounding: |y32 - y| <= L * gamma * A per element, with A = sum_k (|s a_k| + |o|) |W_kn| + |bias_n| the
//    size of the summed terms and gamma = (6 groups + 8) 2^-24 (per group: int32 -> float of C_g and of the weight
//    sum, two products each, the accumulation; then the bias), and the rounding adds at most u |y|. Normwise:
//    u + L * gamma * ||A|| / ||y||. Far tighter than the float math's distance to it (the activation quantization
//    error, about 0.3 % to 0.8 % relative), so the check tells the quantized math from the float one.
Reference reference(Case const& c, Run const& run, std::vector<double> const& x, std::vector<float> const& x32)
{
    Epilogue ep;
    ep.activation = static_cast<int32_t>(c.intAttr("activation"));
    ep.clipMin = c.floatAttr("clip_min", -INFINITY);
    ep.clipMax = c.floatAttr("clip_max", INFINITY);
    std::vector<double> bias;
    if (c.biasPosition() > 0)
    {
        ConstInput const& b = c.inputs.at(static_cast<size_t>(c.biasPosition() - 1));
        for (int64_t j = 0; j < c.n; ++j)
        {
            uint16_t v;
            std::memcpy(&v, &b.bytes[static_cast<size_t>(2 * j)], 2);
            bias.push_back(storedToDouble(v, c.bf16));
        }
    }
    double const u = c.bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    double const lipschitz = ep.activation == 0 ? 1.0 : 1.13;

    std::vector<double> rows;
    std::vector<float> rows32;
    int64_t m = 0;
    ConvGeometry g{};
    if (c.conv())
    {
        g = {run.x.d[0], run.x.d[1], run.x.d[2], run.x.d[3], static_cast<int32_t>(c.intsAttr("kernel_shape", 0)),
            static_cast<int32_t>(c.intsAttr("kernel_shape", 1)), static_cast<int32_t>(c.intsAttr("strides", 0)),
            static_cast<int32_t>(c.intsAttr("strides", 1)), static_cast<int32_t>(c.intsAttr("pads", 0)),
            static_cast<int32_t>(c.intsAttr("pads", 1)), static_cast<int32_t>(c.intsAttr("pads", 2)),
            static_cast<int32_t>(c.intsAttr("pads", 3)), static_cast<int32_t>(c.intsAttr("dilations", 0)),
            static_cast<int32_t>(c.intsAttr("dilations", 1)), static_cast<int32_t>(c.intAttr("k_order"))};
        rows = im2col(x, g);
        m = g.rows();
    }
    else
    {
        rows = x;
        m = volume(run.x) / c.k;
    }
    Reference r;
    if (run.w8a8)
    {
        int64_t const g0 = c.intAttr("group_size", -1);
        int64_t const block = g0 == -1 ? c.k : g0;
        bool const asym = c.intAttr("act_asymmetric") != 0;
        std::vector<double> xq(rows.size());
        std::vector<double> mag(rows.size());
        for (int64_t i = 0; i < m; ++i)
        {
            quantizeRow(&x32[static_cast<size_t>(i * c.k)], c.k, block, asym, &xq[static_cast<size_t>(i * c.k)],
                &mag[static_cast<size_t>(i * c.k)]);
        }
        std::vector<double> absY;
        product(xq, &mag, m, c.k, c.n, c.wref, bias, ep, r.y, &absY);
        double const gamma = (6.0 * static_cast<double>(c.groups()) + 8.0) * std::ldexp(1.0, -24);
        r.tol = u + lipschitz * gamma * norm(absY) / std::max(norm(r.y), 1e-300);
    }
    else
    {
        product(rows, nullptr, m, c.k, c.n, c.wref, bias, ep, r.y, nullptr);
        r.tol = 4 * u;
    }
    if (c.conv())
    {
        r.y = rowsToNchw(r.y, g.batch, c.n, g.outH() * g.outW());
    }
    return r;
}

// ------------------------------------------------------------------------------------------------ one case
std::vector<PluginTensorDesc> descs(Case const& c, Dims const& x, Dims const& y)
{
    DataType const act = c.bf16 ? DataType::kBF16 : DataType::kHALF;
    std::vector<PluginTensorDesc> d;
    auto add = [&](Dims const& s, DataType t) {
        PluginTensorDesc p{};
        p.dims = s;
        p.type = t;
        p.format = TensorFormat::kLINEAR;
        p.scale = 1.0F;
        d.push_back(p);
    };
    add(x, act);
    for (ConstInput const& in : c.inputs)
    {
        add(in.dims, in.int32 ? DataType::kINT32 : act);
    }
    add(y, act);
    return d;
}

struct Library
{
    void* handle{nullptr};
    std::map<std::string, IPluginCreatorV3One*> creators;
};

// The kernels library's tactic lookups (kernels.h), found through the plugin library that loaded it.
using TacticLookupFn = int32_t (*)(int32_t);
TacticLookupFn gCandidateTactic{nullptr};
TacticLookupFn gCandidateByTactic{nullptr};

void buildChecks(Case const& c, Logger& logger, IPluginV3OneBuild* build)
{
    DataType const act = c.bf16 ? DataType::kBF16 : DataType::kHALF;
    int32_t const nIn = c.nbInputs();
    check(build->getNbOutputs() == 1, "getNbOutputs() == 1");
    {
        std::vector<DataType> in{act};
        for (ConstInput const& x : c.inputs)
        {
            in.push_back(x.int32 ? DataType::kINT32 : act);
        }
        DataType out = DataType::kFLOAT;
        check(build->getOutputDataTypes(&out, 1, in.data(), nIn) == 0 && out == act,
            "getOutputDataTypes = activation type");
        in[0] = DataType::kFLOAT;
        check(build->getOutputDataTypes(&out, 1, in.data(), nIn) != 0, "getOutputDataTypes refuses FLOAT activations");
    }

    // Output shapes: every activation axis but the constant one is a symbol carrying a run's size.
    for (Profile const& p : c.profiles)
    {
        Run const& run = p.runs.front();
        ExprBuilder eb;
        std::vector<DimsExprs> in(static_cast<size_t>(nIn));
        in[0].nbDims = run.x.nbDims;
        for (int32_t i = 0; i < run.x.nbDims; ++i)
        {
            in[0].d[i] = i == c.constAxis(run.x) ? eb.constant(run.x.d[i]) : eb.symbol(run.x.d[i]);
        }
        for (int32_t i = 1; i < nIn; ++i)
        {
            Dims const& d = c.inputs[static_cast<size_t>(i - 1)].dims;
            in[i].nbDims = d.nbDims;
            for (int32_t j = 0; j < d.nbDims; ++j)
            {
                in[i].d[j] = eb.constant(d.d[j]);
            }
        }
        DimsExprs out{};
        int32_t const s = build->getOutputShapes(in.data(), nIn, nullptr, 0, &out, 1, eb);
        bool same = s == 0 && out.nbDims == run.y.nbDims;
        for (int32_t i = 0; same && i < out.nbDims; ++i)
        {
            auto const* e = static_cast<Expr const*>(out.d[i]);
            same = e != nullptr && e->mValue == run.y.d[i];
        }
        check(same, "getOutputShapes of symbolic " + dimsText(run.x) + " evaluates to " + dimsText(run.y));
        in[0].d[c.constAxis(run.x)] = eb.constant(run.x.d[c.constAxis(run.x)] + 64);
        logger.messages.clear();
        check(build->getOutputShapes(in.data(), nIn, nullptr, 0, &out, 1, eb) != 0 && !logger.messages.empty(),
            "getOutputShapes refuses a wrong constant activation axis and logs it");
    }

    // Every format combination, position by position as TensorRT asks.
    DataType const types[] = {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT8, DataType::kINT32};
    TensorFormat const formats[] = {TensorFormat::kLINEAR, TensorFormat::kCHW32, TensorFormat::kHWC8};
    int32_t const nPos = nIn + 1;
    std::vector<DynamicPluginTensorDesc> io(static_cast<size_t>(nPos));
    Run const& first = c.profiles.front().runs.front();
    std::vector<PluginTensorDesc> const d0 = descs(c, first.x, first.y);
    for (int32_t i = 0; i < nPos; ++i)
    {
        io[i].desc.dims = d0[i].dims;
    }
    int accepted = 0;
    bool onlyValid = true;
    std::function<void(int32_t)> walk = [&](int32_t pos) {
        if (pos == nPos)
        {
            ++accepted;
            for (int32_t i = 0; i < nPos; ++i)
            {
                DataType const want = d0[i].type == DataType::kINT32 ? DataType::kINT32 : io[0].desc.type;
                onlyValid = onlyValid && io[i].desc.format == TensorFormat::kLINEAR && io[i].desc.type == want
                    && (io[0].desc.type == DataType::kHALF || io[0].desc.type == DataType::kBF16);
            }
            return;
        }
        for (DataType t : types)
        {
            for (TensorFormat fm : formats)
            {
                io[pos].desc.type = t;
                io[pos].desc.format = fm;
                if (build->supportsFormatCombination(pos, io.data(), nIn, 1))
                {
                    walk(pos + 1);
                }
            }
        }
    };
    walk(0);
    check(accepted == 2 && onlyValid,
        "supportsFormatCombination accepts exactly the HALF and BF16 linear combinations (accepted "
            + std::to_string(accepted) + ")");
}

void runProfile(Case const& c, size_t pi, IPluginV3* built, IPluginCreatorV3One* creator, Logger& logger,
    Device& dev, std::string& summary)
{
    Profile const& prof = c.profiles[pi];
    int32_t const nIn = c.nbInputs();
    std::unique_ptr<IPluginV3> plugin(built->clone());
    if (!check(plugin != nullptr, "clone of the build-phase plugin"))
    {
        return;
    }
    auto* build = static_cast<IPluginV3OneBuild*>(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD));
    std::string const tag = "profile " + dimsText(prof.min) + ".." + dimsText(prof.max) + ": ";

    // Configure as the builder does for one profile: dynamic axes -1 in desc, their range in min / opt / max.
    std::vector<PluginTensorDesc> const d0 = descs(c, prof.max, prof.runs.front().y);
    std::vector<DynamicPluginTensorDesc> dyn(d0.size());
    for (size_t i = 0; i < d0.size(); ++i)
    {
        dyn[i].desc = d0[i];
        dyn[i].min = dyn[i].opt = dyn[i].max = d0[i].dims;
    }
    dyn[0].min = prof.min;
    dyn[0].opt = prof.opt;
    dyn[0].max = prof.max;
    for (int32_t i = 0; i < prof.max.nbDims; ++i)
    {
        if (i != c.constAxis(prof.max) && prof.min.d[i] != prof.max.d[i])
        {
            dyn[0].desc.dims.d[i] = -1;
        }
    }
    Dims& yd = dyn.back().desc.dims;
    for (int32_t i = 0; i < yd.nbDims; ++i)
    {
        bool const varies
            = std::any_of(prof.runs.begin(), prof.runs.end(), [&](Run const& r) { return r.y.d[i] != yd.d[i]; });
        yd.d[i] = varies ? -1 : yd.d[i];
    }
    check(build->configurePlugin(dyn.data(), nIn, &dyn.back(), 1) == 0, tag + "configurePlugin");
    size_t const workspace = build->getWorkspaceSize(dyn.data(), nIn, &dyn.back(), 1);
    int32_t const nbTactics = build->getNbTactics();
    std::vector<int32_t> tactics(static_cast<size_t>(std::max(nbTactics, 0)));
    check(nbTactics >= (prof.needTactics ? 1 : 0), tag + "getNbTactics() = " + std::to_string(nbTactics));
    if (nbTactics > 0)
    {
        check(build->getValidTactics(tactics.data(), nbTactics) == 0, tag + "getValidTactics");
        std::set<int32_t> unique(tactics.begin(), tactics.end());
        check(unique.size() == tactics.size() && unique.count(0) == 0, tag + "tactics are unique and non-zero");
        for (int32_t t : tactics)
        {
            int32_t const id = gCandidateByTactic(t);
            check(t > 0 && id >= 0 && gCandidateTactic(id) == t,
                tag + "tactic " + std::to_string(t) + " maps back to its kernel candidate (id "
                    + std::to_string(id) + ")");
        }
        check(build->getTimingCacheID() != nullptr, tag + "getTimingCacheID after configurePlugin");
    }
    if (pi == 0)
    {
        // A wrong packed weight shape is refused with a message.
        std::vector<DynamicPluginTensorDesc> bad = dyn;
        Dims const w = bad[1].desc.dims;
        Dims twice = w;
        twice.d[0] *= 2;
        bad[1].desc.dims = bad[1].min = bad[1].max = bad[1].opt = twice;
        logger.messages.clear();
        std::unique_ptr<IPluginV3> other(built->clone());
        auto* ob = static_cast<IPluginV3OneBuild*>(other->getCapabilityInterface(PluginCapabilityType::kBUILD));
        check(ob->configurePlugin(bad.data(), nIn, &bad.back(), 1) != 0 && logger.saw({"packed_weight"}),
            "configurePlugin refuses a wrong packed_weight shape and logs it");
    }

    // Serialize the fields and re-create for the runtime phase, as deserializing an engine does; clone; attach.
    auto* rt = static_cast<IPluginV3OneRuntime*>(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    PluginFieldCollection const* ser = rt->getFieldsToSerialize();
    if (!check(ser != nullptr && ser->nbFields > 0, tag + "getFieldsToSerialize"))
    {
        return;
    }
    Fields owned = Fields::copyOf(ser);
    plugin.reset(); // the build-phase plugin is gone before the runtime one exists, as in a fresh process
    std::unique_ptr<IPluginV3> runtimePlugin(
        creator->createPlugin(c.name.c_str(), owned.collection(), TensorRTPhase::kRUNTIME));
    if (!check(runtimePlugin != nullptr, tag + "createPlugin(kRUNTIME) from the serialized fields"))
    {
        return;
    }
    std::unique_ptr<IPluginV3> cloned(runtimePlugin->clone());
    runtimePlugin.reset();
    TestResourceContext ctx;
    auto* cloneRt = static_cast<IPluginV3OneRuntime*>(cloned->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    std::unique_ptr<IPluginV3> attached(cloneRt->attachToContext(&ctx));
    cloned.reset();
    if (!check(attached != nullptr, tag + "clone + attachToContext"))
    {
        return;
    }
    auto* run = static_cast<IPluginV3OneRuntime*>(attached->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    if (nbTactics > 0)
    {
        int32_t unknown = 1;
        while (gCandidateByTactic(unknown) >= 0)
        {
            ++unknown;
        }
        logger.messages.clear();
        check(run->setTactic(unknown) != 0 && logger.saw({"tactic " + std::to_string(unknown) + " names no"}),
            tag + "setTactic refuses an unknown tactic and names it");
    }

    // Enqueue: constant inputs on the device once; per run fresh activations and a poisoned output.
    Buffers buf;
    std::vector<void const*> inputs{nullptr};
    for (ConstInput const& in : c.inputs)
    {
        inputs.push_back(buf.upload(in.bytes.data(), in.bytes.size()));
    }
    void* dWorkspace = workspace > 0 ? buf.alloc(workspace) : nullptr;
    std::vector<int32_t> runTactics = tactics;
    runTactics.push_back(0);
    std::normal_distribution<float> normal(0.0F, 1.0F);
    std::uniform_real_distribution<float> shift(-1.0F, 1.0F);
    for (Run const& r : prof.runs)
    {
        // Fresh activations: unit normal plus a shift per row of the last axis (exercises W8A8's offsets).
        int64_t const count = volume(r.x);
        int64_t const last = r.x.d[r.x.nbDims - 1];
        std::vector<uint16_t> xh(static_cast<size_t>(count));
        std::vector<double> x(xh.size());
        std::vector<float> x32(xh.size());
        float rowShift = 0.0F;
        for (int64_t i = 0; i < count; ++i)
        {
            rowShift = i % last == 0 ? shift(dev.rng) : rowShift;
            xh[i] = toStored(normal(dev.rng) + rowShift, c.bf16);
            x[i] = storedToDouble(xh[i], c.bf16);
            x32[i] = static_cast<float>(x[i]);
        }
        Reference const ref = reference(c, r, x, x32);
        Buffers io;
        inputs[0] = io.upload(xh.data(), xh.size() * 2);
        size_t const yBytes = static_cast<size_t>(volume(r.y)) * 2;
        void* dY = io.alloc(yBytes);
        void* outputs[] = {dY};
        std::vector<PluginTensorDesc> d = descs(c, r.x, r.y);
        double worst = 0;
        for (int32_t tactic : runTactics)
        {
            // The default tactic uses the legacy default stream once per case.
            cudaStream_t const stream = (tactic == 0 && !dev.defaultStreamUsed) ? nullptr : dev.stream;
            dev.defaultStreamUsed = dev.defaultStreamUsed || stream == nullptr;
            std::string const what = tag + dimsText(r.x) + (r.w8a8 ? " (W8A8 math)" : "") + " tactic "
                + std::to_string(tactic) + (stream ? "" : " default stream");
            // NaN in fp16 and bf16, on the enqueue's stream: a legacy-stream memset does not order with a
            // non-blocking stream, and under load it landed after the kernel's stores.
            CUDA_CHECK(cudaMemsetAsync(dY, 0xFF, yBytes, stream));
            check(run->setTactic(tactic) == 0, what + ": setTactic");
            check(run->onShapeChange(d.data(), nIn, &d.back(), 1) == 0, what + ": onShapeChange");
            int32_t const s = run->enqueue(d.data(), &d.back(), inputs.data(), outputs, dWorkspace, stream);
            CUDA_CHECK(stream ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize());
            if (!check(s == 0, what + ": enqueue returned " + std::to_string(s)))
            {
                continue;
            }
            std::vector<uint16_t> out(static_cast<size_t>(volume(r.y)));
            CUDA_CHECK(cudaMemcpy(out.data(), dY, yBytes, cudaMemcpyDeviceToHost));
            Compare const cmp = compare(c.bf16, out, ref.y);
            char msg[200];
            std::snprintf(msg, sizeof msg, "%s: rel err %.3e (tol %.2e), %zu non-finite", what.c_str(), cmp.rel,
                ref.tol, cmp.nonFinite);
            check(cmp.nonFinite == 0 && cmp.rel <= ref.tol, msg);
            worst = std::max(worst, cmp.rel);
        }
        char s[96];
        std::snprintf(s, sizeof s, " %s%s:%.2e/%.1e", dimsText(r.x).c_str(), r.w8a8 ? "q" : "", worst, ref.tol);
        summary += s;
    }
    summary += " [" + std::to_string(nbTactics) + " tactics, ws " + std::to_string(workspace) + "]";
}

void runCase(Library const& lib, Logger& logger, Device& dev, Case const& c)
{
    gWhere = c.name;
    int const failedBefore = gFailed;
    dev.defaultStreamUsed = false;
    auto const it = lib.creators.find(c.plugin);
    if (!check(it != lib.creators.end(), "getCreators has " + c.plugin + "/1 in namespace \"\" (V3One)"))
    {
        return;
    }
    IPluginCreatorV3One* creator = it->second;

    // 1. Every attribute the node carries must be listed, or the ONNX parser drops it without a word.
    PluginFieldCollection const* names = creator->getFieldNames();
    std::set<std::string> listed;
    for (int32_t i = 0; names && i < names->nbFields; ++i)
    {
        listed.insert(names->fields[i].name);
    }
    for (Attr const& a : c.attrs)
    {
        if (a.type != "STRING")
        {
            check(listed.count(a.name) == 1, "getFieldNames lists the node's attribute " + a.name);
        }
    }

    // 2. Create for the build phase from the fields the parser passes.
    Fields f(c.attrs, creator->getFieldNames());
    std::unique_ptr<IPluginV3> plugin(creator->createPlugin(c.name.c_str(), f.collection(), TensorRTPhase::kBUILD));
    if (!check(plugin != nullptr, "createPlugin(kBUILD) returned null"))
    {
        return;
    }
    auto const [core, build, rt] = views(plugin.get());
    if (!check(core && build && rt, "a capability interface is null"))
    {
        return;
    }
    check(std::strcmp(core->getInterfaceInfo().kind, "PLUGIN_V3ONE_CORE") == 0, "core interface kind");
    check(std::strcmp(build->getInterfaceInfo().kind, "PLUGIN_V3ONE_BUILD") == 0, "build interface kind");
    check(std::strcmp(rt->getInterfaceInfo().kind, "PLUGIN_V3ONE_RUNTIME") == 0, "runtime interface kind");
    check(core->getPluginName() == c.plugin && std::string(core->getPluginVersion()) == "1"
            && std::string(core->getPluginNamespace()).empty(),
        "name / version / namespace");

    // 3-5.
    buildChecks(c, logger, build);
    std::string summary;
    for (size_t pi = 0; pi < c.profiles.size(); ++pi)
    {
        runProfile(c, pi, plugin.get(), creator, logger, dev, summary);
    }
    std::printf("%-40s %s worst rel err / tol per input:%s\n", c.name.c_str(),
        gFailed == failedBefore ? "ok  " : "FAIL", summary.c_str());
}

// The invalid field collections a case lists (all its attributes, as TensorRT's Python API would pass them, then
// the change), and the same attributes as kINT64 without the STRING ones, which the creator accepts.
void fieldChecks(Library const& lib, Logger& logger, Case const& c)
{
    auto const it = lib.creators.find(c.plugin);
    if (c.invalid.empty() || it == lib.creators.end())
    {
        return;
    }
    gWhere = c.name + " fields";
    IPluginCreatorV3One* creator = it->second;
    for (Invalid const& bad : c.invalid)
    {
        Fields fs;
        std::string what;
        for (Attr const& a : c.attrs)
        {
            bool const dropped = std::find(bad.drop.begin(), bad.drop.end(), a.name) != bad.drop.end();
            auto const replaced
                = std::find_if(bad.set.begin(), bad.set.end(), [&](Attr const& s) { return s.name == a.name; });
            if (dropped || replaced != bad.set.end())
            {
                continue;
            }
            fs.add(a.name == bad.asFloat ? Attr{"FLOAT", a.name, {a.values.at(0)}} : a);
        }
        for (Attr const& s : bad.set)
        {
            fs.add(s);
            what += " " + s.name + "=" + (s.values.empty() ? "" : s.values[0]);
        }
        for (std::string const& d : bad.drop)
        {
            what += " without " + d;
        }
        what += bad.asFloat.empty() ? "" : " " + bad.asFloat + " as kFLOAT32";
        logger.messages.clear();
        std::unique_ptr<IPluginV3> p(creator->createPlugin("bad", fs.collection(), TensorRTPhase::kBUILD));
        check(p == nullptr && logger.saw({bad.expect}),
            "createPlugin refuses" + what + " and logs \"" + bad.expect + "\" through TensorRT's logger");
    }
    Fields fs;
    for (Attr a : c.attrs)
    {
        if (a.type != "STRING")
        {
            a.type = a.type == "FLOAT" ? a.type : "INT64";
            fs.add(a);
        }
    }
    std::unique_ptr<IPluginV3> p(creator->createPlugin("int64", fs.collection(), TensorRTPhase::kBUILD));
    check(p != nullptr, "createPlugin accepts kINT64 fields without the string fields");
}

std::vector<std::string> caseNames(std::string const& dir)
{
    std::vector<std::string> names;
    std::ifstream list(dir + "/cases.txt");
    std::string line;
    while (std::getline(list, line))
    {
        if (!line.empty())
        {
            names.push_back(line);
        }
    }
    if (names.empty())
    {
        std::printf("no cases in %s/cases.txt (run make_cases.py)\n", dir.c_str());
        std::exit(2);
    }
    return names;
}

// --list: the cases as this program reads them, one line each (the CPU test compares them with make_cases.py's).
int listCases(std::string const& dir)
{
    for (std::string const& name : caseNames(dir))
    {
        Case const c = loadCase(dir, name);
        std::printf("%s %s %s attrs=%zu K=%lld N=%lld xconst=%d inputs=", c.name.c_str(), c.plugin.c_str(),
            c.bf16 ? "bf16" : "fp16", c.attrs.size(), static_cast<long long>(c.k), static_cast<long long>(c.n),
            c.xconst);
        for (ConstInput const& in : c.inputs)
        {
            std::printf("%s:%s,", in.int32 ? "i32" : "act", dimsText(in.dims).c_str());
        }
        for (Profile const& p : c.profiles)
        {
            std::printf(" profile=%s:%s:%s:%s", p.needTactics ? "need" : "any", dimsText(p.min).c_str(),
                dimsText(p.opt).c_str(), dimsText(p.max).c_str());
            for (Run const& r : p.runs)
            {
                std::printf(" run=%s:%s:%s", dimsText(r.x).c_str(), dimsText(r.y).c_str(), r.w8a8 ? "w8a8" : "float");
            }
        }
        std::printf(" invalid=%zu\n", c.invalid.size());
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc == 3 && std::string(argv[1]) == "--list")
    {
        return listCases(argv[2]);
    }
    if (argc < 3)
    {
        std::printf("usage: %s PLUGIN_LIBRARY CASES_DIR [--verbose]\n       %s --list CASES_DIR\n", argv[0], argv[0]);
        return 2;
    }
    bool const verbose = argc > 3 && std::string(argv[3]) == "--verbose";
    Library lib;
    lib.handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle)
    {
        std::printf("dlopen(%s): %s\n0 passed, 1 failed\n", argv[1], dlerror());
        return 1;
    }
    auto getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(lib.handle, "getCreators"));
    auto setLoggerFinder = reinterpret_cast<SetLoggerFinderFn>(dlsym(lib.handle, "setLoggerFinder"));
    gCandidateTactic = reinterpret_cast<TacticLookupFn>(dlsym(lib.handle, "trt_woq_linear_candidate_tactic"));
    gCandidateByTactic = reinterpret_cast<TacticLookupFn>(dlsym(lib.handle, "trt_woq_linear_candidate_by_tactic"));
    gWhere = "library";
    check(getCreators != nullptr, "exports getCreators");
    check(setLoggerFinder != nullptr, "exports setLoggerFinder");
    check(gCandidateTactic != nullptr && gCandidateByTactic != nullptr, "its kernels library has the tactic lookups");
    if (!getCreators || !setLoggerFinder || !gCandidateTactic || !gCandidateByTactic)
    {
        finish();
        return 1;
    }
    Logger logger;
    logger.verbose = verbose;
    LoggerFinder finder(&logger);
    setLoggerFinder(&finder);
    int32_t nb = 0;
    IPluginCreatorInterface* const* creators = getCreators(nb);
    for (int32_t i = 0; i < nb; ++i)
    {
        InterfaceInfo const info = creators[i]->getInterfaceInfo();
        if (std::strcmp(info.kind, "PLUGIN CREATOR_V3ONE") != 0)
        {
            continue;
        }
        auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
        if (std::string(c->getPluginVersion()) == "1" && std::string(c->getPluginNamespace()).empty())
        {
            lib.creators[c->getPluginName()] = c;
        }
    }

    int device = 0;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

    std::vector<std::string> const names = caseNames(argv[2]);
    Device dev;
    CUDA_CHECK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
    for (std::string const& name : names)
    {
        Case const c = loadCase(argv[2], name);
        fieldChecks(lib, logger, c);
        runCase(lib, logger, dev, c);
    }
    CUDA_CHECK(cudaStreamDestroy(dev.stream));
    return finish();
}
