// pvmm/bootstrap.hpp - how the ranks of a team find each other: a small versioned interface (rank, size, node,
// allgather, barrier, optional send/receive, abort), every call bounded by a deadline, and its adapters:
// - threads:   ranks are threads of one process (tests, single-process multi-GPU programs);
// - endpoints: node-local processes meeting at a named pvmm endpoint, rank 0 as the root;
// - store:     a key-value store the caller provides (set, get-with-deadline: torch's c10d Store, etcd-like);
// - mpi:       an MPI communicator (pvmm/bootstrap_mpi.hpp, library pvmm::mpi, built where MPI is found).
// The interface is what MSCCL++'s Bootstrap and NVSHMEM's bootstrap plugins share (reference/teams.md §2);
// a C caller or a Python launcher implements the same five calls.
//
// Contract of every adapter (pinned by tests/team/bootstrap.cpp under each one):
// - collectives are called by every rank in the same order; allgather takes the same byte count on every rank
//   (a different count is errc::team_mismatch on the ranks that can see it);
// - a rank that does not arrive by the deadline makes the others fail with errc::timeout naming the missing
//   ranks (where the adapter can know them) and the call; a rank known to be gone (its process exited, it
//   aborted) makes them fail with errc::peer_lost at once, not at the deadline;
// - after a collective failed, the bootstrap is broken: every later call fails at once with the first error
//   (a collective half done cannot be resumed in step);
// - abort() may be called from any thread; calls in progress and later calls on every rank the adapter can
//   reach fail with errc::peer_lost naming the aborting rank.
//
// Threading: one rank's bootstrap is used by one thread at a time, except abort(), which any thread may call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <pvmm/error.hpp>

namespace pvmm {

/// The moment a wait gives up. Every collective takes one, so a caller bounds a sequence of steps by one clock.
using deadline = std::chrono::steady_clock::time_point;
inline deadline deadline_in(std::chrono::milliseconds timeout) noexcept {
  const auto now = std::chrono::steady_clock::now();
  return timeout >= deadline::max() - now ? deadline::max() : now + timeout;
}

/// The ranks of one job. Version 1: the members below.
class bootstrap {
 public:
  static constexpr std::uint32_t interface_version = 1;
  virtual ~bootstrap() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// Ranks with the same node() share a machine (and may share memory through POSIX fds). Any int; the team
  /// numbers nodes in order of their lowest rank.
  virtual int node() const noexcept = 0;
  /// This rank's index among the ranks of its node, and their count.
  virtual int local_rank() const noexcept = 0;
  virtual int local_size() const noexcept = 0;

  /// Every rank contributes `bytes` bytes at `mine`; `all` (size() * bytes) receives them in rank order.
  virtual status allgather(const void* mine, std::size_t bytes, void* all, deadline until) = 0;
  /// Returns once every rank has called it.
  virtual status barrier(deadline until) = 0;
  /// Point-to-point bytes, where the adapter has them (errc::not_supported otherwise): `bytes` must match the
  /// sender's count (errc::team_mismatch otherwise).
  virtual status send(int peer, const void* data, std::size_t bytes, deadline until);
  virtual status receive(int peer, void* data, std::size_t bytes, deadline until);
  /// Gives up: this rank's calls in progress and later ones fail, and the other ranks see errc::peer_lost.
  virtual void abort() noexcept = 0;
};

/// Options every adapter understands.
struct bootstrap_options {
  /// The node this rank reports; unset (-1): found by the adapter (MPI's shared-memory split; the host's boot id
  /// and name for the store; one node for threads and endpoints). Tests set it to simulate several nodes.
  int node = -1;
};

/// `size` bootstraps whose ranks are threads of this process: hand element r to the thread of rank r.
/// `node_of_rank` (empty, or one entry per rank) simulates nodes.
result<std::vector<std::shared_ptr<bootstrap>>> make_thread_bootstraps(int size, std::vector<int> node_of_rank = {});

/// Node-local processes meeting at endpoint `name` (pvmm/endpoint.hpp): rank 0 listens, the others connect, all
/// within `timeout`. Rank 0 holds size - 1 connections; every other rank holds one. Peers must run as the same
/// user. A rank that exits is errc::peer_lost on the others at their next call (its socket closes).
result<std::shared_ptr<bootstrap>> make_endpoint_bootstrap(std::string_view name, int rank, int size,
                                                           std::chrono::milliseconds timeout,
                                                           const bootstrap_options& options = {});

/// A key-value store: set(key, value) publishes, get(key, until) waits for the key until `until`
/// (errc::timeout when it does not appear). Keys are never reused; the adapter never deletes.
struct key_value_store {
  std::function<status(const std::string& key, const std::vector<std::uint8_t>& value)> set;
  std::function<result<std::vector<std::uint8_t>>(const std::string& key, deadline until)> get;
};

/// Ranks meeting through `store` under `prefix` (several teams may share a store with different prefixes).
/// Finding nodes takes one allgather, bounded by `timeout`.
result<std::shared_ptr<bootstrap>> make_store_bootstrap(key_value_store store, std::string prefix, int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        const bootstrap_options& options = {});

/// An in-process key-value store (for tests and threads): set and get as the store adapter expects.
key_value_store make_memory_store();

}  // namespace pvmm
