/*
 * WeightOnlyConv: a TensorRT IPluginV3 computing the 2-D convolution  Y = act(conv(X, W) + bias)  with W the
 * implicit-GEMM matrix [K = C kh kw, N] packed by graph_passes (docs/op.md, "The WeightOnlyConv op"), through the
 * kernels' C ABI (op TRT_WOQ_OP_CONV2D). X and Y are NCHW, TensorFormat::kLINEAR, HALF or BF16.
 *
 * Built into libtrt_woq_plugin beside WeightOnlyLinear (plugins/weight_only_linear/CMakeLists.txt); the attributes
 * WeightOnlyLinear also has are validated by its validate(). Compiles against the public headers of TensorRT 10/11.
 */
#ifndef TRT_WOQ_WEIGHT_ONLY_CONV_PLUGIN_H
#define TRT_WOQ_WEIGHT_ONLY_CONV_PLUGIN_H

#include "../weight_only_linear/weightOnlyLinearPlugin.h"

#include <NvInferRuntime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trt_woq
{
namespace plugin
{

constexpr char const* kCONV_PLUGIN_NAME = "WeightOnlyConv";

// The op's attributes: those of WeightOnlyLinear (in_features = K, out_features = N) plus the geometry.
struct WeightOnlyConvParams
{
    WeightOnlyLinearParams gemm;
    int32_t inChannels{0};
    int32_t kernelShape[2]{0, 0};
    int32_t strides[2]{1, 1};
    int32_t pads[4]{0, 0, 0, 0};  // top, left, bottom, right
    int32_t dilations[2]{1, 1};
    int32_t kOrder{0};  // trt_woq_conv_k_order of the packed weight's K rows (optional field, default (c, i, j))

    // Output height (axis 0) or width (axis 1) for an input extent; < 1 when the kernel does not fit.
    int64_t outExtent(int32_t axis, int64_t in) const noexcept
    {
        return (in + pads[axis] + pads[axis + 2] - int64_t(dilations[axis]) * (kernelShape[axis] - 1) - 1)
            / strides[axis]
            + 1;
    }
};

// Empty string when the parameters are a valid WeightOnlyConv node, else what is wrong, quoting the value.
std::string validate(WeightOnlyConvParams const& p);

class WeightOnlyConvPlugin : public nvinfer1::IPluginV3,
                             public nvinfer1::IPluginV3OneCore,
                             public nvinfer1::IPluginV3OneBuild,
                             public nvinfer1::IPluginV3OneRuntime
{
public:
    WeightOnlyConvPlugin(std::string name, WeightOnlyConvParams const& params);
    WeightOnlyConvPlugin(WeightOnlyConvPlugin const& other);
    ~WeightOnlyConvPlugin() override = default;

    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
    nvinfer1::IPluginV3* clone() noexcept override;

    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;

    int32_t getNbOutputs() const noexcept override;
    int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs,
        nvinfer1::DataType const* inputTypes, int32_t nbInputs) const noexcept override;
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
        int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
        int32_t nbOutputs) noexcept override;
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;

    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

    // The kernel params of an NCHW activation of dims `x` (sizes and options only); false when x is not [B, C, H, W]
    // with known dims, C = in_channels and the kernel fitting.
    bool describe(nvinfer1::Dims const& x, int32_t actType, void* params) const noexcept;

    // The workspace reservations read from the fields (createPlugin).
    void setReservations(std::vector<WorkspaceReservation> r) { mReservations = std::move(r); }

private:
    // The profile of activation `x` (type; batch, H, W at min, opt, max) and the workspace getWorkspaceSize reserves
    // for it; `everyShape` (optional) tells whether every input of the profile was visited.
    WorkspaceReservation profileOf(nvinfer1::DynamicPluginTensorDesc const& x) const;
    size_t workspaceBound(WorkspaceReservation const& profile, int32_t sm, bool* everyShape = nullptr) const;

    std::string mName;
    WeightOnlyConvParams mParams;
    int32_t mSm{0};
    int32_t mActType{0};
    std::vector<WorkspaceReservation> mReservations;  // one per profile configurePlugin saw, or deserialized
    std::vector<int64_t> mReservationWords;           // kRESERVATION_FIELD's storage
    std::vector<nvinfer1::PluginField> mFieldsToSerialize;
    nvinfer1::PluginFieldCollection mFcToSerialize{};
};

class WeightOnlyConvPluginCreator : public nvinfer1::IPluginCreatorV3One
{
public:
    WeightOnlyConvPluginCreator();
    ~WeightOnlyConvPluginCreator() override = default;

    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override;
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override;

private:
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mFc{};
};

} // namespace plugin
} // namespace trt_woq

#endif // TRT_WOQ_WEIGHT_ONLY_CONV_PLUGIN_H
