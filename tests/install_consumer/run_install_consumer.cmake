# cmake -P script behind the install_consumer_find_package test (see CMakeLists.txt here).
# Inputs: SOMA_BUILD_DIR, SOMA_CONFIG, WORK_DIR, CONSUMER_SOURCE_DIR, CONSUMER_GENERATOR,
# CONSUMER_MAKE_PROGRAM, CONSUMER_C_COMPILER, EXPECTED_VERSION.
cmake_minimum_required(VERSION 3.25)

foreach(var SOMA_BUILD_DIR WORK_DIR CONSUMER_SOURCE_DIR CONSUMER_GENERATOR EXPECTED_VERSION)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_install_consumer.cmake: ${var} is not set")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
# Every run starts from nothing, so a stale install cannot make it pass.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step what)
  message(STATUS "install_consumer: ${what}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc})")
  endif()
endfunction()

set(config_args "")
if(NOT "${SOMA_CONFIG}" STREQUAL "")
  set(config_args --config "${SOMA_CONFIG}")
endif()

run_step("install" "${CMAKE_COMMAND}" --install "${SOMA_BUILD_DIR}" --prefix "${prefix}" ${config_args})

# The package must come from the prefix alone: no package registry, no system copy.
set(configure_args
  -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}" -G "${CONSUMER_GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"
  "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF"
  "-DSOMA_EXPECTED_VERSION=${EXPECTED_VERSION}"
  "-DSOMA_EXPECTED_PREFIX=${prefix}")
if(NOT "${SOMA_CONFIG}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${SOMA_CONFIG}")
endif()
foreach(pair "CONSUMER_MAKE_PROGRAM;CMAKE_MAKE_PROGRAM" "CONSUMER_C_COMPILER;CMAKE_C_COMPILER")
  list(GET pair 0 from)
  list(GET pair 1 to)
  if(NOT "${${from}}" STREQUAL "")
    list(APPEND configure_args "-D${to}=${${from}}")
  endif()
endforeach()
run_step("configure consumer" "${CMAKE_COMMAND}" ${configure_args})
run_step("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args})

# Single-config generators put the program at the top of the build tree, multi-config ones in
# a folder per configuration.
set(program "${consumer_build}/soma_consumer")
if(NOT EXISTS "${program}" AND EXISTS "${consumer_build}/${SOMA_CONFIG}/soma_consumer")
  set(program "${consumer_build}/${SOMA_CONFIG}/soma_consumer")
endif()
run_step("run consumer" "${program}")
message(STATUS "install_consumer: passed")
