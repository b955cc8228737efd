// The one holder of every closable Python object (docs/design.md "Bindings", invariant 30).
//
// A holder keeps the C++ object in a shared pointer. A call takes its own share for as long as it runs (use()),
// so close() racing the call only drops the holder's share: the call finishes on the object and the object goes
// with the last share (the call's, a view's), never under a thread that is still inside it. A call that starts
// after close() fails with AlreadyReleasedError.
//
// Exports (views, DLPack capsules, buffer-protocol exports) pin the object: each holds a share and counts in the
// holder's export count. What changes the memory's address range (resize, unmap, set_access, free) runs inside a
// reshape, which is refused with BusyError (a BufferError) while the count is not zero, as CPython refuses
// bytearray.resize with exported buffers; an export taken while a reshape runs is refused alike.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>

#include <nanobind/nanobind.h>

#include "common.hpp"

namespace pvmm_py {

/// The export count of one object, shared by its holder and its pins.
struct export_state {
  std::mutex lock;
  std::size_t exports = 0;
  bool reshaping = false;
};

/// A live export: keeps the object alive and counts as an export until destroyed.
struct export_pin {
  std::shared_ptr<void> keep;
  std::shared_ptr<export_state> state;
  export_pin(std::shared_ptr<void> k, std::shared_ptr<export_state> s) : keep(std::move(k)), state(std::move(s)) {}
  export_pin(const export_pin&) = delete;
  export_pin& operator=(const export_pin&) = delete;
  ~export_pin() {
    std::lock_guard<std::mutex> guard(state->lock);
    --state->exports;
  }
};

/// BusyError (also a BufferError) for `operation` on memory with live exports.
[[noreturn]] void throw_exported(const char* operation, std::size_t exports);
/// BusyError for an export taken while another thread reshapes the memory.
[[noreturn]] void throw_reshaping(const char* operation);

template <class T>
class holder {
 public:
  holder() = default;
  explicit holder(std::shared_ptr<T> object) : object_(std::move(object)) {}
  holder(holder&& other) noexcept {
    std::lock_guard<std::mutex> guard(other.lock_);
    object_ = std::move(other.object_);
    exports_ = std::move(other.exports_);
  }
  holder& operator=(holder&&) = delete;
  /// The last Python reference went (garbage collection): the holder's share is dropped with the GIL released, as
  /// close() drops it, since the object's destructor may block.
  ~holder() {
    if (object_ && PyGILState_Check()) {
      nanobind::gil_scoped_release release;
      object_.reset();
    }
  }
  holder(const holder&) = delete;
  holder& operator=(const holder&) = delete;

  /// A share of the object for one call; AlreadyReleasedError naming `operation` once closed.
  std::shared_ptr<T> use(const char* operation) const {
    std::shared_ptr<T> p = try_use();
    if (!p) throw_closed(operation);
    return p;
  }
  /// A share of the object, or null once closed.
  std::shared_ptr<T> try_use() const noexcept {
    std::lock_guard<std::mutex> guard(lock_);
    return object_;
  }
  bool closed() const noexcept { return !try_use(); }
  /// Closes: hands the holder's share to the caller, which drops it (with the GIL released where the object's
  /// destruction blocks). Calls in flight and exports keep the object until they end. Closing twice is fine.
  std::shared_ptr<T> take() noexcept {
    std::lock_guard<std::mutex> guard(lock_);
    return std::move(object_);
  }
  /// Sets the object (at creation).
  void reset(std::shared_ptr<T> object) noexcept {
    std::lock_guard<std::mutex> guard(lock_);
    object_ = std::move(object);
  }

  /// An export of the object: a pin that keeps it alive and blocks reshapes until destroyed.
  std::unique_ptr<export_pin> pin(const char* operation) const {
    std::shared_ptr<T> p = use(operation);
    std::shared_ptr<export_state> s = exports();
    {
      std::lock_guard<std::mutex> guard(s->lock);
      if (s->reshaping) throw_reshaping(operation);
      ++s->exports;
    }
    return std::make_unique<export_pin>(std::move(p), std::move(s));
  }

  /// A reshape in progress (resize, unmap, set_access, free): refused while exports live.
  class reshape {
   public:
    reshape(std::shared_ptr<T> object, std::shared_ptr<export_state> state)
        : object_(std::move(object)), state_(std::move(state)) {}
    reshape(reshape&& other) noexcept : object_(std::move(other.object_)), state_(std::move(other.state_)) {}
    reshape(const reshape&) = delete;
    reshape& operator=(const reshape&) = delete;
    reshape& operator=(reshape&&) = delete;
    ~reshape() {
      if (!state_) return;
      std::lock_guard<std::mutex> guard(state_->lock);
      state_->reshaping = false;
    }
    T& operator*() const noexcept { return *object_; }
    T* operator->() const noexcept { return object_.get(); }

   private:
    std::shared_ptr<T> object_;
    std::shared_ptr<export_state> state_;
  };
  reshape begin_reshape(const char* operation) const {
    std::shared_ptr<T> p = use(operation);
    std::shared_ptr<export_state> s = exports();
    {
      std::lock_guard<std::mutex> guard(s->lock);
      if (s->exports != 0) throw_exported(operation, s->exports);
      if (s->reshaping) throw_reshaping(operation);
      s->reshaping = true;
    }
    return reshape(std::move(p), std::move(s));
  }
  std::size_t export_count() const {
    std::shared_ptr<export_state> s = exports();
    std::lock_guard<std::mutex> guard(s->lock);
    return s->exports;
  }

 private:
  std::shared_ptr<export_state> exports() const {
    std::lock_guard<std::mutex> guard(lock_);
    return exports_;
  }
  mutable std::mutex lock_;
  std::shared_ptr<T> object_;
  std::shared_ptr<export_state> exports_ = std::make_shared<export_state>();
};

/// Drops a share with the GIL released (the object's destructor may block: unmap, wait for a stream). The caller
/// holds the GIL.
template <class T>
void release_without_gil(std::shared_ptr<T> share) noexcept {
  if (!share) return;
  nanobind::gil_scoped_release release;
  share.reset();
}

/// A call that blocks, on the object behind `h` (a share taken under `operation`), run with the GIL released: the
/// value of call(object), unwrapped.
template <class T, class Call>
auto call_unlocked(const holder<T>& h, const char* operation, Call call) {
  auto share = h.use(operation);
  nanobind::gil_scoped_release release;
  return unwrap(call(*share));
}

/// An __init__'s body: constructs the Python object W at `self`, holding the object `made` gives (or raising its
/// error, `self` untouched).
template <class W, class T>
void init_holding(W* self, pvmm::result<T>&& made) {
  auto object = std::make_shared<T>(unwrap(std::move(made)));
  new (self) W{};
  self->h.reset(std::move(object));
}

/// The methods every closable Python object has alike (W holds its object in `h`): closed, close (close(w) does
/// it; documented by `close_doc` where given: nanobind's doc string) and the context manager, whose exit closes.
/// Returns the class for more methods.
template <class W, class Close, class... Doc>
nanobind::class_<W> closable_with(nanobind::class_<W> cls, Close close, const Doc&... close_doc) {
  cls.def_prop_ro(
         "closed", [](const W& w) { return w.h.closed(); }, "Whether close() was called.")
      .def(
          "close", [close](W& w) { close(w); }, close_doc...)
      .def(
          "__enter__", [](W& self) -> W& { return self; }, nanobind::rv_policy::reference)
      .def("__exit__", [close](W& w, nanobind::args) { close(w); });
  return cls;
}

/// closable_with, where closing drops the holder's share with the GIL released.
template <class W, class... Doc>
nanobind::class_<W> closable(nanobind::class_<W> cls, const Doc&... close_doc) {
  return closable_with(
      std::move(cls), [](W& w) { release_without_gil(w.h.take()); }, close_doc...);
}

}  // namespace pvmm_py
