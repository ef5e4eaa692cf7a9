/*
 * Conformance harness for libtrt_woq_plugin.so: drives the WeightOnlyLinear plugin the way TensorRT does, without
 * TensorRT, and checks every answer.
 *
 *   weight_only_linear_conformance PLUGIN_LIBRARY CASES_DIR [--m 1,3,16,127,4096]
 *
 * CASES_DIR is written by make_cases.py (one WeightOnlyLinear node per case: attributes, constant inputs and the
 * float64 dequantized weight). Per case:
 *   1. dlopen the library; setLoggerFinder (our test logger records every message); getCreators; find the creator
 *      by name / version / namespace; its field names.
 *   2. createPlugin(kBUILD) from the attributes as the ONNX parser passes them (INT -> kINT32, STRING -> kCHAR);
 *      the three capability interfaces; name / version / namespace.
 *   3. Build phase: getOutputDataTypes, getOutputShapes through a test IExprBuilder (symbolic leading dims),
 *      supportsFormatCombination over every (type, format) combination of every position, configurePlugin with a
 *      dynamic M range, getWorkspaceSize, getNbTactics / getValidTactics.
 *   4. getFieldsToSerialize -> createPlugin(kRUNTIME) -> clone -> attachToContext.
 *   5. Runtime: for several M (1 and 4096 included) and every tactic (and 0 = default): setTactic, onShapeChange,
 *      enqueue on a non-blocking stream into a poisoned output, compared with X @ W (+ bias) in float64.
 * Plus: invalid fields (the creator returns null and logs a message quoting the value), kINT64 fields, an invalid
 * tactic, a 3-D activation, the legacy default stream.
 * Prints one line per check that fails, a summary per case, then "N passed, N failed"; exit status 1 on failure.
 */
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
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace nvinfer1;

namespace
{

// ------------------------------------------------------------------------------------------------ bookkeeping
int gPassed = 0;
int gFailed = 0;
std::string gCase;

bool check(bool ok, std::string const& what)
{
    if (ok)
    {
        ++gPassed;
    }
    else
    {
        ++gFailed;
        std::printf("FAIL [%s] %s\n", gCase.c_str(), what.c_str());
    }
    return ok;
}

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

// ------------------------------------------------------------------------------------------------ logger
class TestLogger : public ILogger
{
public:
    void log(Severity severity, char const* msg) noexcept override
    {
        messages.emplace_back(msg ? msg : "");
        if (severity <= Severity::kWARNING && verbose)
        {
            std::printf("  [plugin log] %s\n", msg);
        }
    }
    bool contains(std::string const& s) const
    {
        return std::any_of(messages.begin(), messages.end(), [&](std::string const& m) { return m.find(s) != std::string::npos; });
    }
    std::vector<std::string> messages;
    bool verbose{false};
};

class TestLoggerFinder : public ILoggerFinder
{
public:
    explicit TestLoggerFinder(ILogger* logger)
        : mLogger(logger)
    {
    }
    ILogger* findLogger() override
    {
        return mLogger;
    }

private:
    ILogger* mLogger;
};

// ------------------------------------------------------------------------------------------------ expressions
// A dimension expression: a constant, or a named symbol (an unknown runtime size). TensorRT's IDimensionExpr calls
// through mImpl; this class is both the interface object and its implementation.
class TestExpr : public IDimensionExpr, public apiv::VDimensionExpr
{
public:
    TestExpr(bool constant, int64_t value, std::string name)
        : mConstant(constant)
        , mValue(value)
        , name(std::move(name))
    {
        mImpl = this;
    }
    ~TestExpr() noexcept override = default;
    bool isConstant() const override
    {
        return mConstant;
    }
    int64_t getConstantValue() const override
    {
        return mConstant ? mValue : -1;
    }
    bool isSizeTensor() const override
    {
        return false;
    }
    bool mConstant;
    int64_t mValue;
    std::string name;
};

class TestExprBuilder : public IExprBuilder, public apiv::VExprBuilder
{
public:
    TestExprBuilder()
    {
        mImpl = this;
    }
    ~TestExprBuilder() noexcept override = default;
    IDimensionExpr const* constant(int64_t value) override
    {
        return make(true, value, std::to_string(value));
    }
    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) override
    {
        auto const& x = static_cast<TestExpr const&>(a);
        auto const& y = static_cast<TestExpr const&>(b);
        std::string n = "(" + x.name + " op" + std::to_string(static_cast<int>(op)) + " " + y.name + ")";
        if (x.mConstant && y.mConstant)
        {
            int64_t v = 0;
            switch (op)
            {
            case DimensionOperation::kSUM: v = x.mValue + y.mValue; break;
            case DimensionOperation::kPROD: v = x.mValue * y.mValue; break;
            case DimensionOperation::kMAX: v = std::max(x.mValue, y.mValue); break;
            case DimensionOperation::kMIN: v = std::min(x.mValue, y.mValue); break;
            case DimensionOperation::kSUB: v = x.mValue - y.mValue; break;
            case DimensionOperation::kEQUAL: v = x.mValue == y.mValue; break;
            case DimensionOperation::kLESS: v = x.mValue < y.mValue; break;
            case DimensionOperation::kFLOOR_DIV: v = x.mValue / y.mValue; break;
            case DimensionOperation::kCEIL_DIV: v = (x.mValue + y.mValue - 1) / y.mValue; break;
            }
            return make(true, v, n);
        }
        ++operations;
        return make(false, -1, n);
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override
    {
        return nullptr;
    }
    TestExpr const* symbol(std::string const& name)
    {
        return make(false, -1, name);
    }
    int operations{0};

private:
    TestExpr const* make(bool c, int64_t v, std::string n)
    {
        mPool.push_back(std::make_unique<TestExpr>(c, v, std::move(n)));
        return mPool.back().get();
    }
    std::vector<std::unique_ptr<TestExpr>> mPool;
};

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

// ------------------------------------------------------------------------------------------------ numbers
uint16_t floatToHalf(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t const sign = (x >> 16) & 0x8000;
    int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
    uint32_t mant = x & 0x7FFFFF;
    if (exp >= 31)
    {
        return static_cast<uint16_t>(sign | 0x7C00);
    }
    if (exp <= 0)
    {
        if (exp < -10)
        {
            return static_cast<uint16_t>(sign);
        }
        mant |= 0x800000;
        uint32_t const shift = static_cast<uint32_t>(14 - exp);
        uint32_t half = mant >> shift;
        uint32_t const rem = mant & ((1u << shift) - 1);
        uint32_t const mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
        {
            ++half;
        }
        return static_cast<uint16_t>(sign | half);
    }
    uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
    uint32_t const rem = mant & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
    {
        ++half;
    }
    return static_cast<uint16_t>(sign | half);
}

double halfToDouble(uint16_t h)
{
    int const sign = h >> 15;
    int const exp = (h >> 10) & 0x1F;
    int const mant = h & 0x3FF;
    double v;
    if (exp == 0)
    {
        v = std::ldexp(mant, -24);
    }
    else if (exp == 31)
    {
        v = mant ? NAN : INFINITY;
    }
    else
    {
        v = std::ldexp(mant + 1024, exp - 25);
    }
    return sign ? -v : v;
}

uint16_t floatToBf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    x += 0x7FFF + ((x >> 16) & 1);
    return static_cast<uint16_t>(x >> 16);
}

double bf16ToDouble(uint16_t b)
{
    uint32_t x = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

// ------------------------------------------------------------------------------------------------ cases
struct Case
{
    std::string name;
    int32_t bits, groupSize, k, n, layout, hasZeros, hasBias;
    bool bf16;
    std::vector<int32_t> weight;
    std::vector<uint16_t> scales, zeros, bias;
    std::vector<double> wref; // [K, N]
    int64_t scaleRows() const
    {
        return groupSize == -1 ? 1 : k / groupSize;
    }
    // The packed weight's int32 shape: layout 1 [N / I, K / 2], layout 2 (FP6, bits 6) [N / 4, 3 K / 4].
    int64_t packedRows() const
    {
        return n / (bits == 8 ? 2 : 4);
    }
    int64_t packedCols() const
    {
        return bits == 6 ? 3 * k / 4 : k / 2;
    }
    int32_t nbInputs() const
    {
        return 3 + hasZeros + hasBias;
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

std::vector<Case> loadCases(std::string const& dir)
{
    std::vector<Case> cases;
    std::ifstream list(dir + "/cases.txt");
    std::string line;
    while (std::getline(list, line))
    {
        if (line.empty())
        {
            continue;
        }
        std::istringstream s(line);
        Case c;
        std::string act;
        s >> c.name >> c.bits >> c.groupSize >> c.k >> c.n >> c.layout >> c.hasZeros >> c.hasBias >> act;
        c.bf16 = act == "bf16";
        std::string const p = dir + "/" + c.name;
        c.weight = readFile<int32_t>(p + ".weight.i32", static_cast<size_t>(c.packedRows() * c.packedCols()));
        c.scales = readFile<uint16_t>(p + ".scales.u16", static_cast<size_t>(c.scaleRows() * c.n));
        if (c.hasZeros)
        {
            c.zeros = readFile<uint16_t>(p + ".zeros.u16", static_cast<size_t>(c.scaleRows() * c.n));
        }
        if (c.hasBias)
        {
            c.bias = readFile<uint16_t>(p + ".bias.u16", static_cast<size_t>(c.n));
        }
        c.wref = readFile<double>(p + ".wref.f64", static_cast<size_t>(c.k) * c.n);
        cases.push_back(std::move(c));
    }
    if (cases.empty())
    {
        std::printf("no cases in %s/cases.txt (run make_cases.py)\n", dir.c_str());
        std::exit(2);
    }
    return cases;
}

// The fields as TensorRT's ONNX parser passes them: INT attributes as one kINT32 each, strings as kCHAR with the
// terminating NUL counted (onnx-tensorrt loadFields / copyField).
struct Fields
{
    std::vector<int32_t> ints;
    std::vector<int64_t> ints64;
    std::vector<PluginField> fields;
    PluginFieldCollection fc{};
};

char const* const kIntNames[] = {"bits", "group_size", "in_features", "out_features", "layout", "has_zeros", "has_bias"};

std::unique_ptr<Fields> makeFields(Case const& c, bool asInt64 = false, bool withStrings = true)
{
    auto f = std::make_unique<Fields>();
    f->ints = {c.bits, c.groupSize, c.k, c.n, c.layout, c.hasZeros, c.hasBias};
    f->ints64.assign(f->ints.begin(), f->ints.end());
    for (size_t i = 0; i < 7; ++i)
    {
        if (asInt64)
        {
            f->fields.emplace_back(kIntNames[i], &f->ints64[i], PluginFieldType::kINT64, 1);
        }
        else
        {
            f->fields.emplace_back(kIntNames[i], &f->ints[i], PluginFieldType::kINT32, 1);
        }
    }
    if (withStrings)
    {
        f->fields.emplace_back("plugin_version", "1", PluginFieldType::kCHAR, 2);
        f->fields.emplace_back("plugin_namespace", "", PluginFieldType::kCHAR, 1);
    }
    f->fc.nbFields = static_cast<int32_t>(f->fields.size());
    f->fc.fields = f->fields.data();
    return f;
}

// A deep copy of a field collection (what TensorRT does when it serializes the engine).
struct OwnedFields
{
    std::vector<std::string> names;
    std::vector<std::vector<uint8_t>> data;
    std::vector<PluginField> fields;
    PluginFieldCollection fc{};
};

size_t fieldElementSize(PluginFieldType t)
{
    switch (t)
    {
    case PluginFieldType::kINT64:
    case PluginFieldType::kFLOAT64: return 8;
    case PluginFieldType::kINT32:
    case PluginFieldType::kFLOAT32: return 4;
    case PluginFieldType::kINT16:
    case PluginFieldType::kFLOAT16:
    case PluginFieldType::kBF16: return 2;
    default: return 1;
    }
}

std::unique_ptr<OwnedFields> deepCopy(PluginFieldCollection const* fc)
{
    auto o = std::make_unique<OwnedFields>();
    o->names.reserve(static_cast<size_t>(fc->nbFields));
    o->data.reserve(static_cast<size_t>(fc->nbFields));
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        size_t const bytes = fieldElementSize(f.type) * static_cast<size_t>(f.length);
        o->names.emplace_back(f.name);
        auto const* p = static_cast<uint8_t const*>(f.data);
        o->data.emplace_back(p, p + bytes);
    }
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        o->fields.emplace_back(o->names[i].c_str(), o->data[i].data(), fc->fields[i].type, fc->fields[i].length);
    }
    o->fc.nbFields = fc->nbFields;
    o->fc.fields = o->fields.data();
    return o;
}

Dims dims(std::initializer_list<int64_t> v)
{
    Dims d{};
    d.nbDims = static_cast<int32_t>(v.size());
    int i = 0;
    for (int64_t x : v)
    {
        d.d[i++] = x;
    }
    return d;
}

// Input and output descriptors of a case for a given activation shape (linear formats, the case's types).
std::vector<PluginTensorDesc> descs(Case const& c, Dims const& x)
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
    add(dims({c.packedRows(), c.packedCols()}), DataType::kINT32);
    add(dims({c.scaleRows(), c.n}), act);
    if (c.hasZeros)
    {
        add(dims({c.scaleRows(), c.n}), act);
    }
    if (c.hasBias)
    {
        add(dims({c.n}), act);
    }
    Dims y = x;
    y.d[y.nbDims - 1] = c.n;
    add(y, act);
    return d;
}

// ------------------------------------------------------------------------------------------------ reference
void reference(Case const& c, std::vector<double> const& x, int64_t m, std::vector<double>& y)
{
    y.assign(static_cast<size_t>(m) * c.n, 0.0);
    std::vector<double> bias(static_cast<size_t>(c.n), 0.0);
    for (int32_t j = 0; j < c.n && c.hasBias; ++j)
    {
        bias[j] = c.bf16 ? bf16ToDouble(c.bias[j]) : halfToDouble(c.bias[j]);
    }
    unsigned const threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
    {
        pool.emplace_back([&, t] {
            for (int64_t i = t; i < m; i += threads)
            {
                double* row = &y[static_cast<size_t>(i) * c.n];
                for (int32_t j = 0; j < c.n; ++j)
                {
                    row[j] = bias[j];
                }
                for (int32_t kk = 0; kk < c.k; ++kk)
                {
                    double const a = x[static_cast<size_t>(i) * c.k + kk];
                    double const* w = &c.wref[static_cast<size_t>(kk) * c.n];
                    for (int32_t j = 0; j < c.n; ++j)
                    {
                        row[j] += a * w[j];
                    }
                }
            }
        });
    }
    for (auto& th : pool)
    {
        th.join();
    }
}

// ------------------------------------------------------------------------------------------------ the plugin API
using GetCreatorsFn = IPluginCreatorInterface* const* (*) (int32_t&);
using SetLoggerFinderFn = void (*)(ILoggerFinder*);

struct Library
{
    void* handle{nullptr};
    IPluginCreatorV3One* creator{nullptr};
};

struct Device
{
    cudaStream_t stream{nullptr};
    std::mt19937_64 rng{std::random_device{}()};
};

struct Buffers
{
    std::vector<void*> ptrs;
    ~Buffers()
    {
        for (void* p : ptrs)
        {
            cudaFree(p);
        }
    }
    void* upload(void const* host, size_t bytes)
    {
        void* d{nullptr};
        CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(bytes, 16)));
        CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
        ptrs.push_back(d);
        return d;
    }
};

// Relative Frobenius error and a NaN / poison count of output bits `out` against `ref`.
struct Compare
{
    double rel{0};
    size_t nonFinite{0};
};

Compare compare(Case const& c, std::vector<uint16_t> const& out, std::vector<double> const& ref)
{
    Compare r;
    double num = 0;
    double den = 0;
    for (size_t i = 0; i < ref.size(); ++i)
    {
        double const v = c.bf16 ? bf16ToDouble(out[i]) : halfToDouble(out[i]);
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

void runCase(Library const& lib, TestLogger& logger, Device& dev, Case const& c, std::vector<int64_t> const& ms)
{
    gCase = c.name;
    int const failedBefore = gFailed;
    IPluginCreatorV3One* creator = lib.creator;

    // 2. Create for the build phase.
    auto f = makeFields(c);
    std::unique_ptr<IPluginV3> plugin(creator->createPlugin(c.name.c_str(), &f->fc, TensorRTPhase::kBUILD));
    if (!check(plugin != nullptr, "createPlugin(kBUILD) returned null"))
    {
        return;
    }
    auto* core = static_cast<IPluginV3OneCore*>(plugin->getCapabilityInterface(PluginCapabilityType::kCORE));
    auto* build = static_cast<IPluginV3OneBuild*>(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD));
    auto* rt = static_cast<IPluginV3OneRuntime*>(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    if (!check(core && build && rt, "a capability interface is null"))
    {
        return;
    }
    check(std::strcmp(core->getInterfaceInfo().kind, "PLUGIN_V3ONE_CORE") == 0, "core interface kind");
    check(std::strcmp(build->getInterfaceInfo().kind, "PLUGIN_V3ONE_BUILD") == 0, "build interface kind");
    check(std::strcmp(rt->getInterfaceInfo().kind, "PLUGIN_V3ONE_RUNTIME") == 0, "runtime interface kind");
    check(std::string(core->getPluginName()) == "WeightOnlyLinear" && std::string(core->getPluginVersion()) == "1"
            && std::string(core->getPluginNamespace()).empty(),
        "name / version / namespace");

    // 3a. Output count and types.
    DataType const act = c.bf16 ? DataType::kBF16 : DataType::kHALF;
    int32_t const nIn = c.nbInputs();
    check(build->getNbOutputs() == 1, "getNbOutputs() == 1");
    {
        std::vector<DataType> in(static_cast<size_t>(nIn), act);
        in[1] = DataType::kINT32;
        DataType out = DataType::kFLOAT;
        check(build->getOutputDataTypes(&out, 1, in.data(), nIn) == 0 && out == act, "getOutputDataTypes = activation type");
        in[0] = DataType::kFLOAT;
        check(build->getOutputDataTypes(&out, 1, in.data(), nIn) != 0, "getOutputDataTypes refuses FLOAT activations");
    }

    // 3b. Output shapes, with symbolic leading dims.
    {
        TestExprBuilder eb;
        std::vector<DimsExprs> in(static_cast<size_t>(nIn));
        TestExpr const* batch = eb.symbol("batch");
        TestExpr const* seq = eb.symbol("seq");
        in[0].nbDims = 3;
        in[0].d[0] = batch;
        in[0].d[1] = seq;
        in[0].d[2] = eb.constant(c.k);
        for (int32_t i = 1; i < nIn; ++i)
        {
            in[i].nbDims = 2;
            in[i].d[0] = eb.constant(1);
            in[i].d[1] = eb.constant(c.n);
        }
        DimsExprs out{};
        int32_t const s = build->getOutputShapes(in.data(), nIn, nullptr, 0, &out, 1, eb);
        check(s == 0 && out.nbDims == 3 && out.d[0] == batch && out.d[1] == seq && out.d[2]->isConstant()
                && out.d[2]->getConstantValue() == c.n,
            "getOutputShapes [batch, seq, K] -> [batch, seq, N]");
        in[0].d[2] = eb.constant(c.k + 64);
        logger.messages.clear();
        check(build->getOutputShapes(in.data(), nIn, nullptr, 0, &out, 1, eb) != 0
                && logger.contains(std::to_string(c.k + 64)),
            "getOutputShapes refuses a wrong K and logs it");
    }

    // 3c. Every format combination, position by position as TensorRT asks.
    {
        DataType const types[] = {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT8, DataType::kINT32};
        TensorFormat const formats[] = {TensorFormat::kLINEAR, TensorFormat::kCHW32, TensorFormat::kHWC8};
        int32_t const nPos = nIn + 1;
        std::vector<DynamicPluginTensorDesc> io(static_cast<size_t>(nPos));
        for (auto& d : io)
        {
            d.desc.dims = dims({-1, c.k});
        }
        int accepted = 0;
        bool onlyValid = true;
        std::function<void(int32_t)> walk = [&](int32_t pos) {
            if (pos == nPos)
            {
                ++accepted;
                for (int32_t i = 0; i < nPos; ++i)
                {
                    DataType const want = i == 1 ? DataType::kINT32 : io[0].desc.type;
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

    // 3d. Configure for a profile M in [1, max(ms)], workspace, tactics.
    int64_t const mMax = *std::max_element(ms.begin(), ms.end());
    std::vector<PluginTensorDesc> d0 = descs(c, dims({-1, c.k}));
    std::vector<DynamicPluginTensorDesc> dyn(d0.size());
    for (size_t i = 0; i < d0.size(); ++i)
    {
        dyn[i].desc = d0[i];
        dyn[i].min = dyn[i].max = dyn[i].opt = d0[i].dims;
    }
    dyn[0].min = dims({1, c.k});
    dyn[0].opt = dims({std::min<int64_t>(64, mMax), c.k});
    dyn[0].max = dims({mMax, c.k});
    dyn.back().min = dims({1, c.n});
    dyn.back().opt = dims({std::min<int64_t>(64, mMax), c.n});
    dyn.back().max = dims({mMax, c.n});
    check(build->configurePlugin(dyn.data(), nIn, &dyn.back(), 1) == 0, "configurePlugin");
    size_t const workspace = build->getWorkspaceSize(dyn.data(), nIn, &dyn.back(), 1);
    int32_t const nbTactics = build->getNbTactics();
    std::vector<int32_t> tactics(static_cast<size_t>(std::max(nbTactics, 0)));
    check(nbTactics >= 1, "getNbTactics() >= 1 (got " + std::to_string(nbTactics) + ")");
    if (nbTactics > 0)
    {
        check(build->getValidTactics(tactics.data(), nbTactics) == 0, "getValidTactics");
        std::set<int32_t> unique(tactics.begin(), tactics.end());
        check(unique.size() == tactics.size() && unique.count(0) == 0, "tactics are unique and non-zero");
    }
    check(build->getTimingCacheID() != nullptr, "getTimingCacheID after configurePlugin");
    {
        // A wrong packed weight shape is refused with a message.
        std::vector<DynamicPluginTensorDesc> bad = dyn;
        bad[1].desc.dims = bad[1].min = bad[1].max = bad[1].opt = dims({c.n, c.k});
        logger.messages.clear();
        std::unique_ptr<IPluginV3> other(plugin->clone());
        auto* ob = static_cast<IPluginV3OneBuild*>(other->getCapabilityInterface(PluginCapabilityType::kBUILD));
        check(ob->configurePlugin(bad.data(), nIn, &bad.back(), 1) != 0 && logger.contains("packed_weight"),
            "configurePlugin refuses a wrong packed_weight shape and logs it");
    }

    // 4. Serialize the fields and re-create for the runtime phase; clone; attach.
    PluginFieldCollection const* ser = rt->getFieldsToSerialize();
    if (!check(ser != nullptr && ser->nbFields >= 7, "getFieldsToSerialize"))
    {
        return;
    }
    auto owned = deepCopy(ser);
    plugin.reset(); // the build-phase plugin is gone before the runtime one exists, as in a fresh process
    std::unique_ptr<IPluginV3> runtimePlugin(creator->createPlugin(c.name.c_str(), &owned->fc, TensorRTPhase::kRUNTIME));
    if (!check(runtimePlugin != nullptr, "createPlugin(kRUNTIME) from the serialized fields"))
    {
        return;
    }
    std::unique_ptr<IPluginV3> cloned(runtimePlugin->clone());
    runtimePlugin.reset();
    TestResourceContext ctx;
    auto* cloneRt = static_cast<IPluginV3OneRuntime*>(cloned->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    std::unique_ptr<IPluginV3> attached(cloneRt->attachToContext(&ctx));
    cloned.reset();
    if (!check(attached != nullptr, "clone + attachToContext"))
    {
        return;
    }
    auto* run = static_cast<IPluginV3OneRuntime*>(attached->getCapabilityInterface(PluginCapabilityType::kRUNTIME));

    check(run->setTactic(1000000) != 0, "setTactic refuses an unknown tactic");

    // 5. Enqueue: constant inputs on the device once; per M fresh activations and a poisoned output.
    Buffers buf;
    void* dWeight = buf.upload(c.weight.data(), c.weight.size() * 4);
    void* dScales = buf.upload(c.scales.data(), c.scales.size() * 2);
    void* dZeros = c.hasZeros ? buf.upload(c.zeros.data(), c.zeros.size() * 2) : nullptr;
    void* dBias = c.hasBias ? buf.upload(c.bias.data(), c.bias.size() * 2) : nullptr;
    void* dWorkspace{nullptr};
    if (workspace > 0)
    {
        CUDA_CHECK(cudaMalloc(&dWorkspace, workspace));
        buf.ptrs.push_back(dWorkspace);
    }
    double const tol = c.bf16 ? 1.6e-2 : 2e-3; // 4 units of the output type's rounding, relative, Frobenius
    std::vector<int32_t> runTactics = tactics;
    runTactics.push_back(0);
    std::normal_distribution<float> normal(0.0F, 1.0F);
    std::string summary;
    for (size_t mi = 0; mi < ms.size(); ++mi)
    {
        int64_t const m = ms[mi];
        // The last M runs as a 3-D activation [2, m/2, K] when even, to check that leading dims fold into M.
        bool const threeD = mi + 1 == ms.size() && m % 2 == 0 && m > 1;
        Dims const xd = threeD ? dims({2, m / 2, c.k}) : dims({m, c.k});
        std::vector<uint16_t> xh(static_cast<size_t>(m) * c.k);
        std::vector<double> x(xh.size());
        for (size_t i = 0; i < xh.size(); ++i)
        {
            float const v = normal(dev.rng);
            xh[i] = c.bf16 ? floatToBf16(v) : floatToHalf(v);
            x[i] = c.bf16 ? bf16ToDouble(xh[i]) : halfToDouble(xh[i]);
        }
        std::vector<double> ref;
        reference(c, x, m, ref);
        Buffers io;
        void* dX = io.upload(xh.data(), xh.size() * 2);
        void* dY{nullptr};
        size_t const yBytes = static_cast<size_t>(m) * c.n * 2;
        CUDA_CHECK(cudaMalloc(&dY, yBytes));
        io.ptrs.push_back(dY);
        std::vector<void const*> inputs{dX, dWeight, dScales};
        if (c.hasZeros)
        {
            inputs.push_back(dZeros);
        }
        if (c.hasBias)
        {
            inputs.push_back(dBias);
        }
        void* outputs[] = {dY};
        std::vector<PluginTensorDesc> d = descs(c, xd);
        double worst = 0;
        for (size_t ti = 0; ti < runTactics.size(); ++ti)
        {
            int32_t const tactic = runTactics[ti];
            // The default (tactic 0) run uses the legacy default stream once, at the first M.
            cudaStream_t const stream = (tactic == 0 && mi == 0) ? nullptr : dev.stream;
            std::string const what = "M=" + std::to_string(m) + (threeD ? " (3-D)" : "") + " tactic "
                + std::to_string(tactic) + (stream ? "" : " default stream");
            CUDA_CHECK(cudaMemset(dY, 0xFF, yBytes)); // NaN in fp16 and bf16
            check(run->setTactic(tactic) == 0, what + ": setTactic");
            check(run->onShapeChange(d.data(), nIn, &d.back(), 1) == 0, what + ": onShapeChange");
            int32_t const s = run->enqueue(d.data(), &d.back(), inputs.data(), outputs, dWorkspace, stream);
            CUDA_CHECK(stream ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize());
            if (!check(s == 0, what + ": enqueue returned " + std::to_string(s)))
            {
                continue;
            }
            std::vector<uint16_t> out(static_cast<size_t>(m) * c.n);
            CUDA_CHECK(cudaMemcpy(out.data(), dY, yBytes, cudaMemcpyDeviceToHost));
            Compare const r = compare(c, out, ref);
            char msg[160];
            std::snprintf(msg, sizeof msg, "%s: rel err %.3e (tol %.1e), %zu non-finite", what.c_str(), r.rel, tol,
                r.nonFinite);
            check(r.nonFinite == 0 && r.rel <= tol, msg);
            worst = std::max(worst, r.rel);
        }
        char s[64];
        std::snprintf(s, sizeof s, " M=%lld:%.2e", static_cast<long long>(m), worst);
        summary += s;
    }
    std::printf("%-28s %s tactics=%d workspace=%zu worst rel err per M:%s\n", c.name.c_str(),
        gFailed == failedBefore ? "ok  " : "FAIL", nbTactics, workspace, summary.c_str());
}

// Invalid and alternative field collections.
void fieldChecks(Library const& lib, TestLogger& logger, Case const& base)
{
    gCase = "fields";
    IPluginCreatorV3One* creator = lib.creator;
    struct Bad
    {
        char const* field;
        int32_t value;
        char const* quoted;
    };
    Bad const bads[] = {{"group_size", 96, "group_size 96"}, {"bits", 3, "bits 3"}, {"layout", 2, "layout 2"},
        {"in_features", 100, "in_features 100"}, {"out_features", 6, "out_features 6"}, {"has_zeros", 2, "has_zeros 2"}};
    for (Bad const& b : bads)
    {
        Case c = base;
        c.bits = 4;
        auto f = makeFields(c);
        for (size_t i = 0; i < 7; ++i)
        {
            if (std::strcmp(kIntNames[i], b.field) == 0)
            {
                f->ints[i] = b.value;
            }
        }
        logger.messages.clear();
        std::unique_ptr<IPluginV3> p(creator->createPlugin("bad", &f->fc, TensorRTPhase::kBUILD));
        check(p == nullptr && logger.contains(b.quoted),
            std::string("createPlugin refuses ") + b.quoted + " and logs it through TensorRT's logger");
    }
    {
        auto f = makeFields(base);
        f->fields.erase(f->fields.begin() + 2); // in_features
        f->fc.nbFields = static_cast<int32_t>(f->fields.size());
        f->fc.fields = f->fields.data();
        logger.messages.clear();
        std::unique_ptr<IPluginV3> p(creator->createPlugin("missing", &f->fc, TensorRTPhase::kBUILD));
        check(p == nullptr && logger.contains("in_features"), "createPlugin refuses a missing field and names it");
    }
    {
        auto f = makeFields(base);
        float const bogus = 4.0F;
        f->fields[0] = PluginField("bits", &bogus, PluginFieldType::kFLOAT32, 1);
        logger.messages.clear();
        std::unique_ptr<IPluginV3> p(creator->createPlugin("float", &f->fc, TensorRTPhase::kBUILD));
        check(p == nullptr && logger.contains("bits"), "createPlugin refuses a kFLOAT32 integer field");
    }
    {
        auto f = makeFields(base);
        f->fields[7] = PluginField("plugin_version", "2", PluginFieldType::kCHAR, 2);
        logger.messages.clear();
        std::unique_ptr<IPluginV3> p(creator->createPlugin("v2", &f->fc, TensorRTPhase::kBUILD));
        check(p == nullptr && logger.contains("\"2\""), "createPlugin refuses plugin_version \"2\"");
    }
    {
        auto f = makeFields(base, /*asInt64=*/true, /*withStrings=*/false);
        std::unique_ptr<IPluginV3> p(creator->createPlugin("int64", &f->fc, TensorRTPhase::kBUILD));
        check(p != nullptr, "createPlugin accepts kINT64 fields without the string fields");
    }
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 3)
    {
        std::printf("usage: %s PLUGIN_LIBRARY CASES_DIR [--m 1,3,16,127,4096] [--verbose]\n", argv[0]);
        return 2;
    }
    std::vector<int64_t> ms{1, 3, 16, 127, 4096};
    bool verbose = false;
    for (int i = 3; i < argc; ++i)
    {
        std::string a = argv[i];
        if (a == "--m" && i + 1 < argc)
        {
            ms.clear();
            std::stringstream s(argv[++i]);
            std::string item;
            while (std::getline(s, item, ','))
            {
                ms.push_back(std::stoll(item));
            }
        }
        else if (a == "--verbose")
        {
            verbose = true;
        }
    }

    Library lib;
    lib.handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle)
    {
        std::printf("dlopen(%s): %s\n0 passed, 1 failed\n", argv[1], dlerror());
        return 1;
    }
    auto getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(lib.handle, "getCreators"));
    auto setLoggerFinder = reinterpret_cast<SetLoggerFinderFn>(dlsym(lib.handle, "setLoggerFinder"));
    gCase = "library";
    check(getCreators != nullptr, "exports getCreators");
    check(setLoggerFinder != nullptr, "exports setLoggerFinder");
    if (!getCreators || !setLoggerFinder)
    {
        std::printf("%d passed, %d failed\n", gPassed, gFailed);
        return 1;
    }
    TestLogger logger;
    logger.verbose = verbose;
    TestLoggerFinder finder(&logger);
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
        if (std::string(c->getPluginName()) == "WeightOnlyLinear" && std::string(c->getPluginVersion()) == "1"
            && std::string(c->getPluginNamespace()).empty())
        {
            lib.creator = c;
        }
    }
    if (!check(lib.creator != nullptr, "getCreators has WeightOnlyLinear/1 in namespace \"\" (V3One)"))
    {
        std::printf("%d passed, %d failed\n", gPassed, gFailed);
        return 1;
    }
    PluginFieldCollection const* names = lib.creator->getFieldNames();
    std::set<std::string> listed;
    for (int32_t i = 0; names && i < names->nbFields; ++i)
    {
        listed.insert(names->fields[i].name);
    }
    check(std::all_of(std::begin(kIntNames), std::end(kIntNames), [&](char const* n) { return listed.count(n) == 1; }),
        "getFieldNames lists the seven INT attributes");

    int device = 0;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

    std::vector<Case> cases = loadCases(argv[2]);
    Device dev;
    CUDA_CHECK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
    fieldChecks(lib, logger, cases.front());
    for (Case const& c : cases)
    {
        runCase(lib, logger, dev, c, ms);
    }
    CUDA_CHECK(cudaStreamDestroy(dev.stream));
    std::printf("%d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 ? 0 : 1;
}
