# Run at install time (install(CODE) in TOCLInstall.cmake), when
# CMAKE_INSTALL_PREFIX is the prefix really installed to: writes the
# systemd unit naming that prefix's toclsd and config, and installs both.
# The prefix /usr (the Debian packages) puts them in /lib/systemd/system and
# /etc/tocl; any other prefix in PREFIX/lib/systemd/system and PREFIX/etc/tocl
# (GNUInstallDirs' rule for sysconfdir).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(tocl_sysconfdir /etc)
  set(tocl_unitdir /lib/systemd/system)
else()
  set(tocl_sysconfdir ${CMAKE_INSTALL_PREFIX}/etc)
  set(tocl_unitdir ${CMAKE_INSTALL_PREFIX}/lib/systemd/system)
endif()
set(TOCLSD_PATH ${CMAKE_INSTALL_PREFIX}/${TOCL_SBINDIR}/toclsd)
set(TOCLSD_CONFIG ${tocl_sysconfdir}/tocl/toclsd.toml)
configure_file(${TOCL_SOURCE_DIR}/deploy/toclsd.service.in
               ${TOCL_BINARY_DIR}/install-time/toclsd.service @ONLY)
file(INSTALL ${TOCL_BINARY_DIR}/install-time/toclsd.service DESTINATION ${tocl_unitdir}
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL ${TOCL_SOURCE_DIR}/deploy/toclsd.toml DESTINATION ${tocl_sysconfdir}/tocl
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
