# One version number for the library and every program: project(VERSION).
# tocl/version.h (generated, installed with the public headers) carries it
# to the code: TOCL_VERSION_STRING, and tocl::LibraryVersion() for the
# version of the library a program actually runs with.
set(TOCL_GENERATED_INCLUDE_DIR ${PROJECT_BINARY_DIR}/generated/include)
configure_file(${PROJECT_SOURCE_DIR}/libtocl/include/tocl/version.h.in
               ${TOCL_GENERATED_INCLUDE_DIR}/tocl/version.h @ONLY)
