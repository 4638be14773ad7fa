# DION_TRACE in CPU mode: a put_signal ping-pong of 200 rounds (tests/common/trace_test.h) writes one trace
# per rank; tests/common/trace_check.py checks every event and the merge tool's output. _drop: arrays of 50
# events keep the first 50 and count the rest.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT Python3_Interpreter_FOUND)
  message(STATUS "python3 not found: the DION_TRACE tests are left out")
  return()
endif()
foreach(v full drop)
  set(events default)
  if(v STREQUAL "drop")
    set(events 50)
  endif()
  dion_test(NAME conf_cpu_trace_${v}
    COMMAND sh ${PROJECT_SOURCE_DIR}/tests/common/trace_run.sh ${Python3_EXECUTABLE}
            ${CMAKE_CURRENT_BINARY_DIR}/trace_${v} ${events} --
            $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> trace
    LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1")
endforeach()
