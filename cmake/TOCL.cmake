# Small helpers so that each folder's CMakeLists stays a few lines long.

set(TOCL_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough)
option(TOCL_WERROR "Treat warnings as errors" OFF)

function(tocl_set_warnings target)
  target_compile_options(${target} PRIVATE ${TOCL_WARNINGS})
  if(TOCL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# tocl_add_library(name SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...] [INCLUDE dir])
# Creates tocl_<name> with the alias tocl::<name>.
function(tocl_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS;PUBLIC_INCLUDE;PRIVATE_INCLUDE" ${ARGN})
  add_library(tocl_${name} STATIC ${ARG_SOURCES})
  add_library(tocl::${name} ALIAS tocl_${name})
  set_target_properties(tocl_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(tocl_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_include_directories(tocl_${name} PUBLIC ${ARG_PUBLIC_INCLUDE} PRIVATE ${ARG_PRIVATE_INCLUDE})
  tocl_set_warnings(tocl_${name})
endfunction()

# tocl_add_executable(name SOURCES ... DEPS ...)
function(tocl_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  tocl_set_warnings(${name})
  # GCC 12 at -O2 reports a "potential null pointer dereference" inside
  # CLI11's string splitting (a system header) wherever it is inlined: a
  # false positive only optimised builds see.
  if("CLI11::CLI11" IN_LIST ARG_DEPS)
    target_compile_options(${name} PRIVATE -Wno-null-dereference)
  endif()
endfunction()

# tocl_add_test(name SOURCES ... DEPS ... [LABELS ...])
# One Catch2 binary per call; every TEST_CASE becomes a ctest test.
function(tocl_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE tocl_test_main ${ARG_DEPS})
  tocl_set_warnings(${name})
  # ctest names a test by its Catch2 name, split at every ';' (a CMake list):
  # a part matches no test and, without NoTests, passes having run nothing.
  catch_discover_tests(${name} TEST_PREFIX "${name}: " PROPERTIES LABELS "${ARG_LABELS}"
                       DISCOVERY_MODE PRE_TEST EXTRA_ARGS --warn NoTests)
endfunction()

# tocl_set_test_labels(name label...): gives every test of the
# tocl_add_test binary `name` these labels. tocl_add_test passes one label
# only (catch_discover_tests splits a list); this sets them in a file ctest
# reads after the discovered tests are defined.
function(tocl_set_test_labels name)
  set(file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(WRITE ${file}
    "if(${name}_TESTS)\n"
    "  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${ARGN}\")\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${file})
endfunction()
