// pvmm/team_multicast.hpp - multicast over a team: one address on every rank whose stores reach the window slot
// of every device on its node at once (NVLink SHARP; what torch's SymmetricMemory calls the multicast pointer).
//
// Made collectively from a symmetric_window. The steps, in the order torch and NVSHMEM learnt them:
// 1. every rank checks its device's multicast capability, the slot sizes and the granularity, and the team
//    allgathers the answers before any multicast driver call: a rank without multicast makes every rank fail
//    with errc::not_supported naming it (the host and hip backends have none);
// 2. the lowest rank of each node creates the node's object (one per node: multicast reaches the devices of one
//    NVLink domain) and sends its POSIX fd to the node's other ranks over the team's endpoints, one at a time;
// 3. the lowest rank of each device adds the device, and no rank binds before every device is added;
// 4. that rank binds its slot's memory (one binding per device: ranks that share a device share its binding);
// 5. every rank maps the object and grants its device access; the creator keeps its reference until every rank
//    has said it imported and mapped (torch's hang: a creator that let go too early left peers importing a
//    released handle).
// A rank that fails at a step still takes part in the step's agreement, so every rank fails at once with the
// same errc naming it. Release is local (unmap, unbind what this rank bound, let go) and never waits for peers.
//
// team::abort() unmaps the multicast mapping (address() is then nullptr); the binding goes at release.
//
// Threading: one thread at a time per object, as for the team's other collectives; the accessors may be read
// from any thread while no release runs, also while team::abort() runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/team.hpp>

namespace pvmm {

namespace detail {
struct team_multicast_state;
}

struct team_multicast_options {
  std::chrono::milliseconds timeout{30000};  ///< bounds the collective create
};

/// A multicast object over the ranks of each node, bound to their window slots. Move-only.
class team_multicast : detail::move_only {
 public:
  /// Collective over `window`'s team: every rank calls it, in the same order as its other collectives. Every
  /// rank's slot has the same size, a multiple of the multicast granularity (errc::team_mismatch, invalid_size).
  static result<team_multicast> create(const symmetric_window& window, const team_multicast_options& options = {});

  team_multicast() noexcept = default;  ///< empty (the private constructor below hides the implicit one)

  /// Unmaps, unbinds what this rank bound and lets go now (local: never waits for peers).
  status release() noexcept;
  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  /// The multicast mapping: a store here reaches offset o of the slot of every device on this rank's node
  /// (nullptr once the team was aborted).
  void* address() const noexcept;
  std::size_t size() const noexcept;
  /// The ranks whose slots are bound (the lowest rank of each device on this rank's node), in rank order.
  const std::vector<int>& bound_ranks() const noexcept;

 private:
  explicit team_multicast(std::shared_ptr<detail::team_multicast_state> state) noexcept;
  std::shared_ptr<detail::team_multicast_state> state_;
};

}  // namespace pvmm
