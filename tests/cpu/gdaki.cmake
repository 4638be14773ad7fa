# gdaki over the softnic model (DION_GDAKI_NIC=softnic; docs/gdaki.md), CPU mode: device calls post mlx5 WQEs
# that a CPU thread per rank reads, checks and executes over libfabric's tcp provider. The conformance suite
# with 2, 3 and 4 ranks, and the failure paths (an injected error completion, an out-of-bounds put, a WQE that
# breaks an invariant): quiet returns the error, dion_dev_check names the QP, the peer and the syndrome.
set(DION_GDAKI_ENV DION_CPU_MODE=1 DION_TRANSPORT=gdaki DION_GDAKI_NIC=softnic DION_OFI_PROVIDER=tcp)
foreach(n 2 3 4)
  dion_test(NAME conf_cpu_gdaki_${n} COMMAND $<TARGET_FILE:dionrun> -n ${n} --timeout 200 $<TARGET_FILE:conformance_cpu> all
            LABELS "host;cpu" TIMEOUT 240 ENV ${DION_GDAKI_ENV} DT_STREAM_COUNT=300)
  set_tests_properties(conf_cpu_gdaki_${n} PROPERTIES RUN_SERIAL TRUE)
endforeach()
add_executable(gdaki_cpu ${CMAKE_CURRENT_SOURCE_DIR}/gdaki_cpu.c)
target_link_libraries(gdaki_cpu PRIVATE dion)
dion_test(NAME gdaki_cpu_inject COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 60 $<TARGET_FILE:gdaki_cpu> inject 5
          LABELS "host;cpu" TIMEOUT 90 ENV ${DION_GDAKI_ENV} DION_SOFTNIC_INJECT=remote_access@5)
# Own-window atomics through the loopback QP (both ranks add to the same word: the totals must be right).
dion_test(NAME gdaki_cpu_selfamo COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 60 $<TARGET_FILE:gdaki_cpu> selfamo 100
          LABELS "host;cpu" TIMEOUT 90 ENV ${DION_GDAKI_ENV})
# The atomics section with many more threads than the QP has slots (96 threads, a 64-WQEBB ring): slot waits,
# groups published out of order, and fetched values read before their slot is reused (issue 9: CAS
# increments came out too many when a later WQE overwrote an unread old value).
dion_test(NAME conf_cpu_gdaki_atomics_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 150 $<TARGET_FILE:conformance_cpu> atomics
          LABELS "host;cpu" TIMEOUT 180
          ENV ${DION_GDAKI_ENV} DT_ATOMIC_THREADS=96 DT_ATOMIC_ADDS=10 DT_ATOMIC_CAS=2 DION_GDAKI_QP_DEPTH=64)
set_tests_properties(conf_cpu_gdaki_atomics_2 PROPERTIES RUN_SERIAL TRUE)
foreach(mode oob badwqe)
  dion_test(NAME gdaki_cpu_${mode} COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 60 $<TARGET_FILE:gdaki_cpu> ${mode}
            LABELS "host;cpu" TIMEOUT 90 ENV ${DION_GDAKI_ENV})
endforeach()
# The fault tests of the conformance suite over gdaki: error completions from device code (an injected one and
# a put past the peer's window; the GPU runs the same, tests/gpu), and a rank killed (SIGKILL) in the middle of a
# put_signal stream: survivors' quiets and waits fail, dion_dev_check names the dead rank.
dion_test(NAME conf_cpu_gdaki_inject_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 60 $<TARGET_FILE:conformance_cpu> netfault inject 5
          LABELS "host;cpu" TIMEOUT 90 ENV ${DION_GDAKI_ENV} DION_SOFTNIC_INJECT=remote_access@5)
dion_test(NAME conf_cpu_gdaki_oob_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 60 $<TARGET_FILE:conformance_cpu> netfault oob
          LABELS "host;cpu" TIMEOUT 90 ENV ${DION_GDAKI_ENV})
dion_test(NAME conf_cpu_gdaki_peerfail COMMAND $<TARGET_FILE:conformance_cpu> peerfail_stream 3
          LABELS "host;cpu" TIMEOUT 120 ENV ${DION_GDAKI_ENV})
