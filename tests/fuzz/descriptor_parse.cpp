// Fuzz target: buffer_descriptor::parse on arbitrary bytes (the bytes a peer sends with its fds).
// Invariants: parse never crashes or reads out of bounds (ASan), and whatever it accepts serializes back to
// exactly the bytes it was given.
#include <cstring>

#include <pvmm/descriptor.hpp>

#include "common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pvmm_fuzz::input in{data, size};
  const std::size_t fds_received = in.byte();  // the first byte: how many fds arrived with the bytes
  auto parsed = pvmm::buffer_descriptor::parse(in.data, in.size, fds_received);
  if (!parsed) {
    if (parsed.code() != pvmm::errc::protocol_error)
      pvmm_fuzz::finding("parse failed with a code other than protocol_error");
    return 0;
  }
  const auto again = parsed->serialize();
  if (again.size() != in.size || std::memcmp(again.data(), in.data, in.size) != 0)
    pvmm_fuzz::finding("an accepted descriptor does not serialize back to the same bytes");
  return 0;
}
