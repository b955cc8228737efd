// The special members of an owner that keeps all its state behind `std::unique_ptr<state> state_` (the allocators:
// caching_allocator, pinned_pool, growable_arena, sleeping_allocator), written once: the empty owner, adopting a
// state, moving, and move-assignment, which hands the target's old state to a temporary owner so that the owner's
// own destructor decides what happens to it (live memory stays mapped: invariant 17).
#pragma once

#include <memory>
#include <utility>

#define PVMM_PIMPL_MOVES(T)                                         \
  T::T() noexcept = default;                                        \
  T::T(std::unique_ptr<state> s) noexcept : state_(std::move(s)) {} \
  T::T(T&& other) noexcept : state_(std::move(other.state_)) {}     \
  T& T::operator=(T&& other) noexcept {                             \
    if (this != &other) {                                           \
      T gone(std::move(*this));                                     \
      state_ = std::move(other.state_);                             \
    }                                                               \
    return *this;                                                   \
  }
