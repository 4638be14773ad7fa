# Device handles and their error ring, watchdog and shutdown (issue 7, defects 4, 8, 9).
add_executable(test_errring ${CMAKE_CURRENT_SOURCE_DIR}/test_errring.c)
target_link_libraries(test_errring PRIVATE dion Threads::Threads ${CMAKE_DL_LIBS})
dion_test(NAME cpu_errring_torn COMMAND test_errring LABELS "host;cpu" TIMEOUT 120)
add_executable(test_shutdown ${CMAKE_CURRENT_SOURCE_DIR}/test_shutdown.c)
target_link_libraries(test_shutdown PRIVATE dion Threads::Threads)
foreach(n 2 3)
  dion_test(NAME cpu_shutdown_goodbye_${n} COMMAND test_shutdown goodbye ${n} LABELS "host;cpu" TIMEOUT 60)
  dion_test(NAME cpu_shutdown_kill_${n} COMMAND test_shutdown kill ${n} LABELS "host;cpu" TIMEOUT 60)
endforeach()
# A rank that learns of a failure only from a neighbour that then ended names the failed rank, not the neighbour
# (the watchdog passes what it saw round the ring at once).
dion_test(NAME cpu_shutdown_relay_3 COMMAND test_shutdown relay LABELS "host;cpu" TIMEOUT 60)
dion_test(NAME cpu_shutdown_race COMMAND test_shutdown race LABELS "host;cpu" TIMEOUT 120)
dion_test(NAME cpu_shutdown_kernel COMMAND test_shutdown kernel LABELS "host;cpu" TIMEOUT 60)
add_executable(test_semantics ${CMAKE_CURRENT_SOURCE_DIR}/test_semantics.c)
target_link_libraries(test_semantics PRIVATE dion Threads::Threads)
dion_test(NAME cpu_semantics_ctx COMMAND test_semantics ctx LABELS "host;cpu" TIMEOUT 60 ENV "DION_CPU_MODE=1")
dion_test(NAME cpu_semantics_abort COMMAND test_semantics abort LABELS "host;cpu" TIMEOUT 60 ENV "DION_CPU_MODE=1")
