// grow: the seeds' "dynamically increase allocation size". A buffer grows in place at the tail of its
// reservation; when the addresses after it are taken, it moves to a larger reservation by remapping the same
// physical chunks (no data copied). Data is checked after every step; exits non-zero on a wrong answer.
#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

#include "common.hpp"

namespace {
constexpr unsigned seed = 1000;

void fill(const pvmm::growable_buffer& buffer, std::size_t from, std::size_t bytes) {
  std::vector<unsigned> words(bytes / sizeof(unsigned));
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = seed + static_cast<unsigned>(from / sizeof(unsigned) + i);
  pvmm::testing::copy_to_mapping(static_cast<char*>(buffer.data()) + from, words.data(), bytes).value();
}

bool intact(const pvmm::growable_buffer& buffer, std::size_t bytes) {
  std::vector<unsigned> words(bytes / sizeof(unsigned));
  pvmm::testing::copy_from_mapping(words.data(), buffer.data(), bytes).value();
  for (std::size_t i = 0; i < words.size(); ++i)
    if (words[i] != seed + i) return false;
  return true;
}
}  // namespace

int main() {
  return example::run("grow", [] {
    pvmm::growable_options options;
    options.access = {{pvmm::location::device(0), pvmm::access::read_write}};
    options.chunk_size = pvmm::query_granularity(options.properties).value().minimum;
    options.reserve_size = 4 * options.chunk_size;  // small on purpose: growth soon needs more address space
    auto buffer = pvmm::growable_buffer::create(options).value();
    const std::size_t chunk = buffer.chunk_size();

    std::size_t filled = 0;
    int moves = 0;
    for (std::size_t chunks = 1; chunks <= 12; ++chunks) {
      if (chunks == 6) {
        // Take the addresses right after the buffer, so the next growth past capacity must move.
        auto blocker =
            pvmm::address_reservation::reserve(chunk, 0, static_cast<char*>(buffer.data()) + buffer.capacity());
        (void)blocker;  // if they were taken already, the buffer moves all the same
      }
      void* before = buffer.data();
      auto outcome = buffer.resize(chunks * chunk).value();
      if (outcome.moved) {
        ++moves;
        std::printf("grow: %zu chunks: moved from %p to %p by remapping (no copy)\n", chunks, before, buffer.data());
      }
      if (!intact(buffer, filled)) {
        std::printf("grow: FAIL: data changed when growing to %zu chunks\n", chunks);
        return 1;
      }
      fill(buffer, filled, buffer.size() - filled);
      filled = buffer.size();
    }
    auto shrunk = buffer.resize(2 * chunk).value();
    if (!intact(buffer, 2 * chunk) || shrunk.chunks_removed != 10) {
      std::printf("grow: FAIL after shrinking\n");
      return 1;
    }
    std::printf("grow: ok: grew to %zu bytes in %zu-byte chunks (%d move(s), %zu reservation(s)), shrank to %zu\n",
                filled, chunk, moves, buffer.reservation_count(), buffer.size());
    return 0;
  });
}
