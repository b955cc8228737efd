// pvmm.SleepingAllocator: a thin wrapper over pvmm::sleeping_allocator (include/pvmm/sleeping_allocator.hpp).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc_sources.hpp"
#include "holder.hpp"
#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

struct py_sleeping {
  holder<pvmm::sleeping_allocator> h;  // views hold a share and pin it: free and sleep refuse while they live
  std::vector<std::pair<std::uint64_t, std::unique_ptr<nb::object>>> callbacks;  // GIL held for every access
};

const char* const policy_names[] = {"discard", "pinned", "pageable", "file"};

pvmm::sleep_policy policy_of(const std::string& name) {
  for (int i = 0; i < 4; ++i)
    if (name == policy_names[i]) return static_cast<pvmm::sleep_policy>(i);
  raise(pvmm::errc::invalid_argument, "pvmm.SleepingAllocator.set_policy",
        "policy '" + name + "' is none of 'discard', 'pinned', 'pageable', 'file'");
}

nb::dict stats_dict(const pvmm::sleeping_stats& st) {
  return dict_of("allocations", st.allocations, "reserved_bytes", st.reserved_bytes, "resident_bytes",
                 st.resident_bytes, "offloaded_bytes", st.offloaded_bytes, "asleep", st.asleep, "staging_bytes",
                 st.staging_bytes, "kept_host_bytes", st.kept_host_bytes);
}

/// Runs a Python backing callback: pvmm calls it on the thread that slept, woke or freed, holding none of its locks
/// (the GIL was released around that call: taken again here, the outermost lock). An exception it raises cannot stop
/// the change under way: it is reported as unraisable (sys.unraisablehook).
void run_backing_callback(const pvmm::backing_change& c, void* user) {
  nb::gil_scoped_acquire gil;
  try {
    static const char* reasons[] = {"sleep", "wake", "free"};
    (*static_cast<nb::object*>(user))(dict_of(
        "address", reinterpret_cast<std::uintptr_t>(c.address), "size", c.size, "old_generation", c.old_generation,
        "new_generation", c.new_generation, "reason", reasons[static_cast<int>(c.reason)], "tag", std::string(c.tag)));
  } catch (nb::python_error& e) {
    e.discard_as_unraisable("pvmm.SleepingAllocator backing callback");
  } catch (const std::exception&) {
  }
}

}  // namespace

void bind_sleeping(nb::module_& m) {
  closable_source(
      nb::class_<py_sleeping>(m, "SleepingAllocator",
                              "Tagged allocations whose physical memory sleep() gives back, keeping their addresses "
                              "(pvmm::sleeping_allocator)."),
      "pvmm.SleepingAllocator.install_c_allocator",
      "Makes the C entry points (pvmm_torch_alloc/free) allocate from this allocator, with the current tag. "
      "AlreadyReleasedError once closed (the source installed stays).")
      .def(
          "__init__",
          [](py_sleeping* self, int device, unsigned copy_streams, unsigned staging_slots,
             std::size_t staging_slot_bytes, std::optional<bool> release_address_range, bool keep_host_memory) {
            pvmm::sleeping_options o;
            o.device = device;
            o.copy_streams = copy_streams;
            o.staging_slots = staging_slots;
            o.staging_slot_bytes = staging_slot_bytes;
            o.release_address_range = release_address_range;
            o.keep_host_memory = keep_host_memory;
            init_holding(self, pvmm::sleeping_allocator::create(o));
          },
          "device"_a = 0, "copy_streams"_a = 2, "staging_slots"_a = 4, "staging_slot_bytes"_a = std::size_t{32} << 20,
          "release_address_range"_a = nb::none(), "keep_host_memory"_a = false,
          "copy_streams, staging_slots x staging_slot_bytes: the copies' streams and pinned staging ring; "
          "release_address_range: free and reserve again the exact range while asleep (None: on for hip); "
          "keep_host_memory: keep the page-locked memory of woken pinned copies for the next sleep.")
      .def(
          "allocate",
          [](const py_sleeping& s, std::size_t size, std::optional<std::string> tag) {
            auto a = s.h.use("pvmm.SleepingAllocator.allocate");
            nb::gil_scoped_release release;
            return reinterpret_cast<std::uintptr_t>(unwrap(tag ? a->allocate(size, *tag) : a->allocate(size)));
          },
          "size"_a, "tag"_a = nb::none(),
          "An address (int) that stays the same across sleep and wake, tagged `tag` (None: the current tag). "
          "OutOfMemoryError when the size rounded up to the granularity overflows.")
      .def(
          "free",
          [](const py_sleeping& s, std::uintptr_t p) {
            auto a = use_unviewed(s.h, "pvmm.SleepingAllocator.free");
            nb::gil_scoped_release release;
            unwrap(a->deallocate(reinterpret_cast<void*>(p)));
          },
          "address"_a, "Frees an allocation (asleep or awake). BusyError while views of the allocator live.")
      .def(
          "set_policy",
          [](const py_sleeping& s, const std::string& tag, const std::string& policy, bool retain_host_copy,
             const std::string& file_directory) {
            pvmm::tag_policy p;
            p.policy = policy_of(policy);
            p.retain_host_copy = retain_host_copy;
            p.file_directory = file_directory;
            unwrap(s.h.use("pvmm.SleepingAllocator.set_policy")->set_policy(tag, p));
          },
          "tag"_a, "policy"_a = "pinned", "retain_host_copy"_a = false, "file_directory"_a = "",
          "What sleep does with the tag's contents: 'discard', 'pinned' (page-locked host copy), 'pageable' "
          "(swappable host memory) or 'file' (an unlinked file in file_directory). retain_host_copy keeps the host "
          "copy after wake, so the next sleep of unchanged memory copies nothing.")
      .def(
          "policy",
          [](const py_sleeping& s, const std::string& tag) {
            auto p = unwrap(s.h.use("pvmm.SleepingAllocator.policy")->policy(tag));
            return dict_of("policy", policy_names[static_cast<int>(p.policy)], "retain_host_copy", p.retain_host_copy,
                           "file_directory", p.file_directory);
          },
          "tag"_a)
      .def(
          "sleep",
          [](const py_sleeping& s, const std::vector<std::string>& tags, std::optional<bool> offload,
             nb::handle stream) {
            auto a = s.h.begin_reshape("pvmm.SleepingAllocator.sleep");  // views would read unmapped memory
            std::optional<stream_use> on;
            if (!stream.is_none()) on = stream_of(stream, a->device(), "stream");
            nb::gil_scoped_release release;
            std::vector<std::pair<std::string, pvmm::tag_policy>> saved;  // offload=False: discard, this call only
            if (offload == false) {
              if (tags.empty())
                raise(pvmm::errc::invalid_argument, "pvmm.SleepingAllocator.sleep",
                      "offload=False needs the tags named", {}, "or set_policy(tag, 'discard')");
              pvmm::tag_policy discard;
              discard.policy = pvmm::sleep_policy::discard;
              for (const auto& t : tags) {
                saved.emplace_back(t, unwrap(a->policy(t)));
                unwrap(a->set_policy(t, discard));
              }
            }
            pvmm::status done;
            if (on) {
              auto r = a->sleep(tags, *on);
              if (!r) done = std::move(r).error();
            } else {
              done = a->sleep(tags);
            }
            for (const auto& [t, p] : saved) (void)a->set_policy(t, p);
            unwrap(std::move(done));
          },
          "tags"_a = std::vector<std::string>{}, "offload"_a = nb::none(), "stream"_a = nb::none(),
          "Saves the tagged allocations (all when empty) as their tags' policies say (set_policy; offload=False "
          "discards the named tags this once) and gives their physical memory back. With `stream`, the copies follow "
          "the work queued there. BusyError while views live, or while another sleep or wake runs.")
      .def(
          "wake",
          [](const py_sleeping& s, const std::vector<std::string>& tags, nb::handle stream) {
            auto a = s.h.use("pvmm.SleepingAllocator.wake");
            if (stream.is_none()) {
              nb::gil_scoped_release release;
              unwrap(a->wake(tags));
              return;
            }
            const stream_use on = stream_of(stream, a->device(), "stream");
            nb::gil_scoped_release release;
            (void)unwrap(a->wake(tags, on));
          },
          "tags"_a = std::vector<std::string>{}, "stream"_a = nb::none(),
          "Maps new memory at the same addresses and restores the saved contents. With `stream`, returns once the "
          "copies are queued; `stream` waits for them on the device. OutOfMemoryError naming the tag when memory is "
          "short: nothing is lost and a later wake retries.")
      .def(
          "prepare_host_memory",
          [](const py_sleeping& s, const std::vector<std::string>& tags) {
            call_unlocked(s.h, "pvmm.SleepingAllocator.prepare_host_memory",
                          [&](auto& o) { return o.prepare_host_memory(tags); });
          },
          "tags"_a = std::vector<std::string>{},
          "Page-locks now what the next sleep of the tags (all when empty) copies into for its pinned-policy tags, so "
          "that sleep runs at the speed of the bus; held for those tags until their sleep takes it (a failed sleep "
          "puts it back) or trim_host_memory() frees it. OutOfMemoryError naming the tag, nothing made, when host "
          "memory is short.")
      .def(
          "trim_host_memory",
          [](const py_sleeping& s) {
            call_unlocked(s.h, "pvmm.SleepingAllocator.trim_host_memory",
                          [&](auto& o) { return o.trim_host_memory(); });
          },
          "Frees the page-locked memory kept for reuse (keep_host_memory, prepare_host_memory).")
      .def(
          "drop_host_copies",
          [](const py_sleeping& s, const std::vector<std::string>& tags) {
            unwrap(s.h.use("pvmm.SleepingAllocator.drop_host_copies")->drop_host_copies(tags));
          },
          "tags"_a = std::vector<std::string>{}, "Forgets the retained host copies of awake allocations.")
      .def(
          "read_host_copy",
          [](const py_sleeping& s, std::uintptr_t address, std::size_t size, std::size_t offset) {
            auto a = s.h.use("pvmm.SleepingAllocator.read_host_copy");
            std::string out(size, '\0');
            {
              nb::gil_scoped_release release;
              unwrap(a->read_host_copy(reinterpret_cast<void*>(address), offset, out.data(), size));
            }
            return nb::bytes(out.data(), out.size());
          },
          "address"_a, "size"_a, "offset"_a = 0,
          "`size` bytes at `offset` of the host copy of the allocation holding `address` (asleep, or retained).")
      .def(
          "tag_of",
          [](const py_sleeping& s, std::uintptr_t address) -> std::optional<std::string> {
            auto t = s.h.use("pvmm.SleepingAllocator.tag_of")->tag_of(reinterpret_cast<void*>(address));
            if (!t) return std::nullopt;
            return *t;
          },
          "address"_a, "The tag of the allocation holding `address` (any byte of it); None when none does.")
      .def(
          "generation",
          [](const py_sleeping& s, std::uintptr_t address) {
            return unwrap(
                s.h.use("pvmm.SleepingAllocator.generation")->generation_of(reinterpret_cast<void*>(address)));
          },
          "address"_a,
          "The backing generation of the allocation holding `address`: it changes whenever its physical "
          "memory does (sleep, wake, free).")
      .def(
          "add_backing_callback",
          [](py_sleeping& s, nb::callable fn) {
            auto a = s.h.use("pvmm.SleepingAllocator.add_backing_callback");
            auto keep = std::make_unique<nb::object>(nb::borrow(fn));
            const std::uint64_t id = unwrap(a->add_backing_callback(run_backing_callback, keep.get()));
            s.callbacks.emplace_back(id, std::move(keep));
            return id;
          },
          "callback"_a,
          "callback(change: dict) runs before an allocation's old backing goes (sleep, free) and before its new "
          "backing is mapped (wake): address, size, old_generation, new_generation, reason, tag. Returns an id.")
      .def(
          "remove_backing_callback",
          [](py_sleeping& s, std::uint64_t id) {
            unwrap(s.h.use("pvmm.SleepingAllocator.remove_backing_callback")->remove_backing_callback(id));
            for (auto it = s.callbacks.begin(); it != s.callbacks.end(); ++it)
              if (it->first == id) {
                s.callbacks.erase(it);
                break;
              }
          },
          "id"_a)
      .def(
          "statistics",
          [](const py_sleeping& s, std::optional<std::string> tag) {
            auto a = s.h.use("pvmm.SleepingAllocator.statistics");
            return stats_dict(tag ? a->stats(*tag) : a->stats());
          },
          "tag"_a = nb::none())
      .def(
          "view",
          [](const py_sleeping& s, std::uintptr_t address, const std::string& dtype,
             std::optional<std::vector<std::size_t>> shape) {
            auto a = s.h.use("pvmm.SleepingAllocator.view");
            void* p = reinterpret_cast<void*>(address);
            return make_view(s.h.pin("pvmm.SleepingAllocator.view"), p, a->size_of(p), memory_label::device,
                             a->device(), view_spec{dtype, std::move(shape), 0, false});
          },
          "address"_a, "dtype"_a = "uint8", "shape"_a = nb::none())
      .def(
          "use_tag",
          [](const py_sleeping& s, const std::string& tag) {
            return s.h.use("pvmm.SleepingAllocator.use_tag")->exchange_tag(tag);
          },
          "tag"_a,
          "Sets the tag new allocations get (allocate without a tag, and the C entry points); returns the one it "
          "replaces (pvmm.allocators.tag restores it: nested tags nest).")
      .def_prop_ro("current_tag",
                   [](const py_sleeping& s) { return s.h.use("pvmm.SleepingAllocator.current_tag")->current_tag(); })
      .def_prop_ro("granularity",
                   [](const py_sleeping& s) { return s.h.use("pvmm.SleepingAllocator.granularity")->granularity(); })
      .def("__repr__", [](const py_sleeping& s) {
        auto a = s.h.try_use();
        if (!a) return std::string("<pvmm.SleepingAllocator closed>");
        auto st = a->stats();
        return "<pvmm.SleepingAllocator allocations=" + std::to_string(st.allocations) +
               " resident_bytes=" + std::to_string(st.resident_bytes) + " asleep=" + std::to_string(st.asleep) + ">";
      });
}

}  // namespace pvmm_py
