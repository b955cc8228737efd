// The MPI adapter: a duplicate of the caller's communicator, non-blocking collectives tested until the deadline.
#include <pvmm/bootstrap_mpi.hpp>

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

class mpi_bootstrap final : public bootstrap {
 public:
  ~mpi_bootstrap() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // MPI freed every communicator already
    if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return node_; }
  int local_rank() const noexcept override { return local_rank_; }
  int local_size() const noexcept override { return local_size_; }
  const char* adapter() const noexcept override { return "mpi"; }

  static result<std::shared_ptr<bootstrap>> start(MPI_Comm comm, const bootstrap_options& options,
                                                  const detail::operation& op) {
    auto self = std::make_shared<mpi_bootstrap>();
    if (int rc = MPI_Comm_dup(comm, &self->comm_); rc != MPI_SUCCESS) return failure(op, "MPI_Comm_dup", rc);
    MPI_Comm_rank(self->comm_, &self->rank_);
    MPI_Comm_size(self->comm_, &self->size_);
    int rc = options.node >= 0
                 ? MPI_Comm_split(self->comm_, options.node, self->rank_, &self->local_)
                 : MPI_Comm_split_type(self->comm_, MPI_COMM_TYPE_SHARED, self->rank_, MPI_INFO_NULL, &self->local_);
    if (rc != MPI_SUCCESS) return failure(op, "MPI_Comm_split_type", rc);
    MPI_Comm_rank(self->local_, &self->local_rank_);
    MPI_Comm_size(self->local_, &self->local_size_);
    self->node_ = options.node >= 0 ? options.node : self->rank_;  // a node is named by its lowest rank
    if (options.node < 0)
      if (rc = MPI_Bcast(&self->node_, 1, MPI_INT, 0, self->local_); rc != MPI_SUCCESS)
        return failure(op, "MPI_Bcast", rc);
    return std::shared_ptr<bootstrap>(std::move(self));
  }

  status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t, deadline until) override {
    auto args = [&] { return fmt::format("rank={}, bytes={}", rank_, bytes); };
    const detail::operation op{"pvmm::bootstrap::allgather (mpi)", args};
    PVMM_TRY(broken_.check());
    if (bytes > static_cast<std::size_t>(INT32_MAX)) return op.fail(errc::invalid_argument, "over 2 GiB per rank");
    // The counts first: MPI does not check them, and a mismatch would be undefined behaviour.
    const std::uint64_t count = bytes;
    std::vector<std::uint64_t> counts(size_);
    MPI_Request r1;
    MPI_Iallgather(&count, 8, MPI_BYTE, counts.data(), 8, MPI_BYTE, comm_, &r1);
    PVMM_TRY(wait(r1, until, "MPI_Iallgather (byte counts)", op));
    for (int r = 0; r < size_; ++r)
      if (counts[r] != count)
        return broken_.set(op.fail(errc::team_mismatch,
                                   fmt::format("rank {} gave {} bytes, rank {} gave {}", r, counts[r], rank_, bytes)));
    if (bytes == 0) return {};
    MPI_Request r2;
    MPI_Iallgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comm_, &r2);
    return wait(r2, until, "MPI_Iallgather", op);
  }

  status do_barrier(std::uint64_t, deadline until) override {
    const detail::operation op{"pvmm::bootstrap::barrier (mpi)"};
    PVMM_TRY(broken_.check());
    MPI_Request r;
    MPI_Ibarrier(comm_, &r);
    return wait(r, until, "MPI_Ibarrier", op);
  }

  status do_send(int peer, int tag, const void* data, std::size_t bytes, deadline until) override {
    const detail::operation op{"pvmm::bootstrap::send (mpi)"};
    PVMM_TRY(broken_.check());
    MPI_Request r;
    MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &r);
    return wait(r, until, "MPI_Isend", op);
  }

  status do_receive(int peer, int tag, void* data, std::size_t bytes, deadline until) override {
    const detail::operation op{"pvmm::bootstrap::receive (mpi)"};
    PVMM_TRY(broken_.check());
    MPI_Request r;
    MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &r);
    return wait(r, until, "MPI_Irecv", op);
  }

  void do_abort() noexcept override {
    try {
      const detail::operation op{"pvmm::bootstrap::abort (mpi)"};
      broken_.set(op.fail(errc::peer_lost, fmt::format("rank {} aborted its bootstrap", rank_)));
    } catch (...) {  // formatting failed: nothing more to do
    }
  }

 private:
  static error failure(const detail::operation& op, const char* call, int code) {
    error e = op.fail(errc::backend_error, fmt::format("{} failed: {}", call, mpi_error_text(code)));
    e.native_name = call;
    e.native_code = code;
    return e;
  }

  // Tests `request` until it completes or `until` passes; backs off from spinning to 1 ms sleeps.
  status wait(MPI_Request& request, deadline until, const char* call, const detail::operation& op) {
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      int done = 0;
      if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
        return broken_.set(failure(op, call, rc));
      if (done) return {};
      if (std::chrono::steady_clock::now() >= until)
        return broken_.set(op.fail(errc::timeout, fmt::format("{} did not complete before the deadline: a rank has "
                                                              "not called it (MPI does not say which)",
                                                              call)));
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 0, node_ = 0, local_rank_ = 0, local_size_ = 0;
  detail::broken_state broken_;
};

}  // namespace

result<std::shared_ptr<bootstrap>> make_mpi_bootstrap(MPI_Comm comm, const bootstrap_options& options) {
  const detail::operation op{"pvmm::make_mpi_bootstrap"};
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return op.fail(errc::invalid_argument, "MPI is not initialised", "call MPI_Init first");
  return mpi_bootstrap::start(comm, options, op);
}

}  // namespace pvmm
