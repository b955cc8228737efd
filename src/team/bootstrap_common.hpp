// What the bootstrap adapters share beyond the contract in pvmm::bootstrap: a group-wide broken state (threads),
// deadline arithmetic, and the lists of ranks that errors name.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <pvmm/bootstrap.hpp>

#include <fmt/format.h>

#include "core/deferred_release.hpp"
#include "core/operation.hpp"
#include "core/timeout.hpp"

namespace pvmm::detail {

/// A bootstrap's first failure. Once set, every call fails with it (a collective half done cannot be resumed in
/// step). Guarded: abort() may set it from another thread.
class broken_state {
 public:
  status check() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_) return *first_;
    return {};
  }
  /// Records `e` unless an earlier failure is recorded; returns the recorded one.
  error set(error e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!first_) first_ = std::move(e);
    return *first_;
  }
  bool is_set() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_.has_value();
  }

 private:
  mutable std::mutex mutex_;
  std::optional<error> first_;
};

/// The one timeout rule (core/timeout.hpp) for a team call: a negative timeout is errc::invalid_argument, reported
/// as this call's failure (`op` names the operation and this rank).
inline status check_timeout(std::chrono::milliseconds timeout, const char* parameter, const operation& op) {
  if (auto checked = checked_timeout(timeout, parameter); !checked) return op.wrap(std::move(checked).error());
  return {};
}

/// The arguments every process adapter takes: rank in [0, size), a timeout >= 0 (errc::invalid_argument).
status check_rank_arguments(int rank, int size, std::chrono::milliseconds timeout, const operation& op);

/// An errc a peer reported: a value no errc has (a newer pvmm's, or forged bytes) is protocol_error.
inline errc peer_errc(std::int32_t value) noexcept {
  return value > 0 && value <= static_cast<std::int32_t>(errc::team_mismatch) ? static_cast<errc>(value)
                                                                              : errc::protocol_error;
}

/// release() of a team-layer owner: local, never waits for peers; errc::already_released when empty.
template <class State>
status release_local(std::shared_ptr<State>& state, const char* name, const char* owner) noexcept {
  const operation op{name};
  if (!state) return op.fail(errc::already_released, fmt::format("this {} is empty (released or moved from)", owner));
  state.reset();
  // Signal work that ran since may hold this owner's state too: let go of here, on the caller's thread
  // (core/deferred_release.hpp).
  release_deferred();
  return {};
}

/// "ranks 2, 5" for error messages.
std::string rank_list(const std::vector<int>& ranks);

/// Milliseconds left until `until` (0 once passed; wait_forever for deadline::max()).
std::chrono::milliseconds time_left(deadline until) noexcept;
/// `until` plus `by`, saturated at deadline::max() (a deadline near the clock's end must not wrap into the past).
deadline later(deadline until, std::chrono::milliseconds by) noexcept;

/// What a rank reports to find its node: `node` when set (>= 0, tests simulating nodes), else this machine's
/// boot id and host name, hashed. Ranks with equal keys share a node.
std::uint64_t node_key(int node);
/// Every rank's node from every rank's key: numbered by the node's lowest rank.
std::vector<int> number_nodes(const std::vector<std::uint64_t>& key_of_rank);

/// Local rank and size from every rank's node, for adapters that know the nodes.
struct node_position {
  int local_rank = 0;
  int local_size = 0;
};
/// Every rank's position, in one pass (a rank-by-rank scan is O(n^2) for n ranks).
std::vector<node_position> positions_in_nodes(const std::vector<int>& node_of_rank);

/// The process adapters' places (endpoints, store, MPI): this rank, the group's size and every rank's node, with
/// pvmm::bootstrap's five accessors over them. An adapter sets rank_, size_ and nodes_, then place_ranks().
class placed_bootstrap : public bootstrap {
 public:
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return nodes_[static_cast<std::size_t>(rank_)]; }
  int local_rank() const noexcept override { return positions_[static_cast<std::size_t>(rank_)].local_rank; }
  int local_size() const noexcept override { return positions_[static_cast<std::size_t>(rank_)].local_size; }

 protected:
  placed_bootstrap() = default;
  placed_bootstrap(int rank, int size) : rank_(rank), size_(size) {}
  /// Every rank's local rank and size from nodes_.
  void place_ranks() { positions_ = positions_in_nodes(nodes_); }

  int rank_ = 0;
  int size_ = 0;
  std::vector<int> nodes_;
  std::vector<node_position> positions_;
};

}  // namespace pvmm::detail
