# Device handles and their error ring, watchdog and shutdown (issue 7, defects 4, 8, 9).
add_executable(test_errring ${CMAKE_CURRENT_SOURCE_DIR}/test_errring.c)
target_link_libraries(test_errring PRIVATE dion Threads::Threads ${CMAKE_DL_LIBS})
dion_test(NAME cpu_errring_torn COMMAND test_errring LABELS "host;cpu" TIMEOUT 120)
