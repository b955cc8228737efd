// The MPI adapter: a duplicate of the caller's communicator that returns MPI's errors, and every wait a
// non-blocking MPI call tested in slices until the deadline (creation included).
#include <pvmm/bootstrap_mpi.hpp>

#include <climits>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"

namespace pvmm {
namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

error mpi_failure(const detail::operation& op, const std::string& call, int code) {
  int kind = MPI_ERR_OTHER;
  MPI_Error_class(code, &kind);
  const errc portable = kind == MPI_ERR_TRUNCATE ? errc::team_mismatch : errc::backend_error;
  error e = op.fail(portable, fmt::format("{} failed: {}", call, mpi_error_text(code)));
  e.native_name = call;
  e.native_code = code;
  return e;
}

/// Runs `body`, turning an exception (memory ran out for a buffer or a message) into an error: none leaves pvmm.
template <class T, class F>
T no_throw(const detail::operation& op, F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    try {
      return op.fail(errc::out_of_memory, "memory ran out for a buffer or a message");
    } catch (...) {
      error e;
      e.code = errc::out_of_memory;
      return e;
    }
  }
}

// A non-blocking MPI call and the memory it reads and writes (pvmm's own copies, never the caller's buffers).
struct in_flight {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Status status{};
  MPI_Comm made = MPI_COMM_NULL;  // MPI_Comm_idup writes it at completion
  std::vector<std::uint8_t> out, in;
};

// MPI forbids cancelling or freeing a collective's request, and a late rank may still complete one that missed
// its deadline, writing into its buffers: those are kept, reachable, for the life of the process.
void keep_for_process_life(std::unique_ptr<in_flight> f) noexcept {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::unique_ptr<in_flight>>();  // never destroyed: MPI may write at exit
  std::lock_guard<std::mutex> lock(mutex);
  try {
    kept->push_back(std::move(f));
  } catch (...) {
    (void)f.release();  // no memory to record it: leaked rather than freed under MPI
  }
}

class mpi_bootstrap final : public detail::placed_bootstrap {
 public:
  ~mpi_bootstrap() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // After MPI_Finalize MPI freed it already; with a call left pending it stays, as that call's buffers do.
    if (!finalized && !left_pending_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  const char* adapter() const noexcept override { return "mpi"; }

 private:
  // The contract's checks, numbering and broken state are the base's (pvmm::bootstrap); these only forward.
  status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t, deadline until) override {
    return gather_all(mine, bytes, all, until);
  }
  status do_barrier(std::uint64_t, deadline until) override { return wait_for_all(until); }
  status do_send(int peer, int tag, const void* data, std::size_t bytes, deadline until) override {
    return send_to(peer, tag, data, bytes, until);
  }
  status do_receive(int peer, int tag, void* data, std::size_t bytes, deadline until) override {
    return receive_from(peer, tag, data, bytes, until);
  }
  // The base marked this bootstrap broken before calling this; a wait in progress sees it within a slice (MPI
  // cannot cancel a collective, so the request is left pending with its buffers).
  void do_abort() noexcept override {}

 public:
  /// Duplicates `comm` (MPI_Comm_idup), then finds the nodes (one allgather), all by `until`.
  status start(MPI_Comm comm, const bootstrap_options& options, deadline until, const detail::operation& op) {
    MPI_Comm_size(comm, &size_);
    MPI_Comm_rank(comm, &rank_);
    if (size_ > max_ranks)  // every rank sees the same size, so every rank refuses alike
      return op.fail(errc::invalid_argument,
                     fmt::format("the communicator has {} ranks; a bootstrap has at most {}", size_, max_ranks));
    auto dup = std::make_unique<in_flight>();
    PVMM_TRY(post(MPI_Comm_idup(comm, &dup->made, &dup->request), "MPI_Comm_idup", op));
    PVMM_TRY(wait(dup, until, "MPI_Comm_idup", op));
    comm_ = dup->made;
    if (int rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN); rc != MPI_SUCCESS)
      return mpi_failure(op, "MPI_Comm_set_errhandler", rc);
    std::vector<std::uint64_t> keys(static_cast<std::size_t>(size_));
    const std::uint64_t mine = detail::node_key(options.node);
    if (auto found = gather_all(&mine, sizeof mine, keys.data(), until); !found) return op.wrap(found.error());
    nodes_ = detail::number_nodes(keys);
    place_ranks();
    return {};
  }

 private:
  status gather_all(const void* mine, std::size_t bytes, void* all, deadline until) {
    const std::uint64_t call = calls_;
    auto args = [&] { return fmt::format("rank={}, bytes={}, call={}", rank_, bytes, call); };
    const detail::operation op{"pvmm::bootstrap::allgather (mpi)", args};
    // Null pointers, the broken state and exceptions are the base's (pvmm::bootstrap); only MPI's int counts here.
    if (bytes > static_cast<std::size_t>(INT_MAX)) return op.fail(errc::invalid_argument, "over 2 GiB per rank");
    // The counts first: MPI does not check them, and a mismatch would be undefined behaviour.
    PVMM_TRY(check_counts(bytes, until, op));
    if (bytes == 0) return {};
    auto f = std::make_unique<in_flight>();
    f->out.assign(static_cast<const std::uint8_t*>(mine), static_cast<const std::uint8_t*>(mine) + bytes);
    f->in.resize(bytes * static_cast<std::size_t>(size_));
    const int n = static_cast<int>(bytes);
    PVMM_TRY(post(MPI_Iallgather(f->out.data(), n, MPI_BYTE, f->in.data(), n, MPI_BYTE, comm_, &f->request),
                  "MPI_Iallgather", op));
    PVMM_TRY(wait(f, until, "MPI_Iallgather", op));
    std::memcpy(all, f->in.data(), f->in.size());
    return {};
  }

  status check_counts(std::size_t bytes, deadline until, const detail::operation& op) {
    auto f = std::make_unique<in_flight>();
    const std::uint64_t count = bytes;
    f->in.resize(sizeof count * static_cast<std::size_t>(size_));
    f->out.resize(sizeof count);
    std::memcpy(f->out.data(), &count, sizeof count);
    PVMM_TRY(post(
        MPI_Iallgather(f->out.data(), sizeof count, MPI_BYTE, f->in.data(), sizeof count, MPI_BYTE, comm_, &f->request),
        "MPI_Iallgather (byte counts)", op));
    PVMM_TRY(wait(f, until, "MPI_Iallgather (byte counts)", op));
    std::vector<int> differ;
    std::uint64_t theirs = 0;
    for (int r = 0; r < size_; ++r) {
      std::uint64_t c = 0;
      std::memcpy(&c, f->in.data() + sizeof c * static_cast<std::size_t>(r), sizeof c);
      if (c == count) continue;
      differ.push_back(r);
      theirs = c;
    }
    if (differ.empty()) return {};
    return op.fail(errc::team_mismatch, fmt::format("{} gave {} bytes (the last of them), rank {} gave {}",
                                                    detail::rank_list(differ), theirs, rank_, bytes));
  }

  status wait_for_all(deadline until) {
    const std::uint64_t call = calls_;
    auto args = [&] { return fmt::format("rank={}, call={}", rank_, call); };
    const detail::operation op{"pvmm::bootstrap::barrier (mpi)", args};
    auto f = std::make_unique<in_flight>();
    PVMM_TRY(post(MPI_Ibarrier(comm_, &f->request), "MPI_Ibarrier", op));
    return wait(f, until, "MPI_Ibarrier", op);
  }

  status send_to(int peer, int tag, const void* data, std::size_t bytes, deadline until) {
    auto args = [&] { return fmt::format("rank={}, peer={}, bytes={}", rank_, peer, bytes); };
    const detail::operation op{"pvmm::bootstrap::send (mpi)", args};
    PVMM_TRY(check_mpi_limits(tag, bytes, op));
    auto f = std::make_unique<in_flight>();
    f->out.assign(static_cast<const std::uint8_t*>(data), static_cast<const std::uint8_t*>(data) + bytes);
    PVMM_TRY(post(MPI_Isend(f->out.data(), static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &f->request),
                  "MPI_Isend", op));
    return wait(f, until, fmt::format("MPI_Isend to rank {}", peer), op);
  }

  status receive_from(int peer, int tag, void* data, std::size_t bytes, deadline until) {
    auto args = [&] { return fmt::format("rank={}, peer={}, bytes={}", rank_, peer, bytes); };
    const detail::operation op{"pvmm::bootstrap::receive (mpi)", args};
    PVMM_TRY(check_mpi_limits(tag, bytes, op));
    auto f = std::make_unique<in_flight>();
    f->in.resize(bytes);
    PVMM_TRY(post(MPI_Irecv(f->in.data(), static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &f->request),
                  "MPI_Irecv", op));
    PVMM_TRY(wait(f, until, fmt::format("MPI_Irecv from rank {}", peer), op));
    int got = 0;
    MPI_Get_count(&f->status, MPI_BYTE, &got);
    if (got != static_cast<int>(bytes))
      return op.fail(errc::team_mismatch,
                     fmt::format("rank {} sent {} bytes, rank {} expected {}", peer, got, rank_, bytes));
    std::memcpy(data, f->in.data(), bytes);
    return {};
  }

  /// What MPI limits beyond the base's checks (peer, null data): its tag bound and int counts.
  status check_mpi_limits(int tag, std::size_t bytes, const detail::operation& op) const {
    int* tag_bound = nullptr;  // MPI guarantees at least 32767; the library may allow more
    int found = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_bound, &found);
    const int largest = found && tag_bound ? *tag_bound : 32767;
    if (tag > largest)
      return op.fail(errc::invalid_argument, fmt::format("tag {} is above this MPI's MPI_TAG_UB ({})", tag, largest));
    if (bytes > static_cast<std::size_t>(INT_MAX)) return op.fail(errc::invalid_argument, "over 2 GiB");
    return {};
  }

  /// A posting call's return code: a failure breaks the bootstrap (the ranks are out of step).
  status post(int rc, const char* call, const detail::operation& op) {
    ++calls_;
    if (rc != MPI_SUCCESS) return mpi_failure(op, call, rc);
    return {};
  }

  /// Tests `f` in slices (spinning, then sleeping up to 1 ms) until it completes, `until` passes or this rank
  /// aborts. A request left pending is kept with its buffers (keep_for_process_life).
  status wait(std::unique_ptr<in_flight>& f, deadline until, const std::string& call, const detail::operation& op) {
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      int done = 0;
      if (int rc = MPI_Test(&f->request, &done, &f->status); rc != MPI_SUCCESS) return mpi_failure(op, call, rc);
      if (done) return {};
      if (broken()) {  // abort() from another thread (the base marked it first): its error is the one returned
        leave_pending(std::move(f));
        return op.fail(errc::peer_lost, "this rank aborted while waiting");
      }
      if (std::chrono::steady_clock::now() >= until) {
        leave_pending(std::move(f));
        return op.fail(errc::timeout, late_text(call));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
  }

  void leave_pending(std::unique_ptr<in_flight> f) noexcept {
    left_pending_ = true;
    keep_for_process_life(std::move(f));
  }

  std::string late_text(const std::string& call) const {
    if (call.find(" rank ") != std::string::npos) return fmt::format("{} did not complete before the deadline", call);
    return fmt::format(
        "of {} ranks, some did not arrive: {} (call {} of this bootstrap) did not complete before "
        "the deadline; MPI does not say which ranks are missing",
        size_, call, calls_ - 1);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::uint64_t calls_ = 0;    // calls posted, so ranks can compare where each stopped
  bool left_pending_ = false;  // a call missed its deadline or was aborted: MPI may still use comm_
};

/// MPI_COMM_NULL, an intercommunicator, an MPI not (or no longer) initialised: each would raise an error on a
/// handler pvmm does not own (MPI's default ends the job), so each is refused first.
status check_usable(MPI_Comm comm, std::chrono::milliseconds timeout, const detail::operation& op) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized) return op.fail(errc::invalid_argument, "MPI is not initialised", "call MPI_Init first");
  if (finalized) return op.fail(errc::invalid_argument, "MPI is finalized", "make bootstraps before MPI_Finalize");
  if (comm == MPI_COMM_NULL) return op.fail(errc::invalid_argument, "the communicator is MPI_COMM_NULL");
  int inter = 0;
  MPI_Comm_test_inter(comm, &inter);
  if (inter) return op.fail(errc::invalid_argument, "the communicator is an intercommunicator");
  if (timeout.count() < 0) return op.fail(errc::invalid_argument, "the timeout is negative");
  return {};
}

}  // namespace

result<std::shared_ptr<bootstrap>> make_mpi_bootstrap(MPI_Comm comm, std::chrono::milliseconds timeout,
                                                      const bootstrap_options& options) {
  auto args = [&] { return fmt::format("timeout={} ms, node={}", timeout.count(), options.node); };
  const detail::operation op{"pvmm::make_mpi_bootstrap", args};
  return no_throw<result<std::shared_ptr<bootstrap>>>(op, [&]() -> result<std::shared_ptr<bootstrap>> {
    const deadline until = deadline_in(timeout);
    PVMM_TRY(check_usable(comm, timeout, op));
    auto self = std::make_shared<mpi_bootstrap>();
    PVMM_TRY(self->start(comm, options, until, op));
    return std::shared_ptr<bootstrap>(std::move(self));
  });
}

result<std::shared_ptr<bootstrap>> make_mpi_bootstrap(MPI_Comm comm, const bootstrap_options& options) {
  return make_mpi_bootstrap(comm, default_mpi_bootstrap_timeout, options);
}

}  // namespace pvmm
