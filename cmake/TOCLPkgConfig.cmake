# Writes tocl.pc from its template once libtocl.so is linked (a POST_BUILD
# step, cmake/TOCLInstall.cmake): Libs.private, what a static link of
# libtocl.a needs besides it, is the list of libraries libtocl.so needs
# (linked --as-needed: only those it uses), as -l flags.
#   cmake -DLIBRARY=libtocl.so -DREADELF=readelf -DTEMPLATE=tocl.pc.in -DOUTPUT=tocl.pc -P ...
execute_process(COMMAND ${READELF} -d ${LIBRARY} OUTPUT_VARIABLE dynamic RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "readelf -d ${LIBRARY} failed")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[lib[^]]+\\.so[^]]*\\]" needed "${dynamic}")
set(TOCL_PC_LIBS_PRIVATE)
foreach(entry ${needed})
  string(REGEX REPLACE ".*\\[lib([^]]+)\\.so[^]]*\\]" "\\1" name "${entry}")
  # The C and C++ runtimes come with the compiler driver.
  if(NOT name MATCHES "^(c|m|stdc\\+\\+|gcc_s)$")
    string(APPEND TOCL_PC_LIBS_PRIVATE " -l${name}")
  endif()
endforeach()
string(STRIP "${TOCL_PC_LIBS_PRIVATE} -pthread" TOCL_PC_LIBS_PRIVATE)
configure_file(${TEMPLATE} ${OUTPUT} @ONLY)
