# The Debian packages, `make package` (CPack's DEB generator, one package per
# install component of cmake/TOCLInstall.cmake):
#   libtocl0     the shared library
#   libtocl-dev  headers, libtocl.a, libtocl.so, the CMake package, tocl.pc
#   toclsd       toclsd, toclsd-exec and tocl, the systemd unit, /etc/tocl/toclsd.toml
#                (a conffile), the `tocl` system user (postinst), man pages,
#                bash completion
# Their Debian files (changelog, copyright, maintainer scripts) are in
# deploy/debian/. tests/install checks the packages' contents and lintian.

# Every package carries the copyright file and the changelog (Debian policy
# 12.5, 12.7). Only in the packages: a plain `cmake --install` leaves them out.
set(TOCL_DEBIAN_DIR ${PROJECT_SOURCE_DIR}/deploy/debian)
file(STRINGS ${TOCL_DEBIAN_DIR}/changelog tocl_changelog_head LIMIT_COUNT 1)
if(NOT tocl_changelog_head MATCHES "^tocl \\(${PROJECT_VERSION}\\) ")
  message(FATAL_ERROR "deploy/debian/changelog starts with '${tocl_changelog_head}': "
                      "its newest entry must be the project's version ${PROJECT_VERSION}")
endif()
add_custom_command(
  OUTPUT ${PROJECT_BINARY_DIR}/debian/changelog.gz
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/debian
  COMMAND ${CMAKE_COMMAND} -E copy ${TOCL_DEBIAN_DIR}/changelog ${PROJECT_BINARY_DIR}/debian/changelog
  COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/debian/changelog
  DEPENDS ${TOCL_DEBIAN_DIR}/changelog
  VERBATIM)
add_custom_target(tocl_debian_changelog ALL DEPENDS ${PROJECT_BINARY_DIR}/debian/changelog.gz)

set(tocl_packages lib:libtocl0 dev:libtocl-dev daemon:toclsd)
foreach(entry ${tocl_packages})
  string(REPLACE ":" ";" entry ${entry})
  list(GET entry 0 component)
  list(GET entry 1 package)
  install(FILES ${TOCL_DEBIAN_DIR}/copyright ${PROJECT_BINARY_DIR}/debian/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package}
          PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
          COMPONENT ${component} EXCLUDE_FROM_ALL)
  if(EXISTS ${TOCL_DEBIAN_DIR}/${package}.lintian-overrides)
    install(FILES ${TOCL_DEBIAN_DIR}/${package}.lintian-overrides
            DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME ${package}
            PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
            COMPONENT ${component} EXCLUDE_FROM_ALL)
  endif()
  string(TOUPPER ${component} component)
  set(CPACK_DEBIAN_${component}_PACKAGE_NAME ${package})
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tocl)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "tocl maintainers <maintainers@tocl.example.org>")
set(CPACK_PACKAGE_VENDOR "tocl")
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: each package's description (below)
# starts with its own summary line.
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_COMPONENTS_ALL lib dev daemon)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)
# Installed with CMAKE_INSTALL_PREFIX=/usr and DESTDIR (not a staging
# prefix), so that install-time files (the unit) name /usr/sbin/toclsd and
# /etc/tocl.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# CPack writes a postinst and postrm that run ldconfig; Debian wants the
# ldconfig trigger as well (lintian: lacks-ldconfig-trigger).
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${TOCL_DEBIAN_DIR}/triggers)
set(CPACK_COMPONENT_LIB_DESCRIPTION
  "thread-oriented communication for clusters (shared library)
tocl gives every thread of a cluster a global id and carries messages
between threads by that id, over shared memory, TCP and RDMA. This package
has libtocl.so.${PROJECT_VERSION_MAJOR}, the client library applications run with; they
need the toclsd daemon on each host.")

set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libtocl0 (= ${PROJECT_VERSION})")
# Only static linking (libtocl.a) needs them.
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS
  "libgrpc++-dev, libprotobuf-dev, libspdlog-dev, libfmt-dev, libssl-dev, libibverbs-dev, librdmacm-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "thread-oriented communication for clusters (development files)
The headers of tocl's C++20 API, the static library libtocl.a, the
CMake package (find_package(tocl), target tocl::tocl) and tocl.pc for
pkg-config.")

set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION net)
set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
  ${TOCL_DEBIAN_DIR}/conffiles ${TOCL_DEBIAN_DIR}/postinst ${TOCL_DEBIAN_DIR}/prerm
  ${TOCL_DEBIAN_DIR}/postrm)
set(CPACK_COMPONENT_DAEMON_DESCRIPTION
  "thread-oriented communication for clusters (daemon and tools)
toclsd, the per-host daemon that keeps the directory of hosts, processes
and threads and forms clusters with the daemons of other hosts, runs as
the system user tocl (systemd unit toclsd.service, configuration
/etc/tocl/toclsd.toml). The tocl command line lists, queries, spawns and
signals the cluster's processes and threads.")

include(CPack)
