/*
 * WeightOnlyLinear: a TensorRT IPluginV3 computing  Y[..., N] = X[..., K] @ ((U - Z) * S) (+ bias)  from a weight
 * packed by graph_passes (docs/layouts.md), through the kernels' C ABI (plugins/kernels/include/trt_woq/kernels.h).
 *
 * The node contract (op_type, inputs, attributes) is docs/op.md; this file's field names are its attribute names.
 * Compiles against the public headers of TensorRT 10.x and 11.x; the library links no TensorRT library.
 */
#ifndef TRT_WOQ_WEIGHT_ONLY_LINEAR_PLUGIN_H
#define TRT_WOQ_WEIGHT_ONLY_LINEAR_PLUGIN_H

#include <NvInferRuntime.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trt_woq
{
namespace plugin
{

// Shared by plugin and creator, and what TensorRT's ONNX parser looks up: op_type, plugin_version, plugin_namespace.
constexpr char const* kPLUGIN_NAME = "WeightOnlyLinear";
constexpr char const* kPLUGIN_VERSION = "1";
constexpr char const* kPLUGIN_NAMESPACE = "";

// Tensor positions. Optional inputs (zeros, bias, weight_sums) are present only when their flag is set, in this order.
constexpr int32_t kACTIVATION_IDX = 0;
constexpr int32_t kWEIGHT_IDX = 1;
constexpr int32_t kSCALES_IDX = 2;

// The op's attributes, validated. Plain data so that clone and serialization are copies.
struct WeightOnlyLinearParams
{
    int32_t bits{0};
    int32_t groupSize{0};
    int32_t inFeatures{0};
    int32_t outFeatures{0};
    int32_t layout{0};
    int32_t hasZeros{0};
    int32_t hasBias{0};
    int32_t activation{0};  // trt_woq_epilogue applied after the bias (optional field, default 0 = none)
    float clipMin{0.f};     // clip_min / clip_max: only with activation CLIP
    float clipMax{0.f};
    int32_t actMode{0};       // trt_woq_act_mode; optional attribute (absent = weight-only)
    int32_t actAsymmetric{0}; // W8A8: activation offsets; the int32 weight_sums input is present

    int32_t zerosIndex() const noexcept { return hasZeros ? 3 : -1; }
    int32_t biasIndex() const noexcept { return hasBias ? 3 + hasZeros : -1; }
    int32_t weightSumsIndex() const noexcept { return actAsymmetric ? 3 + hasZeros + hasBias : -1; }
    int32_t nbInputs() const noexcept { return 3 + hasZeros + hasBias + actAsymmetric; }
    // Packed int32 weight: layout 1 [N / I, K / 2], I = 2 (INT8) or 4 (INT4); layout 2 (FP6) [N / 4, 3 K / 4].
    int64_t packedRows() const noexcept { return outFeatures / (bits == 8 ? 2 : 4); }
    int64_t packedCols() const noexcept { return bits == 6 ? 3 * int64_t{inFeatures} / 4 : inFeatures / 2; }
    int64_t scaleRows() const noexcept { return groupSize == -1 ? 1 : inFeatures / groupSize; }
};

// Empty string when the parameters are a valid WeightOnlyLinear node, else what is wrong, quoting the value.
std::string validate(WeightOnlyLinearParams const& p);

// Empty string when the dims of the constant inputs (packed_weight, scales, zeros, bias, weight_sums; -1 = unknown)
// fit the parameters, else what is wrong, quoting the dims. Shared with WeightOnlyConv.
std::string operandShapeError(WeightOnlyLinearParams const& p, nvinfer1::DynamicPluginTensorDesc const* in);

// Shared with WeightOnlyConv (plugins/weight_only_conv): "[d0, d1, ...]" for messages; the current device's compute
// capability (major * 10 + minor), throwing std::runtime_error when CUDA cannot tell.
std::string dimsString(nvinfer1::Dims const& d);
int32_t currentSm();

// What getWorkspaceSize returns for one profile that configurePlugin saw, kept so that enqueue can hand the kernels
// the size TensorRT allocated (at least this) instead of the current shape's own need: the activation type
// (trt_woq_act_type), the profile's extents at min, opt and max (WeightOnlyLinear: M, 0, 0; WeightOnlyConv: batch,
// H, W) and the bytes. Serialized, kRESERVATION_WORDS int64 per profile, as the kINT64 field kRESERVATION_FIELD,
// which no creator lists (it is not an ONNX attribute); fields without it load with no reservation.
struct WorkspaceReservation
{
    int64_t actType{0};
    int64_t min[3]{0, 0, 0};
    int64_t opt[3]{0, 0, 0};
    int64_t max[3]{0, 0, 0};
    int64_t bytes{0};
};
constexpr char const* kRESERVATION_FIELD = "workspace_reservations";
constexpr int32_t kRESERVATION_WORDS = 11;

// Records `r`, replacing the reservation of the same type and profile.
void addReservation(std::vector<WorkspaceReservation>& all, WorkspaceReservation const& r);
// The reservation of the same type and profile (min, opt, max) as `key`, or nullptr.
WorkspaceReservation const* findReservation(
    std::vector<WorkspaceReservation> const& all, WorkspaceReservation const& key);
// The smallest reservation of type `actType` whose profile holds `extents` (min <= e <= max on each), or -1: whatever
// profile TensorRT runs, it holds the shape and TensorRT allocated at least that profile's reservation.
int64_t reservedBytes(std::vector<WorkspaceReservation> const& all, int64_t actType, int64_t const (&extents)[3]);
// The field of `all` over `words` (its storage); fills `words`.
nvinfer1::PluginField reservationField(std::vector<WorkspaceReservation> const& all, std::vector<int64_t>& words);
// Parses the field into `out`; empty string when it is well formed, else what is wrong, quoting the value.
std::string readReservations(nvinfer1::PluginField const& f, std::vector<WorkspaceReservation>& out);
// "HALF [1..3, 8..24, 8..24] 1234 bytes; ..." for messages, the first `nbExtents` extents of each.
std::string reservationsString(std::vector<WorkspaceReservation> const& all, int32_t nbExtents);

class WeightOnlyLinearPlugin : public nvinfer1::IPluginV3,
                               public nvinfer1::IPluginV3OneCore,
                               public nvinfer1::IPluginV3OneBuild,
                               public nvinfer1::IPluginV3OneRuntime
{
public:
    WeightOnlyLinearPlugin(std::string name, WeightOnlyLinearParams const& params);
    WeightOnlyLinearPlugin(WeightOnlyLinearPlugin const& other);
    ~WeightOnlyLinearPlugin() override = default;

    // IPluginV3
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
    nvinfer1::IPluginV3* clone() noexcept override;

    // IPluginV3OneCore
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;

    // IPluginV3OneBuild
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
    int32_t getNbTactics() noexcept override;
    int32_t getValidTactics(int32_t* tactics, int32_t nbTactics) noexcept override;
    char const* getTimingCacheID() noexcept override;

    // IPluginV3OneRuntime
    int32_t setTactic(int32_t tactic) noexcept override;
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

    // The workspace reservations read from the fields (createPlugin).
    void setReservations(std::vector<WorkspaceReservation> r) { mReservations = std::move(r); }

private:
    // The kernel candidates that support M in [mMin, mMax] for this node on this GPU. A candidate's tactic is
    // trt_woq_linear_candidate_tactic(id), a hash of its name, so that engines and timing caches outlive a build.
    std::vector<int32_t> validCandidates() const;
    // "name = tactic, ..." of the candidates whose masks serve this node's format, mode and epilogue (any M, any GPU).
    std::string offeredTactics() const;
    void chooseCandidate();
    void fillSizes(void* params, int64_t m) const;
    // The profile of activation `x` (type, M at min, opt, max) and the workspace getWorkspaceSize reserves for it.
    WorkspaceReservation profileOf(nvinfer1::DynamicPluginTensorDesc const& x) const;
    size_t workspaceBound(WorkspaceReservation const& profile, int32_t sm) const;

    std::string mName;
    WeightOnlyLinearParams mParams;
    int32_t mSm{0};          // compute capability * 10 + minor, of the current device
    int32_t mActType{0};     // trt_woq_act_type of the configured activation
    int64_t mMin{1};         // M range of the configured profile
    int64_t mMax{1};
    int64_t mM{0};           // M of the current shape (runtime)
    int32_t mTactic{0};      // TensorRT tactic; 0 = default
    int32_t mCandidate{-1};  // kernel candidate for mM; -1 = dispatch
    std::string mTimingCacheId;
    std::vector<WorkspaceReservation> mReservations;  // one per profile configurePlugin saw, or deserialized
    std::vector<int64_t> mReservationWords;           // kRESERVATION_FIELD's storage
    std::vector<nvinfer1::PluginField> mFieldsToSerialize;
    nvinfer1::PluginFieldCollection mFcToSerialize{};
};

class WeightOnlyLinearPluginCreator : public nvinfer1::IPluginCreatorV3One
{
public:
    WeightOnlyLinearPluginCreator();
    ~WeightOnlyLinearPluginCreator() override = default;

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

#endif // TRT_WOQ_WEIGHT_ONLY_LINEAR_PLUGIN_H
