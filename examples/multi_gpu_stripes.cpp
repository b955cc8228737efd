// multi_gpu_stripes: the vectorAddMMAP flow. The devices that back the buffer are chosen the way the sample
// chooses them (those the using device can reach, by can_access_peer); a size the program wants (any number of
// bytes) is rounded up to the stripe size; one reservation is backed by stripes from each chosen device in turn,
// one grant for the device that uses it, and data is written and checked across all the stripes.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

#include "common.hpp"

int main() {
  return example::run("multi_gpu_stripes", [] {
    const int devices = pvmm::device_count().value();
    const int user = 0;  // the device whose kernels would use the buffer
    std::vector<int> backing{user};
    for (int d = 0; d < devices; ++d)
      if (d != user && pvmm::can_access_peer(user, d).value()) backing.push_back(d);

    // A stripe is the largest recommended granularity of the backing devices, and a multiple of the
    // reservation unit, so every stripe maps anywhere in the range.
    const std::size_t unit = pvmm::reservation_granularity().value();
    std::size_t stripe = unit;
    for (int d : backing) {
      pvmm::allocation_properties p;
      p.location = pvmm::location::device(d);
      stripe = std::max(stripe, pvmm::query_granularity(p).value().recommended);
    }
    stripe = (stripe + unit - 1) / unit * unit;
    const std::size_t wanted = 10'000'000 + 12'345;  // what the program needs: no granularity in sight
    const std::size_t stripes = std::max<std::size_t>((wanted + stripe - 1) / stripe, backing.size());
    const std::size_t size = stripes * stripe;

    auto range = pvmm::address_reservation::reserve(size).value();
    std::vector<pvmm::physical_allocation> memory;
    for (std::size_t s = 0; s < stripes; ++s) {
      pvmm::allocation_properties p;
      p.location = pvmm::location::device(backing[s % backing.size()]);
      memory.push_back(pvmm::physical_allocation::create(stripe, p).value());
      range.map(s * stripe, memory.back()).value();
    }
    // Only the using device is granted: peer access is per range, not global.
    range.set_access(0, size, {{pvmm::location::device(user), pvmm::access::read_write}}).value();
    std::vector<unsigned> out(wanted / sizeof(unsigned)), in(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned>(i * 2654435761u);
    pvmm::testing::copy_to_mapping(range.address(), out.data(), out.size() * sizeof(unsigned), user).value();
    pvmm::testing::copy_from_mapping(in.data(), range.address(), in.size() * sizeof(unsigned), user).value();
    if (in != out) {
      std::printf("multi_gpu_stripes: FAIL: data differs\n");
      return 1;
    }
    for (std::size_t s = 0; s < stripes; ++s)
      if (memory[s].properties().value().location != pvmm::location::device(backing[s % backing.size()])) {
        std::printf("multi_gpu_stripes: FAIL: stripe %zu is not on device %d\n", s, backing[s % backing.size()]);
        return 1;
      }
    std::printf(
        "multi_gpu_stripes: ok: %zu bytes wanted, %zu stripes of %zu bytes from %zu of %d device(s) "
        "reachable from device %d\n",
        wanted, stripes, stripe, backing.size(), devices, user);
    return 0;
  });
}
