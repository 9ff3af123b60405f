# Warnings, sanitizers and checks shared by every soma target.
add_library(soma_options INTERFACE)
target_compile_options(soma_options INTERFACE -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)
# TLS descriptors: a thread_local in libsoma.so is reached in a few instructions instead of a
# call to __tls_get_addr (the error state, the current device, memory history's cursor are read
# on every call). Safe for a library that Python loads with dlopen.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_compile_options(soma_options INTERFACE $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-mtls-dialect=gnu2>)
endif()
if(SOMA_EXPENSIVE_CHECKS)
  target_compile_definitions(soma_options INTERFACE SOMA_EXPENSIVE_CHECKS=1)
endif()
if(SOMA_SANITIZER STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  # -O1, the level ASan's documentation recommends, instead of RelWithDebInfo's -O2: it finds the
  # same errors, and gcc compiles the instrumented tests in about 60 % of the time (a test file
  # of 1 100 lines: 40 s at -O2, 25 s at -O1), most of CI's asan stage.
  add_compile_options($<$<CONFIG:RelWithDebInfo>:-O1>)
  add_link_options(-fsanitize=address,undefined)
elseif(SOMA_SANITIZER STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT SOMA_SANITIZER STREQUAL "")
  message(FATAL_ERROR "SOMA_SANITIZER must be '', 'address' or 'thread', not '${SOMA_SANITIZER}'")
endif()
