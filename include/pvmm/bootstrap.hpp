// pvmm/bootstrap.hpp - how the ranks of a team find each other: a small versioned interface (rank, size, node,
// allgather, barrier, send/receive with tags, abort), every call bounded by a deadline, and its adapters:
// - threads:   ranks are threads of one process (tests, single-process multi-GPU programs);
// - endpoints: node-local processes meeting at a named pvmm endpoint, rank 0 as the root;
// - store:     a key-value store the caller provides (set, get-with-deadline: torch's c10d Store, etcd-like);
// - mpi:       an MPI communicator (pvmm/bootstrap_mpi.hpp, library pvmm::mpi, built where MPI is found).
// The interface is what MSCCL++'s Bootstrap and NVSHMEM's bootstrap plugins share;
// a C caller or a Python launcher implements the same calls.
//
// The contract lives in this class, not in each adapter: the public calls are non-virtual (as RMM's
// device_memory_resource: allocate calls do_allocate). They check the arguments, number the collectives, keep the
// broken state, turn std::bad_alloc into errc::out_of_memory, name the operation, and call the private do_*
// virtuals an adapter implements. An adapter reports what only it can see with the texts below (did_not_arrive,
// gave_bytes, aborted_by), so every adapter says the same thing for the same failure.
//
// Contract of every adapter (pinned by tests/team/bootstrap.cpp under each one, and under an adapter written there
// as a user would):
// - collectives are called by every rank in the same order; allgather takes the same byte count on every rank
//   (a different count is errc::team_mismatch on the ranks that can see it);
// - a rank that does not arrive by the deadline makes the others fail with errc::timeout naming the missing
//   ranks (where the adapter can know them) and the call; a rank known to be gone (its process exited, it
//   aborted) makes them fail with errc::peer_lost at once, not at the deadline;
// - after any call failed, the bootstrap is broken: every later call fails at once with the first error
//   (a collective half done cannot be resumed in step);
// - abort() may be called from any thread; calls in progress and later calls on every rank the adapter can
//   reach fail naming the aborting rank, with the errc of that rank's first failure (a rank that failed with
//   out_of_memory and aborted makes its peers fail with out_of_memory too, so every rank reports one outcome), or
//   errc::peer_lost where it aborted without one. A collective every rank had completed before the abort was seen
//   stays completed. The threads, endpoints and store adapters carry the errc; MPI cannot tell its peers (they
//   reach their deadline), and an adapter written by a user that does not carry it gives peer_lost;
// - an adapter call that throws (memory running out inside it) breaks the bootstrap and aborts it, as above;
// - send/receive: messages from one rank to another with the same tag arrive in order; a message with another tag
//   waits for the receive of its tag (never lost, never delivered to another tag); on the threads, endpoints and
//   store adapters two ranks may each send the other a message of any size before receiving (no send waits for
//   its peer's receive); on MPI a send past MPI's eager limit waits for the matching receive, as MPI_Send does;
// - memory running out in any call is errc::out_of_memory (the public calls catch std::bad_alloc), never an
//   exception.
//
// Threading: one rank's bootstrap is used by one thread at a time, except abort(), which any thread may call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pvmm/error.hpp>

namespace pvmm {

/// The moment a wait gives up. Every collective takes one, so a caller bounds a sequence of steps by one clock.
using deadline = std::chrono::steady_clock::time_point;
/// Now plus `timeout`, saturated: ipc::wait_forever, or any timeout past the clock's range, is deadline::max()
/// (never waits out); a negative one is now.
inline deadline deadline_in(std::chrono::milliseconds timeout) noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (timeout.count() <= 0) return now;
  // Compared in milliseconds: converting timeout to the clock's nanoseconds would overflow.
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(deadline::max() - now)) return deadline::max();
  return now + timeout;
}

/// The ranks of one job. No version number: nothing could read one, since a C++ adapter is checked by the compiler
/// against this class (the C interface's bootstrap struct, where callers are not compiled against it, carries one).
class bootstrap {
 public:
  /// The most ranks a group may have: every adapter refuses more with errc::invalid_argument.
  static constexpr int max_ranks = 65536;
  virtual ~bootstrap() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// Ranks with the same node() share a machine (and may share memory through POSIX fds). Any int; the team
  /// numbers nodes in order of their lowest rank.
  virtual int node() const noexcept = 0;
  /// This rank's index among the ranks of its node, and their count.
  virtual int local_rank() const noexcept = 0;
  virtual int local_size() const noexcept = 0;
  /// The adapter's name in errors ("threads").
  virtual const char* adapter() const noexcept { return "user"; }

  /// Every rank contributes `bytes` bytes at `mine`; `all` (size() * bytes) receives them in rank order.
  status allgather(const void* mine, std::size_t bytes, void* all, deadline until);
  /// Returns once every rank has called it.
  status barrier(deadline until);
  /// Point-to-point bytes, where the adapter has them (errc::not_supported otherwise). `tag` >= 0 matches a send
  /// to its receive; `bytes` must match the sender's count (errc::team_mismatch otherwise).
  status send(int peer, int tag, const void* data, std::size_t bytes, deadline until);
  status receive(int peer, int tag, void* data, std::size_t bytes, deadline until);
  /// Gives up: this rank's calls in progress and later ones fail, and the other ranks fail naming this rank, with
  /// the errc of this rank's first failure (errc::peer_lost where it had none).
  void abort() noexcept;

  /// The first failure, once a call failed or abort() was called (any thread).
  bool broken() const noexcept;

 protected:
  /// The standard texts, for adapters: "ranks 2, 3 did not arrive at collective 7 before the deadline"
  /// (errc::timeout), "rank 1 gave 8 bytes to collective 7, rank 0 gave 4" (errc::team_mismatch), "rank 1 aborted"
  /// (errc::peer_lost). The public call adds its name and arguments.
  static error did_not_arrive(const std::vector<int>& ranks, std::uint64_t collective);
  static error gave_bytes(int theirs, std::size_t their_bytes, std::uint64_t collective, int mine,
                          std::size_t my_bytes);
  static error aborted_by(int rank);
  /// What a peer's abort is on this rank: aborted_by(rank) for errc::peer_lost, else "rank 1 failed with
  /// out_of_memory and aborted" carrying `code` (an adapter checks a code read off the wire before passing it).
  static error failed_by(int rank, errc code);
  /// For do_abort(): the errc this rank's peers are told, its first failure's (errc::peer_lost where it had none).
  errc abort_code() const noexcept;
  /// How many collectives this rank completed (any thread): the first collective an abort interrupts.
  std::uint64_t collectives_completed() const noexcept { return completed_.load(); }

 private:
  /// Collective number `collective` (0, 1, ... on every rank in step); arguments checked, not broken.
  virtual status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                              deadline until) = 0;
  /// Default: an allgather of one byte.
  virtual status do_barrier(std::uint64_t collective, deadline until);
  /// Default: errc::not_supported.
  virtual status do_send(int peer, int tag, const void* data, std::size_t bytes, deadline until);
  virtual status do_receive(int peer, int tag, void* data, std::size_t bytes, deadline until);
  /// Tells the peers this rank gave up and wakes this rank's waits; called once, after broken() is set.
  virtual void do_abort() noexcept = 0;

  /// Breaks this bootstrap with `e` unless it is broken already and returns the first failure; with `tell`, aborts
  /// once (do_abort tells the peers that errc): abort(), and an adapter call that threw (it could not tell them).
  status fail_call(error e, bool tell) noexcept;
  /// send() and receive()'s one body: the arguments checked, a broken bootstrap refused, then do_send or do_receive.
  status point_to_point(bool sending, int peer, int tag, void* data, std::size_t bytes, deadline until);

  mutable std::mutex mutex_;
  std::optional<error> broken_;
  std::uint64_t started_ = 0;
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<bool> aborted_{false};
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
/// within `timeout`. Rank 0 holds size - 1 connections; every other rank holds one. Every rank also listens at
/// "<name>#p2p-<rank>" for send/receive, which go direct (one connection per peer and direction, made on first use;
/// the connect watches for aborts). A send of any size never waits on its peer's receive: while the socket is full
/// it reads what peers send this rank (kept for its receives), so ranks sending each other large messages at once
/// all go on. What messages for tags not yet received cost the receiver is bounded: at most 16384 of them and
/// 256 MiB, each counted as its bytes plus 1 KiB of overhead; past either, the receive fails with
/// errc::protocol_error naming the sender. A rank whose own listener could not be made still sends;
/// its receives fail at once with that listener's error.
/// Peers must run as the same user; a connection from another user, or one that sends no hello within 1 s, is
/// dropped. A rank that exits is errc::peer_lost on the others at their next call (its socket closes).
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
