# Ranks as separate hosts on one machine (dionrun --hosts: network, UTS, mount and IPC namespaces). The probe
# reads the comm's rank descriptions, so it links the internal library. Skipped (77) where namespaces cannot
# be created. To run any other program across hosts, add a line: dionrun -n N --hosts PROG (exit 77: skip).
add_executable(hosts_probe ${CMAKE_CURRENT_SOURCE_DIR}/hosts_probe.c)
target_link_libraries(hosts_probe PRIVATE dion_internal)

set(HOSTS_TEST bash ${CMAKE_CURRENT_SOURCE_DIR}/hosts_test.sh $<TARGET_FILE:dionrun> $<TARGET_FILE:hosts_probe>
    $<TARGET_FILE:conformance_cpu>)
foreach(n 2 3 4)
  dion_test(NAME hosts_boot_${n} COMMAND ${HOSTS_TEST} boot ${n} LABELS "host;cpu" TIMEOUT 120)
endforeach()
foreach(launcher slurm ompi torch noroot)
  dion_test(NAME hosts_env_${launcher}_3 COMMAND ${HOSTS_TEST} env_${launcher} 3 LABELS "host;cpu" TIMEOUT 120)
endforeach()
dion_test(NAME hosts_dev_3 COMMAND ${HOSTS_TEST} dev 3 LABELS "host;cpu" TIMEOUT 300)
dion_test(NAME hosts_p2p_forced_3 COMMAND ${HOSTS_TEST} p2p_forced 3 LABELS "host;cpu" TIMEOUT 120)
dion_test(NAME hosts_kill_4 COMMAND ${HOSTS_TEST} kill 4 LABELS "host;cpu" TIMEOUT 120)
dion_test(NAME hosts_timeout_3 COMMAND ${HOSTS_TEST} timeout 3 LABELS "host;cpu" TIMEOUT 60)
dion_test(NAME hosts_launcher_killed_3 COMMAND ${HOSTS_TEST} launcher_killed 3 LABELS "host;cpu" TIMEOUT 60)
dion_test(NAME hosts_noperm COMMAND ${HOSTS_TEST} noperm 2 LABELS "host;cpu" TIMEOUT 30)
# gdaki over the softnic model between simulated hosts (chosen by itself before the proxy).
dion_test(NAME hosts_gdaki_3 COMMAND ${HOSTS_TEST} gdaki 3 LABELS "host;cpu" TIMEOUT 240)
set_tests_properties(hosts_gdaki_3 PROPERTIES RUN_SERIAL TRUE)
