// Fuzz target: what a peer sends to share a pool - the pool message (ipc::receive_pool), the pool's file (its size,
// seals, access mode and header) and pointer export records (memory_pool::import_pointer) - built from the input,
// against a live exporting pool of the host backend and its import. The records may be pvmm's own (live, freed,
// reused), mutated, or anything. Invariants: no crash (an accepted import is read and written, and its peer then
// tries to truncate the file), no fd or pvmm object leaked, every failure an error value.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <pvmm/pvmm.hpp>

#include "common.hpp"

namespace {

struct world {  // built once: an exporting pool, its import, a stream
  pvmm::memory_pool pool, imported;
  pvmm::stream s;
  world() {
    pvmm::pool_properties p;
    p.exportable = pvmm::handle_types::posix_fd;
    p.max_size = std::size_t{64} << 20;  // a small file to copy and mutate
    pool = pvmm::memory_pool::create(p).value();
    imported = pvmm::memory_pool::import_posix_fd(pool.export_posix_fd().value(), 0).value();
    s = pvmm::stream::create(0).value();
  }
};

void pool_message(pvmm_fuzz::input in) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  const int fds[] = {0, sv[0]};
  const std::size_t count = in.byte() % 3;
  std::vector<std::uint8_t> payload(in.data, in.data + std::min<std::size_t>(in.size, 64));
  (void)pvmm::ipc::send_fds(sv[0], fds, count, payload.data(), payload.size());
  auto received = pvmm::ipc::receive_pool(sv[1], std::chrono::milliseconds(100));
  if (received) {
    auto pool = pvmm::memory_pool::import_posix_fd(*received, 0);  // a pipe end or stdin: refused, never a crash
    (void)pool;
  }
  ::close(sv[0]);
  ::close(sv[1]);
}

/// A copy of the pool's file as a peer could make it: its size, seals, access mode and header as the input says.
void pool_file(world& w, pvmm_fuzz::input in) {
  auto real = w.pool.export_posix_fd();
  if (!real) return;
  struct stat st {};
  if (::fstat(real->fd.get(), &st) != 0) return;
  const auto size = static_cast<std::size_t>(st.st_size), page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  pvmm::pool_export forged;
  forged.id = w.pool.id();
  const std::uint8_t how = in.byte();
  if (how % 4 == 0) {  // the real file, perhaps opened read-only
    const int flags = (how & 4) ? O_RDONLY : O_RDWR;
    forged.fd = pvmm::owned_fd(::open(("/proc/self/fd/" + std::to_string(real->fd.get())).c_str(), flags | O_CLOEXEC));
  } else {
    forged.fd = pvmm::owned_fd(::memfd_create("pvmm-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!forged.fd.valid()) return;
    const std::size_t sizes[] = {size, size - page, size + page, page, 0, size / 2, page * in.byte()};
    const std::size_t length = sizes[in.byte() % 7];
    if (::ftruncate(forged.fd.get(), static_cast<off_t>(length)) != 0) return;
    std::vector<std::uint8_t> header(page);
    if (::pread(real->fd.get(), header.data(), page, static_cast<off_t>(size - page)) != static_cast<ssize_t>(page))
      return;
    for (std::uint8_t n = in.byte() % 4; n > 0; --n) header[in.byte() % 24] = in.byte();  // magic, capacity, layout
    if (length >= page) (void)::pwrite(forged.fd.get(), header.data(), page, static_cast<off_t>(length - page));
    const int choices[] = {F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE, F_SEAL_FUTURE_WRITE, F_SEAL_SEAL};
    int seals = 0;
    const std::uint8_t which = in.byte();
    for (int i = 0; i < 5; ++i)
      if (which & (1 << i)) seals |= choices[i];
    if (seals != 0) (void)::fcntl(forged.fd.get(), F_ADD_SEALS, seals);
  }
  if (!forged.fd.valid()) return;
  auto imported = pvmm::memory_pool::import_posix_fd(forged, 0);
  if (!imported) return;
  // Accepted: the peer may now try to pull the file away; a live export must still be safe to import and touch.
  if (::ftruncate(forged.fd.get(), 0) == 0) pvmm_fuzz::finding("an accepted pool file could still be truncated");
  auto block = w.pool.allocate(4096, w.s);
  if (!block) return;
  (void)w.s.synchronize();
  if (auto record = block->export_pointer()) {
    auto held = imported->import_pointer(*record, w.s);
    if (held) {
      auto* p = static_cast<volatile std::uint8_t*>(held->data());
      p[0] = p[0];
      (void)held->free_async(w.s);
    }
  }
  (void)block->free_async(w.s);
  (void)w.s.synchronize();
}

void pointer_record(world& w, pvmm_fuzz::input in) {
  // A real record of a live allocation, then changed as the input says.
  auto block = w.pool.allocate(std::size_t{4096} * (1 + in.byte() % 64), w.s).value();
  (void)w.s.synchronize();
  auto record = block.export_pointer().value();
  const std::uint8_t how = in.byte();
  if (how & 1) {  // free it first: the record is stale
    (void)block.free_async(w.s);
    (void)w.s.synchronize();
    if (how & 2) {  // and reuse the block
      auto again = w.pool.allocate(record.size, w.s);
      (void)again;
    }
  }
  auto* bytes = reinterpret_cast<std::uint8_t*>(&record);
  for (std::uint8_t n = in.byte() % 8; n > 0 && in.size >= 2; --n) {
    const std::uint8_t at = in.byte() % sizeof record;
    bytes[at] = in.byte();
  }
  auto held = w.imported.import_pointer(record, w.s);
  if (held) {
    auto* p = static_cast<volatile std::uint8_t*>(held->data());
    p[0] = p[0];  // touching an accepted import must be safe
    p[held->size() - 1] = 1;
    (void)held->free_async(w.s);
    (void)w.s.synchronize();
  }
  if (block) (void)block.free_async(w.s);
  (void)w.s.synchronize();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static world w;
  pvmm_fuzz::input in{data, size};
  const auto fds = pvmm_fuzz::open_fd_count();
  const auto live = pvmm::query_live_objects();
  const std::uint8_t mode = in.byte() % 4;  // odd: a message; 0: a record; 2: a file
  if (mode & 1)
    pool_message(in);
  else if (mode == 0)
    pointer_record(w, in);
  else
    pool_file(w, in);
  if (pvmm_fuzz::open_fd_count() != fds) pvmm_fuzz::finding("an fd leaked");
  if (!(pvmm::query_live_objects() == live)) pvmm_fuzz::finding("a pvmm object leaked");
  return 0;
}
