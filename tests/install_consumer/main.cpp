// Uses the installed pvmm: reserve, create, map, grant, write, read back through a second mapping.
#include <cstdio>
#include <cstring>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

int main() {
  auto backend = pvmm::query_backend();
  if (!backend.available || pvmm::device_count().value() == 0) {
    std::printf("[pvmm-skip] %s backend has no device here: %s\n", backend.name.c_str(),
                backend.unavailable_reason.c_str());
    return 0;
  }
  try {
    pvmm::allocation_properties props;
    auto size = pvmm::query_granularity(props).value().minimum;
    auto memory = pvmm::physical_allocation::create(size, props).value();
    auto a = pvmm::address_reservation::reserve(size).value();
    auto b = pvmm::address_reservation::reserve(size).value();
    const pvmm::access_descriptor rw{pvmm::location::device(0), pvmm::access::read_write};
    void* pa = a.map_and_grant(0, memory, 0, size, {rw}).value();
    void* pb = b.map_and_grant(0, memory, 0, size, {rw}).value();
    const char text[] = "written through one mapping";
    pvmm::testing::copy_to_mapping(pa, text, sizeof text).value();
    char back[sizeof text] = {};
    pvmm::testing::copy_from_mapping(back, pb, sizeof back).value();
    if (std::memcmp(text, back, sizeof text) != 0) {
      std::printf("FAIL: the second mapping did not see the write\n");
      return 1;
    }
    std::printf("pvmm consumer (%s backend): ok\n", backend.name.c_str());
    return 0;
  } catch (const pvmm::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
