#include "weightOnlyLinearPlugin.h"

#include "pluginLogger.h"
#include "trt_woq/kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <sstream>
#include <vector>

using namespace nvinfer1;

namespace trt_woq
{
namespace plugin
{
namespace
{

constexpr int32_t kSTATUS_SUCCESS = 0;
constexpr int32_t kSTATUS_FAILURE = -1;
constexpr int64_t kTILE_ROWS = 16; // every kernel's token tile is a multiple of 16 rows

// The integer fields, in the order of docs/op.md; `activation`, `act_mode` and `act_asymmetric` are optional
// (absent = none / weight-only). plugin_version and plugin_namespace are read by the ONNX parser to find the
// creator; the creator accepts them and checks that they name this plugin. The activation's float parameters are
// kFLOAT_FIELDS.
struct IntField
{
    char const* name;
    int32_t WeightOnlyLinearParams::*member;
    bool required{true};
};
struct FloatField
{
    char const* name;
    float WeightOnlyLinearParams::*member;
};
constexpr FloatField kFLOAT_FIELDS[] = {
    {"clip_min", &WeightOnlyLinearParams::clipMin},
    {"clip_max", &WeightOnlyLinearParams::clipMax},
};
constexpr IntField kINT_FIELDS[] = {
    {"bits", &WeightOnlyLinearParams::bits},
    {"group_size", &WeightOnlyLinearParams::groupSize},
    {"in_features", &WeightOnlyLinearParams::inFeatures},
    {"out_features", &WeightOnlyLinearParams::outFeatures},
    {"layout", &WeightOnlyLinearParams::layout},
    {"has_zeros", &WeightOnlyLinearParams::hasZeros},
    {"has_bias", &WeightOnlyLinearParams::hasBias},
    {"activation", &WeightOnlyLinearParams::activation, false},
    {"act_mode", &WeightOnlyLinearParams::actMode, false},
    {"act_asymmetric", &WeightOnlyLinearParams::actAsymmetric, false},
};

char const* dataTypeName(DataType t)
{
    switch (t)
    {
    case DataType::kFLOAT: return "FLOAT";
    case DataType::kHALF: return "HALF";
    case DataType::kBF16: return "BF16";
    case DataType::kINT32: return "INT32";
    case DataType::kINT8: return "INT8";
    case DataType::kINT64: return "INT64";
    default: return "other";
    }
}

// M = product of all dims but the last, or -1 if one of them is unknown.
int64_t rowsOf(Dims const& d)
{
    int64_t m = 1;
    for (int32_t i = 0; i + 1 < d.nbDims; ++i)
    {
        if (d.d[i] < 0)
        {
            return -1;
        }
        m *= d.d[i];
    }
    return m;
}

// Logs "WeightOnlyLinear[name]::where: what" and returns the failure status.
int32_t fail(std::string const& name, char const* where, std::string const& what) noexcept
{
    logError(std::string(kPLUGIN_NAME) + "[" + name + "]::" + where + ": " + what);
    return kSTATUS_FAILURE;
}

// The op's `bits` attribute names the weight format (docs/op.md); validate() admits only these.
trt_woq_weight_format weightFormatOf(int32_t bits)
{
    return bits == 8 ? TRT_WOQ_WEIGHT_INT8 : bits == 6 ? TRT_WOQ_WEIGHT_FP6_E3M2 : TRT_WOQ_WEIGHT_INT4;
}

// A candidate's name for messages ("#id" when the kernels library does not know the id).
std::string candidateName(int32_t id)
{
    trt_woq_candidate_info info{};
    return trt_woq_linear_candidate_info(id, &info) == TRT_WOQ_OK ? info.name : "#" + std::to_string(id);
}

} // namespace

std::string dimsString(Dims const& d)
{
    std::ostringstream s;
    s << "[";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s << (i ? ", " : "") << d.d[i];
    }
    s << "]";
    return s.str();
}

int32_t currentSm()
{
    int32_t device{0};
    int32_t major{0};
    int32_t minor{0};
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess)
    {
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    }
    if (e == cudaSuccess)
    {
        e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    }
    if (e != cudaSuccess)
    {
        throw std::runtime_error(std::string("cannot query the CUDA device: ") + cudaGetErrorName(e));
    }
    return major * 10 + minor;
}

namespace
{

bool sameProfile(WorkspaceReservation const& a, WorkspaceReservation const& b)
{
    return a.actType == b.actType && std::equal(a.min, a.min + 3, b.min) && std::equal(a.opt, a.opt + 3, b.opt)
        && std::equal(a.max, a.max + 3, b.max);
}

} // namespace

void addReservation(std::vector<WorkspaceReservation>& all, WorkspaceReservation const& r)
{
    auto const same
        = std::find_if(all.begin(), all.end(), [&](WorkspaceReservation const& x) { return sameProfile(x, r); });
    if (same != all.end())
    {
        *same = r;
    }
    else
    {
        all.push_back(r);
    }
}

WorkspaceReservation const* findReservation(
    std::vector<WorkspaceReservation> const& all, WorkspaceReservation const& key)
{
    auto const same
        = std::find_if(all.begin(), all.end(), [&](WorkspaceReservation const& x) { return sameProfile(x, key); });
    return same == all.end() ? nullptr : &*same;
}

int64_t reservedBytes(std::vector<WorkspaceReservation> const& all, int64_t actType, int64_t const (&extents)[3])
{
    int64_t bytes = -1;
    for (WorkspaceReservation const& r : all)
    {
        bool holds = r.actType == actType;
        for (int32_t i = 0; i < 3; ++i)
        {
            holds = holds && r.min[i] <= extents[i] && extents[i] <= r.max[i];
        }
        if (holds && (bytes < 0 || r.bytes < bytes))
        {
            bytes = r.bytes;
        }
    }
    return bytes;
}

PluginField reservationField(std::vector<WorkspaceReservation> const& all, std::vector<int64_t>& words)
{
    words.clear();
    for (WorkspaceReservation const& r : all)
    {
        words.push_back(r.actType);
        words.insert(words.end(), r.min, r.min + 3);
        words.insert(words.end(), r.opt, r.opt + 3);
        words.insert(words.end(), r.max, r.max + 3);
        words.push_back(r.bytes);
    }
    return PluginField(kRESERVATION_FIELD, words.data(), PluginFieldType::kINT64, static_cast<int32_t>(words.size()));
}

std::string readReservations(PluginField const& f, std::vector<WorkspaceReservation>& out)
{
    out.clear();
    if (f.type != PluginFieldType::kINT64 || f.length < 0 || f.length % kRESERVATION_WORDS != 0
        || (f.length > 0 && f.data == nullptr))
    {
        return std::string("field ") + kRESERVATION_FIELD + " must hold kINT64 values, "
            + std::to_string(kRESERVATION_WORDS) + " per profile, got type "
            + std::to_string(static_cast<int32_t>(f.type)) + ", length " + std::to_string(f.length);
    }
    auto const* w = static_cast<int64_t const*>(f.data);
    for (int32_t i = 0; i < f.length; i += kRESERVATION_WORDS, w += kRESERVATION_WORDS)
    {
        WorkspaceReservation r;
        r.actType = w[0];
        std::copy(w + 1, w + 4, r.min);
        std::copy(w + 4, w + 7, r.opt);
        std::copy(w + 7, w + 10, r.max);
        r.bytes = w[10];
        if ((r.actType != TRT_WOQ_ACT_FP16 && r.actType != TRT_WOQ_ACT_BF16) || r.bytes < 0)
        {
            return std::string("field ") + kRESERVATION_FIELD + ": profile " + std::to_string(i / kRESERVATION_WORDS)
                + " has activation type " + std::to_string(r.actType) + " and " + std::to_string(r.bytes) + " bytes";
        }
        out.push_back(r);
    }
    return {};
}

std::string reservationsString(std::vector<WorkspaceReservation> const& all, int32_t nbExtents)
{
    std::ostringstream s;
    for (WorkspaceReservation const& r : all)
    {
        s << (&r == all.data() ? "" : "; ") << (r.actType == TRT_WOQ_ACT_BF16 ? "BF16" : "HALF") << " [";
        for (int32_t i = 0; i < nbExtents && i < 3; ++i)
        {
            s << (i ? ", " : "") << r.min[i] << ".." << r.max[i];
        }
        s << "] " << r.bytes << " bytes";
    }
    return all.empty() ? std::string("none") : s.str();
}

std::string validate(WeightOnlyLinearParams const& p)
{
    std::ostringstream e;
    int32_t const layout = p.bits == 6 ? 2 : 1; // FP6 E3M2: layout 2 (fp6_split_v1); INT8 / INT4: layout 1
    if (p.bits != 4 && p.bits != 8 && p.bits != 6)
    {
        e << "bits " << p.bits << " is not one of 4, 8, 6 (FP6 E3M2)";
    }
    else if (p.groupSize != -1 && p.groupSize != 32 && p.groupSize != 64 && p.groupSize != 128 && p.groupSize != 256)
    {
        e << "group_size " << p.groupSize << " is not one of -1, 32, 64, 128, 256";
    }
    else if (p.layout != layout)
    {
        e << "layout " << p.layout << " is not the layout of bits " << p.bits << " (" << layout << ")";
    }
    else if (p.inFeatures <= 0 || p.inFeatures % 64 != 0)
    {
        e << "in_features " << p.inFeatures << " must be a positive multiple of 64 (layout " << layout << ")";
    }
    else if (p.outFeatures <= 0 || p.outFeatures % (p.bits == 8 ? 2 : 4) != 0)
    {
        e << "out_features " << p.outFeatures << " must be a positive multiple of " << (p.bits == 8 ? 2 : 4)
          << " for bits " << p.bits << " (layout " << layout << " interleave)";
    }
    else if (p.bits == 6 && p.hasZeros != 0)
    {
        e << "has_zeros " << p.hasZeros << ": FP6 E3M2 (bits 6) has no zero points";
    }
    else if (p.groupSize != -1 && p.inFeatures % p.groupSize != 0)
    {
        e << "group_size " << p.groupSize << " does not divide in_features " << p.inFeatures;
    }
    else if (p.hasZeros != 0 && p.hasZeros != 1)
    {
        e << "has_zeros " << p.hasZeros << " is not 0 or 1";
    }
    else if (p.hasBias != 0 && p.hasBias != 1)
    {
        e << "has_bias " << p.hasBias << " is not 0 or 1";
    }
    else if (p.activation < TRT_WOQ_EPILOGUE_NONE || p.activation > TRT_WOQ_EPILOGUE_GELU_TANH)
    {
        e << "activation " << p.activation << " is not a trt_woq_epilogue (0 .. " << TRT_WOQ_EPILOGUE_GELU_TANH << ")";
    }
    else if (p.activation == TRT_WOQ_EPILOGUE_CLIP && !(p.clipMin <= p.clipMax))
    {
        e << "clip_min " << p.clipMin << " is not <= clip_max " << p.clipMax;
    }
    else if (p.actMode != TRT_WOQ_ACT_MODE_WEIGHT_ONLY && p.actMode != TRT_WOQ_ACT_MODE_W8A8_DYNAMIC)
    {
        e << "act_mode " << p.actMode << " is not 0 (weight-only) or 1 (W8A8)";
    }
    else if (p.actMode == TRT_WOQ_ACT_MODE_W8A8_DYNAMIC && (p.bits != 8 || p.hasZeros != 0))
    {
        e << "act_mode 1 (W8A8) takes symmetric INT8 weights, got bits " << p.bits << ", has_zeros " << p.hasZeros;
    }
    else if ((p.actAsymmetric != 0 && p.actAsymmetric != 1)
        || (p.actAsymmetric && p.actMode == TRT_WOQ_ACT_MODE_WEIGHT_ONLY))
    {
        e << "act_asymmetric " << p.actAsymmetric << " must be 0, or 1 with act_mode 1";
    }
    return e.str();
}

std::string operandShapeError(WeightOnlyLinearParams const& p, DynamicPluginTensorDesc const* in)
{
    Dims const& w = in[kWEIGHT_IDX].desc.dims;
    if (w.nbDims != 2 || (w.d[0] >= 0 && w.d[0] != p.packedRows()) || (w.d[1] >= 0 && w.d[1] != p.packedCols()))
    {
        return "packed_weight is " + dimsString(w) + ", layout " + std::to_string(p.layout) + " needs ["
            + std::to_string(p.packedRows()) + ", " + std::to_string(p.packedCols()) + "] for K="
            + std::to_string(p.inFeatures) + ", N=" + std::to_string(p.outFeatures) + ", bits "
            + std::to_string(p.bits);
    }
    std::vector<int32_t> perGroup{kSCALES_IDX};
    if (p.hasZeros)
    {
        perGroup.push_back(p.zerosIndex());
    }
    if (p.actAsymmetric)
    {
        perGroup.push_back(p.weightSumsIndex());
    }
    for (int32_t idx : perGroup)
    {
        Dims const& s = in[idx].desc.dims;
        int64_t const count = s.nbDims == 2 ? s.d[0] * s.d[1] : (s.nbDims == 1 ? s.d[0] : -1);
        bool const unknown = s.nbDims >= 1 && std::any_of(s.d, s.d + s.nbDims, [](int64_t v) { return v < 0; });
        if (!unknown && count != p.scaleRows() * p.outFeatures)
        {
            return std::string(idx == kSCALES_IDX ? "scales" : idx == p.zerosIndex() ? "zeros" : "weight_sums") + " is "
                + dimsString(s) + ", expected [" + std::to_string(p.scaleRows()) + ", " + std::to_string(p.outFeatures)
                + "]";
        }
    }
    if (p.hasBias)
    {
        Dims const& b = in[p.biasIndex()].desc.dims;
        int64_t const last = b.nbDims ? b.d[b.nbDims - 1] : -1;
        if (last >= 0 && last != p.outFeatures)
        {
            return "bias is " + dimsString(b) + ", expected [" + std::to_string(p.outFeatures) + "]";
        }
    }
    return {};
}

// ---------------------------------------------------------------------------------------------------------------------
// Plugin: core
// ---------------------------------------------------------------------------------------------------------------------

WeightOnlyLinearPlugin::WeightOnlyLinearPlugin(std::string name, WeightOnlyLinearParams const& params)
    : mName(std::move(name))
    , mParams(params)
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::WeightOnlyLinearPlugin");
}

WeightOnlyLinearPlugin::WeightOnlyLinearPlugin(WeightOnlyLinearPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mName(other.mName)
    , mParams(other.mParams)
    , mSm(other.mSm)
    , mActType(other.mActType)
    , mMin(other.mMin)
    , mMax(other.mMax)
    , mM(other.mM)
    , mTactic(other.mTactic)
    , mCandidate(other.mCandidate)
    , mTimingCacheId(other.mTimingCacheId)
    , mReservations(other.mReservations)
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::WeightOnlyLinearPlugin(copy)");
    // mFieldsToSerialize (and mReservationWords) point into the object they belong to: rebuilt on demand, not copied.
}

IPluginCapability* WeightOnlyLinearPlugin::getCapabilityInterface(PluginCapabilityType type) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getCapabilityInterface");
    try
    {
        switch (type)
        {
        case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
        case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuild*>(this);
        case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
        }
        fail(mName, "getCapabilityInterface", "unknown capability " + std::to_string(static_cast<int32_t>(type)));
    }
    catch (std::exception const& e)
    {
        fail(mName, "getCapabilityInterface", e.what());
    }
    return nullptr;
}

IPluginV3* WeightOnlyLinearPlugin::clone() noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::clone");
    try
    {
        return new WeightOnlyLinearPlugin(*this);
    }
    catch (std::exception const& e)
    {
        fail(mName, "clone", e.what());
    }
    return nullptr;
}

char const* WeightOnlyLinearPlugin::getPluginName() const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getPluginName");
    return kPLUGIN_NAME;
}

char const* WeightOnlyLinearPlugin::getPluginVersion() const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getPluginVersion");
    return kPLUGIN_VERSION;
}

char const* WeightOnlyLinearPlugin::getPluginNamespace() const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getPluginNamespace");
    return kPLUGIN_NAMESPACE;
}

// ---------------------------------------------------------------------------------------------------------------------
// Plugin: build
// ---------------------------------------------------------------------------------------------------------------------

int32_t WeightOnlyLinearPlugin::getNbOutputs() const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getNbOutputs");
    return 1;
}

int32_t WeightOnlyLinearPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getOutputDataTypes");
    try
    {
        if (nbOutputs != 1 || nbInputs != mParams.nbInputs())
        {
            return fail(mName, "getOutputDataTypes",
                "expected " + std::to_string(mParams.nbInputs()) + " inputs and 1 output (has_zeros="
                    + std::to_string(mParams.hasZeros) + ", has_bias=" + std::to_string(mParams.hasBias) + "), got "
                    + std::to_string(nbInputs) + " and " + std::to_string(nbOutputs));
        }
        DataType const act = inputTypes[kACTIVATION_IDX];
        if (act != DataType::kHALF && act != DataType::kBF16)
        {
            return fail(mName, "getOutputDataTypes",
                std::string("activation type ") + dataTypeName(act)
                    + " is not HALF or BF16 (an FP32 graph needs Casts around the node; graph_passes adds them)");
        }
        outputTypes[0] = act;
        return kSTATUS_SUCCESS;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "getOutputDataTypes", e.what());
    }
}

int32_t WeightOnlyLinearPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs,
    DimsExprs const* /*shapeInputs*/, int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs,
    IExprBuilder& exprBuilder) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getOutputShapes");
    try
    {
        if (nbInputs != mParams.nbInputs() || nbOutputs != 1 || nbShapeInputs != 0)
        {
            return fail(mName, "getOutputShapes",
                "expected " + std::to_string(mParams.nbInputs()) + " inputs, 0 shape inputs and 1 output, got "
                    + std::to_string(nbInputs) + ", " + std::to_string(nbShapeInputs) + " and "
                    + std::to_string(nbOutputs));
        }
        DimsExprs const& x = inputs[kACTIVATION_IDX];
        if (x.nbDims < 1)
        {
            return fail(mName, "getOutputShapes", "the activation must have at least one dimension, got a scalar");
        }
        IDimensionExpr const* k = x.d[x.nbDims - 1];
        if (k->isConstant() && k->getConstantValue() != mParams.inFeatures)
        {
            return fail(mName, "getOutputShapes",
                "the activation's last dimension is " + std::to_string(k->getConstantValue())
                    + ", in_features is " + std::to_string(mParams.inFeatures));
        }
        outputs[0].nbDims = x.nbDims;
        for (int32_t i = 0; i + 1 < x.nbDims; ++i)
        {
            outputs[0].d[i] = x.d[i];
        }
        outputs[0].d[x.nbDims - 1] = exprBuilder.constant(mParams.outFeatures);
        return kSTATUS_SUCCESS;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "getOutputShapes", e.what());
    }
}

bool WeightOnlyLinearPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::supportsFormatCombination");
    try
    {
        if (nbInputs != mParams.nbInputs() || nbOutputs != 1 || pos < 0 || pos >= nbInputs + nbOutputs)
        {
            return false;
        }
        PluginTensorDesc const& d = inOut[pos].desc;
        if (d.format != TensorFormat::kLINEAR)
        {
            return false;
        }
        if (pos == kWEIGHT_IDX)
        {
            return d.type == DataType::kINT32;
        }
        if (pos == kACTIVATION_IDX)
        {
            return d.type == DataType::kHALF || d.type == DataType::kBF16;
        }
        if (pos == mParams.weightSumsIndex())
        {
            return d.type == DataType::kINT32;
        }
        // scales, zeros, bias and the output: the activation's type (position 0 is decided before them).
        return d.type == inOut[kACTIVATION_IDX].desc.type;
    }
    catch (std::exception const& e)
    {
        fail(mName, "supportsFormatCombination", e.what());
    }
    return false;
}

void WeightOnlyLinearPlugin::fillSizes(void* paramsOut, int64_t m) const
{
    auto& p = *static_cast<trt_woq_linear_params*>(paramsOut);
    std::memset(&p, 0, sizeof(p));
    p.m = m;
    p.n = mParams.outFeatures;
    p.k = mParams.inFeatures;
    p.weight_format = weightFormatOf(mParams.bits);
    p.group_size = mParams.groupSize;
    p.layout_version = mParams.layout;
    p.act_type = static_cast<trt_woq_act_type>(mActType);
    p.epilogue = static_cast<trt_woq_epilogue>(mParams.activation);
    p.clip_min = mParams.clipMin;
    p.clip_max = mParams.clipMax;
    p.act_mode = static_cast<trt_woq_act_mode>(mParams.actMode);
    p.act_asymmetric = mParams.actAsymmetric;
    // Only sizes and options are read by the queries, but say which optional operands exist.
    static char const kPresent = 0;
    p.zeros = mParams.hasZeros ? &kPresent : nullptr;
    p.bias = mParams.hasBias ? &kPresent : nullptr;
    p.weight_sums = mParams.actAsymmetric ? &kPresent : nullptr;
}

std::vector<int32_t> WeightOnlyLinearPlugin::validCandidates() const
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::validCandidates");
    std::vector<int32_t> ids;
    int32_t const count = trt_woq_linear_candidate_count();
    for (int32_t id = 0; id < count; ++id)
    {
        bool ok = true;
        for (int64_t m : {mMin, mMax})
        {
            trt_woq_linear_params p;
            fillSizes(&p, m);
            ok = ok && trt_woq_linear_candidate_supports(id, &p, mSm) == TRT_WOQ_OK;
        }
        if (ok)
        {
            ids.push_back(id);
        }
    }
    return ids;
}

std::string WeightOnlyLinearPlugin::offeredTactics() const
{
    trt_woq_linear_params p;
    fillSizes(&p, 1);
    std::string offered;
    int32_t const count = trt_woq_linear_candidate_count();
    for (int32_t id = 0; id < count; ++id)
    {
        trt_woq_candidate_info c{};
        if (trt_woq_linear_candidate_serves(id, &p) == TRT_WOQ_OK
            && trt_woq_linear_candidate_info(id, &c) == TRT_WOQ_OK)
        {
            offered += (offered.empty() ? "" : ", ") + std::string(c.name) + " = "
                + std::to_string(trt_woq_linear_candidate_tactic(id));
        }
    }
    return offered.empty() ? std::string("no kernel candidate") : offered;
}

int32_t WeightOnlyLinearPlugin::configurePlugin(DynamicPluginTensorDesc const* in, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::configurePlugin");
    try
    {
        if (nbInputs != mParams.nbInputs() || nbOutputs != 1)
        {
            return fail(mName, "configurePlugin",
                "expected " + std::to_string(mParams.nbInputs()) + " inputs and 1 output, got "
                    + std::to_string(nbInputs) + " and " + std::to_string(nbOutputs));
        }
        Dims const& x = in[kACTIVATION_IDX].desc.dims;
        if (x.nbDims < 1 || (x.d[x.nbDims - 1] >= 0 && x.d[x.nbDims - 1] != mParams.inFeatures))
        {
            return fail(mName, "configurePlugin",
                "activation " + dimsString(x) + " does not end in in_features " + std::to_string(mParams.inFeatures));
        }
        std::string const operands = operandShapeError(mParams, in);
        if (!operands.empty())
        {
            return fail(mName, "configurePlugin", operands);
        }
        mActType = in[kACTIVATION_IDX].desc.type == DataType::kBF16 ? TRT_WOQ_ACT_BF16 : TRT_WOQ_ACT_FP16;
        mMin = std::max<int64_t>(rowsOf(in[kACTIVATION_IDX].min), 1);
        mMax = std::max<int64_t>(rowsOf(in[kACTIVATION_IDX].max), mMin);
        mSm = currentSm();
        mTimingCacheId = std::to_string(mParams.bits) + "_" + std::to_string(mParams.groupSize) + "_"
            + std::to_string(mParams.inFeatures) + "_" + std::to_string(mParams.outFeatures) + "_"
            + std::to_string(mParams.layout) + "_" + std::to_string(mParams.hasZeros) + std::to_string(mParams.hasBias)
            + "_" + std::to_string(mActType) + "_a" + std::to_string(mParams.actMode)
            + std::to_string(mParams.actAsymmetric) + "_e" + std::to_string(mParams.activation) + "_sm"
            + std::to_string(mSm);
        if (validCandidates().empty() && trt_woq_linear_candidate_count() > 0)
        {
            // No one candidate spans the profile; the dispatch picks one per M at enqueue, if any serves both ends.
            for (int64_t m : {mMin, mMax})
            {
                trt_woq_linear_params p;
                fillSizes(&p, m);
                if (trt_woq_linear_dispatch(&p, mSm) < 0)
                {
                    return fail(mName, "configurePlugin",
                        "no kernel serves this node at M=" + std::to_string(m) + " on sm_" + std::to_string(mSm)
                            + " (bits " + std::to_string(mParams.bits) + ", group_size "
                            + std::to_string(mParams.groupSize) + ", act_mode " + std::to_string(mParams.actMode)
                            + ", activation " + std::to_string(mParams.activation) + ")");
                }
            }
            logVerbose(std::string(kPLUGIN_NAME) + "[" + mName + "]: no kernel candidate supports all of M in ["
                + std::to_string(mMin) + ", " + std::to_string(mMax) + "] on sm_" + std::to_string(mSm)
                + "; enqueue uses the kernels' dispatch");
        }
        // What getWorkspaceSize returns for this profile, so that enqueue passes it as the workspace's size.
        WorkspaceReservation r = profileOf(in[kACTIVATION_IDX]);
        r.bytes = static_cast<int64_t>(workspaceBound(r, mSm));
        addReservation(mReservations, r);
        return kSTATUS_SUCCESS;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "configurePlugin", e.what());
    }
}

WorkspaceReservation WeightOnlyLinearPlugin::profileOf(DynamicPluginTensorDesc const& x) const
{
    WorkspaceReservation r;
    r.actType = x.desc.type == DataType::kBF16 ? TRT_WOQ_ACT_BF16 : TRT_WOQ_ACT_FP16;
    r.min[0] = std::max<int64_t>(rowsOf(x.min), 1);
    r.max[0] = std::max<int64_t>(rowsOf(x.max), r.min[0]);
    r.opt[0] = std::min(std::max<int64_t>(rowsOf(x.opt), r.min[0]), r.max[0]);
    return r;
}

size_t WeightOnlyLinearPlugin::workspaceBound(WorkspaceReservation const& profile, int32_t sm) const
{
    int64_t const lo = profile.min[0];
    int64_t const hi = profile.max[0];
    // Whatever tactic TensorRT picks, and the dispatch fallback: the largest need over the profile's M range.
    // Split plans make a candidate's need non-monotonic in M (a tail split at M = 333 may need more than at
    // M = 4096), so every tile count is visited: token tiles are multiples of 16 rows.
    std::vector<int64_t> ms{lo, profile.opt[0], hi};
    for (int64_t m = (lo / kTILE_ROWS + 1) * kTILE_ROWS; m < hi; m += kTILE_ROWS)
    {
        ms.push_back(m);
    }
    size_t bytes = 0;
    int32_t const count = trt_woq_linear_candidate_count();
    for (int64_t m : ms)
    {
        trt_woq_linear_params p;
        fillSizes(&p, m);
        p.act_type = static_cast<trt_woq_act_type>(profile.actType);
        bytes = std::max(bytes, trt_woq_linear_workspace_size(TRT_WOQ_CANDIDATE_AUTO, &p, sm));
        for (int32_t id = 0; id < count; ++id)
        {
            if (trt_woq_linear_candidate_supports(id, &p, sm) == TRT_WOQ_OK)
            {
                bytes = std::max(bytes, trt_woq_linear_workspace_size(id, &p, sm));
            }
        }
    }
    return bytes;
}

size_t WeightOnlyLinearPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getWorkspaceSize");
    try
    {
        if (nbInputs != mParams.nbInputs())
        {
            fail(mName, "getWorkspaceSize", "unexpected input count " + std::to_string(nbInputs));
            return 0;
        }
        WorkspaceReservation const profile = profileOf(inputs[kACTIVATION_IDX]);
        WorkspaceReservation const* reserved = findReservation(mReservations, profile);
        return reserved ? static_cast<size_t>(reserved->bytes) : workspaceBound(profile, mSm ? mSm : currentSm());
    }
    catch (std::exception const& e)
    {
        fail(mName, "getWorkspaceSize", e.what());
    }
    return 0;
}

int32_t WeightOnlyLinearPlugin::getNbTactics() noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getNbTactics");
    try
    {
        return static_cast<int32_t>(validCandidates().size());
    }
    catch (std::exception const& e)
    {
        fail(mName, "getNbTactics", e.what());
    }
    return 0;
}

int32_t WeightOnlyLinearPlugin::getValidTactics(int32_t* tactics, int32_t nbTactics) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getValidTactics");
    try
    {
        std::vector<int32_t> const ids = validCandidates();
        if (tactics == nullptr || nbTactics != static_cast<int32_t>(ids.size()))
        {
            return fail(mName, "getValidTactics",
                "asked for " + std::to_string(nbTactics) + " tactics, getNbTactics() said "
                    + std::to_string(ids.size()));
        }
        for (size_t i = 0; i < ids.size(); ++i)
        {
            tactics[i] = trt_woq_linear_candidate_tactic(ids[i]);
            if (tactics[i] == 0)
            {
                return fail(mName, "getValidTactics",
                    "kernel candidate " + candidateName(ids[i])
                        + " has no tactic: two candidates' names hash alike (the kernels library wrote which to "
                          "stderr); rename one");
            }
        }
        return kSTATUS_SUCCESS;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "getValidTactics", e.what());
    }
}

char const* WeightOnlyLinearPlugin::getTimingCacheID() noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getTimingCacheID");
    return mTimingCacheId.empty() ? nullptr : mTimingCacheId.c_str();
}

// ---------------------------------------------------------------------------------------------------------------------
// Plugin: runtime
// ---------------------------------------------------------------------------------------------------------------------

int32_t WeightOnlyLinearPlugin::setTactic(int32_t tactic) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::setTactic");
    try
    {
        if (tactic != 0 && trt_woq_linear_candidate_by_tactic(tactic) < 0)
        {
            return fail(mName, "setTactic",
                "tactic " + std::to_string(tactic)
                    + " names no kernel candidate of this build (rebuild the engine with this kernels library); "
                      "for this node it offers 0 = default, "
                    + offeredTactics());
        }
        mTactic = tactic;
        chooseCandidate();
        return kSTATUS_SUCCESS;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "setTactic", e.what());
    }
}

void WeightOnlyLinearPlugin::chooseCandidate()
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::chooseCandidate");
    mCandidate = TRT_WOQ_CANDIDATE_AUTO;
    if (mTactic == 0 || mM <= 0)
    {
        return;
    }
    trt_woq_linear_params p;
    fillSizes(&p, mM);
    int32_t const id = trt_woq_linear_candidate_by_tactic(mTactic);
    if (trt_woq_linear_candidate_supports(id, &p, mSm) == TRT_WOQ_OK)
    {
        mCandidate = id;
    }
    else
    {
        logVerbose(std::string(kPLUGIN_NAME) + "[" + mName + "]: tactic " + std::to_string(mTactic) + " ("
            + candidateName(id) + ") does not support M=" + std::to_string(mM) + "; using the kernels' dispatch");
    }
}

int32_t WeightOnlyLinearPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::onShapeChange");
    try
    {
        if (nbInputs != mParams.nbInputs() || nbOutputs != 1)
        {
            return fail(mName, "onShapeChange",
                "expected " + std::to_string(mParams.nbInputs()) + " inputs and 1 output, got "
                    + std::to_string(nbInputs) + " and " + std::to_string(nbOutputs));
        }
        Dims const& x = in[kACTIVATION_IDX].dims;
        int64_t const m = rowsOf(x);
        if (x.nbDims < 1 || m < 0 || x.d[x.nbDims - 1] != mParams.inFeatures)
        {
            return fail(mName, "onShapeChange",
                "activation " + dimsString(x) + " is not [..., " + std::to_string(mParams.inFeatures) + "]");
        }
        DataType const t = in[kACTIVATION_IDX].type;
        if (t != DataType::kHALF && t != DataType::kBF16)
        {
            return fail(mName, "onShapeChange", std::string("activation type ") + dataTypeName(t));
        }
        mActType = t == DataType::kBF16 ? TRT_WOQ_ACT_BF16 : TRT_WOQ_ACT_FP16;
        if (mSm == 0)
        {
            mSm = currentSm();
        }
        mM = m;
        chooseCandidate();
        return kSTATUS_SUCCESS;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "onShapeChange", e.what());
    }
}

int32_t WeightOnlyLinearPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::enqueue");
    try
    {
        int64_t const m = rowsOf(inputDesc[kACTIVATION_IDX].dims);
        if (m != mM)
        {
            // TensorRT calls onShapeChange before enqueue when shapes change; recompute if a caller did not.
            mM = m;
            chooseCandidate();
        }
        if (m == 0)
        {
            return kSTATUS_SUCCESS;
        }
        trt_woq_linear_params p;
        fillSizes(&p, m);
        p.activation = inputs[kACTIVATION_IDX];
        p.packed_weight = inputs[kWEIGHT_IDX];
        p.scales = inputs[kSCALES_IDX];
        p.zeros = mParams.hasZeros ? inputs[mParams.zerosIndex()] : nullptr;
        p.bias = mParams.hasBias ? inputs[mParams.biasIndex()] : nullptr;
        p.weight_sums = mParams.actAsymmetric ? inputs[mParams.weightSumsIndex()] : nullptr;
        p.output = outputs[0];
        p.workspace = workspace;
        trt_woq_linear_params sizesOnly = p;
        // The size TensorRT allocated: at least what getWorkspaceSize returned for the profile running, so a shape
        // needing more gets the kernels' TRT_WOQ_ERR_WORKSPACE, not an overrun. Fields without reservations (no
        // configurePlugin before serialization): the current shape's own need.
        int64_t const extents[3] = {m, 0, 0};
        int64_t const reserved = reservedBytes(mReservations, p.act_type, extents);
        if (reserved < 0 && !mReservations.empty())
        {
            return fail(mName, "enqueue",
                "activation " + dimsString(inputDesc[kACTIVATION_IDX].dims) + " (M=" + std::to_string(m)
                    + ") lies in none of the profiles the workspace was reserved for: "
                    + reservationsString(mReservations, 1));
        }
        p.workspace_size = reserved >= 0 ? static_cast<size_t>(reserved)
                                         : trt_woq_linear_workspace_size(mCandidate, &sizesOnly, mSm);
        trt_woq_status const s = trt_woq_linear_run(mCandidate, &p, stream);
        if (s != TRT_WOQ_OK)
        {
            std::string what = std::string(trt_woq_status_string(s)) + " (M=" + std::to_string(m)
                + ", N=" + std::to_string(mParams.outFeatures) + ", K=" + std::to_string(mParams.inFeatures)
                + ", candidate " + (mCandidate < 0 ? std::string("auto") : candidateName(mCandidate)) + ")";
            if (s == TRT_WOQ_ERR_CUDA)
            {
                what += std::string(": ") + trt_woq_last_cuda_error();
            }
            if (s == TRT_WOQ_ERR_WORKSPACE)
            {
                what += ": this shape needs "
                    + std::to_string(trt_woq_linear_workspace_size(mCandidate, &sizesOnly, mSm))
                    + " bytes, the profile's getWorkspaceSize reserved " + std::to_string(p.workspace_size);
            }
            return fail(mName, "enqueue", what);
        }
        return kSTATUS_SUCCESS;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "enqueue", e.what());
    }
}

IPluginV3* WeightOnlyLinearPlugin::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::attachToContext");
    // No per-context resources: a clone per execution context is enough.
    return clone();
}

PluginFieldCollection const* WeightOnlyLinearPlugin::getFieldsToSerialize() noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPlugin::getFieldsToSerialize");
    try
    {
        mFieldsToSerialize.clear();
        for (IntField const& f : kINT_FIELDS)
        {
            mFieldsToSerialize.emplace_back(f.name, &(mParams.*(f.member)), PluginFieldType::kINT32, 1);
        }
        for (FloatField const& f : kFLOAT_FIELDS)
        {
            mFieldsToSerialize.emplace_back(f.name, &(mParams.*(f.member)), PluginFieldType::kFLOAT32, 1);
        }
        if (!mReservations.empty())
        {
            mFieldsToSerialize.push_back(reservationField(mReservations, mReservationWords));
        }
        mFcToSerialize.nbFields = static_cast<int32_t>(mFieldsToSerialize.size());
        mFcToSerialize.fields = mFieldsToSerialize.data();
        return &mFcToSerialize;
    }
    catch (std::exception const& e)
    {
        fail(mName, "getFieldsToSerialize", e.what());
    }
    return nullptr;
}

// ---------------------------------------------------------------------------------------------------------------------
// Creator
// ---------------------------------------------------------------------------------------------------------------------

WeightOnlyLinearPluginCreator::WeightOnlyLinearPluginCreator()
{
    TRT_WOQ_TRACE("WeightOnlyLinearPluginCreator::WeightOnlyLinearPluginCreator");
    // The ONNX parser passes only the fields listed here (onnx-tensorrt loadFields), INT attributes as kINT32.
    for (IntField const& f : kINT_FIELDS)
    {
        mFields.emplace_back(f.name, nullptr, PluginFieldType::kINT32, 1);
    }
    for (FloatField const& f : kFLOAT_FIELDS)
    {
        mFields.emplace_back(f.name, nullptr, PluginFieldType::kFLOAT32, 1);
    }
    mFc.nbFields = static_cast<int32_t>(mFields.size());
    mFc.fields = mFields.data();
}

char const* WeightOnlyLinearPluginCreator::getPluginName() const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPluginCreator::getPluginName");
    return kPLUGIN_NAME;
}

char const* WeightOnlyLinearPluginCreator::getPluginVersion() const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPluginCreator::getPluginVersion");
    return kPLUGIN_VERSION;
}

char const* WeightOnlyLinearPluginCreator::getPluginNamespace() const noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPluginCreator::getPluginNamespace");
    return kPLUGIN_NAMESPACE;
}

PluginFieldCollection const* WeightOnlyLinearPluginCreator::getFieldNames() noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPluginCreator::getFieldNames");
    return &mFc;
}

IPluginV3* WeightOnlyLinearPluginCreator::createPlugin(
    char const* name, PluginFieldCollection const* fc, TensorRTPhase phase) noexcept
{
    TRT_WOQ_TRACE("WeightOnlyLinearPluginCreator::createPlugin");
    std::string const layer = name ? name : "";
    try
    {
        if (fc == nullptr || (fc->nbFields > 0 && fc->fields == nullptr))
        {
            fail(layer, "createPlugin", "no field collection");
            return nullptr;
        }
        WeightOnlyLinearParams params;
        std::vector<WorkspaceReservation> reservations;
        bool seen[sizeof(kINT_FIELDS) / sizeof(kINT_FIELDS[0])] = {};
        bool seenFloat[sizeof(kFLOAT_FIELDS) / sizeof(kFLOAT_FIELDS[0])] = {};
        for (int32_t i = 0; i < fc->nbFields; ++i)
        {
            PluginField const& f = fc->fields[i];
            std::string const fieldName = f.name ? f.name : "";
            if (fieldName == "plugin_version" || fieldName == "plugin_namespace")
            {
                if (f.type != PluginFieldType::kCHAR || f.data == nullptr)
                {
                    fail(layer, "createPlugin", "field " + fieldName + " must be a string (kCHAR)");
                    return nullptr;
                }
                std::string value(static_cast<char const*>(f.data),
                    strnlen(static_cast<char const*>(f.data), static_cast<size_t>(std::max(f.length, 0))));
                std::string const want = fieldName == "plugin_version" ? kPLUGIN_VERSION : kPLUGIN_NAMESPACE;
                if (value != want)
                {
                    fail(layer, "createPlugin",
                        fieldName + " \"" + value + "\" is not \"" + want + "\" (this library builds version "
                            + kPLUGIN_VERSION + ")");
                    return nullptr;
                }
                continue;
            }
            if (fieldName == kRESERVATION_FIELD)
            {
                std::string const bad = readReservations(f, reservations);
                if (!bad.empty())
                {
                    fail(layer, "createPlugin", bad);
                    return nullptr;
                }
                continue;
            }
            auto const fl = std::find_if(std::begin(kFLOAT_FIELDS), std::end(kFLOAT_FIELDS),
                [&](FloatField const& ff) { return fieldName == ff.name; });
            if (fl != std::end(kFLOAT_FIELDS))
            {
                if (f.data == nullptr || f.length != 1
                    || (f.type != PluginFieldType::kFLOAT32 && f.type != PluginFieldType::kFLOAT64))
                {
                    fail(layer, "createPlugin", "field " + fieldName + " must hold one float (kFLOAT32 / kFLOAT64)");
                    return nullptr;
                }
                params.*(fl->member) = f.type == PluginFieldType::kFLOAT32
                    ? *static_cast<float const*>(f.data)
                    : static_cast<float>(*static_cast<double const*>(f.data));
                seenFloat[fl - std::begin(kFLOAT_FIELDS)] = true;
                continue;
            }
            size_t j = 0;
            while (j < sizeof(kINT_FIELDS) / sizeof(kINT_FIELDS[0]) && fieldName != kINT_FIELDS[j].name)
            {
                ++j;
            }
            if (j == sizeof(kINT_FIELDS) / sizeof(kINT_FIELDS[0]))
            {
                // Unknown fields are ignored, so that a newer graph pass can add optional attributes.
                logWarning(std::string(kPLUGIN_NAME) + "[" + layer + "]: ignoring unknown field \"" + fieldName + "\"");
                continue;
            }
            if (f.data == nullptr || f.length != 1)
            {
                fail(layer, "createPlugin",
                    "field " + fieldName + " must hold one integer, got length " + std::to_string(f.length));
                return nullptr;
            }
            int64_t v{0};
            if (f.type == PluginFieldType::kINT32)
            {
                v = *static_cast<int32_t const*>(f.data);
            }
            else if (f.type == PluginFieldType::kINT64)
            {
                v = *static_cast<int64_t const*>(f.data);
            }
            else
            {
                fail(layer, "createPlugin",
                    "field " + fieldName + " has type " + std::to_string(static_cast<int32_t>(f.type))
                        + ", expected kINT32 or kINT64");
                return nullptr;
            }
            if (v < INT32_MIN || v > INT32_MAX)
            {
                fail(layer, "createPlugin", "field " + fieldName + " value " + std::to_string(v) + " overflows int32");
                return nullptr;
            }
            params.*(kINT_FIELDS[j].member) = static_cast<int32_t>(v);
            seen[j] = true;
        }
        for (size_t j = 0; j < sizeof(kINT_FIELDS) / sizeof(kINT_FIELDS[0]); ++j)
        {
            if (!seen[j] && kINT_FIELDS[j].required)
            {
                fail(layer, "createPlugin", std::string("required field ") + kINT_FIELDS[j].name + " is missing");
                return nullptr;
            }
        }
        for (size_t j = 0; j < sizeof(kFLOAT_FIELDS) / sizeof(kFLOAT_FIELDS[0]); ++j)
        {
            if (!seenFloat[j] && params.activation == TRT_WOQ_EPILOGUE_CLIP)
            {
                fail(layer, "createPlugin",
                    std::string("activation 2 (clip) needs field ") + kFLOAT_FIELDS[j].name + ", which is missing");
                return nullptr;
            }
        }
        std::string const bad = validate(params);
        if (!bad.empty())
        {
            fail(layer, "createPlugin", bad);
            return nullptr;
        }
        auto* plugin = new WeightOnlyLinearPlugin(layer, params);
        plugin->setReservations(std::move(reservations));
        if (phase == TensorRTPhase::kRUNTIME)
        {
            logVerbose(std::string(kPLUGIN_NAME) + "[" + layer + "]: created for the runtime phase");
        }
        return plugin;
    }
    catch (std::exception const& e)
    {
        fail(layer, "createPlugin", e.what());
    }
    return nullptr;
}

} // namespace plugin
} // namespace trt_woq
