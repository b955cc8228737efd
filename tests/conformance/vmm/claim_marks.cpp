// The claim marks on an address_reservation's mapping records, a case per row of the state table in docs/design.md
// ("Claim marks"): busy, made and claim slot, against map, unmap, set_access and the counting paths. Each case
// drives a record into its row with the functions map, unmap and set_access call (src/vmm/claim_marks.hpp, compiled
// here from the same header) and checks what the library decides from it: busy() refuses unmap and set_access with
// errc::busy, reservation_state::made() counts it in query_live_objects().mappings, any record refuses a map over it
// (overlapping_mapping) and counts in mapping_count(). The rows a reservation rests in are reached through the public
// API too, on every backend.
#include "vmm/claim_marks.hpp"
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;
namespace d = pvmm::detail;

namespace {
constexpr std::size_t unit = 0x1000;

/// A reservation's bookkeeping alone (no backend, no memory): records enter it as map enters them.
struct marks {
  d::reservation_state r;
  /// map's claim of mapping `i` ([i * unit, (i + 1) * unit)): the record enters with a claim slot or a busy mark.
  std::size_t begin_map(std::size_t i) {
    auto next = r.mappings.lower_bound(i * unit);
    return d::claim_for_map(r, next, i * unit, r.mappings.index_of(next), d::mapping_record{unit, nullptr, 0});
  }
  /// A map whose driver call succeeded: as map_state ends it.
  void end_map(std::size_t i, std::size_t slot) {
    if (slot != 0)
      d::give_back_claim_slot(r, slot);
    else
      d::mark_made(at(i));
  }
  /// set_access's claim of mappings [i, i + n), none busy.
  std::size_t begin_grant(std::size_t i, std::size_t n = 1) {
    auto first = r.mappings.find(i * unit);
    return d::claim_for_grant(r, i * unit, n * unit, first, std::next(first, static_cast<std::ptrdiff_t>(n)),
                              r.mappings.index_of(first));
  }
  void end_grant(std::size_t i, std::size_t slot, std::size_t n = 1) {
    if (slot != 0)
      d::give_back_claim_slot(r, slot);
    else
      d::release_claimed_range(r, i * unit, n * unit, 0);
  }
  /// unmap's claim of mapping i: its busy mark.
  void begin_unmap(std::size_t i) {
    auto it = r.mappings.find(i * unit);
    d::mark_busy(it, std::next(it));
  }
  /// Every slot taken by grants of other mappings, as four other threads' calls in flight would.
  void take_every_slot(std::size_t first_other) {
    for (std::size_t k = 0; k < d::claim_slots::slots; ++k) {
      end_map(first_other + k, begin_map(first_other + k));
      REQUIRE(begin_grant(first_other + k) != 0);  // held: the next map takes the next slot
    }
  }
  d::mapping_record& at(std::size_t i) { return r.mappings.find(i * unit)->second; }
  /// What unmap and set_access decide (check_claimable): another thread holds it.
  bool busy(std::size_t i) {
    auto it = r.mappings.find(i * unit);
    return d::first_busy(r, it, std::next(it)) != std::next(it);
  }
  /// What count_mappings (query_live_objects().mappings) counts.
  bool counted(std::size_t i) { return r.made(at(i)); }
  bool slot_active(std::size_t i) {
    const auto s = at(i).claim_slot;
    return s != 0 && r.claims.active[s - 1].load();
  }
  /// A row of the table: mapping i's three marks (its claim slot 1-based, and whether that slot is active), then
  /// what the calls read from them.
  struct row {
    bool busy_mark, made_mark;
    int slot;
    bool active, busy, counted;
  };
  void expect(std::size_t i, row want) {
    INFO("mapping " << i);
    CHECK(at(i).busy == want.busy_mark);
    CHECK(at(i).made == want.made_mark);
    CHECK(int{at(i).claim_slot} == want.slot);
    CHECK(slot_active(i) == want.active);
    CHECK(busy(i) == want.busy);
    CHECK(counted(i) == want.counted);
  }
};
// The table's rows (docs/design.md, "Claim marks"), slot k = 1: {busy, made, claim slot, slot active, busy(), made()}.
constexpr marks::row row1{false, false, 1, true, true, false};
constexpr marks::row row2{true, false, 0, false, true, false};
constexpr marks::row row3{false, false, 1, false, false, true};
constexpr marks::row row4{false, true, 0, false, false, true};
constexpr marks::row row5{false, true, 1, false, false, true};
constexpr marks::row row6{false, true, 1, true, true, true};
constexpr marks::row row7{true, true, 0, false, true, true};  // or with a given-back slot
constexpr marks::row row8{true, false, 1, false, true, true};

/// Through the public API: maps `mappings` granules back to back (each map takes the slot the one before gave back,
/// so all but the last settle to row 4), grants the first when `grant_first` (row 5), then checks the first mapping
/// at rest: a map over it is overlapping_mapping, every mapping is counted live, a grant and the unmap succeed.
void check_first_at_rest(std::size_t mappings, bool grant_first) {
  const std::size_t g = granule();
  auto memory = physical_allocation::create(g, default_properties()).value();
  auto range = address_reservation::reserve(mappings * g).value();
  const std::size_t live = query_live_objects().mappings;
  for (std::size_t i = 0; i < mappings; ++i) range.map(i * g, memory, 0, g).value();
  if (grant_first) PVMM_CHECK_OK(range.set_access(0, g, {rw()}));
  PVMM_CHECK_ERRC(range.map(0, memory, 0, g), errc::overlapping_mapping);
  CHECK(range.mapping_count() == mappings);
  CHECK(query_live_objects().mappings == live + mappings);
  PVMM_CHECK_OK(range.set_access(0, g, {rw()}));
  PVMM_CHECK_OK(range.unmap(0, mappings * g));
  CHECK(query_live_objects().mappings == live);
}
}  // namespace

TEST_SUITE("claim marks") {
  PVMM_CASE("row 1, a map in flight with claim slot k: busy for unmap and set_access, not counted, a record") {
    marks m;
    const std::size_t slot = m.begin_map(0);
    REQUIRE(slot == 1);
    m.expect(0, row1);
    CHECK(m.r.mappings.size() == 1);  // mapping_count() and release()'s refusal see it
    m.end_map(0, slot);
    m.expect(0, row3);
  }

  PVMM_CASE("row 2, a map in flight while every slot is taken: its busy mark, not counted") {
    marks m;
    m.take_every_slot(1);
    const std::size_t slot = m.begin_map(0);
    REQUIRE(slot == 0);
    m.expect(0, row2);
    m.end_map(0, slot);  // under the lock
    m.expect(0, row4);
  }

  PVMM_CASE("row 3, mapped through slot k, the slot given back and not taken again: free, counted") {
    marks m;
    m.end_map(0, m.begin_map(0));
    m.expect(0, row3);  // the given-back slot says made
    PVMM_REQUIRE_DEVICE();
    check_first_at_rest(1, false);  // one map leaves its record so
  }

  PVMM_CASE("row 4, mapped and its marks settled (slot k taken again for another range): free, counted") {
    marks m;
    m.end_map(0, m.begin_map(0));
    m.end_map(1, m.begin_map(1));  // takes slot 1 again: mapping 0's mark is cleared, made said outright
    m.expect(0, row4);
    m.expect(1, row3);
    PVMM_REQUIRE_DEVICE();
    check_first_at_rest(2, false);
  }

  PVMM_CASE("row 5, granted through slot k, the slot given back: free, counted, made said outright") {
    marks m;
    m.end_map(0, m.begin_map(0));
    m.end_map(1, m.begin_map(1));
    m.end_grant(1, m.begin_grant(1));  // the range slot 1 claimed last: no mark written but made
    m.expect(1, row5);
    PVMM_REQUIRE_DEVICE();
    check_first_at_rest(1, true);
  }

  PVMM_CASE("row 6, a grant in flight with claim slot k: busy for unmap and set_access, still counted") {
    marks m;
    m.end_map(0, m.begin_map(0));  // row 3: made only through its slot
    const std::size_t slot = m.begin_grant(0);
    REQUIRE(slot == 1);
    m.expect(0, row6);  // made said outright: the active slot no longer says so
    m.end_grant(0, slot);
    m.expect(0, row5);
  }

  PVMM_CASE("row 7, a grant in flight while every slot is taken, or an unmap in flight: busy mark, counted") {
    marks m;
    m.end_map(0, m.begin_map(0));
    m.take_every_slot(1);  // slot 1 taken again for another range: mapping 0 settles (row 4)
    const std::size_t slot = m.begin_grant(0);
    REQUIRE(slot == 0);
    m.expect(0, row7);
    m.end_grant(0, slot);  // under the lock
    m.expect(0, row4);
    m.begin_unmap(0);  // an unmap of a made record: the same marks
    m.expect(0, row7);
    d::release_claimed_range(m.r, 0, unit, 0);  // a failed unmap gives it back, still mapped
    m.expect(0, row4);
  }

  PVMM_CASE("row 8, an unmap in flight of a record made only through its slot: busy, counted until erased") {
    marks m;
    m.end_map(0, m.begin_map(0));  // row 3
    m.begin_unmap(0);
    m.expect(0, row8);
    m.end_map(1, m.begin_map(1));  // slot 1 taken again meanwhile: the mark settles to made, still busy
    m.expect(0, row7);
    m.r.mappings.erase(m.r.mappings.find(0));  // a successful unmap erases the record: nothing left to count
    CHECK(m.r.mappings.size() == 1);
  }
}  // TEST_SUITE
