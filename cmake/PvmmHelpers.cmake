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
