# Man pages made from the programs' own --help and --version by help2man
# (Debian's help2man package): tocl(1) and toclsd(8), gzip'ed, installed with
# the daemon component. A page's extra sections (SEE ALSO, ...) come from
# deploy/man/<program>.h2m.
find_program(TOCL_HELP2MAN help2man)
find_program(TOCL_GZIP gzip)
if(NOT TOCL_HELP2MAN OR NOT TOCL_GZIP)
  message(WARNING "help2man or gzip not found: no man pages (deploy/install-deps.sh installs them)")
  return()
endif()

set(tocl_man_pages)
# tocl_man_page(program section "what it is")
function(tocl_man_page program section name)
  set(page ${PROJECT_BINARY_DIR}/man/${program}.${section})
  add_custom_command(
    OUTPUT ${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
    # The defaults --help shows must not come from the builder's environment.
    COMMAND ${CMAKE_COMMAND} -E env --unset=TOCL_DAEMON --unset=TOCL_CREDENTIALS
            ${TOCL_HELP2MAN} --no-info --no-discard-stderr --section ${section} --name ${name}
            --include ${PROJECT_SOURCE_DIR}/deploy/man/${program}.h2m
            --output ${page} $<TARGET_FILE:${program}>
    COMMAND ${TOCL_GZIP} -9nf ${page}
    DEPENDS ${program} ${PROJECT_SOURCE_DIR}/deploy/man/${program}.h2m
    COMMENT "help2man ${program}"
    VERBATIM)
  set(tocl_man_pages ${tocl_man_pages} ${page}.gz PARENT_SCOPE)
  install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section} COMPONENT daemon)
endfunction()

tocl_man_page(tocl 1 "the command line of a tocl cluster's directory")
tocl_man_page(toclsd 8 "the tocl per-node daemon")
add_custom_target(tocl_man_pages ALL DEPENDS ${tocl_man_pages})
