// The measuring kit behind every pvmm-bench section (bench.hpp).
#include "bench.hpp"

#include <random>

#include <fmt/format.h>

namespace bench {

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

comparison compare(const std::vector<double>& pvmm_s, const std::vector<double>& other_s) {
  std::vector<double> ratios;
  for (std::size_t i = 0; i < pvmm_s.size() && i < other_s.size(); ++i)
    if (other_s[i] > 0) ratios.push_back(pvmm_s[i] / other_s[i]);
  return {median(pvmm_s), median(other_s), quantile(ratios, 0.5), quantile(ratios, 0.25), quantile(ratios, 0.75)};
}

comparison interleaved(int rounds, const std::function<double()>& pvmm_op, const std::function<double()>& other_op) {
  std::mt19937 order(12345);
  std::vector<double> a, b;
  (void)pvmm_op(), (void)other_op();  // warm-up round, not counted
  for (int r = 0; r < rounds; ++r) {
    double x, y;
    if (order() & 1) {
      x = pvmm_op(), y = other_op();
    } else {
      y = other_op(), x = pvmm_op();
    }
    a.push_back(x), b.push_back(y);
  }
  return compare(a, b);
}

void table_header(const char* pvmm_unit, const char* other_unit) {
  fmt::print("  {:<52} {:>11} {:>11} {:>9}  {}\n", "", pvmm_unit, other_unit, "ratio", "IQR");
}

void spread_row(const std::string& what, const comparison& c, double scale) {
  fmt::print("  {:<52} {:>11.3f} {:>11.3f} {:>8.3f}x  [{:.3f}-{:.3f}]{}\n", what, c.pvmm_s * scale, c.other_s * scale,
             c.ratio, c.q1, c.q3, c.within_noise() ? "  within noise" : "");
}

void row(const std::string& what, double pvmm_s, double other_s, double scale) {
  fmt::print("  {:<52} {:>11.3f} {:>11.3f} {:>8.3f}x\n", what, pvmm_s * scale, other_s * scale,
             other_s > 0 ? pvmm_s / other_s : 0.0);
}

}  // namespace bench
