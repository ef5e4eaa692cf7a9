/*
 * What the plugins' C++ test programs share to drive a plugin as TensorRT does, without TensorRT's library (its
 * headers only) and without replacing anything the plugins call: no stand-ins here, so the conformance harness
 * (tests/plugins/conformance/plugin_conformance.cpp, the real kernels library on a GPU) includes it as well as the
 * CPU harness of the host checks (host_harness.h, which adds the stand-ins).
 *
 *   - check / finish: counted checks, "FAIL [where] what" per failure, "N passed, N failed" at the end.
 *   - A logger (for the library's exported setLoggerFinder) that keeps every message.
 *   - An IExprBuilder whose symbols carry probe values, so that the expressions a plugin builds evaluate.
 *   - Fields: the fields of a node built as TensorRT's ONNX parser builds them (onnx-tensorrt loadFields: only the
 *     names the creator lists; INT -> one kINT32, INTS -> a kINT32 array, FLOAT -> kFLOAT32, STRING -> kCHAR with
 *     the NUL), given as they are, or a deep copy of a collection (what TensorRT keeps when it serializes).
 *
 * Included once per test program (it defines the counters).
 */
#ifndef TRT_WOQ_TESTS_TRT_TEST_SUPPORT_H
#define TRT_WOQ_TESTS_TRT_TEST_SUPPORT_H

#include <NvInferRuntime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <istream>
#include <memory>
#include <string>
#include <vector>

namespace trt_test
{

using namespace nvinfer1;

// ------------------------------------------------------------------------------------------------ checks
inline int gPassed = 0;
inline int gFailed = 0;
inline std::string gWhere;

inline bool check(bool ok, std::string const& what)
{
    ok ? ++gPassed : ++gFailed;
    if (!ok)
    {
        std::printf("FAIL [%s] %s\n", gWhere.c_str(), what.c_str());
    }
    return ok;
}

// Prints "N passed, N failed"; the program's exit status.
inline int finish()
{
    std::printf("%d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 ? 0 : 1;
}

// ------------------------------------------------------------------------------------------------ logger
class Logger : public ILogger
{
public:
    void log(Severity severity, char const* msg) noexcept override
    {
        messages.emplace_back(msg ? msg : "");
        if (verbose && severity <= Severity::kWARNING)
        {
            std::printf("  [plugin log] %s\n", messages.back().c_str());
        }
    }
    // Whether a message since the last clear() contains every one of `parts`.
    bool saw(std::vector<std::string> const& parts) const
    {
        return std::any_of(messages.begin(), messages.end(), [&](std::string const& m) {
            return std::all_of(parts.begin(), parts.end(), [&](std::string const& p) { return m.find(p) != m.npos; });
        });
    }
    std::string all() const
    {
        std::string s;
        for (auto const& m : messages)
        {
            s += "\n    " + m;
        }
        return s;
    }
    std::vector<std::string> messages;
    bool verbose{false}; // also print the warnings and errors
};

class LoggerFinder : public ILoggerFinder
{
public:
    explicit LoggerFinder(ILogger* l)
        : mLogger(l)
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
// A dimension expression: a constant, or a symbol (a size unknown at build time) that carries a probe value, the
// size of one run, so that the expressions a plugin builds from it can be evaluated and compared with the run's
// output shape. TensorRT's IDimensionExpr calls through mImpl; this class is both the interface and its
// implementation.
class Expr : public IDimensionExpr, public apiv::VDimensionExpr
{
public:
    Expr(bool constant, int64_t value)
        : mConstant(constant)
        , mValue(value)
    {
        mImpl = this;
    }
    ~Expr() noexcept override = default;
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
    int64_t mValue; // the constant, or a symbol's probe value
};

class ExprBuilder : public IExprBuilder, public apiv::VExprBuilder
{
public:
    ExprBuilder()
    {
        mImpl = this;
    }
    ~ExprBuilder() noexcept override = default;
    IDimensionExpr const* constant(int64_t value) override
    {
        return make(true, value);
    }
    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) override
    {
        auto const& x = static_cast<Expr const&>(a);
        auto const& y = static_cast<Expr const&>(b);
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
        case DimensionOperation::kFLOOR_DIV:
            v = x.mValue / y.mValue - ((x.mValue % y.mValue != 0) && ((x.mValue < 0) != (y.mValue < 0)));
            break;
        case DimensionOperation::kCEIL_DIV: v = (x.mValue + y.mValue - 1) / y.mValue; break;
        }
        return make(x.mConstant && y.mConstant, v);
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override
    {
        return nullptr;
    }
    Expr const* symbol(int64_t probe)
    {
        return make(false, probe);
    }

private:
    Expr const* make(bool c, int64_t v)
    {
        mPool.push_back(std::make_unique<Expr>(c, v));
        return mPool.back().get();
    }
    std::vector<std::unique_ptr<Expr>> mPool;
};

// The value of an expression an ExprBuilder made: a constant's, or what it evaluates to at the symbols' probes.
inline int64_t value(IDimensionExpr const* e)
{
    return static_cast<Expr const*>(e)->mValue;
}

// ------------------------------------------------------------------------------------------------ fields
// An ONNX attribute: INT, INTS, FLOAT or STRING (or INT64: INT / INTS passed as kINT64), with its values as text.
struct Attr
{
    std::string type;
    std::string name;
    std::vector<std::string> values;
};

// An attribute as the test programs' input files write it: "TYPE NAME VALUES..." (the rest of `s`).
inline Attr readAttr(std::istream& s)
{
    Attr a;
    s >> a.type >> a.name;
    std::string v;
    while (s >> v)
    {
        a.values.push_back(v);
    }
    return a;
}

// A field collection that owns its names and data.
class Fields
{
public:
    // The fields TensorRT's ONNX parser builds from `attrs` for a creator listing `listed`: the listed names only,
    // in the creator's order, each from the attribute of that name; names the node lacks are skipped.
    Fields(std::vector<Attr> const& attrs, PluginFieldCollection const* listed)
    {
        for (int32_t i = 0; listed && i < listed->nbFields; ++i)
        {
            std::string const name = listed->fields[i].name;
            for (Attr const& a : attrs)
            {
                if (a.name == name)
                {
                    add(a);
                }
            }
        }
    }
    // Fields given as they are (a caller other than the parser, or a malformed node).
    Fields() = default;
    // A deep copy of `fc` (what TensorRT keeps of getFieldsToSerialize in an engine).
    static Fields copyOf(PluginFieldCollection const* fc)
    {
        Fields o;
        for (int32_t i = 0; i < fc->nbFields; ++i)
        {
            PluginField const& f = fc->fields[i];
            o.add(f.name, f.type, f.data, elementSize(f.type) * static_cast<size_t>(std::max(f.length, 0)), f.length);
        }
        return o;
    }
    // One attribute as a field: INT / INTS as kINT32, INT64 as kINT64, FLOAT as kFLOAT32, STRING as kCHAR with its
    // NUL counted.
    void add(Attr const& a)
    {
        std::vector<char> bytes;
        PluginFieldType type{PluginFieldType::kINT32};
        int32_t length = static_cast<int32_t>(a.values.size());
        if (a.type == "INT" || a.type == "INTS")
        {
            for (auto const& v : a.values)
            {
                append(bytes, static_cast<int32_t>(std::stoll(v)));
            }
        }
        else if (a.type == "INT64")
        {
            type = PluginFieldType::kINT64;
            for (auto const& v : a.values)
            {
                append(bytes, static_cast<int64_t>(std::stoll(v)));
            }
        }
        else if (a.type == "FLOAT")
        {
            type = PluginFieldType::kFLOAT32;
            for (auto const& v : a.values)
            {
                append(bytes, static_cast<float>(std::stod(v)));
            }
        }
        else if (a.type == "STRING")
        {
            type = PluginFieldType::kCHAR;
            std::string const s = a.values.empty() ? "" : a.values[0];
            bytes.assign(s.begin(), s.end());
            bytes.push_back('\0');
            length = static_cast<int32_t>(bytes.size());
        }
        add(a.name, type, bytes.data(), bytes.size(), length);
    }
    // A field of `size` bytes at `data`, copied.
    void add(std::string const& name, PluginFieldType type, void const* data, size_t size, int32_t length)
    {
        auto const* p = static_cast<char const*>(data);
        mStore.emplace_back(p, p + size);
        mNames.push_back(std::make_unique<std::string>(name));
        mFields.emplace_back(mNames.back()->c_str(), nullptr, type, length);
    }
    // The collection, pointing into this object (valid until the next add).
    PluginFieldCollection const* collection()
    {
        for (size_t i = 0; i < mFields.size(); ++i)
        {
            mFields[i].data = mStore[i].empty() ? nullptr : mStore[i].data();
        }
        mFc.nbFields = static_cast<int32_t>(mFields.size());
        mFc.fields = mFields.data();
        return &mFc;
    }

private:
    template <typename T>
    static void append(std::vector<char>& bytes, T v)
    {
        char b[sizeof(T)];
        std::memcpy(b, &v, sizeof(T));
        bytes.insert(bytes.end(), b, b + sizeof(T));
    }
    static size_t elementSize(PluginFieldType t)
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
    std::vector<std::vector<char>> mStore;
    std::vector<std::unique_ptr<std::string>> mNames;
    std::vector<PluginField> mFields;
    PluginFieldCollection mFc{};
};

// ------------------------------------------------------------------------------------------------ plugins
// A plugin's capability interfaces.
struct Views
{
    IPluginV3OneCore* core;
    IPluginV3OneBuild* build;
    IPluginV3OneRuntime* runtime;
};

inline Views views(IPluginV3* p)
{
    return {static_cast<IPluginV3OneCore*>(p->getCapabilityInterface(PluginCapabilityType::kCORE)),
        static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD)),
        static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME))};
}

} // namespace trt_test

#endif // TRT_WOQ_TESTS_TRT_TEST_SUPPORT_H
