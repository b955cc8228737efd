// The sleeping allocator's host copies (pinned, pageable, file) and its copy engine (streams, events, staging ring).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "alloc/sleeping_state.hpp"

namespace pvmm::detail::sleeping {

result<std::shared_ptr<host_store>> host_store::create(const tag_policy& policy, std::size_t bytes, bool register_host,
                                                       const operation& op) {
  auto s = std::make_shared<host_store>();
  s->kind = policy.policy;
  s->bytes = bytes;
  if (policy.policy == sleep_policy::offload_pinned) {
    if (register_host) {
      if (auto ok = s->lock_fresh_pages(bytes, op); !ok) return ok.error();
    } else {  // no host registration here (a CUDA device without HOST_REGISTER_SUPPORTED): a page-locked allocation
      pinned_options o;
      o.mapped = false;  // the device reaches it by copies, never by pointer
      auto p = pinned_allocation::create(bytes, o);
      if (!p) return op.wrap(std::move(p).error());
      s->pinned = std::move(p).value();
    }
  } else if (policy.policy == sleep_policy::offload_pageable) {
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
      return op.fail(errc::out_of_memory, fmt::format("mapping {} bytes of host memory for the copies failed: {}",
                                                      bytes, std::strerror(errno)));
    s->pageable = m;
  } else if (policy.policy == sleep_policy::offload_file) {
    std::string dir = policy.file_directory;
    if (dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      dir = tmp && *tmp ? tmp : "/tmp";
    }
    std::string path = dir + "/pvmm-sleep-XXXXXX";
    const int fd = ::mkstemp(path.data());
    if (fd < 0)
      return op.fail(errc::system_error, fmt::format("creating a file in '{}' failed: {}", dir, std::strerror(errno)),
                     "set tag_policy::file_directory to a writable directory");
    ::unlink(path.c_str());  // nothing stays on disk, whatever happens to the process
    s->fd = fd;
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      return op.fail(errc::out_of_memory,
                     fmt::format("sizing the file in '{}' to {} bytes failed: {}", dir, bytes, std::strerror(errno)));
  }
  return s;
}

host_store::~host_store() {
  unlock_pages();
  if (pageable) ::munmap(pageable, bytes);
  if (fd >= 0) ::close(fd);
}

unsigned char* host_store::memory() const noexcept {
  if (locked) return locked;
  if (pinned.valid()) return static_cast<unsigned char*>(pinned.data());
  return static_cast<unsigned char*>(pageable);
}

std::size_t host_store::page_locked_bytes() const noexcept {
  return registration.valid() ? registration.size() : pinned.valid() ? pinned.size() : 0;
}

status host_store::write(std::size_t offset, const void* from, std::size_t size, const operation& op) {
  if (auto* m = memory()) {
    std::memcpy(m + offset, from, size);
    return {};
  }
  const auto* p = static_cast<const unsigned char*>(from);
  while (size) {
    const ssize_t n = ::pwrite(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return op.fail(errc::system_error, fmt::format("writing the host copy's file failed: {}", std::strerror(errno)));
    p += n, offset += static_cast<std::size_t>(n), size -= static_cast<std::size_t>(n);
  }
  return {};
}

status host_store::read(std::size_t offset, void* out, std::size_t size, const operation& op) const {
  if (auto* m = memory()) {
    std::memcpy(out, m + offset, size);
    return {};
  }
  auto* p = static_cast<unsigned char*>(out);
  while (size) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return op.fail(errc::system_error, fmt::format("reading the host copy's file failed: {}",
                                                     n == 0 ? "it is shorter than written" : std::strerror(errno)));
    p += n, offset += static_cast<std::size_t>(n), size -= static_cast<std::size_t>(n);
  }
  return {};
}

status copy_engine::ensure_streams(const operation& op) {
  while (streams.size() < stream_count) {
    auto s = stream::create(device);
    if (!s) return op.wrap(std::move(s).error());
    streams.push_back(std::move(s).value());
  }
  return {};
}

status copy_engine::ensure_ring(const operation& op) {
  if (ring.valid()) return {};
  pinned_options o;
  o.mapped = false;
  auto r = pinned_allocation::create(std::size_t{slots} * slot_bytes, o);
  if (!r) return op.wrap(std::move(r).error());
  slot_done.clear();
  for (unsigned i = 0; i < slots; ++i) {
    auto e = event::create(device);
    if (!e) return op.wrap(std::move(e).error());
    slot_done.push_back(std::move(e).value());
  }
  slot_used.assign(slots, false);
  ring = std::move(r).value();
  ring_bytes.store(ring.size(), std::memory_order_relaxed);
  return {};
}

result<event*> copy_engine::event_at(std::size_t i, const operation& op) {
  while (events.size() <= i) {
    auto e = event::create(device);
    if (!e) return op.wrap(std::move(e).error());
    events.push_back(std::move(e).value());
  }
  return &events[i];
}

status copy_engine::follow(stream_ref on, const operation& op) {
  auto e = event::create(on.device());
  if (!e) return op.wrap(std::move(e).error());
  if (auto ok = e->record(on); !ok) return op.wrap(std::move(ok).error());
  for (auto& s : streams)
    if (auto ok = s.wait(*e); !ok) return op.wrap(std::move(ok).error());
  return {};
}

result<event> copy_engine::join_into(stream_ref on, const operation& op) {
  for (auto& s : streams) {
    auto e = event::create(device);
    if (!e) return op.wrap(std::move(e).error());
    if (auto ok = e->record(s); !ok) return op.wrap(std::move(ok).error());
    if (auto ok = on.wait(*e); !ok) return op.wrap(std::move(ok).error());
  }
  auto done = event::create(on.device());
  if (!done) return op.wrap(std::move(done).error());
  if (auto ok = done->record(on); !ok) return op.wrap(std::move(ok).error());
  return done;
}

status copy_engine::synchronize_all(const operation& op) {
  status first;
  for (auto& s : streams)
    if (auto ok = s.synchronize(); !ok && first) first = op.wrap(std::move(ok).error());
  return first;
}

status copy_engine::wait_slot(unsigned slot, const operation& op) {
  if (!slot_used[slot]) return {};
  if (auto ok = slot_done[slot].synchronize(); !ok) return op.wrap(std::move(ok).error());
  slot_used[slot] = false;
  return {};
}

}  // namespace pvmm::detail::sleeping
