# cmake/ChorusWritePc.cmake - run at install time (install(CODE) in ChorusInstall.cmake): writes
# chorus.pc for the prefix being installed into. In: CMAKE_INSTALL_PREFIX (the install's),
# CHORUS_PC_TEMPLATE, CHORUS_PC_OUTPUT, CHORUS_PC_LIBDIR, CHORUS_PC_INCLUDEDIR (as configured:
# relative to the prefix, or absolute), CHORUS_PC_VERSION, CHORUS_PC_LIBS_PRIVATE.

# chorus_pc_dir(<dir> <out>): ${prefix}/<dir> for a relative dir, or an absolute one under the
# prefix; any other absolute dir as it is.
function(chorus_pc_dir dir out)
  if(NOT IS_ABSOLUTE "${dir}")
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
    return()
  endif()
  string(LENGTH "${CHORUS_PC_PREFIX}" prefix_len)
  string(FIND "${dir}/" "${CHORUS_PC_PREFIX}/" at)
  if(at EQUAL 0)
    string(SUBSTRING "${dir}" ${prefix_len} -1 rest)
    set(${out} "\${prefix}${rest}" PARENT_SCOPE)
  else()
    set(${out} "${dir}" PARENT_SCOPE)
  endif()
endfunction()

foreach(var CHORUS_PC_TEMPLATE CHORUS_PC_OUTPUT CHORUS_PC_LIBDIR CHORUS_PC_INCLUDEDIR CHORUS_PC_VERSION)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "ChorusWritePc.cmake: ${var} is not set")
  endif()
endforeach()

# The prefix without a trailing slash (cmake --install --prefix /opt/chorus/ would give one).
string(REGEX REPLACE "(.)/+$" "\\1" CHORUS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
chorus_pc_dir("${CHORUS_PC_LIBDIR}" CHORUS_PC_LIBDIR)
chorus_pc_dir("${CHORUS_PC_INCLUDEDIR}" CHORUS_PC_INCLUDEDIR)
# Threads are part of the C library since glibc 2.34: then no Libs.private line at all.
set(CHORUS_PC_LIBS_PRIVATE_LINE "")
if(NOT "${CHORUS_PC_LIBS_PRIVATE}" STREQUAL "")
  set(CHORUS_PC_LIBS_PRIVATE_LINE "Libs.private: ${CHORUS_PC_LIBS_PRIVATE}\n")
endif()
configure_file("${CHORUS_PC_TEMPLATE}" "${CHORUS_PC_OUTPUT}" @ONLY)
