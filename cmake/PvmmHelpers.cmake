# Warnings for pvmm's own targets; errors when PVMM_WARNINGS_AS_ERRORS (CI sets it).
function(pvmm_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Woverloaded-virtual -Wconversion -Wno-sign-conversion
    $<$<BOOL:${PVMM_WARNINGS_AS_ERRORS}>:-Werror>>)
endfunction()

# A backend library: the neutral layer's objects plus the backend's sources.
function(pvmm_add_backend name)
  add_library(pvmm_${name} SHARED ${ARGN} $<TARGET_OBJECTS:pvmm_neutral>)
  target_include_directories(pvmm_${name}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(pvmm_${name} PRIVATE fmt::fmt)
  target_compile_features(pvmm_${name} PUBLIC cxx_std_17)
  set_target_properties(pvmm_${name} PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
    EXPORT_NAME ${name})
  pvmm_set_warnings(pvmm_${name})
  pvmm_bind_locally(pvmm_${name})
  pvmm_unity_build(pvmm_${name})
  # Calls from one of pvmm's functions to another bind inside the library at link time: no PLT stub and GOT
  # entry on the way, each a cache line and a page that a real driver call has evicted in between
  # (pvmm-own-cost, cold caches). pvmm's functions are not meant to be interposed.
  target_link_options(pvmm_${name} PRIVATE -Wl,-Bsymbolic-functions)
  pvmm_hot_code_flags(pvmm_${name})
  pvmm_hot_layout(pvmm_${name})
endfunction()

# The hot paths' code together (cmake/hot_layout.ld): each function and variable its own section
# (-ffunction-sections -fdata-sections, on the library's own objects and pvmm_neutral's), and the linker script naming
# the hot ones placed first (code) and on one cache line (variables). Where the
# linker does not take the script (it is tried once), the layout is the default one.
# Thread-local variables through TLS descriptors (-mtls-dialect=gnu2), only with PVMM_TLS_DESCRIPTORS=ON (off by
# default): a library loaded at start-up reaches its thread-local state cache with a call that returns the offset,
# instead of __tls_get_addr's look-up of the thread's DTV (two code lines and two data lines in ld.so and the DTV
# for a cold reserve or free: tools/own-cost-lines.py). Off by default because a dlopen'ed libpvmm (the Python
# module) gets dynamic TLS, whose descriptor slow path on x86-64 glibc before 2.40 (and its backports) does not
# keep the vector registers that gnu2 code assumes kept (glibc BZ 31372). Never in sanitizer builds: their
# runtimes track a dlopen'ed library's thread-locals by intercepting __tls_get_addr.
option(PVMM_TLS_DESCRIPTORS "Build libpvmm with TLS descriptors (-mtls-dialect=gnu2; needs glibc >= 2.40 where dlopen'ed)" OFF)
function(pvmm_hot_code_flags target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-ffunction-sections -fdata-sections>)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-mtls-dialect=gnu2 PVMM_CXX_HAS_TLS_DESCRIPTORS)
  if(PVMM_TLS_DESCRIPTORS AND PVMM_CXX_HAS_TLS_DESCRIPTORS AND NOT PVMM_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-mtls-dialect=gnu2>)
  endif()
endfunction()
function(pvmm_hot_layout target)
  set(script ${PROJECT_SOURCE_DIR}/cmake/hot_layout.ld)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-Wl,-T,${script}" PVMM_LINKER_TAKES_HOT_LAYOUT)
  if(PVMM_LINKER_TAKES_HOT_LAYOUT)
    target_link_options(${target} PRIVATE "-Wl,-T,${script}")
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${script})
  endif()
endfunction()

# Lets the compiler call and inline a library function defined in the same file directly (it may assume no
# other definition interposes it): see pvmm_add_backend.
function(pvmm_bind_locally target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
endfunction()

# Unity build (PVMM_UNITY_BUILD): a target's sources compiled PVMM_UNITY_BATCH at a time, so the headers they
# share (doctest, pvmm, the standard library) and the inline and template code they instantiate alike are
# compiled once per batch instead of once per file.
function(pvmm_unity_build target)
  if(PVMM_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${PVMM_UNITY_BATCH})
  endif()
endfunction()

# The signal module (src/backend/signal_kernels.cu compiled to PTX by the CUDA toolkit's nvcc, then embedded as a raw
# string in signal_kernels_ptx.inc) for `target`, which includes it: the cuda backend and the hip backend on HIP's
# NVIDIA platform load it with the driver at run time. One rule per directory, shared by its targets. The rule makes
# its output folder itself: Ninja creates an output's folder before running a rule, Make (CMake's default generator)
# does not, and nvcc -o does not either.
function(pvmm_embed_signal_module target)
  find_package(CUDAToolkit REQUIRED)
  find_program(PVMM_NVCC nvcc HINTS ${CUDAToolkit_BIN_DIR} REQUIRED)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/signal_module)
  get_filename_component(backend ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  set(rule pvmm_signal_module_${backend})
  if(NOT TARGET ${rule})
    set(kernels ${PROJECT_SOURCE_DIR}/src/backend/signal_kernels.cu)
    add_custom_command(OUTPUT ${dir}/signal_kernels_ptx.inc
      BYPRODUCTS ${dir}/signal_kernels.ptx
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
      COMMAND ${PVMM_NVCC} -ptx -arch=compute_75 -std=c++17 -I${PROJECT_SOURCE_DIR}/include ${kernels}
              -o ${dir}/signal_kernels.ptx
      COMMAND ${CMAKE_COMMAND} -DIN=${dir}/signal_kernels.ptx -DOUT=${dir}/signal_kernels_ptx.inc
              -P ${PROJECT_SOURCE_DIR}/cmake/embed_text.cmake
      DEPENDS ${kernels} ${PROJECT_SOURCE_DIR}/include/pvmm/team_device.hpp
              ${PROJECT_SOURCE_DIR}/include/pvmm/detail/device_primitives.hpp ${PROJECT_SOURCE_DIR}/cmake/embed_text.cmake
      COMMENT "signal kernels -> PTX")
    add_custom_target(${rule} DEPENDS ${dir}/signal_kernels_ptx.inc)
  endif()
  add_dependencies(${target} ${rule})
  target_include_directories(${target} PRIVATE ${dir})
endfunction()
