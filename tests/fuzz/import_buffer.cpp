// Fuzz target: import_buffer with a fuzzed descriptor and fds of every kind a peer could send: pvmm's own
// sealed exports, unsealed or half-sealed memfds (which a peer could truncate), memfds of the wrong size or
// name, pipes, /dev/null and fd numbers that are closed. Invariants: no crash — including no SIGBUS when the
// imported memory is touched after the peer truncates what it can —, no fd or pvmm object leaked, and
// every failure is an error value.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include <pvmm/pvmm.hpp>

#include "common.hpp"

namespace {

std::size_t page() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

int make_memfd(const char* name, std::size_t size, int seals) {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0 || (seals && ::fcntl(fd, F_ADD_SEALS, seals) != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// One fd of the kind the input asks for; a negative number stands for one that is not open.
int make_fd(std::uint8_t kind, std::uint8_t pages, std::vector<pvmm::physical_allocation>& keep) {
  const std::size_t size = (pages % 4 + 1) * page();
  switch (kind % 7) {
    case 0: {  // pvmm's own export
      pvmm::allocation_properties p;
      p.exportable = pvmm::handle_types::posix_fd;
      auto memory = pvmm::physical_allocation::create(size, p);
      if (!memory) return -1;
      auto fd = memory->export_posix_fd();
      keep.push_back(std::move(*memory));
      return fd ? fd->detach() : -1;
    }
    case 1:
      return make_memfd("pvmm-d0-x1", size, 0);
    case 2:
      return make_memfd("pvmm-d0-x1", size, F_SEAL_SHRINK);
    case 3:
      return make_memfd("pvmm-n77-x1", size, F_SEAL_SHRINK | F_SEAL_GROW);
    case 4: {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) return -1;
      ::close(p[1]);
      return p[0];
    }
    case 5:
      return ::open("/dev/null", O_RDWR | O_CLOEXEC);
    default:  // a number that is not an open fd (never closed by the target: it owns nothing)
      return -2 - pages;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pvmm_fuzz::input in{data, size};
  const std::size_t before_fds = pvmm_fuzz::open_fd_count();
  const auto before_live = pvmm::query_live_objects();
  {
    std::vector<pvmm::physical_allocation> keep;  // the exporters' side of pvmm's own exports
    std::vector<int> fds;
    const std::size_t count = in.byte() % 5;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint8_t kind = in.byte();
      fds.push_back(make_fd(kind, in.byte(), keep));
    }
    auto d = pvmm::buffer_descriptor::parse(in.data, in.size, fds.size());
    if (d) {
      auto imported =
          pvmm::import_buffer(*d, fds.data(), fds.size(), {{pvmm::location::device(0), pvmm::access::read_write}});
      // A peer truncates whatever it still can, then the importer touches every page it mapped.
      for (int fd : fds)
        if (fd >= 0) (void)::ftruncate(fd, 0);
      if (imported) {
        auto* bytes = static_cast<volatile std::uint8_t*>(imported->data());
        for (std::size_t off = 0; off < imported->size(); off += page())
          bytes[off] = static_cast<std::uint8_t>(bytes[off] + 1);
      }
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  if (pvmm_fuzz::open_fd_count() != before_fds) pvmm_fuzz::finding("fds leaked");
  if (!(pvmm::query_live_objects() == before_live)) pvmm_fuzz::finding("pvmm objects leaked");
  return 0;
}
