# What `cmake --install` puts under the prefix (and what the Debian packages
# are made of, cmake/TOCLPackage.cmake). Components, one per package:
#   lib     libtocl.so.MAJOR                                     (libtocl0)
#   dev     headers, libtocl.a, the libtocl.so link, CMake package, tocl.pc
#                                                                 (libtocl-dev)
#   daemon  toclsd, toclsd-exec, tocl, the systemd unit, the example config,
#           man pages, bash completion                           (toclsd)
include(CMakePackageConfigHelpers)

set(TOCL_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tocl)

# --- the library -----------------------------------------------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libtocl/include/tocl
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(FILES ${TOCL_GENERATED_INCLUDE_DIR}/tocl/export.h ${TOCL_GENERATED_INCLUDE_DIR}/tocl/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tocl COMPONENT dev)
# Shared libraries are not executable (Debian policy 8.1).
install(TARGETS tocl_shared EXPORT tocl-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
          COMPONENT lib NAMELINK_COMPONENT dev)
install(TARGETS tocl_static EXPORT tocl-static-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
# A stripped install (`cmake --install --strip`, the packages) strips the
# executables and libtocl.so; libtocl.a loses its debug sections only, as
# Debian's dh_strip does it.
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug --enable-deterministic-archives
      \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libtocl.a\"
      COMMAND_ERROR_IS_FATAL ANY)
  endif()" COMPONENT dev)
install(EXPORT tocl-targets NAMESPACE tocl:: DESTINATION ${TOCL_CMAKE_PACKAGE_DIR} COMPONENT dev)
install(EXPORT tocl-static-targets NAMESPACE tocl:: DESTINATION ${TOCL_CMAKE_PACKAGE_DIR}
        COMPONENT dev)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tocl-config.cmake.in
  ${PROJECT_BINARY_DIR}/tocl-config.cmake INSTALL_DESTINATION ${TOCL_CMAKE_PACKAGE_DIR})
# The SONAME carries the major version: so does compatibility.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tocl-config-version.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tocl-config.cmake ${PROJECT_BINARY_DIR}/tocl-config-version.cmake
        DESTINATION ${TOCL_CMAKE_PACKAGE_DIR} COMPONENT dev)

# tocl.pc: relocatable (the prefix is found from the file's own place), its
# Libs.private are the libraries libtocl.so turned out to need, read from
# the linked library (cmake/TOCLPkgConfig.cmake).
file(RELATIVE_PATH TOCL_PC_PREFIX_FROM_PCDIR
     /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" TOCL_PC_PREFIX_FROM_PCDIR ${TOCL_PC_PREFIX_FROM_PCDIR})
set(TOCL_PC_LIBS_PRIVATE "@TOCL_PC_LIBS_PRIVATE@")  # filled in after the link
configure_file(${PROJECT_SOURCE_DIR}/cmake/tocl.pc.in ${PROJECT_BINARY_DIR}/tocl.pc.in @ONLY)
add_custom_command(
  OUTPUT ${PROJECT_BINARY_DIR}/tocl.pc
  COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:tocl_shared> -DREADELF=${CMAKE_READELF}
          -DTEMPLATE=${PROJECT_BINARY_DIR}/tocl.pc.in -DOUTPUT=${PROJECT_BINARY_DIR}/tocl.pc
          -P ${PROJECT_SOURCE_DIR}/cmake/TOCLPkgConfig.cmake
  DEPENDS tocl_shared ${PROJECT_BINARY_DIR}/tocl.pc.in ${PROJECT_SOURCE_DIR}/cmake/TOCLPkgConfig.cmake
  COMMENT "tocl.pc"
  VERBATIM)
add_custom_target(tocl_pkg_config ALL DEPENDS ${PROJECT_BINARY_DIR}/tocl.pc)
install(FILES ${PROJECT_BINARY_DIR}/tocl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)

# --- the daemon and the tools ----------------------------------------------------------
# toclsd-exec must sit next to toclsd (toclsd/spawn/exec_helper.h).
install(TARGETS toclsd toclsd-exec RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT daemon)
install(TARGETS tocl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT daemon)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/completion/tocl ${PROJECT_SOURCE_DIR}/deploy/completion/toclsd
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT daemon)
include(TOCLManPages)

# The systemd unit and the example config name where toclsd and the config
# are, which only the prefix given at install time says (`--prefix`, or
# /usr for the packages): written then, by cmake/TOCLInstallSystemFiles.cmake.
install(CODE "
  set(TOCL_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(TOCL_BINARY_DIR \"${PROJECT_BINARY_DIR}\")
  set(TOCL_SBINDIR \"${CMAKE_INSTALL_SBINDIR}\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/TOCLInstallSystemFiles.cmake\")
  " COMPONENT daemon)
