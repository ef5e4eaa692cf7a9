/*
 * Float64 references of the plugin conformance harness (harness.h), plain C++ (no CUDA, no TensorRT), so that
 * tests/plugins/conformance/test_reference.py can check them on the CPU against graph_passes, the source of truth:
 *   - fp16 / bf16 storage conversions (round to nearest even);
 *   - the epilogues of graph_passes/registry/epilogues.py;
 *   - W8A8 activation quantization, the float32 steps of graph_passes/quantizers/activations.py, one correctly
 *     rounded IEEE operation each (this file must be compiled without FMA contraction: -ffp-contract=off);
 *   - the patches of graph_passes/op_conv.py (im2col, K order (c, i, j), zeros outside the input);
 *   - rows [M, K] @ W[K, N] + bias, then the epilogue, in float64.
 */
#ifndef TRT_WOQ_CONFORMANCE_REFERENCE_H
#define TRT_WOQ_CONFORMANCE_REFERENCE_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace conformance
{

// ------------------------------------------------------------------------------------------------ storage types
inline uint16_t floatToHalf(float f)
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

inline double halfToDouble(uint16_t h)
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

inline uint16_t floatToBf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    x += 0x7FFF + ((x >> 16) & 1);
    return static_cast<uint16_t>(x >> 16);
}

inline double bf16ToDouble(uint16_t b)
{
    uint32_t x = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

inline double storedToDouble(uint16_t v, bool bf16)
{
    return bf16 ? bf16ToDouble(v) : halfToDouble(v);
}

inline uint16_t toStored(float v, bool bf16)
{
    return bf16 ? floatToBf16(v) : floatToHalf(v);
}

// ------------------------------------------------------------------------------------------------ epilogues
// trt_woq_epilogue values (kernels.h): 0 none, 1 relu, 2 clip, 3 silu, 4 gelu_erf, 5 gelu_tanh.
struct Epilogue
{
    int32_t activation{0};
    double clipMin{-INFINITY};
    double clipMax{INFINITY};

    double operator()(double y) const
    {
        switch (activation)
        {
        case 1: return std::max(y, 0.0);
        case 2: return std::min(std::max(y, clipMin), clipMax);
        case 3: return y / (1.0 + std::exp(-y));
        case 4: return 0.5 * y * (1.0 + std::erf(y / std::sqrt(2.0)));
        case 5: return 0.5 * y * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (y + 0.044715 * y * y * y)));
        default: return y;
        }
    }
};

// ------------------------------------------------------------------------------------------------ W8A8
// Quantizes one row x[0, k) (values exact in float32) in blocks of `block` and writes the dequantized row
// xq = s * a + o (float64, as QuantizedActivations.dequantize) and mag = |s * a| + |o| per element (the size of the
// terms the kernel's float32 epilogue adds, for the error bound).
inline void quantizeRow(float const* x, int64_t k, int64_t block, bool asymmetric, double* xq, double* mag)
{
    for (int64_t b0 = 0; b0 < k; b0 += block)
    {
        float lo = x[b0];
        float hi = x[b0];
        float amax = 0.0F;
        for (int64_t i = b0; i < b0 + block; ++i)
        {
            lo = std::min(lo, x[i]);
            hi = std::max(hi, x[i]);
            amax = std::max(amax, std::fabs(x[i]));
        }
        float s;
        float o;
        float qmin;
        if (asymmetric)
        {
            s = (hi - lo) / 255.0F;
            float const shift = 128.0F * s;
            o = lo + shift;
            qmin = -128.0F;
        }
        else
        {
            s = amax / 127.0F;
            o = 0.0F;
            qmin = -127.0F;
        }
        float const div = s == 0.0F ? 1.0F : s;
        for (int64_t i = b0; i < b0 + block; ++i)
        {
            float const centred = x[i] - o;
            float const q = std::nearbyint(centred / div); // the default rounding mode: half to even, as np.rint
            double const a = std::min(std::max(q, qmin), 127.0F);
            xq[i] = a * static_cast<double>(s) + static_cast<double>(o);
            mag[i] = std::fabs(a * static_cast<double>(s)) + std::fabs(static_cast<double>(o));
        }
    }
}

// ------------------------------------------------------------------------------------------------ conv
struct ConvGeometry
{
    int64_t batch, channels, h, w;
    int32_t kh, kw, sh, sw, top, left, bottom, right, dh, dw;
    int32_t kOrder; // the node's k_order: 0 = (c, i, j), 1 = (i, j, c)

    int64_t outH() const
    {
        return (h + top + bottom - int64_t(dh) * (kh - 1) - 1) / sh + 1;
    }
    int64_t outW() const
    {
        return (w + left + right - int64_t(dw) * (kw - 1) - 1) / sw + 1;
    }
    int64_t rows() const
    {
        return batch * outH() * outW();
    }
    int64_t k() const
    {
        return channels * kh * kw;
    }
};

// Patches [B * OH * OW, C * kh * kw] of NCHW x: row (b, y, x), column k = (c * kh + i) * kw + j, or
// (i * kw + j) * C + c for kOrder 1 (op_conv.py).
inline std::vector<double> im2col(std::vector<double> const& x, ConvGeometry const& g)
{
    int64_t const oh = g.outH();
    int64_t const ow = g.outW();
    int64_t const k = g.k();
    std::vector<double> p(static_cast<size_t>(g.rows() * k), 0.0);
    for (int64_t b = 0; b < g.batch; ++b)
    {
        for (int64_t y = 0; y < oh; ++y)
        {
            for (int64_t xo = 0; xo < ow; ++xo)
            {
                double* row = &p[static_cast<size_t>(((b * oh + y) * ow + xo) * k)];
                for (int64_t c = 0; c < g.channels; ++c)
                {
                    for (int32_t i = 0; i < g.kh; ++i)
                    {
                        int64_t const iy = y * g.sh - g.top + int64_t(i) * g.dh;
                        for (int32_t j = 0; j < g.kw; ++j)
                        {
                            int64_t const ix = xo * g.sw - g.left + int64_t(j) * g.dw;
                            if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                            {
                                size_t const at = static_cast<size_t>(((b * g.channels + c) * g.h + iy) * g.w + ix);
                                int64_t const kk
                                    = g.kOrder == 1 ? (i * g.kw + j) * g.channels + c : (c * g.kh + i) * g.kw + j;
                                row[kk] = x[at];
                            }
                        }
                    }
                }
            }
        }
    }
    return p;
}

// [B * OH * OW, N] rows (b, y, x) -> NCHW [B, N, OH, OW].
inline std::vector<double> rowsToNchw(std::vector<double> const& r, int64_t batch, int64_t n, int64_t pixels)
{
    std::vector<double> y(r.size());
    for (int64_t b = 0; b < batch; ++b)
    {
        for (int64_t p = 0; p < pixels; ++p)
        {
            for (int64_t j = 0; j < n; ++j)
            {
                y[static_cast<size_t>((b * n + j) * pixels + p)] = r[static_cast<size_t>((b * pixels + p) * n + j)];
            }
        }
    }
    return y;
}

// ------------------------------------------------------------------------------------------------ product
// y[m, N] = epilogue(rows[m, K] @ w[K, N] + bias) in float64; when mag is given (|terms| per element of rows), also
// absY[m, N] = mag @ |w| + |bias| (the size of what a floating-point evaluation sums).
inline void product(std::vector<double> const& rows, std::vector<double> const* mag, int64_t m, int64_t k, int64_t n,
    std::vector<double> const& w, std::vector<double> const& bias, Epilogue const& epilogue, std::vector<double>& y,
    std::vector<double>* absY)
{
    y.assign(static_cast<size_t>(m * n), 0.0);
    if (absY)
    {
        absY->assign(static_cast<size_t>(m * n), 0.0);
    }
    unsigned const threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
    {
        pool.emplace_back([&, t] {
            std::vector<double> acc(static_cast<size_t>(n));
            std::vector<double> accAbs(static_cast<size_t>(n));
            for (int64_t i = t; i < m; i += threads)
            {
                for (int64_t j = 0; j < n; ++j)
                {
                    acc[j] = bias.empty() ? 0.0 : bias[j];
                    accAbs[j] = bias.empty() ? 0.0 : std::fabs(bias[j]);
                }
                for (int64_t kk = 0; kk < k; ++kk)
                {
                    double const a = rows[static_cast<size_t>(i * k + kk)];
                    double const* wr = &w[static_cast<size_t>(kk * n)];
                    for (int64_t j = 0; j < n; ++j)
                    {
                        acc[j] += a * wr[j];
                    }
                    if (mag)
                    {
                        double const am = (*mag)[static_cast<size_t>(i * k + kk)];
                        for (int64_t j = 0; j < n; ++j)
                        {
                            accAbs[j] += am * std::fabs(wr[j]);
                        }
                    }
                }
                for (int64_t j = 0; j < n; ++j)
                {
                    y[static_cast<size_t>(i * n + j)] = epilogue(acc[j]);
                    if (absY)
                    {
                        (*absY)[static_cast<size_t>(i * n + j)] = accAbs[j];
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

} // namespace conformance

#endif // TRT_WOQ_CONFORMANCE_REFERENCE_H
