# Unit tests of internal pieces (linked with the static library that exposes them).
add_executable(test_core ${CMAKE_CURRENT_SOURCE_DIR}/test_core.c)
target_link_libraries(test_core PRIVATE dion_internal)
target_compile_options(test_core PRIVATE -fno-strict-aliasing)
dion_test(NAME unit_core COMMAND test_core LABELS host TIMEOUT 120)
# DION_TRACE's host half and device hook on CPU threads: names, drops, host-thread events, JSON.
add_executable(test_trace ${CMAKE_CURRENT_SOURCE_DIR}/test_trace.c)
target_link_libraries(test_trace PRIVATE dion_internal)
dion_test(NAME unit_trace COMMAND test_trace LABELS host TIMEOUT 60)
