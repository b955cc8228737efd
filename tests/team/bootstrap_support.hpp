// What the bootstrap tests share (bootstrap.cpp: the contract per adapter; bootstrap_bounds.cpp: bounds, strangers
// at the endpoints root, memory running out): a user-written adapter, groups per adapter, failure checks.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/endpoint.hpp>
#include <pvmm/ipc.hpp>

#include <doctest/doctest.h>

#include "sanitized.hpp"

namespace bootstrap_test {

using namespace std::chrono_literals;
using pvmm::errc;
using group = std::vector<std::shared_ptr<pvmm::bootstrap>>;

// An adapter as a user writes one: over a key-value store, with the base's standard texts.
class user_bootstrap final : public pvmm::bootstrap {
 public:
  user_bootstrap(pvmm::key_value_store s, int rank, int size) : s_(std::move(s)), rank_(rank), size_(size) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return 0; }
  int local_rank() const noexcept override { return rank_; }
  int local_size() const noexcept override { return size_; }

 private:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t id,
                            pvmm::deadline until) override {
    const auto* in = static_cast<const std::uint8_t*>(mine);
    if (auto ok = s_.set("c/" + std::to_string(id) + "/" + std::to_string(rank_), {in, in + bytes}); !ok) return ok;
    for (int r = 0; r < size_; ++r) {
      auto v = wait("c/" + std::to_string(id) + "/" + std::to_string(r), until);
      if (!v && v.code() == errc::timeout) return did_not_arrive({r}, id);
      if (!v) return std::move(v).error();
      if (v->size() != bytes) return gave_bytes(r, v->size(), id, rank_, bytes);
      if (bytes > 0) std::memcpy(static_cast<std::uint8_t*>(all) + r * bytes, v->data(), bytes);
    }
    return aborted();
  }
  pvmm::status do_send(int peer, int tag, const void* data, std::size_t bytes, pvmm::deadline) override {
    const auto* in = static_cast<const std::uint8_t*>(data);
    return s_.set(p2p(rank_, peer, tag, sent_[{peer, tag}]++), {in, in + bytes});
  }
  pvmm::status do_receive(int peer, int tag, void* data, std::size_t bytes, pvmm::deadline until) override {
    auto v = wait(p2p(peer, rank_, tag, received_[{peer, tag}]), until);
    if (!v) return std::move(v).error();
    if (v->size() != bytes) {
      pvmm::error e;
      e.code = errc::team_mismatch;
      e.detail = "rank " + std::to_string(peer) + " sent " + std::to_string(v->size()) + " bytes";
      return e;
    }
    ++received_[{peer, tag}];
    if (bytes > 0) std::memcpy(data, v->data(), bytes);
    return {};
  }
  void do_abort() noexcept override {
    try {
      (void)s_.set("abort", {static_cast<std::uint8_t>(rank_)});
    } catch (...) {
    }
  }
  pvmm::status aborted() {
    if (auto a = s_.get("abort", std::chrono::steady_clock::now()); a && a->size() == 1) return aborted_by((*a)[0]);
    return {};
  }
  pvmm::result<std::vector<std::uint8_t>> wait(const std::string& key, pvmm::deadline until) {
    for (;;) {
      auto slice = std::min(until, pvmm::deadline_in(20ms));
      auto v = s_.get(key, slice);
      if (v || v.code() != errc::timeout || slice == until) return v;
      if (auto a = aborted(); !a) return std::move(a).error();
    }
  }
  static std::string p2p(int from, int to, int tag, std::uint64_t n) {
    return "p/" + std::to_string(from) + "/" + std::to_string(to) + "/" + std::to_string(tag) + "/" + std::to_string(n);
  }
  pvmm::key_value_store s_;
  int rank_, size_;
  std::map<std::pair<int, int>, std::uint64_t> sent_, received_;
};

inline const char* const adapters[] = {"threads", "endpoints", "store", "user"};

inline std::string unique_name(const std::string& what) {
  static std::atomic<int> n{0};
  return "pvmm-bootstrap-test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

// Runs f(rank) on one thread per rank.
inline void on_every_rank(int n, const std::function<void(int)>& f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(f, r);
  for (auto& t : threads) t.join();
}

using duration = std::chrono::steady_clock::duration;

// on_every_rank, timing each rank: element r is how long f(r) ran.
inline std::vector<duration> on_every_rank_timed(int n, const std::function<void(int)>& f) {
  std::vector<duration> took(static_cast<std::size_t>(n));
  on_every_rank(n, [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    f(r);
    took[static_cast<std::size_t>(r)] = std::chrono::steady_clock::now() - start;
  });
  return took;
}

// A group of `n` ranks; endpoints meet at `name` (a fresh one when empty); the stores are fresh (keys are never
// reused).
inline group make_group(const std::string& adapter, int n, std::string name = {}) {
  if (adapter == "threads") return pvmm::make_thread_bootstraps(n).value();
  group g(n);
  std::mutex m;
  if (name.empty()) name = unique_name("group");
  auto store = pvmm::make_memory_store();
  on_every_rank(n, [&](int r) {
    std::shared_ptr<pvmm::bootstrap> b;
    if (adapter == "endpoints") b = pvmm::make_endpoint_bootstrap(name, r, n, 10s).value();
    if (adapter == "store") b = pvmm::make_store_bootstrap(store, name, r, n, 10s).value();
    if (adapter == "user") b = std::make_shared<user_bootstrap>(store, r, n);
    std::lock_guard<std::mutex> lock(m);
    g[r] = b;
  });
  return g;
}

// Runs body(adapter, a group of `n` ranks) once per adapter, the adapter named in the failures' messages.
inline void for_each_adapter(int n, const std::function<void(const char* adapter, group& g)>& body) {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, n);
    body(a, g);
  }
}

inline std::string text(const pvmm::status& s) { return s ? "success" : s.error().message(); }
inline bool names(const pvmm::status& s, const std::string& what) {
  return !s && s.error().message().find(what) != std::string::npos;
}

// Ranks 0 .. count - 1 failed with `code`, naming `named`; each within 3 s where `took` is given.
inline void expect_failed(const std::vector<pvmm::status>& got, int count, errc code, const std::string& named,
                          const std::vector<duration>& took = {}) {
  for (int r = 0; r < count; ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(got[r].code() == code, text(got[r]));
    CHECK_MESSAGE(names(got[r], named), text(got[r]));
    if (!took.empty()) CHECK(took[r] < 3s);
  }
}

}  // namespace bootstrap_test
