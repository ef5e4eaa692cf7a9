/*
 * The harness's references (reference.h) on files, for tests/plugins/conformance/test_reference.py to compare with
 * graph_passes on the CPU. Raw little-endian arrays in and out; one command per call:
 *
 *   reference_check quantize M K BLOCK ASYM X.f32 OUT.f64        rows of s * a + o (W8A8 activation quantization)
 *   reference_check im2col B C H W KH KW SH SW TOP LEFT BOTTOM RIGHT DH DW K_ORDER X.f64 OUT.f64
 *   reference_check product M K N ACTIVATION CLIP_MIN CLIP_MAX ROWS.f64 W.f64 BIAS.f64|- OUT.f64
 */
#include "reference.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace
{

template <typename T>
std::vector<T> load(char const* path, size_t count)
{
    std::vector<T> v(count);
    std::ifstream f(path, std::ios::binary);
    if (!f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(T))))
    {
        std::fprintf(stderr, "cannot read %zu values from %s\n", count, path);
        std::exit(2);
    }
    return v;
}

void save(char const* path, std::vector<double> const& v)
{
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<char const*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
}

} // namespace

int main(int argc, char** argv)
{
    using namespace conformance;
    std::string const cmd = argc > 1 ? argv[1] : "";
    auto num = [&](int i) { return std::stoll(argv[i]); };
    if (cmd == "quantize" && argc == 8)
    {
        int64_t const m = num(2), k = num(3);
        std::vector<float> const x = load<float>(argv[6], static_cast<size_t>(m * k));
        std::vector<double> xq(x.size()), mag(x.size());
        for (int64_t i = 0; i < m; ++i)
        {
            quantizeRow(&x[static_cast<size_t>(i * k)], k, num(4), num(5) != 0, &xq[static_cast<size_t>(i * k)],
                &mag[static_cast<size_t>(i * k)]);
        }
        save(argv[7], xq);
        return 0;
    }
    if (cmd == "im2col" && argc == 19)
    {
        ConvGeometry const g{num(2), num(3), num(4), num(5), int32_t(num(6)), int32_t(num(7)), int32_t(num(8)),
            int32_t(num(9)), int32_t(num(10)), int32_t(num(11)), int32_t(num(12)), int32_t(num(13)), int32_t(num(14)),
            int32_t(num(15)), int32_t(num(16))};
        save(argv[18], im2col(load<double>(argv[17], static_cast<size_t>(g.batch * g.channels * g.h * g.w)), g));
        return 0;
    }
    if (cmd == "product" && argc == 12)
    {
        int64_t const m = num(2), k = num(3), n = num(4);
        Epilogue ep;
        ep.activation = int32_t(num(5));
        ep.clipMin = std::stod(argv[6]);
        ep.clipMax = std::stod(argv[7]);
        std::vector<double> const bias
            = std::string(argv[10]) == "-" ? std::vector<double>{} : load<double>(argv[10], static_cast<size_t>(n));
        std::vector<double> y;
        product(load<double>(argv[8], static_cast<size_t>(m * k)), nullptr, m, k, n,
            load<double>(argv[9], static_cast<size_t>(k * n)), bias, ep, y, nullptr);
        save(argv[11], y);
        return 0;
    }
    std::fprintf(stderr, "usage: see the comment at the top of reference_check.cpp\n");
    return 2;
}
