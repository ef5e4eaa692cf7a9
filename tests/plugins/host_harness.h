/*
 * CPU harness for the plugins' host code (no GPU, no TensorRT library, only its headers): stand-ins for what the
 * plugins call besides TensorRT, and helpers that drive them the way TensorRT does (on trt_test_support.h's logger,
 * IExprBuilder and parser-built fields).
 *
 *   - The kernels' C ABI (trt_woq/kernels.h) over a table of fake candidates that tests fill in: names, served masks,
 *     an M range, a workspace function. trt_woq_linear_run records its params instead of launching anything and,
 *     as the library does, returns TRT_WOQ_ERR_WORKSPACE when workspace_size is below the candidate's need.
 *   - cudaGetDevice / cudaDeviceGetAttribute / cudaGetErrorName: a device of compute capability fakes::gSm, or
 *     cudaErrorNoDevice when fakes::gNoDevice is set.
 *   - host::PluginUnderTest: what the check programs of both plugins do alike: a program's start (the logger, the
 *     creator, the nodes of its input file), a node's plugin from the parser's fields with its serialization round
 *     trip, the format combinations, an enqueue with its operands, the fixed cases' creation and refusals.
 *
 * Included once per test program (it defines the C functions). Compiled and run by
 * tests/plugins/weight_only_linear/test_plugin_host.py and tests/plugins/weight_only_conv/test_conv_plugin_host.py.
 */
#ifndef TRT_WOQ_TESTS_HOST_HARNESS_H
#define TRT_WOQ_TESTS_HOST_HARNESS_H

#include "trt_test_support.h"
#include "trt_woq/kernels.h"

#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
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


// ------------------------------------------------------------------------------------------------ helpers
namespace host
{

using namespace trt_test;

inline Logger gLogger;
inline LoggerFinder gFinder(&gLogger);

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
            nodes.back().attrs.push_back(readAttr(s));
        }
    }
    return nodes;
}

// A node's attributes by name.
using AttrMap = std::map<std::string, Attr>;

inline AttrMap byName(std::vector<Attr> const& attrs)
{
    AttrMap m;
    for (Attr const& a : attrs)
    {
        m[a.name] = a;
    }
    return m;
}

// Value `i` of INT / INTS attribute `name`, `dflt` when the node has no such attribute.
inline int64_t intOf(AttrMap const& m, std::string const& name, int64_t dflt = 0, size_t i = 0)
{
    auto it = m.find(name);
    return it == m.end() ? dflt : std::stoll(it->second.values.at(i));
}

// `attrs` with `a` replacing the attribute of its name, or added.
inline std::vector<Attr> with(std::vector<Attr> attrs, Attr const& a)
{
    for (Attr& x : attrs)
    {
        if (x.name == a.name)
        {
            x = a;
            return attrs;
        }
    }
    attrs.push_back(a);
    return attrs;
}

inline std::vector<Attr> without(std::vector<Attr> attrs, std::string const& name)
{
    attrs.erase(std::remove_if(attrs.begin(), attrs.end(), [&](Attr const& a) { return a.name == name; }), attrs.end());
    return attrs;
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

// ------------------------------------------------------------------------------------------------ driving
// supportsFormatCombination of every position, for HALF and BF16 activations, over `types` in the linear format and
// in `other`: exactly the linear ones of the activation type at position 0 (HALF or BF16), kINT32 where `int32At`
// (the packed weight, ...), the activation type elsewhere.
inline void checkFormats(IPluginV3OneBuild* build, int32_t nbIn, std::vector<DataType> const& types,
    TensorFormat other, std::function<bool(int32_t pos)> const& int32At)
{
    std::vector<DynamicPluginTensorDesc> io(static_cast<size_t>(nbIn + 1));
    for (DataType act : {DataType::kHALF, DataType::kBF16})
    {
        for (int32_t pos = 0; pos <= nbIn; ++pos)
        {
            for (DataType t : types)
            {
                for (TensorFormat f : {TensorFormat::kLINEAR, other})
                {
                    for (auto& d : io)
                    {
                        d.desc.type = act;
                        d.desc.format = TensorFormat::kLINEAR;
                    }
                    io[static_cast<size_t>(pos)].desc.type = t;
                    io[static_cast<size_t>(pos)].desc.format = f;
                    bool const want = f == TensorFormat::kLINEAR
                        && (pos == 0 ? (t == DataType::kHALF || t == DataType::kBF16)
                                     : (int32At(pos) ? t == DataType::kINT32 : t == act));
                    check(build->supportsFormatCombination(pos, io.data(), nbIn, 1) == want,
                        "supportsFormatCombination pos " + std::to_string(pos) + " type "
                            + std::to_string(static_cast<int32_t>(t)) + " format "
                            + std::to_string(static_cast<int32_t>(f)));
                }
            }
        }
    }
}

// Addresses for enqueue's operands, each its own (the stand-in library only records them): input i at
// 0x10000 (i + 1), the output at 0xA0000, the workspace at 0xB0000.
struct Operands
{
    std::vector<void const*> inputs;
    void* output;
    void* workspace;
};

inline Operands fakeOperands(int32_t nbIn)
{
    Operands o{{}, reinterpret_cast<void*>(uintptr_t(0xA0000)), reinterpret_cast<void*>(uintptr_t(0xB0000))};
    for (int32_t i = 0; i < nbIn; ++i)
    {
        o.inputs.push_back(reinterpret_cast<void const*>(uintptr_t(0x10000) * uintptr_t(i + 1)));
    }
    return o;
}

// onShapeChange, then enqueue of `in` -> `out` on fake operands; the stand-in library's calls in fakes::gRuns.
// enqueue's status, or -2 when onShapeChange fails.
inline int32_t enqueueOnce(IPluginV3OneRuntime* rt, std::vector<PluginTensorDesc> const& in, PluginTensorDesc out)
{
    int32_t const nbIn = static_cast<int32_t>(in.size());
    Operands o = fakeOperands(nbIn);
    fakes::gRuns.clear();
    if (rt->onShapeChange(in.data(), nbIn, &out, 1) != 0)
    {
        return -2;
    }
    return rt->enqueue(in.data(), &out, o.inputs.data(), &o.output, o.workspace, nullptr);
}

// An enqueue checked as a node's: its operands and the kernel call it made (null unless exactly one).
struct Launch
{
    Operands operands;
    trt_woq_linear_params const* params;
};

// onShapeChange and enqueue of the inputs configured as `in` but for the activation's dims `x`, into the output
// configured as `out` with dims `y`. Checks: both succeed with one kernel call, whose activation, packed weight and
// scales are inputs 0, 1 and 2, its zeros input 3 where the node has zeros, its bias the next where it has a bias.
inline Launch launch(IPluginV3OneRuntime* rt, std::vector<DynamicPluginTensorDesc> const& in, Dims x,
    DynamicPluginTensorDesc const& out, Dims y, bool hasZeros, bool hasBias)
{
    int32_t const nbIn = static_cast<int32_t>(in.size());
    std::vector<PluginTensorDesc> pin;
    for (DynamicPluginTensorDesc const& d : in)
    {
        pin.push_back(d.desc);
    }
    pin[0].dims = x;
    PluginTensorDesc pout = out.desc;
    pout.dims = y;
    Launch l{fakeOperands(nbIn), nullptr};
    std::vector<void const*> const& ptrs = l.operands.inputs;
    check(rt->onShapeChange(pin.data(), nbIn, &pout, 1) == 0, "onShapeChange");
    fakes::gRuns.clear();
    check(rt->enqueue(pin.data(), &pout, ptrs.data(), &l.operands.output, l.operands.workspace, nullptr) == 0,
        "enqueue");
    if (!check(fakes::gRuns.size() == 1, "one kernel call per enqueue"))
    {
        return l;
    }
    trt_woq_linear_params const& p = fakes::gRuns[0].params;
    check(p.activation == ptrs[0] && p.packed_weight == ptrs[1] && p.scales == ptrs[2], "X, W, scales");
    check(p.zeros == (hasZeros ? ptrs[3] : nullptr), "zeros pointer");
    check(p.bias == (hasBias ? ptrs[3 + (hasZeros ? 1 : 0)] : nullptr), "bias pointer");
    l.params = &p;
    return l;
}

// A node's plugin for the build phase and the one TensorRT re-creates for the runtime from its serialized fields.
struct NodePlugins
{
    std::unique_ptr<IPluginV3> plugin;  // null when createPlugin(kBUILD) refused the node
    std::unique_ptr<IPluginV3> runtime; // null when createPlugin(kRUNTIME) refused getFieldsToSerialize
    std::string serialized;             // describe(getFieldsToSerialize())
};

// The plugin a check program drives: its creator's name, and the layer name of the plugins its fixed cases create.
class PluginUnderTest
{
public:
    PluginUnderTest(char const* name, char const* layer)
        : mName(name)
        , mLayer(layer)
    {
    }

    IPluginCreatorV3One* creator() const
    {
        return host::creator(mName);
    }

    // createPlugin from the fields the ONNX parser builds from `attrs`.
    IPluginV3* create(std::vector<Attr> const& attrs, TensorRTPhase phase = TensorRTPhase::kBUILD) const
    {
        Fields f(attrs, creator()->getFieldNames());
        return creator()->createPlugin(mLayer, f.collection(), phase);
    }

    // createPlugin(kBUILD) from `attrs` as given, every one in order: not the parser's fields (a caller passing
    // kINT64 fields, or malformed ones).
    IPluginV3* createAsGiven(std::vector<Attr> const& attrs) const
    {
        Fields f;
        for (Attr const& a : attrs)
        {
            f.add(a);
        }
        return creator()->createPlugin(mLayer, f.collection(), TensorRTPhase::kBUILD);
    }

    // createPlugin(kRUNTIME) from `fc`, as deserializing an engine does.
    IPluginV3* createRuntime(PluginFieldCollection const* fc) const
    {
        return creator()->createPlugin(mLayer, fc, TensorRTPhase::kRUNTIME);
    }

    // createPlugin(kRUNTIME) refuses the parser's fields of `attrs` with `serialized` added (a field the plugin
    // serializes, malformed), logging a message that contains every one of `quote`.
    void expectRuntimeRefused(std::vector<Attr> const& attrs, Attr const& serialized,
        std::vector<std::string> const& quote, std::string const& what) const
    {
        Fields f(attrs, creator()->getFieldNames());
        f.add(serialized);
        gLogger.messages.clear();
        check(std::unique_ptr<IPluginV3>(createRuntime(f.collection())) == nullptr && gLogger.saw(quote),
            what + ":" + gLogger.all());
    }

    // createPlugin refuses `attrs`, logging a message that contains every one of `quote`.
    void expectRefused(std::vector<Attr> const& attrs, std::vector<std::string> const& quote,
        std::string const& what) const
    {
        gLogger.messages.clear();
        std::unique_ptr<IPluginV3> p(create(attrs));
        check(p == nullptr, what + ": createPlugin accepted it");
        check(gLogger.saw(quote), what + ": no message quoting the value; got:" + gLogger.all());
    }

    // A node graph_passes wrote: createPlugin(kBUILD) accepts its fields as the parser builds them, with the three
    // capability interfaces; every field the creator lists serializes as the node has it (an absent int field as 0),
    // and the node has no attribute the creator does not list; getFieldsToSerialize -> createPlugin(kRUNTIME), clone
    // and attachToContext keep every field.
    NodePlugins fromNode(Node const& node) const
    {
        NodePlugins out;
        AttrMap const a = byName(node.attrs);
        gLogger.messages.clear();
        IPluginCreatorV3One* c = creator();
        Fields fields(node.attrs, c->getFieldNames());
        out.plugin.reset(c->createPlugin(node.label.c_str(), fields.collection(), TensorRTPhase::kBUILD));
        if (!check(out.plugin != nullptr, "createPlugin(kBUILD) refused a node graph_passes wrote:" + gLogger.all()))
        {
            return out;
        }
        Views v = views(out.plugin.get());
        check(v.core && v.build && v.runtime, "capability interfaces");

        PluginFieldCollection const* listed = c->getFieldNames();
        PluginFieldCollection const* ser = v.runtime->getFieldsToSerialize();
        out.serialized = describe(ser);
        for (int32_t i = 0; i < listed->nbFields; ++i)
        {
            std::string const name = listed->fields[i].name;
            auto it = a.find(name);
            std::string const got = fieldValues(ser, name);
            if (it != a.end())
            {
                check(got == attrValues(it->second), "field " + name + " serialized as " + got + ", the node has "
                        + attrValues(it->second));
            }
            else if (listed->fields[i].type == PluginFieldType::kINT32)
            {
                check(got == "0", "absent field " + name + " serialized as " + got + ", expected its default 0");
            }
        }
        for (auto const& [name, attr] : a)
        {
            bool const isListed = std::any_of(listed->fields, listed->fields + listed->nbFields,
                [&](PluginField const& f) { return name == f.name; });
            check(isListed || attr.type == "STRING", "attribute " + name + " is not a field the creator lists");
        }

        out.runtime.reset(c->createPlugin(node.label.c_str(), ser, TensorRTPhase::kRUNTIME));
        if (check(out.runtime != nullptr, "createPlugin(kRUNTIME) from getFieldsToSerialize:" + gLogger.all()))
        {
            std::string const again = describe(views(out.runtime.get()).runtime->getFieldsToSerialize());
            check(again == out.serialized,
                "runtime plugin's fields differ from the build plugin's: " + again + " vs " + out.serialized);
        }
        std::unique_ptr<IPluginV3> cloned(out.plugin->clone());
        check(cloned && describe(views(cloned.get()).runtime->getFieldsToSerialize()) == out.serialized,
            "clone's fields");
        std::unique_ptr<IPluginV3> attached(v.runtime->attachToContext(nullptr));
        check(attached && describe(views(attached.get()).runtime->getFieldsToSerialize()) == out.serialized,
            "attachToContext's fields");
        return out;
    }

    // A check program: the library's logger, the creator (a FAIL line and status 1 when getCreators lacks it),
    // `checkNode` on each of the plugin's nodes in the file `argv[1]` names, if any, then each of `fixedCases`.
    // Prints "N passed, N failed"; the exit status.
    int run(int argc, char** argv, void (*checkNode)(Node const&), std::initializer_list<void (*)()> fixedCases) const
    {
        setLoggerFinder(&gFinder);
        if (creator() == nullptr)
        {
            std::printf("FAIL no %s creator (name, version 1, namespace \"\") in getCreators\n", mName);
            return 1;
        }
        if (argc > 1)
        {
            std::vector<Node> nodes = readNodes(argv[1]);
            check(!nodes.empty(), std::string("nodes in ") + argv[1]);
            for (Node const& n : nodes)
            {
                if (n.op == mName)
                {
                    checkNode(n);
                }
            }
        }
        for (auto fixedCase : fixedCases)
        {
            fixedCase();
        }
        return finish();
    }

private:
    char const* mName;
    char const* mLayer;
};

} // namespace host

#endif // TRT_WOQ_TESTS_HOST_HARNESS_H
