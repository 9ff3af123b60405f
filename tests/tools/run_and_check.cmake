# Runs PROGRAM with ARGS (space-separated), then checks that it exited with EXIT_CODE and that
# its combined output matches the regular expression EXPECT. Prints the output either way.
separate_arguments(arg_list UNIX_COMMAND "${ARGS}")
execute_process(
  COMMAND "${PROGRAM}" ${arg_list}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output
  TIMEOUT 50)
message("${output}")
if(NOT "${result}" STREQUAL "${EXIT_CODE}")
  message(FATAL_ERROR "'${PROGRAM} ${ARGS}' exited with '${result}', expected ${EXIT_CODE}")
endif()
string(REPLACE "\n" " " flat "${output}")
if(DEFINED EXPECT AND NOT "${EXPECT}" STREQUAL "" AND NOT flat MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output of '${PROGRAM} ${ARGS}' does not match '${EXPECT}'")
endif()
