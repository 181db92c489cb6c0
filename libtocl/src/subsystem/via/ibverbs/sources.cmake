# The via subsystem's ibverbs provider, included by libtocl/CMakeLists.txt.
# Sets TOCL_IBVERBS_SOURCES (relative to libtocl/) and the target tocl_rdma
# (rdma-core's libibverbs and librdmacm), which the subsystems library
# links. The provider always builds; without a device it is not offered at
# run time.
find_path(TOCL_IBVERBS_INCLUDE_DIR infiniband/verbs.h)
find_path(TOCL_RDMACM_INCLUDE_DIR rdma/rdma_cma.h)
find_library(TOCL_IBVERBS_LIBRARY ibverbs)
find_library(TOCL_RDMACM_LIBRARY rdmacm)
if(NOT TOCL_IBVERBS_INCLUDE_DIR OR NOT TOCL_RDMACM_INCLUDE_DIR OR NOT TOCL_IBVERBS_LIBRARY
   OR NOT TOCL_RDMACM_LIBRARY)
  message(FATAL_ERROR
    "rdma-core is required for the via subsystem's ibverbs provider: "
    "apt-get install libibverbs-dev librdmacm-dev (or configure with -DTOCL_WITH_VIA=OFF)")
endif()

if(NOT TARGET tocl_rdma)
  add_library(tocl_rdma INTERFACE)
  target_include_directories(tocl_rdma SYSTEM INTERFACE
    ${TOCL_IBVERBS_INCLUDE_DIR} ${TOCL_RDMACM_INCLUDE_DIR})
  target_link_libraries(tocl_rdma INTERFACE ${TOCL_RDMACM_LIBRARY} ${TOCL_IBVERBS_LIBRARY})
endif()

set(TOCL_IBVERBS_SOURCES
  src/subsystem/via/ibverbs/verbs_memory.cc
  src/subsystem/via/ibverbs/verbs_provider.cc
  src/subsystem/via/ibverbs/verbs_vi.cc)
