// The bootstrap contract (the public calls around the adapters' do_* virtuals) and the helpers the adapters share.
#include <unistd.h>

#include <cstddef>
#include <fstream>

#include <pvmm/bootstrap.hpp>
#include <pvmm/ipc.hpp>

#include <map>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/no_throw.hpp"
#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"

namespace pvmm {
namespace {

// Runs an adapter's call under the library's one no-throw edge (core/no_throw.hpp): bad_alloc and length_error (a
// SIZE_MAX byte count) are out_of_memory; anything else an adapter written by a user throws is backend_error.
template <class Call>
status guard(const detail::operation& op, Call&& call) noexcept {
  return detail::catch_all(
      std::forward<Call>(call),
      [&](const detail::caught_exception& c) -> status {
        if (c.carried != nullptr) return op.wrap(*c.carried);
        if (c.code == errc::out_of_memory)
          return op.fail(errc::out_of_memory, c.what ? fmt::format("memory ran out in the bootstrap ({})", c.what)
                                                     : std::string("memory ran out in the bootstrap"));
        return op.fail(errc::backend_error, c.what ? fmt::format("the bootstrap adapter threw: {}", c.what)
                                                   : std::string("the bootstrap adapter threw"));
      },
      []() noexcept -> status { return detail::bare_error(errc::out_of_memory); });
}

// An adapter's do_* call under guard(): `threw` says whether its failure was an exception it let out.
template <class Call>
status adapter_call(const detail::operation& op, bool& threw, Call&& call) noexcept {
  threw = true;
  return guard(op, [&]() -> status {
    auto done = call();
    threw = false;
    return done;
  });
}

}  // namespace

error bootstrap::did_not_arrive(const std::vector<int>& ranks, std::uint64_t collective) {
  error e;
  e.code = errc::timeout;
  e.detail =
      fmt::format("{} did not arrive at collective {} before the deadline", detail::rank_list(ranks), collective);
  return e;
}

error bootstrap::gave_bytes(int theirs, std::size_t their_bytes, std::uint64_t collective, int mine,
                            std::size_t my_bytes) {
  error e;
  e.code = errc::team_mismatch;
  e.detail = fmt::format("rank {} gave {} bytes to collective {}, rank {} gave {}", theirs, their_bytes, collective,
                         mine, my_bytes);
  return e;
}

error bootstrap::aborted_by(int r) {
  error e;
  e.code = errc::peer_lost;
  e.detail = fmt::format("rank {} aborted", r);
  return e;
}

error bootstrap::failed_by(int r, errc code) {
  if (code == errc::peer_lost) return aborted_by(r);
  error e;
  e.code = code;
  e.detail = fmt::format("rank {} failed with {} and aborted", r, to_string(code));
  return e;
}

errc bootstrap::abort_code() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_ ? broken_->code : errc::peer_lost;
}

status bootstrap::fail_call(error e, bool tell) noexcept {
  errc code = e.code;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_) broken_ = std::move(e);
    code = broken_->code;
  }
  if (tell && !aborted_.exchange(true)) do_abort();  // after the record: do_abort tells its errc
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    return *broken_;
  } catch (...) {  // memory ran out for the copy
    return detail::bare_error(code);
  }
}

bool bootstrap::broken() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_.has_value();
}

status bootstrap::allgather(const void* mine, std::size_t bytes, void* all, deadline until) {
  const std::uint64_t id = started_;
  auto args = [&] { return fmt::format("adapter={}, rank={}, bytes={}, collective={}", adapter(), rank(), bytes, id); };
  const detail::operation op{"pvmm::bootstrap::allgather", args};
  bool threw = false;
  auto done = adapter_call(op, threw, [&]() -> status {
    if (bytes > 0 && (!mine || !all)) return op.fail(errc::invalid_argument, "mine and all must not be null");
    // No memory holds more than PTRDIFF_MAX bytes (a pointer plus more would overflow): out_of_memory, as a
    // SIZE_MAX byte count is everywhere.
    if (size() > 0 && bytes > static_cast<std::size_t>(PTRDIFF_MAX) / static_cast<std::size_t>(size()))
      return op.fail(errc::out_of_memory,
                     fmt::format("{} ranks of {} bytes is more than any memory holds", size(), bytes));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (broken_) return *broken_;
    }
    ++started_;
    auto gathered = do_allgather(mine, bytes, all, id, until);
    if (!gathered) return fail_call(op.wrap(std::move(gathered).error()), false);
    ++completed_;
    return {};
  });
  return done || !threw ? done : fail_call(std::move(done).error(), true);
}

status bootstrap::barrier(deadline until) {
  const std::uint64_t id = started_;
  auto args = [&] { return fmt::format("adapter={}, rank={}, collective={}", adapter(), rank(), id); };
  const detail::operation op{"pvmm::bootstrap::barrier", args};
  bool threw = false;
  auto done = adapter_call(op, threw, [&]() -> status {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (broken_) return *broken_;
    }
    ++started_;
    auto met = do_barrier(id, until);
    if (!met) return fail_call(op.wrap(std::move(met).error()), false);
    ++completed_;
    return {};
  });
  return done || !threw ? done : fail_call(std::move(done).error(), true);
}

status bootstrap::do_barrier(std::uint64_t collective, deadline until) {
  std::uint8_t one = 1;
  std::vector<std::uint8_t> all(static_cast<std::size_t>(size()));
  return do_allgather(&one, 1, all.data(), collective, until);
}

namespace {

status check_point_to_point(const bootstrap& b, int peer, int tag, const void* data, std::size_t bytes,
                            const detail::operation& op) {
  if (peer < 0 || peer >= b.size())
    return op.fail(errc::invalid_argument, fmt::format("rank {} is not one of {} ranks", peer, b.size()));
  if (peer == b.rank()) return op.fail(errc::invalid_argument, "a rank does not send to itself");
  if (tag < 0) return op.fail(errc::invalid_argument, "the tag is negative");
  if (bytes > 0 && !data) return op.fail(errc::invalid_argument, "data must not be null");
  if (bytes > static_cast<std::size_t>(PTRDIFF_MAX))
    return op.fail(errc::out_of_memory, fmt::format("{} bytes is more than any memory holds", bytes));
  return {};
}

}  // namespace

status bootstrap::send(int peer, int tag, const void* data, std::size_t bytes, deadline until) {
  return point_to_point(true, peer, tag, const_cast<void*>(data), bytes, until);  // only read when sending
}

status bootstrap::receive(int peer, int tag, void* data, std::size_t bytes, deadline until) {
  return point_to_point(false, peer, tag, data, bytes, until);
}

status bootstrap::point_to_point(bool sending, int peer, int tag, void* data, std::size_t bytes, deadline until) {
  auto args = [&] {
    return fmt::format("adapter={}, rank={}, peer={}, tag={}, bytes={}", adapter(), rank(), peer, tag, bytes);
  };
  const detail::operation op{sending ? "pvmm::bootstrap::send" : "pvmm::bootstrap::receive", args};
  bool threw = false;
  auto done = adapter_call(op, threw, [&]() -> status {
    PVMM_TRY(check_point_to_point(*this, peer, tag, data, bytes, op));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (broken_) return *broken_;
    }
    auto moved = sending ? do_send(peer, tag, data, bytes, until) : do_receive(peer, tag, data, bytes, until);
    if (!moved) return fail_call(op.wrap(std::move(moved).error()), false);
    return {};
  });
  return done || !threw ? done : fail_call(std::move(done).error(), true);
}

status bootstrap::do_send(int, int, const void*, std::size_t, deadline) {
  const detail::operation op{"pvmm::bootstrap::send"};
  return op.fail(errc::not_supported, "this bootstrap adapter has no point-to-point messages",
                 "use allgather, or an adapter that has send/receive (threads, endpoints, store, mpi)");
}

status bootstrap::do_receive(int, int, void*, std::size_t, deadline) {
  const detail::operation op{"pvmm::bootstrap::receive"};
  return op.fail(errc::not_supported, "this bootstrap adapter has no point-to-point messages",
                 "use allgather, or an adapter that has send/receive (threads, endpoints, store, mpi)");
}

void bootstrap::abort() noexcept {
  error why = detail::bare_error(errc::peer_lost);  // memory running out for the text: still broken
  try {
    auto args = [&] { return fmt::format("adapter={}, rank={}", adapter(), rank()); };
    const detail::operation op{"pvmm::bootstrap::abort", args};
    why = op.wrap(aborted_by(rank()));
  } catch (...) {
  }
  (void)fail_call(std::move(why), true);  // the first failure stays; do_abort runs once
}

namespace detail {

status check_rank_arguments(int rank, int size, std::chrono::milliseconds timeout, const operation& op) {
  if (size <= 0 || size > bootstrap::max_ranks)
    return op.fail(errc::invalid_argument,
                   fmt::format("a group has 1 to {} ranks, not {}", bootstrap::max_ranks, size));
  if (rank < 0 || rank >= size)
    return op.fail(errc::invalid_argument, fmt::format("rank {} is not one of {} ranks", rank, size));
  if (timeout.count() < 0) return op.fail(errc::invalid_argument, "the timeout is negative");
  return {};
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

deadline later(deadline until, std::chrono::milliseconds by) noexcept {
  if (until >= deadline::max() - std::chrono::duration_cast<deadline::duration>(by)) return deadline::max();
  return until + by;
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
  std::map<std::uint64_t, int> lowest;  // a node is numbered by its lowest rank
  std::vector<int> nodes(key_of_rank.size());
  for (std::size_t r = 0; r < key_of_rank.size(); ++r)
    nodes[r] = lowest.emplace(key_of_rank[r], static_cast<int>(r)).first->second;
  return nodes;
}

std::vector<node_position> positions_in_nodes(const std::vector<int>& node_of_rank) {
  std::map<int, int> seen;  // node -> ranks of it so far
  std::vector<node_position> p(node_of_rank.size());
  for (std::size_t r = 0; r < node_of_rank.size(); ++r) p[r].local_rank = seen[node_of_rank[r]]++;
  for (std::size_t r = 0; r < node_of_rank.size(); ++r) p[r].local_size = seen[node_of_rank[r]];
  return p;
}

}  // namespace detail
}  // namespace pvmm
