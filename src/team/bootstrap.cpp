// The bootstrap interface's defaults and the helpers the adapters share.
#include <unistd.h>

#include <fstream>

#include <pvmm/bootstrap.hpp>
#include <pvmm/ipc.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"

namespace pvmm {

status bootstrap::send(int peer, const void*, std::size_t bytes, deadline) {
  auto args = [&] { return fmt::format("peer={}, bytes={}", peer, bytes); };
  const detail::operation op{"pvmm::bootstrap::send", args};
  return op.fail(errc::not_supported, "this bootstrap adapter has no point-to-point messages",
                 "use allgather, or an adapter that has send/receive (threads, mpi)");
}

status bootstrap::receive(int peer, void*, std::size_t bytes, deadline) {
  auto args = [&] { return fmt::format("peer={}, bytes={}", peer, bytes); };
  const detail::operation op{"pvmm::bootstrap::receive", args};
  return op.fail(errc::not_supported, "this bootstrap adapter has no point-to-point messages",
                 "use allgather, or an adapter that has send/receive (threads, mpi)");
}

namespace detail {

status check_rank_arguments(int rank, int size, std::chrono::milliseconds timeout, const operation& op) {
  if (size <= 0 || rank < 0 || rank >= size)
    return op.fail(errc::invalid_argument, fmt::format("rank {} is not one of {} ranks", rank, size));
  if (timeout.count() < 0) return op.fail(errc::invalid_argument, "the timeout is negative");
  return {};
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

std::chrono::milliseconds time_left(deadline until) noexcept {
  if (until == deadline::max()) return ipc::wait_forever;
  const auto now = std::chrono::steady_clock::now();
  if (until <= now) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(until - now);
}

std::uint64_t node_key(int node) {
  if (node >= 0) return static_cast<std::uint64_t>(node);
  // This machine: its boot id and host name, hashed (FNV-1a: the same in every process, unlike std::hash's promise).
  std::string text;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> text;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  text += host;
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<int> number_nodes(const std::vector<std::uint64_t>& key_of_rank) {
  std::vector<int> nodes(key_of_rank.size());
  for (std::size_t r = 0; r < key_of_rank.size(); ++r)  // a node is numbered by its lowest rank
    for (std::size_t q = 0; q <= r; ++q)
      if (key_of_rank[q] == key_of_rank[r]) {
        nodes[r] = static_cast<int>(q);
        break;
      }
  return nodes;
}

node_position position_in_node(const std::vector<int>& node_of_rank, int rank) {
  node_position p;
  for (int r = 0; r < static_cast<int>(node_of_rank.size()); ++r) {
    if (node_of_rank[r] != node_of_rank[rank]) continue;
    if (r < rank) ++p.local_rank;
    ++p.local_size;
  }
  return p;
}

}  // namespace detail
}  // namespace pvmm
