# cmake/ChorusInstall.cmake - what lets other builds find an installed Chorus: the pkg-config
# file chorus.pc, the CMake package (find_package(Chorus) -> Chorus::chorus) and the run path
# of the installed tools. Included by the top-level CMakeLists.txt after the library target.

include(CMakePackageConfigHelpers)

set(CHORUS_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Chorus)
set(CHORUS_PKGCONFIG_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The installed tools find libchorus relative to themselves ($ORIGIN/../lib/<multiarch>), so a
# prefix that is not in the loader's search path (/opt/chorus, $HOME/.local) works too.
file(RELATIVE_PATH CHORUS_BIN_TO_LIB ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
set(CHORUS_BIN_RPATH "$ORIGIN/${CHORUS_BIN_TO_LIB}")

# ---- CMake package: <libdir>/cmake/Chorus/{ChorusConfig,ChorusConfigVersion,ChorusTargets}.cmake
# The exported targets file computes the prefix from its own location, so the package stays
# valid when the prefix is chosen at install time (cmake --install --prefix) or moved.
install(EXPORT ChorusTargets NAMESPACE Chorus:: FILE ChorusTargets.cmake
        DESTINATION ${CHORUS_CMAKE_INSTALL_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ChorusConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/ChorusConfig.cmake
                              INSTALL_DESTINATION ${CHORUS_CMAKE_INSTALL_DIR})
# 0.x releases may change the ABI between minor versions (the SONAME is libchorus.so.0 for
# now): a request for 0.1 accepts 0.1.z only; from 1.0 on, any 1.y >= the request.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(CHORUS_VERSION_COMPATIBILITY SameMinorVersion)
else()
  set(CHORUS_VERSION_COMPATIBILITY SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ChorusConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY ${CHORUS_VERSION_COMPATIBILITY})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ChorusConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ChorusConfigVersion.cmake
        DESTINATION ${CHORUS_CMAKE_INSTALL_DIR})

# ---- pkg-config: <libdir>/pkgconfig/chorus.pc
# Written at install time, not at configure time, so that its prefix is the one installed into
# (`cmake --install build --prefix DIR` overrides CMAKE_INSTALL_PREFIX only then). libdir and
# includedir are given relative to ${prefix} when they lie under it, as pkg-config files do.
# Libs.private: what a static link would add; the shared library records its own needs.
set(CHORUS_PC_LIBS_PRIVATE "")
if(CMAKE_THREAD_LIBS_INIT)
  set(CHORUS_PC_LIBS_PRIVATE "${CMAKE_THREAD_LIBS_INIT}")
endif()
set(CHORUS_PC_STAGED ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/chorus.pc)
install(CODE "
  set(CHORUS_PC_TEMPLATE \"${CMAKE_CURRENT_LIST_DIR}/chorus.pc.in\")
  set(CHORUS_PC_OUTPUT \"${CHORUS_PC_STAGED}\")
  set(CHORUS_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(CHORUS_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(CHORUS_PC_VERSION \"${PROJECT_VERSION}\")
  set(CHORUS_PC_LIBS_PRIVATE \"${CHORUS_PC_LIBS_PRIVATE}\")
  include(\"${CMAKE_CURRENT_LIST_DIR}/ChorusWritePc.cmake\")
")
install(FILES ${CHORUS_PC_STAGED} DESTINATION ${CHORUS_PKGCONFIG_INSTALL_DIR})
