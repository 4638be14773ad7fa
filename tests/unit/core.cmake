# Unit tests of internal pieces (linked with the static library that exposes them).
add_executable(test_core ${CMAKE_CURRENT_SOURCE_DIR}/test_core.c)
target_link_libraries(test_core PRIVATE dion_internal)
target_compile_options(test_core PRIVATE -fno-strict-aliasing)
dion_test(NAME unit_core COMMAND test_core LABELS host TIMEOUT 120)
