# Runs a command that must succeed and print a line matching a regular expression (a ctest
# PASS_REGULAR_EXPRESSION ignores the exit status: a command that printed the line and then
# failed passed):
#   cmake "-DCOMMAND=prog|arg1|arg2" -DEXPECT=<regex> -P expect_output.cmake
foreach(var COMMAND EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_output.cmake: -D${var}=... missing")
  endif()
endforeach()
string(REPLACE "|" ";" argv "${COMMAND}")
execute_process(COMMAND ${argv} RESULT_VARIABLE result OUTPUT_VARIABLE output
                ERROR_VARIABLE output)
message("${output}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${argv}: exit status ${result}, expected 0")
endif()
if(NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "${argv}: no output line matches ${EXPECT}")
endif()
