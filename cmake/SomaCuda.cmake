# Optional CUDA language support, for the GPU-side tests (tests/gpu/) and the benchmark against
# the driver's allocator (bench/vs_driver.cu). The soma library itself never needs nvcc (the cuda
# backend loads the driver at run time); only those programs are compiled with it.
#
#   SOMA_ENABLE_CUDA = AUTO (default) | ON | OFF
#     AUTO  CUDA is enabled when check_language(CUDA) finds a working nvcc, no sanitizer build
#           is asked for (nvcc does not take -fsanitize) and tests or benchmarks are built.
#     ON    CUDA is required: configuring fails when no working nvcc is found.
#     OFF   nothing is compiled with nvcc.
#   CMAKE_CUDA_ARCHITECTURES defaults to 90 (H100/H200).
#
# Result, for the rest of the build (this file is included at the top level, so the variable is
# seen by every subdirectory):
#   SOMA_CUDA_ENABLED  TRUE or FALSE
#
# Include from the top-level CMakeLists.txt, after cmake/SomaOptions.cmake (which defines
# SOMA_SANITIZER's flags) and before any add_subdirectory().

set(SOMA_ENABLE_CUDA "AUTO" CACHE STRING
  "Compile the GPU tests and the driver benchmark with nvcc: AUTO (if nvcc works), ON, OFF")
set_property(CACHE SOMA_ENABLE_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${SOMA_ENABLE_CUDA}" _soma_cuda_mode)
if(_soma_cuda_mode STREQUAL "TRUE" OR _soma_cuda_mode STREQUAL "YES" OR _soma_cuda_mode STREQUAL "1")
  set(_soma_cuda_mode ON)
elseif(_soma_cuda_mode STREQUAL "FALSE" OR _soma_cuda_mode STREQUAL "NO" OR _soma_cuda_mode STREQUAL "0")
  set(_soma_cuda_mode OFF)
endif()
if(NOT _soma_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "SOMA_ENABLE_CUDA must be AUTO, ON or OFF, not '${SOMA_ENABLE_CUDA}'")
endif()

set(SOMA_CUDA_ENABLED FALSE)
set(_soma_cuda_reason "")

if(_soma_cuda_mode STREQUAL "OFF")
  set(_soma_cuda_reason "SOMA_ENABLE_CUDA=OFF")
elseif(_soma_cuda_mode STREQUAL "AUTO" AND NOT SOMA_SANITIZER STREQUAL "")
  # add_compile_options(-fsanitize=...) of SomaOptions.cmake would reach nvcc, which rejects it.
  set(_soma_cuda_reason "sanitizer build (SOMA_SANITIZER=${SOMA_SANITIZER})")
elseif(_soma_cuda_mode STREQUAL "AUTO" AND NOT SOMA_BUILD_TESTS AND NOT SOMA_BUILD_BENCHMARKS)
  set(_soma_cuda_reason "neither tests nor benchmarks are built")
else()
  if(_soma_cuda_mode STREQUAL "ON" AND NOT SOMA_SANITIZER STREQUAL "")
    message(FATAL_ERROR
      "SOMA_ENABLE_CUDA=ON cannot be combined with SOMA_SANITIZER=${SOMA_SANITIZER}: nvcc does "
      "not accept -fsanitize. Use SOMA_ENABLE_CUDA=OFF (or AUTO) for sanitizer builds.")
  endif()
  # nvcc compiles host code with the same compiler as the rest of soma unless told otherwise.
  if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND NOT DEFINED ENV{CUDAHOSTCXX}
     AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH
      "Host compiler used by nvcc")
  endif()
  # nvcc not on PATH but installed at the usual place: let check_language find it.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(_soma_nvcc nvcc)
    if(NOT _soma_nvcc AND EXISTS /usr/local/cuda/bin/nvcc)
      set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
    endif()
    unset(_soma_nvcc CACHE)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (90: H100/H200)")
    endif()
    enable_language(CUDA)
    set(SOMA_CUDA_ENABLED TRUE)
  elseif(_soma_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR
      "SOMA_ENABLE_CUDA=ON but no working CUDA compiler was found. Put nvcc on PATH, set "
      "CUDACXX or CMAKE_CUDA_COMPILER, or configure with -DSOMA_ENABLE_CUDA=OFF.")
  else()
    set(_soma_cuda_reason "no working CUDA compiler (nvcc) found")
  endif()
endif()

if(SOMA_CUDA_ENABLED)
  message(STATUS "soma: CUDA enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES}): GPU tests and bench/vs_driver are built")
  # Warnings for nvcc-compiled targets: soma_options' -Wall... are host-compiler flags that nvcc
  # does not take directly, so CUDA targets link this instead.
  add_library(soma_cuda_options INTERFACE)
  target_compile_options(soma_cuda_options INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-missing-field-initializers>)
  # C++20 for .cu files, as for the rest of soma. CMake before 3.26 does not know nvcc's C++20
  # flag (nvcc >= 12 has it); tell it, as newer CMake's Compiler/NVIDIA-CUDA.cmake does.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
     AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
else()
  message(STATUS "soma: CUDA disabled (${_soma_cuda_reason}): GPU tests and bench/vs_driver "
                 "are not built")
endif()
unset(_soma_cuda_mode)
unset(_soma_cuda_reason)
