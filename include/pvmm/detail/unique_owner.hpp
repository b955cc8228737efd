// pvmm/detail/unique_owner.hpp - the one skeleton of pvmm's move-only owners: moves, the noexcept destructor,
// valid() and operator bool, written once (as cuda-api-wrappers' unique_region<Deleter> does for regions).
//
// An owner derives from unique_owner<Owner, Holder>, where Holder keeps what it owns and says whether it holds
// something. Two holders cover every owner:
// - region_holder<Owner, Extra>: (pointer, size) owners; data() and size(), plus the owner's Extra fields
//   (page-locked allocations keep `mapped_`, pool allocations their pool and stream);
// - handle_holder<Ref>: handle owners (stream, event); Ref is the borrowed view of the handle, with
//   native_handle() and device(), so an owner IS usable wherever its view is (a stream is a stream_ref).
// The owner writes only:
// - `static void teardown(holder&) noexcept`: gives the resource back for the destructor and move-assignment,
//   ignoring errors and never reaching fault injection (an injected failure there would only simulate the leak
//   teardown exists to prevent);
// - `status release() noexcept`: gives it back now and reports errors; forget() empties the owner once done.
// It declares `friend unique_owner;` so the skeleton can call its teardown.
//
// Moving leaves the source empty; move-assignment gives the target's old resource back first. Owners hold no
// state outside their holder (checked), so the destructor can reach all of it after the owner's own part is gone.
//
// C++17 and nothing else: compiled by nvcc and hipcc as part of the public headers.
#pragma once

#include <cstddef>
#include <utility>

namespace pvmm::detail {

/// Base of an owner whose state is one member that moves and cleans itself up (a shared_ptr, or a unique_ptr with
/// an out-of-line deleter): copying is deleted, the rest stays implicit, so the owner declares no special members
/// (a moved-from member is null, which is what "empty, errc::already_released" reads).
class move_only {
 protected:
  move_only() noexcept = default;
  move_only(move_only&&) noexcept = default;
  move_only& operator=(move_only&&) noexcept = default;
  move_only(const move_only&) = delete;
  move_only& operator=(const move_only&) = delete;
  ~move_only() = default;
};

/// The Extra of a (pointer, size) owner that keeps nothing else.
struct no_extra {};

/// What a (pointer, size) owner holds: the region, and Extra's fields (an empty Extra costs nothing). The owner
/// is a friend, so its static teardown and release can read and empty a holder it is handed.
template <class Owner, class Extra = no_extra>
class region_holder : protected Extra {
 public:
  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 protected:
  friend Owner;
  region_holder() noexcept = default;
  region_holder(void* data, std::size_t size, Extra extra = {}) noexcept
      : Extra(std::move(extra)), data_(data), size_(size) {}
  region_holder(region_holder&&) noexcept = default;
  region_holder& operator=(region_holder&&) noexcept = default;

  bool holds() const noexcept { return data_ != nullptr; }
  void clear() noexcept {
    static_cast<Extra&>(*this) = Extra{};
    data_ = nullptr;
    size_ = 0;
  }

  void* data_ = nullptr;
  std::size_t size_ = 0;
};

/// What a handle owner holds: its borrowed view Ref (copyable; a default Ref is empty, a nonzero
/// native_handle().value is held), inherited publicly so the owner is usable as a Ref.
template <class Ref>
class handle_holder : public Ref {
 protected:
  handle_holder() noexcept = default;
  template <class Handle>
  handle_holder(Handle handle, int device) noexcept : Ref(handle, device) {}

  bool holds() const noexcept { return this->native_handle().value != 0; }
  void clear() noexcept { static_cast<Ref&>(*this) = Ref{}; }
};

/// A borrowed handle of one device: stream_ref is built on it, and so is an owner without a public view type (event).
template <class Handle>
class handle_ref {
 public:
  constexpr handle_ref() noexcept = default;
  constexpr handle_ref(Handle handle, int device) noexcept : handle_(handle), device_(device) {}
  Handle native_handle() const noexcept { return handle_; }
  int device() const noexcept { return device_; }

 protected:
  Handle handle_{};
  int device_ = -1;
};

/// Moves, destructor, valid() and operator bool of a move-only owner (see the top of this header).
template <class Owner, class Holder>
class unique_owner : public Holder {
 public:
  unique_owner(const unique_owner&) = delete;
  unique_owner& operator=(const unique_owner&) = delete;

  bool valid() const noexcept { return this->holds(); }
  explicit operator bool() const noexcept { return valid(); }

 protected:
  using holder = Holder;

  unique_owner() noexcept = default;
  /// Takes ownership of what the holder built from `parts` describes.
  template <class... Parts>
  explicit unique_owner(std::in_place_t, Parts&&... parts) noexcept : Holder(std::forward<Parts>(parts)...) {}
  unique_owner(unique_owner&& other) noexcept : Holder(std::move(static_cast<Holder&>(other))) { other.clear(); }
  unique_owner& operator=(unique_owner&& other) noexcept {
    if (this != &other) {
      give_back();
      Holder::operator=(std::move(static_cast<Holder&>(other)));
      other.clear();
    }
    return *this;
  }
  ~unique_owner() {
    static_assert(sizeof(Owner) == sizeof(Holder), "an owner keeps all its state in its holder");
    give_back();
  }

  /// Empties the owner after release() gave the resource back (or handed it on).
  void forget() noexcept { this->clear(); }

 private:
  void give_back() noexcept {
    if (valid()) Owner::teardown(static_cast<Holder&>(*this));
  }
};

}  // namespace pvmm::detail
