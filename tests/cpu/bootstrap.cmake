# Bootstrap: unique id, env (dionrun, mpirun), dion_mpi.h, failure cases.
add_executable(test_bootstrap ${CMAKE_CURRENT_SOURCE_DIR}/test_bootstrap.c)
target_link_libraries(test_bootstrap PRIVATE dion Threads::Threads)

foreach(n 1 2 4 8)
  dion_test(NAME boot_uid_${n} COMMAND test_bootstrap uid ${n} LABELS "host;cpu" TIMEOUT 120)
  dion_test(NAME boot_dionrun_${n} COMMAND $<TARGET_FILE:dionrun> -n ${n} $<TARGET_FILE:test_bootstrap> env
            LABELS "host;cpu" TIMEOUT 120)
endforeach()
dion_test(NAME boot_wrong_secret COMMAND test_bootstrap secret LABELS "host;cpu" TIMEOUT 60)
dion_test(NAME boot_unreachable_root COMMAND test_bootstrap unreachable LABELS "host;cpu" TIMEOUT 60)
dion_test(NAME boot_killed_rank COMMAND test_bootstrap kill 4 LABELS "host;cpu" TIMEOUT 60)
dion_test(NAME boot_abort_during_barrier COMMAND test_bootstrap abortcoll LABELS "host;cpu" TIMEOUT 60)
dion_test(NAME boot_malformed_frames COMMAND test_bootstrap fuzz 4 LABELS "host;cpu" TIMEOUT 120)

# Env init under Open MPI's mpirun (root: --allow-run-as-root; 2 cores: --oversubscribe). Open MPI itself leaks
# at exit, so LeakSanitizer is off for these two (AddressSanitizer still checks every access).
if(MPIEXEC_EXECUTABLE)
  set(DION_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 4)
  dion_test(NAME boot_mpirun_env COMMAND ${DION_MPIRUN} $<TARGET_FILE:test_bootstrap> env LABELS "host;cpu"
            TIMEOUT 120 ENV "ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0")
  if(MPI_C_FOUND)
    add_executable(test_bootstrap_mpi ${CMAKE_CURRENT_SOURCE_DIR}/test_bootstrap_mpi.c)
    target_link_libraries(test_bootstrap_mpi PRIVATE dion MPI::MPI_C)
    dion_test(NAME boot_mpi_header COMMAND ${DION_MPIRUN} $<TARGET_FILE:test_bootstrap_mpi> LABELS "host;cpu"
              TIMEOUT 120 ENV "ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0")
  endif()
endif()

# Issue 7: defects 6 and 7 (each test failed on the code before its fix).
dion_test(NAME boot_idle_ring_connections COMMAND test_bootstrap idle 3 LABELS "host;cpu" TIMEOUT 90)
dion_test(NAME boot_two_jobs_one_root COMMAND test_bootstrap jobs LABELS "host;cpu" TIMEOUT 90)
dion_test(NAME boot_abort_longest_timeout COMMAND test_bootstrap abortlong LABELS "host;cpu" TIMEOUT 60)
dion_test(NAME boot_rendezvous_foreign COMMAND test_bootstrap rendezvous LABELS "host;cpu" TIMEOUT 90)
add_executable(test_boot_internal ${CMAKE_CURRENT_SOURCE_DIR}/test_boot_internal.c)
target_link_libraries(test_boot_internal PRIVATE dion_internal Threads::Threads)
dion_test(NAME boot_siphash_vectors COMMAND test_boot_internal siphash LABELS host TIMEOUT 30)
dion_test(NAME fdpass_hostile_sender COMMAND test_boot_internal fdpass LABELS "host;cpu" TIMEOUT 90)
dion_test(NAME boot_impostor_root COMMAND test_bootstrap fakeroot LABELS "host;cpu" TIMEOUT 60)
