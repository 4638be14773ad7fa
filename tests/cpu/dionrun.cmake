# dionrun, the single-node launcher: environment, first-failure reporting, exit status, signals, timeout,
# bad usage, and MPS handling (with a stand-in nvidia-cuda-mps-control: CI has no GPU).
add_executable(dionrun_probe ${CMAKE_CURRENT_SOURCE_DIR}/dionrun_probe.c)
target_link_libraries(dionrun_probe PRIVATE dion)

set(DIONRUN_TEST bash ${CMAKE_CURRENT_SOURCE_DIR}/dionrun_test.sh $<TARGET_FILE:dionrun> $<TARGET_FILE:dionrun_probe>)

foreach(n 1 2 4 8)
  dion_test(NAME dionrun_env_${n} COMMAND ${DIONRUN_TEST} env ${n} LABELS "host;cpu" TIMEOUT 30)
endforeach()
foreach(case fail stubborn grace signal timeout sigterm sigint notfound usage mps_missing mps_forced mps_auto mps_user
             mps_fail mps_sigterm mps_broken)
  dion_test(NAME dionrun_${case} COMMAND ${DIONRUN_TEST} ${case} LABELS "host;cpu" TIMEOUT 30)
endforeach()
