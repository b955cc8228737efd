// Bootstraps over Python objects (team_bootstrap.hpp).
#include "team_bootstrap.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace pvmm_py {

using namespace nb::literals;

namespace {

pvmm::error store_error(const char* what, const std::string& key, nb::python_error& e) {
  return make_error(pvmm::errc::timeout, what, std::string("the store raised: ") + e.what(), "key=" + key,
                    "a store's get must block until the key exists (bounded by its own timeout)");
}

/// What a callback returns to pvmm once it kept a Python exception (raised as itself when the call returns) or the
/// call was cancelled (a signal): pvmm stops at once, and the team aborts (peers get peer_lost naming this rank).
pvmm::error callback_raised(const char* what) {
  return make_error(pvmm::errc::peer_lost, what, "a Python callback raised, or a signal arrived, on this rank", {},
                    "the binding raises the callback's exception (or KeyboardInterrupt) itself");
}

pvmm::error key_missing(const std::string& key) {
  return make_error(pvmm::errc::timeout, "store.get", "the key did not appear before the deadline", "key=" + key);
}

}  // namespace

pvmm::key_value_store python_store(nb::object store, std::shared_ptr<callback_errors> errors) {
  auto holder = std::shared_ptr<nb::object>(new nb::object(std::move(store)), [](nb::object* o) {
    nb::gil_scoped_acquire gil;
    delete o;
  });
  pvmm::key_value_store kv;
  kv.set = [holder, errors](const std::string& key, const std::vector<std::uint8_t>& value) -> pvmm::status {
    nb::gil_scoped_acquire gil;  // not refused once cancelled: an abort publishes its record with set
    try {
      holder->attr("set")(key, nb::bytes(reinterpret_cast<const char*>(value.data()), value.size()));
    } catch (nb::python_error& e) {
      errors->keep(std::move(e));  // raised as itself
      return callback_raised("store.set");
    }
    return {};
  };
  kv.get = [holder, errors](const std::string& key, pvmm::deadline until) -> pvmm::result<std::vector<std::uint8_t>> {
    nb::gil_scoped_acquire gil;
    if (errors->cancelled()) return callback_raised("store.get");
    try {
      nb::list keys;
      keys.append(key);
      if (nb::hasattr(*holder, "check")) {
        // Polls without blocking (torch.distributed.Store.check) until the key exists or the deadline passes.
        auto pause = std::chrono::microseconds(200);
        while (!nb::cast<bool>(holder->attr("check")(keys))) {
          if (std::chrono::steady_clock::now() >= until) return key_missing(key);
          if (errors->cancelled()) return callback_raised("store.get");
          {
            nb::gil_scoped_release release;
            std::this_thread::sleep_for(pause);
          }
          pause = std::min(pause * 2, std::chrono::microseconds(10000));
        }
      } else if (nb::hasattr(*holder, "wait")) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        nb::module_ datetime = nb::module_::import_("datetime");
        holder->attr("wait")(keys, datetime.attr("timedelta")("milliseconds"_a = std::max<long long>(left.count(), 0)));
      } else if (std::chrono::steady_clock::now() >= until) {
        // A minimal store (set and a blocking get): a get with no time left would block for the store's own timeout
        // on a key that is not there (the abort key every collective looks for). pvmm gets no answer instead.
        return key_missing(key);
      }
      nb::object v = holder->attr("get")(key);
      if (nb::isinstance<nb::str>(v)) v = v.attr("encode")();
      auto b = nb::cast<nb::bytes>(v);
      const auto* p = reinterpret_cast<const std::uint8_t*>(b.c_str());
      return std::vector<std::uint8_t>(p, p + b.size());
    } catch (nb::python_error& e) {
      // An Exception from get or wait is the store saying the key did not arrive in time (torch raises one);
      // anything else (KeyboardInterrupt, SystemExit) is raised as itself.
      if (e.matches(PyExc_Exception)) return store_error("store.get", key, e);
      errors->keep(std::move(e));
      return callback_raised("store.get");
    }
  };
  return kv;
}

namespace {

/// A bootstrap whose allgather is a Python callable: fn(bytes) -> list of `size` bytes objects (or their
/// concatenation), every rank calling it in the same order. mpi4py: `lambda b: comm.allgather(b)`. What the
/// callable returns is checked (a peer's bytes are not trusted): a wrong count or length is errc::protocol_error.
class python_bootstrap final : public pvmm::bootstrap {
 public:
  python_bootstrap(nb::object fn, int rank, int size, int node, int local_rank, int local_size,
                   std::shared_ptr<callback_errors> errors)
      : errors_(std::move(errors)),
        fn_(new nb::object(std::move(fn)),
            [](nb::object* o) {
              nb::gil_scoped_acquire gil;
              delete o;
            }),
        rank_(rank),
        size_(size),
        node_(node),
        local_rank_(local_rank),
        local_size_(local_size) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return node_; }
  int local_rank() const noexcept override { return local_rank_; }
  int local_size() const noexcept override { return local_size_; }
  const char* adapter() const noexcept override { return "python"; }

 private:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t, pvmm::deadline) override {
    nb::gil_scoped_acquire gil;
    if (errors_->cancelled()) return callback_raised("pvmm.Team.over_allgather");
    const char* op = "pvmm.Team.over_allgather";
    const std::string args = "bytes=" + std::to_string(bytes);
    try {
      nb::object out = (*fn_)(nb::bytes(static_cast<const char*>(mine), bytes));
      auto* dst = static_cast<unsigned char*>(all);
      if (nb::isinstance<nb::bytes>(out)) {
        auto b = nb::cast<nb::bytes>(out);
        if (b.size() != bytes * static_cast<std::size_t>(size_))
          return make_error(pvmm::errc::protocol_error, op,
                            "the allgather returned " + std::to_string(b.size()) + " bytes", args);
        std::memcpy(dst, b.c_str(), b.size());
        return {};
      }
      auto parts = nb::cast<std::vector<nb::bytes>>(out);
      if (parts.size() != static_cast<std::size_t>(size_))
        return make_error(
            pvmm::errc::protocol_error, op,
            "the allgather returned " + std::to_string(parts.size()) + " parts for " + std::to_string(size_) + " ranks",
            args);
      for (std::size_t r = 0; r < parts.size(); ++r) {
        if (parts[r].size() != bytes)
          return make_error(pvmm::errc::protocol_error, op,
                            "rank " + std::to_string(r) + " gave " + std::to_string(parts[r].size()) + " bytes", args);
        std::memcpy(dst + r * bytes, parts[r].c_str(), bytes);
      }
      return {};
    } catch (nb::python_error& e) {
      errors_->keep(std::move(e));  // raised as itself when the call returns
      return callback_raised("pvmm.Team.over_allgather");
    } catch (nb::cast_error&) {
      return make_error(pvmm::errc::protocol_error, op, "the allgather returned neither bytes nor a list of bytes",
                        args);
    }
  }
  void do_abort() noexcept override {}

  std::shared_ptr<callback_errors> errors_;
  std::shared_ptr<nb::object> fn_;
  int rank_, size_, node_, local_rank_, local_size_;
};

}  // namespace

std::shared_ptr<pvmm::bootstrap> python_allgather_bootstrap(nb::object fn, int rank, int size, int node, int local_rank,
                                                            int local_size, std::shared_ptr<callback_errors> errors) {
  return std::make_shared<python_bootstrap>(std::move(fn), rank, size, node, local_rank, local_size, std::move(errors));
}

}  // namespace pvmm_py
