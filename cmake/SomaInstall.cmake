# Install rules and the CMake package, so that an installed soma is found with
#
#   find_package(soma CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE soma::soma)
#
# Installed: the shared library `soma` (exported as soma::soma), the public headers in
# include/soma/, the `soma` program (target soma_cli) when it is built, and
# <libdir>/cmake/soma/{somaConfig,somaConfigVersion,somaTargets}.cmake.
# The static layers (soma_core, soma_backend, soma_runtime) are linked into the shared library
# PRIVATE and are neither installed nor exported.
include(CMakePackageConfigHelpers)

set(SOMA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/soma"
    CACHE STRING "Where somaConfig.cmake is installed, relative to the prefix")
mark_as_advanced(SOMA_INSTALL_CMAKEDIR)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/soma"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        COMPONENT soma_development)

if(NOT TARGET soma)
  message(WARNING "soma: no target 'soma' (src/capi); the library is not installed or exported")
  return()
endif()

# An exported target may carry only $<BUILD_INTERFACE:...> paths of the source or build tree;
# the installed copy gets <prefix>/include from INCLUDES DESTINATION below. A plain source path
# would make CMake refuse to generate, so wrap it here and say which line src/capi needs.
get_target_property(_soma_include_dirs soma INTERFACE_INCLUDE_DIRECTORIES)
if(_soma_include_dirs)
  set(_soma_fixed_dirs "")
  set(_soma_wrapped FALSE)
  foreach(_dir IN LISTS _soma_include_dirs)
    string(FIND "${_dir}/" "${PROJECT_SOURCE_DIR}/" _in_source)
    string(FIND "${_dir}/" "${PROJECT_BINARY_DIR}/" _in_build)
    if(_in_source EQUAL 0 OR _in_build EQUAL 0)
      list(APPEND _soma_fixed_dirs "$<BUILD_INTERFACE:${_dir}>")
      set(_soma_wrapped TRUE)
    else()
      list(APPEND _soma_fixed_dirs "${_dir}")
    endif()
  endforeach()
  if(_soma_wrapped)
    message(AUTHOR_WARNING
      "soma: target 'soma' exports a source/build-tree include path (${_soma_include_dirs}); "
      "wrapped in $<BUILD_INTERFACE:...>. src/capi/CMakeLists.txt should say:\n"
      "  target_include_directories(soma PUBLIC\n"
      "    $<BUILD_INTERFACE:\${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)")
    set_property(TARGET soma PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_soma_fixed_dirs}")
  endif()
endif()

# The installed program finds the installed library next door, wherever the prefix is.
if(TARGET soma_cli)
  get_target_property(_soma_cli_rpath soma_cli INSTALL_RPATH)
  if(NOT _soma_cli_rpath)
    file(RELATIVE_PATH _soma_bin_to_lib "/${CMAKE_INSTALL_BINDIR}" "/${CMAKE_INSTALL_LIBDIR}")
    set_property(TARGET soma_cli PROPERTY INSTALL_RPATH "$ORIGIN/${_soma_bin_to_lib}")
  endif()
endif()

install(TARGETS soma
        EXPORT somaTargets
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT soma_runtime
                NAMELINK_COMPONENT soma_development
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT soma_development
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT soma_runtime
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

if(TARGET soma_cli)
  install(TARGETS soma_cli RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT soma_runtime)
endif()

install(EXPORT somaTargets
        NAMESPACE soma::
        FILE somaTargets.cmake
        DESTINATION "${SOMA_INSTALL_CMAKEDIR}"
        COMPONENT soma_development)

# The config file is written here rather than kept as a .in file: it only loads the targets.
# Threads is found for consumers in case a later change makes it part of soma's interface.
set(_soma_config_in "${PROJECT_BINARY_DIR}/cmake/somaConfig.cmake.in")
file(WRITE "${_soma_config_in}" [=[
@PACKAGE_INIT@

include(CMakeFindDependencyMacro)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_dependency(Threads)

include("${CMAKE_CURRENT_LIST_DIR}/somaTargets.cmake")
check_required_components(soma)
]=])
configure_package_config_file(
  "${_soma_config_in}" "${PROJECT_BINARY_DIR}/cmake/somaConfig.cmake"
  INSTALL_DESTINATION "${SOMA_INSTALL_CMAKEDIR}")
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/cmake/somaConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/cmake/somaConfig.cmake"
              "${PROJECT_BINARY_DIR}/cmake/somaConfigVersion.cmake"
        DESTINATION "${SOMA_INSTALL_CMAKEDIR}"
        COMPONENT soma_development)
