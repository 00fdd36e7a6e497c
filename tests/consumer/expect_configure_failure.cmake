# Configures the consumer project with COMPONENTS that must fail, and checks the message:
#   cmake -DSOURCE=tests/consumer -DBINARY=<dir> -DPREFIX=<install prefix> -DGENERATOR=Ninja
#         -DCOMPONENTS=warp-drive -DEXPECT=<regex> -P expect_configure_failure.cmake
foreach(var SOURCE BINARY PREFIX GENERATOR COMPONENTS EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_configure_failure.cmake: -D${var}=... missing")
  endif()
endforeach()
file(REMOVE_RECURSE "${BINARY}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${BINARY}" -G "${GENERATOR}"
          "-DCMAKE_PREFIX_PATH=${PREFIX}" "-DCONSUMER_COMPONENTS=${COMPONENTS}"
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")
if(result EQUAL 0)
  message(FATAL_ERROR "find_package(specstate COMPONENTS ${COMPONENTS}) succeeded; it must fail")
endif()
string(REGEX REPLACE "[ \t\r\n]+" " " flat "${output}")  # CMake wraps long messages
if(NOT flat MATCHES "${EXPECT}")
  message(FATAL_ERROR "the configure failed without the expected message: ${EXPECT}")
endif()
message(STATUS "configure failed as expected, with: ${EXPECT}")
