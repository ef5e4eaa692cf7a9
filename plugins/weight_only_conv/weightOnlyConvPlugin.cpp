#include "weightOnlyConvPlugin.h"

#include "../weight_only_linear/pluginLogger.h"
#include "trt_woq/kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <sstream>

using namespace nvinfer1;

namespace trt_woq
{
namespace plugin
{
namespace
{

constexpr int32_t kOK = 0;
constexpr int32_t kFAIL = -1;
// getWorkspaceSize visits every input of a profile holding at most this many (batch x H x W); see workspaceBound.
constexpr int64_t kMAX_WORKSPACE_SHAPES = int64_t(1) << 14;

// The node's attributes (docs/op.md): the WeightOnlyLinear ones, then the geometry, then the clip bounds. The ONNX
// parser passes INT as one kINT32, INTS as a kINT32 array, FLOAT as kFLOAT32 (docs/op.md, parser mapping).
struct ConvField
{
    char const* name;
    PluginFieldType type;
    int32_t length;
    bool required;
};
constexpr ConvField kFIELDS[] = {
    {"bits", PluginFieldType::kINT32, 1, true},
    {"group_size", PluginFieldType::kINT32, 1, true},
    {"in_features", PluginFieldType::kINT32, 1, true},
    {"out_features", PluginFieldType::kINT32, 1, true},
    {"layout", PluginFieldType::kINT32, 1, true},
    {"has_zeros", PluginFieldType::kINT32, 1, true},
    {"has_bias", PluginFieldType::kINT32, 1, true},
    {"activation", PluginFieldType::kINT32, 1, false},
    {"in_channels", PluginFieldType::kINT32, 1, true},
    {"kernel_shape", PluginFieldType::kINT32, 2, true},
    {"strides", PluginFieldType::kINT32, 2, true},
    {"pads", PluginFieldType::kINT32, 4, true},
    {"dilations", PluginFieldType::kINT32, 2, true},
    {"clip_min", PluginFieldType::kFLOAT32, 1, false},
    {"clip_max", PluginFieldType::kFLOAT32, 1, false},
    {"k_order", PluginFieldType::kINT32, 1, false},
};
constexpr size_t kNB_FIELDS = sizeof(kFIELDS) / sizeof(kFIELDS[0]);

// Where field i lives in the params (int32_t for kINT32 fields, float for kFLOAT32 ones).
void* storage(WeightOnlyConvParams& p, size_t i)
{
    void* const where[kNB_FIELDS] = {&p.gemm.bits, &p.gemm.groupSize, &p.gemm.inFeatures, &p.gemm.outFeatures,
        &p.gemm.layout, &p.gemm.hasZeros, &p.gemm.hasBias, &p.gemm.activation, &p.inChannels, p.kernelShape,
        p.strides, p.pads, p.dilations, &p.gemm.clipMin, &p.gemm.clipMax, &p.kOrder};
    return where[i];
}

int32_t fail(std::string const& name, char const* where, std::string const& what) noexcept
{
    logError(std::string(kCONV_PLUGIN_NAME) + "[" + name + "]::" + where + ": " + what);
    return kFAIL;
}

bool halfOrBf16(DataType t)
{
    return t == DataType::kHALF || t == DataType::kBF16;
}

int32_t actTypeOf(DataType t)
{
    return t == DataType::kBF16 ? TRT_WOQ_ACT_BF16 : TRT_WOQ_ACT_FP16;
}

} // namespace

std::string validate(WeightOnlyConvParams const& p)
{
    std::string const gemm = validate(p.gemm);
    if (!gemm.empty())
    {
        return gemm;
    }
    std::ostringstream e;
    int32_t const* k = p.kernelShape;
    if (p.gemm.bits != 8 && p.gemm.bits != 4)
    {
        e << "bits " << p.gemm.bits << ": WeightOnlyConv takes INT8 or INT4 weights (bits 8 or 4)";
    }
    else if (k[0] < 1 || k[1] < 1 || p.strides[0] < 1 || p.strides[1] < 1 || p.dilations[0] < 1 || p.dilations[1] < 1
        || std::any_of(p.pads, p.pads + 4, [](int32_t v) { return v < 0; }))
    {
        e << "kernel_shape [" << k[0] << ", " << k[1] << "], strides [" << p.strides[0] << ", " << p.strides[1]
          << "], dilations [" << p.dilations[0] << ", " << p.dilations[1] << "] must be >= 1 and pads >= 0";
    }
    else if (int64_t(p.inChannels) * k[0] * k[1] != p.gemm.inFeatures)
    {
        e << "in_features " << p.gemm.inFeatures << " is not in_channels " << p.inChannels << " x " << k[0] << " x "
          << k[1];
    }
    else if (p.kOrder != TRT_WOQ_CONV_K_CIJ && p.kOrder != TRT_WOQ_CONV_K_IJC)
    {
        e << "k_order " << p.kOrder << " must be 0 (c, i, j) or 1 (i, j, c)";
    }
    return e.str();
}

// ---------------------------------------------------------------------------------------------------------------------
// Plugin
// ---------------------------------------------------------------------------------------------------------------------

WeightOnlyConvPlugin::WeightOnlyConvPlugin(std::string name, WeightOnlyConvParams const& params)
    : mName(std::move(name))
    , mParams(params)
{
}

WeightOnlyConvPlugin::WeightOnlyConvPlugin(WeightOnlyConvPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mName(other.mName)
    , mParams(other.mParams)
    , mSm(other.mSm)
    , mActType(other.mActType)
    , mReservations(other.mReservations)
{
    // mFieldsToSerialize (and mReservationWords) point into the object they belong to: rebuilt on demand, not copied.
}

IPluginCapability* WeightOnlyConvPlugin::getCapabilityInterface(PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
    case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuild*>(this);
    case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
    }
    fail(mName, "getCapabilityInterface", "unknown capability");
    return nullptr;
}

IPluginV3* WeightOnlyConvPlugin::clone() noexcept
{
    try
    {
        return new WeightOnlyConvPlugin(*this);
    }
    catch (std::exception const& e)
    {
        fail(mName, "clone", e.what());
    }
    return nullptr;
}

char const* WeightOnlyConvPlugin::getPluginName() const noexcept
{
    return kCONV_PLUGIN_NAME;
}

char const* WeightOnlyConvPlugin::getPluginVersion() const noexcept
{
    return kPLUGIN_VERSION;
}

char const* WeightOnlyConvPlugin::getPluginNamespace() const noexcept
{
    return kPLUGIN_NAMESPACE;
}

int32_t WeightOnlyConvPlugin::getNbOutputs() const noexcept
{
    return 1;
}

int32_t WeightOnlyConvPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    if (nbOutputs != 1 || nbInputs != mParams.gemm.nbInputs())
    {
        return fail(mName, "getOutputDataTypes", "expected " + std::to_string(mParams.gemm.nbInputs())
                + " inputs and 1 output, got " + std::to_string(nbInputs) + " and " + std::to_string(nbOutputs));
    }
    if (!halfOrBf16(inputTypes[kACTIVATION_IDX]))
    {
        return fail(mName, "getOutputDataTypes",
            "the activation is not HALF or BF16 (an FP32 graph needs Casts around the node; graph_passes adds them)");
    }
    outputTypes[0] = inputTypes[kACTIVATION_IDX];
    return kOK;
}

int32_t WeightOnlyConvPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs,
    DimsExprs const* /*shapeInputs*/, int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs,
    IExprBuilder& exprBuilder) noexcept
{
    try
    {
        if (nbInputs != mParams.gemm.nbInputs() || nbOutputs != 1 || nbShapeInputs != 0)
        {
            return fail(mName, "getOutputShapes", "unexpected input / output count");
        }
        DimsExprs const& x = inputs[kACTIVATION_IDX];
        if (x.nbDims != 4 || (x.d[1]->isConstant() && x.d[1]->getConstantValue() != mParams.inChannels))
        {
            return fail(mName, "getOutputShapes",
                "the activation must be NCHW with C = in_channels " + std::to_string(mParams.inChannels));
        }
        outputs[0].nbDims = 4;
        outputs[0].d[0] = x.d[0];
        outputs[0].d[1] = exprBuilder.constant(mParams.gemm.outFeatures);
        for (int32_t axis = 0; axis < 2; ++axis)
        {
            // (in + pad_begin + pad_end - dilation (kernel - 1) - 1) // stride + 1
            int64_t const span = int64_t(mParams.dilations[axis]) * (mParams.kernelShape[axis] - 1) + 1;
            IDimensionExpr const* padded = exprBuilder.operation(DimensionOperation::kSUM, *x.d[2 + axis],
                *exprBuilder.constant(mParams.pads[axis] + mParams.pads[axis + 2]));
            IDimensionExpr const* rest
                = exprBuilder.operation(DimensionOperation::kSUB, *padded, *exprBuilder.constant(span));
            IDimensionExpr const* steps = exprBuilder.operation(
                DimensionOperation::kFLOOR_DIV, *rest, *exprBuilder.constant(mParams.strides[axis]));
            outputs[0].d[2 + axis]
                = exprBuilder.operation(DimensionOperation::kSUM, *steps, *exprBuilder.constant(1));
        }
        return kOK;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "getOutputShapes", e.what());
    }
}

bool WeightOnlyConvPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    // NCHW (kLINEAR) throughout: what an ONNX Conv's tensors are, so TensorRT inserts no reformat around the node;
    // the kernels gather the patches from NCHW themselves (docs/kernels.md, Conv2d).
    if (nbInputs != mParams.gemm.nbInputs() || nbOutputs != 1 || pos < 0 || pos >= nbInputs + nbOutputs)
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
        return halfOrBf16(d.type);
    }
    return d.type == inOut[kACTIVATION_IDX].desc.type;
}

bool WeightOnlyConvPlugin::describe(Dims const& x, int32_t actType, void* paramsOut) const noexcept
{
    if (x.nbDims != 4 || x.d[0] < 0 || x.d[1] != mParams.inChannels || x.d[2] < 1 || x.d[3] < 1)
    {
        return false;
    }
    int64_t const oh = mParams.outExtent(0, x.d[2]);
    int64_t const ow = mParams.outExtent(1, x.d[3]);
    if (oh < 1 || ow < 1 || x.d[0] > INT32_MAX || x.d[2] > INT32_MAX || x.d[3] > INT32_MAX)
    {
        return false;
    }
    auto& p = *static_cast<trt_woq_linear_params*>(paramsOut);
    std::memset(&p, 0, sizeof(p));
    WeightOnlyLinearParams const& g = mParams.gemm;
    p.m = x.d[0] * oh * ow;
    p.n = g.outFeatures;
    p.k = g.inFeatures;
    p.weight_format = g.bits == 8 ? TRT_WOQ_WEIGHT_INT8 : TRT_WOQ_WEIGHT_INT4;
    p.group_size = g.groupSize;
    p.layout_version = g.layout;
    p.act_type = static_cast<trt_woq_act_type>(actType);
    p.op = TRT_WOQ_OP_CONV2D;
    p.epilogue = static_cast<trt_woq_epilogue>(g.activation);
    p.clip_min = g.clipMin;
    p.clip_max = g.clipMax;
    trt_woq_conv_geometry& c = p.conv;
    c.batch = static_cast<int32_t>(x.d[0]);
    c.in_channels = mParams.inChannels;
    c.in_h = static_cast<int32_t>(x.d[2]);
    c.in_w = static_cast<int32_t>(x.d[3]);
    c.kernel_h = mParams.kernelShape[0];
    c.kernel_w = mParams.kernelShape[1];
    c.stride_h = mParams.strides[0];
    c.stride_w = mParams.strides[1];
    c.pad_top = mParams.pads[0];
    c.pad_left = mParams.pads[1];
    c.pad_bottom = mParams.pads[2];
    c.pad_right = mParams.pads[3];
    c.dilation_h = mParams.dilations[0];
    c.dilation_w = mParams.dilations[1];
    c.out_h = static_cast<int32_t>(oh);
    c.out_w = static_cast<int32_t>(ow);
    c.k_order = mParams.kOrder;
    static char const kPresent = 0;  // the queries read no pointer, but see which optional operands exist
    p.zeros = g.hasZeros ? &kPresent : nullptr;
    p.bias = g.hasBias ? &kPresent : nullptr;
    return true;
}

int32_t WeightOnlyConvPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    try
    {
        if (nbInputs != mParams.gemm.nbInputs() || nbOutputs != 1)
        {
            return fail(mName, "configurePlugin", "unexpected input / output count");
        }
        Dims const& x = in[kACTIVATION_IDX].desc.dims;
        if (x.nbDims != 4 || (x.d[1] >= 0 && x.d[1] != mParams.inChannels))
        {
            return fail(mName, "configurePlugin",
                "activation " + dimsString(x) + " is not NCHW with C = " + std::to_string(mParams.inChannels));
        }
        std::string const operands = operandShapeError(mParams.gemm, in);
        if (!operands.empty())
        {
            return fail(mName, "configurePlugin", operands);
        }
        mActType = actTypeOf(in[kACTIVATION_IDX].desc.type);
        mSm = currentSm();
        trt_woq_linear_params p;
        if (describe(in[kACTIVATION_IDX].max, mActType, &p) && trt_woq_linear_dispatch(&p, mSm) < 0)
        {
            return fail(mName, "configurePlugin",
                "no kernel runs this conv for the profile's largest input " + dimsString(in[kACTIVATION_IDX].max));
        }
        // What getWorkspaceSize returns for this profile, so that enqueue passes it as the workspace's size.
        WorkspaceReservation r = profileOf(in[kACTIVATION_IDX]);
        bool everyShape = true;
        r.bytes = static_cast<int64_t>(workspaceBound(r, mSm, &everyShape));
        addReservation(mReservations, r);
        if (!everyShape)
        {
            logWarning(std::string(kCONV_PLUGIN_NAME) + "[" + mName + "]: the profile "
                + dimsString(in[kACTIVATION_IDX].min) + " .. " + dimsString(in[kACTIVATION_IDX].max)
                + " holds more than " + std::to_string(kMAX_WORKSPACE_SHAPES) + " inputs; the workspace ("
                + std::to_string(r.bytes)
                + " bytes) is the largest need of every batch at H and W each at min, opt and max, and an input "
                  "needing more fails at enqueue");
        }
        return kOK;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "configurePlugin", e.what());
    }
}

WorkspaceReservation WeightOnlyConvPlugin::profileOf(DynamicPluginTensorDesc const& x) const
{
    WorkspaceReservation r;
    r.actType = actTypeOf(x.desc.type);
    bool const known = x.min.nbDims == 4 && x.opt.nbDims == 4 && x.max.nbDims == 4;
    int32_t const axes[3] = {0, 2, 3};  // batch, H, W
    for (int32_t i = 0; i < 3; ++i)
    {
        int32_t const a = axes[i];
        r.min[i] = std::max<int64_t>(known ? x.min.d[a] : 1, 1);
        r.max[i] = std::max<int64_t>(known ? x.max.d[a] : 1, r.min[i]);
        r.opt[i] = std::min(std::max<int64_t>(known ? x.opt.d[a] : 1, r.min[i]), r.max[i]);
    }
    return r;
}

size_t WeightOnlyConvPlugin::workspaceBound(WorkspaceReservation const& profile, int32_t sm, bool* everyShape) const
{
    // The need of the kernels' dispatch (what enqueue runs) is not monotonic in the image size: by M and the
    // geometry it picks im2col (an M x K patch buffer), the implicit kernels (a channels-last copy) or the TMA-im2col
    // wgmma (split-K partials and counters, planned per M). So every input of the profile is visited, batch x H x W,
    // where there are at most kMAX_WORKSPACE_SHAPES; beyond that every batch at H and W each at the profile's min,
    // opt and max, and an input needing more fails at enqueue with the kernels' workspace error (no overrun).
    int64_t shapes = 1;
    for (int32_t i = 0; i < 3; ++i)
    {
        shapes = std::min(shapes * (profile.max[i] - profile.min[i] + 1), kMAX_WORKSPACE_SHAPES + 1);
    }
    bool const all = shapes <= kMAX_WORKSPACE_SHAPES;
    if (everyShape)
    {
        *everyShape = all;
    }
    Dims x{};
    x.nbDims = 4;
    x.d[1] = mParams.inChannels;
    trt_woq_linear_params p;
    size_t bytes = 0;
    auto const visit = [&](int64_t h, int64_t w) {
        x.d[2] = h;
        x.d[3] = w;
        for (x.d[0] = profile.min[0]; x.d[0] <= profile.max[0]; ++x.d[0])
        {
            if (describe(x, static_cast<int32_t>(profile.actType), &p))
            {
                bytes = std::max(bytes, trt_woq_linear_workspace_size(TRT_WOQ_CANDIDATE_AUTO, &p, sm));
            }
        }
    };
    for (int64_t h = profile.min[1]; all && h <= profile.max[1]; ++h)
    {
        for (int64_t w = profile.min[2]; w <= profile.max[2]; ++w)
        {
            visit(h, w);
        }
    }
    for (int32_t i = 0; !all && i < 9; ++i)
    {
        int64_t const* const at[3] = {profile.min, profile.opt, profile.max};
        visit(at[i / 3][1], at[i % 3][2]);
    }
    return bytes;
}

size_t WeightOnlyConvPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    try
    {
        if (nbInputs != mParams.gemm.nbInputs())
        {
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

int32_t WeightOnlyConvPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    try
    {
        trt_woq_linear_params p;
        if (nbInputs != mParams.gemm.nbInputs() || nbOutputs != 1 || !halfOrBf16(in[kACTIVATION_IDX].type)
            || !describe(in[kACTIVATION_IDX].dims, actTypeOf(in[kACTIVATION_IDX].type), &p))
        {
            return fail(mName, "onShapeChange",
                "activation " + dimsString(in[kACTIVATION_IDX].dims) + " is not an NCHW HALF / BF16 input with C = "
                    + std::to_string(mParams.inChannels) + " that the kernel fits");
        }
        mActType = actTypeOf(in[kACTIVATION_IDX].type);
        if (mSm == 0)
        {
            mSm = currentSm();
        }
        return kOK;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "onShapeChange", e.what());
    }
}

int32_t WeightOnlyConvPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    try
    {
        trt_woq_linear_params p;
        if (!describe(inputDesc[kACTIVATION_IDX].dims, actTypeOf(inputDesc[kACTIVATION_IDX].type), &p))
        {
            return fail(mName, "enqueue", "activation " + dimsString(inputDesc[kACTIVATION_IDX].dims));
        }
        if (p.m == 0)
        {
            return kOK;
        }
        WeightOnlyLinearParams const& g = mParams.gemm;
        trt_woq_linear_params const sizesOnly = p;
        p.activation = inputs[kACTIVATION_IDX];
        p.packed_weight = inputs[kWEIGHT_IDX];
        p.scales = inputs[kSCALES_IDX];
        p.zeros = g.hasZeros ? inputs[g.zerosIndex()] : nullptr;
        p.bias = g.hasBias ? inputs[g.biasIndex()] : nullptr;
        p.output = outputs[0];
        p.workspace = workspace;
        // The size TensorRT allocated: at least what getWorkspaceSize returned for the profile running, so an input
        // needing more gets the kernels' TRT_WOQ_ERR_WORKSPACE, not an overrun. Fields without reservations (no
        // configurePlugin before serialization): the current input's own need.
        Dims const& x = inputDesc[kACTIVATION_IDX].dims;
        int64_t const extents[3] = {x.d[0], x.d[2], x.d[3]};
        int64_t const reserved = reservedBytes(mReservations, p.act_type, extents);
        if (reserved < 0 && !mReservations.empty())
        {
            return fail(mName, "enqueue",
                "activation " + dimsString(x) + " lies in none of the profiles the workspace was reserved for: "
                    + reservationsString(mReservations, 3));
        }
        p.workspace_size = reserved >= 0 ? static_cast<size_t>(reserved)
                                         : trt_woq_linear_workspace_size(TRT_WOQ_CANDIDATE_AUTO, &sizesOnly, mSm);
        trt_woq_status const s = trt_woq_linear_run(TRT_WOQ_CANDIDATE_AUTO, &p, stream);
        if (s != TRT_WOQ_OK)
        {
            std::string what = std::string(trt_woq_status_string(s)) + " (M=" + std::to_string(p.m)
                + ", N=" + std::to_string(p.n) + ", K=" + std::to_string(p.k) + ")";
            if (s == TRT_WOQ_ERR_CUDA)
            {
                what += std::string(": ") + trt_woq_last_cuda_error();
            }
            if (s == TRT_WOQ_ERR_WORKSPACE)
            {
                what += ": activation " + dimsString(x) + " needs "
                    + std::to_string(trt_woq_linear_workspace_size(TRT_WOQ_CANDIDATE_AUTO, &sizesOnly, mSm))
                    + " bytes, the profile's getWorkspaceSize reserved " + std::to_string(p.workspace_size);
            }
            return fail(mName, "enqueue", what);
        }
        return kOK;
    }
    catch (std::exception const& e)
    {
        return fail(mName, "enqueue", e.what());
    }
}

IPluginV3* WeightOnlyConvPlugin::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    return clone();
}

PluginFieldCollection const* WeightOnlyConvPlugin::getFieldsToSerialize() noexcept
{
    try
    {
        mFieldsToSerialize.clear();
        for (size_t i = 0; i < kNB_FIELDS; ++i)
        {
            mFieldsToSerialize.emplace_back(kFIELDS[i].name, storage(mParams, i), kFIELDS[i].type, kFIELDS[i].length);
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

WeightOnlyConvPluginCreator::WeightOnlyConvPluginCreator()
{
    for (ConvField const& f : kFIELDS)
    {
        mFields.emplace_back(f.name, nullptr, f.type, f.length);
    }
    mFc.nbFields = static_cast<int32_t>(mFields.size());
    mFc.fields = mFields.data();
}

char const* WeightOnlyConvPluginCreator::getPluginName() const noexcept
{
    return kCONV_PLUGIN_NAME;
}

char const* WeightOnlyConvPluginCreator::getPluginVersion() const noexcept
{
    return kPLUGIN_VERSION;
}

char const* WeightOnlyConvPluginCreator::getPluginNamespace() const noexcept
{
    return kPLUGIN_NAMESPACE;
}

PluginFieldCollection const* WeightOnlyConvPluginCreator::getFieldNames() noexcept
{
    return &mFc;
}

IPluginV3* WeightOnlyConvPluginCreator::createPlugin(
    char const* name, PluginFieldCollection const* fc, TensorRTPhase /*phase*/) noexcept
{
    std::string const layer = name ? name : "";
    try
    {
        if (fc == nullptr || (fc->nbFields > 0 && fc->fields == nullptr))
        {
            fail(layer, "createPlugin", "no field collection");
            return nullptr;
        }
        WeightOnlyConvParams params;
        std::vector<WorkspaceReservation> reservations;
        bool seen[kNB_FIELDS] = {};
        for (int32_t i = 0; i < fc->nbFields; ++i)
        {
            PluginField const& f = fc->fields[i];
            std::string const fieldName = f.name ? f.name : "";
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
            size_t j = 0;
            while (j < kNB_FIELDS && fieldName != kFIELDS[j].name)
            {
                ++j;
            }
            if (j == kNB_FIELDS)
            {
                continue;  // plugin_version / plugin_namespace (the parser found us by them) and unknown fields
            }
            ConvField const& want = kFIELDS[j];
            bool const isFloat = want.type == PluginFieldType::kFLOAT32;
            bool const typeOk = isFloat ? (f.type == PluginFieldType::kFLOAT32 || f.type == PluginFieldType::kFLOAT64)
                                        : (f.type == PluginFieldType::kINT32 || f.type == PluginFieldType::kINT64);
            if (f.data == nullptr || f.length != want.length || !typeOk)
            {
                fail(layer, "createPlugin", "field " + fieldName + " must hold " + std::to_string(want.length)
                        + (isFloat ? " float(s)" : " integer(s)") + ", got length " + std::to_string(f.length));
                return nullptr;
            }
            for (int32_t e = 0; e < want.length; ++e)
            {
                double const v = f.type == PluginFieldType::kINT32 ? static_cast<int32_t const*>(f.data)[e]
                    : f.type == PluginFieldType::kINT64            ? static_cast<double>(static_cast<int64_t const*>(f.data)[e])
                    : f.type == PluginFieldType::kFLOAT32          ? static_cast<float const*>(f.data)[e]
                                                                   : static_cast<double const*>(f.data)[e];
                if (isFloat)
                {
                    static_cast<float*>(storage(params, j))[e] = static_cast<float>(v);
                }
                else if (v < INT32_MIN || v > INT32_MAX)
                {
                    fail(layer, "createPlugin", "field " + fieldName + " overflows int32");
                    return nullptr;
                }
                else
                {
                    static_cast<int32_t*>(storage(params, j))[e] = static_cast<int32_t>(v);
                }
            }
            seen[j] = true;
        }
        for (size_t j = 0; j < kNB_FIELDS; ++j)
        {
            if (!seen[j] && kFIELDS[j].required)
            {
                fail(layer, "createPlugin", std::string("required field ") + kFIELDS[j].name + " is missing");
                return nullptr;
            }
            if (!seen[j] && kFIELDS[j].type == PluginFieldType::kFLOAT32
                && params.gemm.activation == TRT_WOQ_EPILOGUE_CLIP)
            {
                fail(layer, "createPlugin",
                    std::string("activation 2 (clip) needs field ") + kFIELDS[j].name + ", which is missing");
                return nullptr;
            }
        }
        std::string const bad = validate(params);
        if (!bad.empty())
        {
            fail(layer, "createPlugin", bad);
            return nullptr;
        }
        auto* plugin = new WeightOnlyConvPlugin(layer, params);
        plugin->setReservations(std::move(reservations));
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
