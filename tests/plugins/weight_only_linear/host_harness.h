/*
 * CPU harness for the plugins' host code (no GPU, no TensorRT library, only its headers): stand-ins for what the
 * plugins call besides TensorRT, and helpers that drive them the way TensorRT does.
 *
 *   - The kernels' C ABI (trt_woq/kernels.h) over a table of fake candidates that tests fill in: names, served masks,
 *     an M range, a workspace function. trt_woq_linear_run records its params instead of launching anything and,
 *     as the library does, returns TRT_WOQ_ERR_WORKSPACE when workspace_size is below the candidate's need.
 *   - cudaGetDevice / cudaDeviceGetAttribute / cudaGetErrorName: a device of compute capability fakes::gSm, or
 *     cudaErrorNoDevice when fakes::gNoDevice is set.
 *   - A logger (through the library's exported setLoggerFinder), an IExprBuilder whose symbols carry probe values,
 *     and the fields of a node built as TensorRT's ONNX parser builds them (onnx-tensorrt loadFields: only the names
 *     the creator lists; INT -> one kINT32, INTS -> a kINT32 array, FLOAT -> kFLOAT32, STRING -> kCHAR with the NUL).
 *
 * Included once per test program (it defines the C functions). Compiled and run by test_plugin_host.py and
 * tests/plugins/weight_only_conv/test_conv_plugin_host.py.
 */
#ifndef TRT_WOQ_TESTS_HOST_HARNESS_H
#define TRT_WOQ_TESTS_HOST_HARNESS_H

#include "trt_woq/kernels.h"

#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace nvinfer1;

extern "C" IPluginCreatorInterface* const* getCreators(int32_t& nbCreators);
extern "C" void setLoggerFinder(ILoggerFinder* finder);

// ------------------------------------------------------------------------------------------------ fakes
namespace fakes
{

struct Candidate
{
    std::string name;
    uint32_t formats{0x7};
    uint32_t modes{0x1};
    uint32_t ops{0x1};
    uint32_t epilogues{0x3f};
    int64_t minM{1};
    int64_t maxM{INT64_MAX};
    int32_t score{1};
    std::function<size_t(trt_woq_linear_params const&)> workspace = [](trt_woq_linear_params const&) {
        return size_t(0);
    };
};

std::vector<Candidate> gCandidates;
int32_t gSm = 90;
bool gNoDevice = false;
trt_woq_status gRunStatus = TRT_WOQ_OK;
struct RunCall
{
    int32_t id;
    trt_woq_linear_params params;
};
std::vector<RunCall> gRuns;

inline bool serves(Candidate const& c, trt_woq_linear_params const& p)
{
    return (c.formats >> p.weight_format & 1u) && (c.modes >> p.act_mode & 1u) && (c.ops >> p.op & 1u)
        && (c.epilogues >> p.epilogue & 1u);
}

inline bool supports(int32_t id, trt_woq_linear_params const& p)
{
    if (id < 0 || id >= static_cast<int32_t>(gCandidates.size()))
    {
        return false;
    }
    Candidate const& c = gCandidates[static_cast<size_t>(id)];
    return serves(c, p) && p.m >= c.minM && p.m <= c.maxM;
}

// kernels.h's rule: 32-bit FNV-1a of the name, % (2^31 - 1) + 1.
inline int32_t tacticOf(std::string const& name)
{
    uint32_t h = 2166136261u;
    for (unsigned char ch : name)
    {
        h = (h ^ ch) * 16777619u;
    }
    return static_cast<int32_t>(h % 2147483647u) + 1;
}

} // namespace fakes

extern "C"
{

int32_t trt_woq_abi_version(void)
{
    return TRT_WOQ_ABI_VERSION;
}

int32_t trt_woq_linear_candidate_count(void)
{
    return static_cast<int32_t>(fakes::gCandidates.size());
}

int32_t trt_woq_linear_candidate_tactic(int32_t id)
{
    if (id < 0 || id >= trt_woq_linear_candidate_count())
    {
        return 0;
    }
    return fakes::tacticOf(fakes::gCandidates[static_cast<size_t>(id)].name);
}

int32_t trt_woq_linear_candidate_by_tactic(int32_t tactic)
{
    for (int32_t id = 0; id < trt_woq_linear_candidate_count(); ++id)
    {
        if (tactic > 0 && trt_woq_linear_candidate_tactic(id) == tactic)
        {
            return id;
        }
    }
    return -1;
}

int32_t trt_woq_linear_candidate_by_name(char const* name)
{
    for (int32_t id = 0; name && id < trt_woq_linear_candidate_count(); ++id)
    {
        if (fakes::gCandidates[static_cast<size_t>(id)].name == name)
        {
            return id;
        }
    }
    return -1;
}

trt_woq_status trt_woq_linear_candidate_describe(int32_t id, char* buf, size_t buf_size)
{
    if (id < 0 || id >= trt_woq_linear_candidate_count() || buf == nullptr || buf_size == 0)
    {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    std::snprintf(buf, buf_size, "%s", fakes::gCandidates[static_cast<size_t>(id)].name.c_str());
    return TRT_WOQ_OK;
}

trt_woq_status trt_woq_linear_candidate_info(int32_t id, trt_woq_candidate_info* out)
{
    if (id < 0 || id >= trt_woq_linear_candidate_count() || out == nullptr)
    {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    fakes::Candidate const& c = fakes::gCandidates[static_cast<size_t>(id)];
    *out = {c.name.c_str(), c.formats, c.modes, c.ops, c.epilogues};
    return TRT_WOQ_OK;
}

trt_woq_status trt_woq_linear_candidate_serves(int32_t id, trt_woq_linear_params const* params)
{
    if (id < 0 || id >= trt_woq_linear_candidate_count() || params == nullptr)
    {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    return fakes::serves(fakes::gCandidates[static_cast<size_t>(id)], *params) ? TRT_WOQ_OK
                                                                                : TRT_WOQ_ERR_UNSUPPORTED_OPTION;
}

trt_woq_status trt_woq_linear_candidate_supports(int32_t id, trt_woq_linear_params const* params, int32_t)
{
    if (id < 0 || id >= trt_woq_linear_candidate_count() || params == nullptr)
    {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    return fakes::supports(id, *params) ? TRT_WOQ_OK : TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
}

int32_t trt_woq_linear_dispatch(trt_woq_linear_params const* params, int32_t)
{
    int32_t best = -1;
    for (int32_t id = 0; params && id < trt_woq_linear_candidate_count(); ++id)
    {
        if (fakes::supports(id, *params) && fakes::gCandidates[static_cast<size_t>(id)].score >= 0
            && (best < 0 || fakes::gCandidates[static_cast<size_t>(id)].score
                    > fakes::gCandidates[static_cast<size_t>(best)].score))
        {
            best = id;
        }
    }
    return best;
}

size_t trt_woq_linear_workspace_size(int32_t id, trt_woq_linear_params const* params, int32_t sm)
{
    if (id == TRT_WOQ_CANDIDATE_AUTO)
    {
        id = trt_woq_linear_dispatch(params, sm);
    }
    if (params == nullptr || !fakes::supports(id, *params))
    {
        return 0;
    }
    return fakes::gCandidates[static_cast<size_t>(id)].workspace(*params);
}

trt_woq_status trt_woq_linear_run(int32_t id, trt_woq_linear_params const* params, void*)
{
    fakes::gRuns.push_back({id, *params});
    if (params->workspace_size < trt_woq_linear_workspace_size(id, params, fakes::gSm))
    {
        return TRT_WOQ_ERR_WORKSPACE;
    }
    return fakes::gRunStatus;
}

char const* trt_woq_status_string(trt_woq_status status)
{
    return status == TRT_WOQ_OK     ? "ok"
        : status == TRT_WOQ_ERR_CUDA ? "fake CUDA error"
        : status == TRT_WOQ_ERR_WORKSPACE ? "workspace missing or too small"
                                          : "fake failure";
}

char const* trt_woq_last_cuda_error(void)
{
    return "cudaErrorFakeLaunchFailure";
}

cudaError_t cudaGetDevice(int* device)
{
    if (fakes::gNoDevice)
    {
        return cudaErrorNoDevice;
    }
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int)
{
    *value = attr == cudaDevAttrComputeCapabilityMajor ? fakes::gSm / 10 : fakes::gSm % 10;
    return cudaSuccess;
}

char const* cudaGetErrorName(cudaError_t error)
{
    return error == cudaErrorNoDevice ? "cudaErrorNoDevice" : "cudaError(fake)";
}

} // extern "C"

// ------------------------------------------------------------------------------------------------ checks
namespace host
{

int gPassed = 0;
int gFailed = 0;
std::string gWhere;

inline bool check(bool ok, std::string const& what)
{
    ok ? ++gPassed : ++gFailed;
    if (!ok)
    {
        std::printf("FAIL [%s] %s\n", gWhere.c_str(), what.c_str());
    }
    return ok;
}

inline int finish()
{
    std::printf("%d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 ? 0 : 1;
}

class Logger : public ILogger
{
public:
    void log(Severity, char const* msg) noexcept override
    {
        messages.emplace_back(msg ? msg : "");
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

Logger gLogger;
LoggerFinder gFinder(&gLogger);

// A dimension expression: a constant, or a symbol carrying a probe value so that expressions built on it evaluate.
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
    int64_t mValue;
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

inline int64_t value(IDimensionExpr const* e)
{
    return static_cast<Expr const*>(e)->mValue;
}

// ------------------------------------------------------------------------------------------------ plugins
inline IPluginCreatorV3One* creator(std::string const& name)
{
    int32_t n = 0;
    IPluginCreatorInterface* const* all = getCreators(n);
    for (int32_t i = 0; i < n; ++i)
    {
        auto* c = static_cast<IPluginCreatorV3One*>(all[i]);
        if (name == c->getPluginName() && std::string("1") == c->getPluginVersion()
            && std::string("") == c->getPluginNamespace())
        {
            return c;
        }
    }
    return nullptr;
}

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

// An ONNX attribute: INT, INTS, FLOAT or STRING, with its values as text.
struct Attr
{
    std::string type;
    std::string name;
    std::vector<std::string> values;
};

// The fields TensorRT's ONNX parser builds from `attrs` for a creator listing `listed`, with their storage.
class Fields
{
public:
    Fields(std::vector<Attr> const& attrs, PluginFieldCollection const* listed)
    {
        for (int32_t i = 0; i < listed->nbFields; ++i)
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
    void add(Attr const& a)
    {
        mStore.emplace_back();
        std::vector<char>& bytes = mStore.back();
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
        mNames.push_back(std::make_unique<std::string>(a.name));
        mFields.emplace_back(mNames.back()->c_str(), nullptr, type, length);
    }
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
    std::vector<std::vector<char>> mStore;
    std::vector<std::unique_ptr<std::string>> mNames;
    std::vector<PluginField> mFields;
    PluginFieldCollection mFc{};
};

// A field collection as comparable text: "name:type:length=v0,v1;...".
inline std::string describe(PluginFieldCollection const* fc)
{
    if (fc == nullptr)
    {
        return "<null>";
    }
    std::ostringstream s;
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        s << f.name << ":" << static_cast<int32_t>(f.type) << ":" << f.length << "=";
        for (int32_t e = 0; e < f.length && f.data; ++e)
        {
            s << (e ? "," : "");
            if (f.type == PluginFieldType::kINT32)
            {
                s << static_cast<int32_t const*>(f.data)[e];
            }
            else if (f.type == PluginFieldType::kFLOAT32)
            {
                s << static_cast<float const*>(f.data)[e];
            }
            else if (f.type == PluginFieldType::kINT64)
            {
                s << static_cast<int64_t const*>(f.data)[e];
            }
            else
            {
                s << "?";
            }
        }
        s << ";";
    }
    return s.str();
}

// The int32 / float values of field `name` in `fc` as text, "" when absent.
inline std::string fieldValues(PluginFieldCollection const* fc, std::string const& name)
{
    for (int32_t i = 0; fc && i < fc->nbFields; ++i)
    {
        if (name == fc->fields[i].name)
        {
            std::string const all = describe(fc);
            size_t const at = all.find(name + ":");
            size_t const eq = all.find('=', at);
            return all.substr(eq + 1, all.find(';', eq) - eq - 1);
        }
    }
    return "";
}

// The values of an attribute as the serialized fields print them (INT narrowed to int32, FLOAT to float).
inline std::string attrValues(Attr const& a)
{
    std::ostringstream s;
    for (size_t e = 0; e < a.values.size(); ++e)
    {
        s << (e ? "," : "");
        if (a.type == "FLOAT")
        {
            s << static_cast<float>(std::stod(a.values[e]));
        }
        else
        {
            s << static_cast<int32_t>(std::stoll(a.values[e]));
        }
    }
    return s.str();
}

// Nodes written by the Python side: "node OP LABEL", then "attr TYPE NAME VALUES...", then "end".
struct Node
{
    std::string op;
    std::string label;
    std::vector<Attr> attrs;
};

inline std::vector<Node> readNodes(std::string const& path)
{
    std::vector<Node> nodes;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line))
    {
        std::istringstream s(line);
        std::string key;
        s >> key;
        if (key == "node")
        {
            nodes.emplace_back();
            s >> nodes.back().op >> nodes.back().label;
        }
        else if (key == "attr" && !nodes.empty())
        {
            Attr a;
            s >> a.type >> a.name;
            std::string v;
            while (s >> v)
            {
                a.values.push_back(v);
            }
            nodes.back().attrs.push_back(a);
        }
    }
    return nodes;
}

inline DynamicPluginTensorDesc tensor(DataType type, Dims dims, Dims min, Dims opt, Dims max)
{
    DynamicPluginTensorDesc d{};
    d.desc.type = type;
    d.desc.format = TensorFormat::kLINEAR;
    d.desc.dims = dims;
    d.min = min;
    d.opt = opt;
    d.max = max;
    return d;
}

inline DynamicPluginTensorDesc tensor(DataType type, Dims dims)
{
    return tensor(type, dims, dims, dims, dims);
}

inline Dims dims(std::initializer_list<int64_t> v)
{
    Dims d{};
    for (int64_t x : v)
    {
        d.d[d.nbDims++] = x;
    }
    return d;
}

} // namespace host

#endif // TRT_WOQ_TESTS_HOST_HARNESS_H
