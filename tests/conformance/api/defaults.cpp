// Every public owner type default-constructs (empty) and is destroyed empty, from its header alone: an inline
// default constructor that needs a pimpl's complete type does not compile in user code (issue 48, item 8).
#include <pvmm/pvmm.hpp>
#include <pvmm/symmetric_heap.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_multicast.hpp>

#include "support.hpp"

namespace {
template <class T>
void check_empty() {
  T owner;
  CHECK_FALSE(owner.valid());
  T moved(std::move(owner));
  CHECK_FALSE(moved.valid());
}
}  // namespace

TEST_CASE("api: every public owner type default-constructs empty") {
  check_empty<pvmm::caching_allocator>();
  check_empty<pvmm::growable_arena>();
  check_empty<pvmm::sleeping_allocator>();
  check_empty<pvmm::pinned_pool>();
  check_empty<pvmm::memory_pool>();
  check_empty<pvmm::pool_allocation>();
  check_empty<pvmm::physical_allocation>();
  check_empty<pvmm::address_reservation>();
  check_empty<pvmm::growable_buffer>();
  check_empty<pvmm::multicast_object>();
  check_empty<pvmm::managed_allocation>();
  check_empty<pvmm::pinned_allocation>();
  check_empty<pvmm::host_registration>();
  check_empty<pvmm::stream>();
  check_empty<pvmm::event>();
  check_empty<pvmm::owned_fd>();
  check_empty<pvmm::symmetric_heap>();
  check_empty<pvmm::team>();
  check_empty<pvmm::symmetric_window>();
  check_empty<pvmm::team_multicast>();
  check_empty<pvmm::ipc::connection>();
  check_empty<pvmm::ipc::listener>();
}
