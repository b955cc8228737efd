// What the fake NVTX tool (nvtx_fake_tool.cpp) logs, shared with the test that loads it (nvtx_registration.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

enum pvmm_fake_nvtx_kind {
  pvmm_fake_nvtx_heap,         // a heap registered: ptr, size, handle
  pvmm_fake_nvtx_heap_gone,    // a heap unregistered: handle
  pvmm_fake_nvtx_region,       // a region registered: ptr, size, its heap's handle
  pvmm_fake_nvtx_region_gone,  // a region unregistered: ptr
  pvmm_fake_nvtx_unmap,        // (the test's) the driver unmapped ptr, size
  pvmm_fake_nvtx_bad,          // a call the tool refused: why
};

struct pvmm_fake_nvtx_event {
  pvmm_fake_nvtx_kind kind;
  const void* ptr;
  std::size_t size;
  std::uintptr_t heap;
  std::string why;
};

/// The tool's log, in call order (the test appends its unmaps to it): a std::vector<pvmm_fake_nvtx_event>*.
extern "C" void* pvmm_fake_nvtx_events();
