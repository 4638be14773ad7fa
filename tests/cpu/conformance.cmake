# The conformance suite in CPU mode, over dionrun: 2, 3, 4 and 8 ranks, plus DION_CHECK, abort and a failed peer.
add_executable(conformance_cpu ${CMAKE_CURRENT_SOURCE_DIR}/conformance_cpu.c)
target_link_libraries(conformance_cpu PRIVATE dion Threads::Threads)
foreach(n 2 3 4 8)
  dion_test(NAME conf_cpu_${n} COMMAND $<TARGET_FILE:dionrun> -n ${n} --timeout 240 $<TARGET_FILE:conformance_cpu> all
            LABELS "host;cpu" TIMEOUT 300 ENV "DION_CPU_MODE=1")
endforeach()
# Six windows, some in the handle's slots and some not, every (destination, source) pair, over 10 ranks (more
# than the handle's 8 inline peers).
dion_test(NAME conf_cpu_manywin_10 COMMAND $<TARGET_FILE:dionrun> -n 10 --timeout 120 $<TARGET_FILE:conformance_cpu> manywin
          LABELS "host;cpu" TIMEOUT 150 ENV "DION_CPU_MODE=1")
dion_test(NAME conf_cpu_check COMMAND $<TARGET_FILE:dionrun> -n 3 --timeout 100 $<TARGET_FILE:conformance_cpu> check
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DION_CHECK=1")
dion_test(NAME conf_cpu_stats COMMAND $<TARGET_FILE:dionrun> -n 3 --timeout 100 $<TARGET_FILE:conformance_cpu> stats
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DION_STATS=1")
dion_test(NAME conf_cpu_abort COMMAND $<TARGET_FILE:dionrun> -n 3 --timeout 100 $<TARGET_FILE:conformance_cpu> abort
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1")
dion_test(NAME conf_cpu_peerfail COMMAND $<TARGET_FILE:conformance_cpu> peerfail 3
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1")
# The backend choice per peer (transports/transports.c): logged, forced by DION_TRANSPORT, unknown names refused.
dion_test(NAME conf_cpu_transport_select COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/transport_select.sh $<TARGET_FILE:dionrun>
          $<TARGET_FILE:conformance_cpu> LABELS "host;cpu" TIMEOUT 200)
# The same suite over the proxy backend (libfabric's tcp provider through proxy threads), forced for every peer.
foreach(n 2 3 4)
  dion_test(NAME conf_cpu_proxy_${n} COMMAND $<TARGET_FILE:dionrun> -n ${n} --timeout 200 $<TARGET_FILE:conformance_cpu> all
            LABELS "host;cpu" TIMEOUT 240 ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=tcp;DT_STREAM_COUNT=2000")
  # every put_signal crosses tcp and two proxy threads: alone on the 2 cores they take seconds, not minutes
  set_tests_properties(conf_cpu_proxy_${n} PROPERTIES RUN_SERIAL TRUE)
endforeach()
# And over libfabric's shm provider (its message order, writes confirmed by a later fetch: the engine's
# "msg_order+flush" mode; docs/backends/proxy.md).
foreach(n 2 3)
  dion_test(NAME conf_cpu_proxy_shm_${n} COMMAND $<TARGET_FILE:dionrun> -n ${n} --timeout 200 $<TARGET_FILE:conformance_cpu> all
            LABELS "host;cpu" TIMEOUT 240 ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm;DT_STREAM_COUNT=2000")
  set_tests_properties(conf_cpu_proxy_shm_${n} PROPERTIES RUN_SERIAL TRUE)
endforeach()
# Six windows over the proxy, some in the handle's slots and some not (commands name a window by its id).
dion_test(NAME conf_cpu_proxy_manywin_shm_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> manywin
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm")
set_tests_properties(conf_cpu_proxy_manywin_shm_2 PROPERTIES RUN_SERIAL TRUE)
# A rank is killed (SIGKILL) in the middle of a put_signal stream over the proxy: survivors' waits and quiets fail,
# and dion_dev_check names the dead rank.
dion_test(NAME conf_cpu_proxy_peerfail COMMAND $<TARGET_FILE:conformance_cpu> peerfail_stream 3
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=tcp")
# The random-size put_signal stress (1 B..1 MiB, random offsets, data checked at every signal): p2p, and the
# proxy over tcp and shm.
dion_test(NAME conf_cpu_stress_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> stress
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DT_STRESS_COUNT=200")
dion_test(NAME conf_cpu_proxy_stress_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> stress
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=tcp;DT_STRESS_COUNT=200")
set_tests_properties(conf_cpu_proxy_stress_2 PROPERTIES RUN_SERIAL TRUE)
# The same over shm: its message order carries the signal behind data of every size (inline, inject, CMA).
dion_test(NAME conf_cpu_proxy_stress_shm_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> stress
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm;DT_STRESS_COUNT=200")
set_tests_properties(conf_cpu_proxy_stress_shm_2 PROPERTIES RUN_SERIAL TRUE)
# shm with signals as plain atomics (DION_OFI_SIGNAL=plain): the suite and the stress.
dion_test(NAME conf_cpu_proxy_plainsig_shm_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 200 $<TARGET_FILE:conformance_cpu> all
          LABELS "host;cpu" TIMEOUT 240
          ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm;DION_OFI_SIGNAL=plain;DT_STREAM_COUNT=2000")
dion_test(NAME conf_cpu_proxy_stress_plainsig_shm_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> stress
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm;DION_OFI_SIGNAL=plain;DT_STRESS_COUNT=200")
set_tests_properties(conf_cpu_proxy_plainsig_shm_2 conf_cpu_proxy_stress_plainsig_shm_2 PROPERTIES RUN_SERIAL TRUE)
# shm with small put_signals and signals as one message each (DION_OFI_SIGNAL=msg): the suite and the stress.
dion_test(NAME conf_cpu_proxy_msgsig_shm_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 200 $<TARGET_FILE:conformance_cpu> all
          LABELS "host;cpu" TIMEOUT 240
          ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm;DION_OFI_SIGNAL=msg;DT_STREAM_COUNT=2000")
dion_test(NAME conf_cpu_proxy_stress_msgsig_shm_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> stress
          LABELS "host;cpu" TIMEOUT 120 ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm;DION_OFI_SIGNAL=msg;DT_STRESS_COUNT=200")
set_tests_properties(conf_cpu_proxy_msgsig_shm_2 conf_cpu_proxy_stress_msgsig_shm_2 PROPERTIES RUN_SERIAL TRUE)
# Every window staged through host shadows and notices (DION_PROXY_STAGING=always), as GPU windows are where
# the provider cannot register GPU memory: the suite, 2 and 3 ranks over tcp, 2 over shm, and the stress. Every
# staged put takes one more hop (the owner's proxy applies it): on the shared 2-core CI machine at load ~80 one
# run stalled past the 10 s default wait timeout, so these waits get 60 s (a lost notice still fails them).
# Also many producers into one staged window (manyput: every thread of 4 blocks, random ranges, put_signal and
# put + signal): the notices of 4 rings to one peer merge, are applied in batches and acknowledged together;
# data checked at every round's signals. shm with 2 proxy threads.
set(staged_env "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_PROXY_STAGING=always;DION_WAIT_TIMEOUT=60s;DT_STREAM_COUNT=500;DT_MP_ROUNDS=30")
foreach(v tcp_2 tcp_3 shm_2 manyput_tcp_2 manyput_tcp_3 manyput_shm_2)
  string(REGEX MATCH "(tcp|shm)_([0-9])" _ ${v})
  set(prov ${CMAKE_MATCH_1})
  set(n ${CMAKE_MATCH_2})
  set(mode all)
  set(name conf_cpu_proxy_staged_${n})
  if(prov STREQUAL "shm")
    set(name conf_cpu_proxy_staged_shm_2)
  endif()
  set(extra "")
  if(v MATCHES "^manyput")
    set(mode manyput)
    set(name conf_cpu_proxy_staged_manyput_${n})
    if(prov STREQUAL "shm")
      set(name conf_cpu_proxy_staged_manyput_shm_2)
      set(extra ";DION_PROXY_THREADS=2")
    endif()
  endif()
  dion_test(NAME ${name} COMMAND $<TARGET_FILE:dionrun> -n ${n} --timeout 200 $<TARGET_FILE:conformance_cpu> ${mode}
            LABELS "host;cpu" TIMEOUT 240 ENV "${staged_env};DION_OFI_PROVIDER=${prov}${extra}")
  set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
endforeach()
# Issue 8: signal ADDs from every rank to every rank's word, its own included, over shm with staged windows.
# On a GPU a rank's own ADD was a GPU atomic on the host table next to the engine's CPU atomics and lost a
# peer's ADD; CPU atomics do not lose it, so the CPU run checks the totals and, by the proxy threads' command
# counts (100 ADDs to each of 2 ranks and a quiet = 201), that the own ADDs go through the proxy.
dion_test(NAME conf_cpu_proxy_sigadd_shm_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> sigadd
          LABELS "host;cpu" TIMEOUT 120
          ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm;DION_PROXY_STAGING=always;DION_WAIT_TIMEOUT=60s;DT_SIGADD_COUNT=100;DION_LOG=info")
set_tests_properties(conf_cpu_proxy_sigadd_shm_2 PROPERTIES RUN_SERIAL TRUE
                     PASS_REGULAR_EXPRESSION "proxy thread 0: 201 commands.*proxy thread 0: 201 commands.*PASS: 2 ranks, 0 failures")
dion_test(NAME conf_cpu_proxy_staged_stress_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:conformance_cpu> stress
          LABELS "host;cpu" TIMEOUT 120
          ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=tcp;DION_PROXY_STAGING=always;DION_WAIT_TIMEOUT=60s;DT_STRESS_COUNT=200")
set_tests_properties(conf_cpu_proxy_staged_stress_2 PROPERTIES RUN_SERIAL TRUE)
# The same suite over the proxy's verbs engine, on the fake libibverbs of tests/unit: its QPs join the rank
# processes through unix sockets and a service thread in each applies WRITE, READ and ATOMIC to the registered
# memory like a NIC's responder (no RDMA device needed; docs/backends/proxy.md says what this does not cover).
if(TARGET dion_fake_ibverbs)
  foreach(n 2 3)
    dion_test(NAME conf_cpu_proxy_verbs_${n} COMMAND $<TARGET_FILE:dionrun> -n ${n} --timeout 200 $<TARGET_FILE:conformance_cpu> all
              LABELS "host;cpu" TIMEOUT 240
              ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy/verbs;DION_IB_LIBRARY=$<TARGET_FILE:dion_fake_ibverbs>;FAKE_IBV_REORDER=1;DT_STREAM_COUNT=2000")
  endforeach()
  # An error completion (remote access error, then retry exceeded) fails the ring: quiet returns an error and
  # dion_dev_check names the peer and the decoded status.
  add_executable(proxy_verbs_fault ${CMAKE_CURRENT_SOURCE_DIR}/proxy_verbs_fault.c)
  target_link_libraries(proxy_verbs_fault PRIVATE dion)
  dion_test(NAME proxy_verbs_fault_rem_access COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:proxy_verbs_fault> "remote access error"
            LABELS "host;cpu" TIMEOUT 120
            ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy/verbs;DION_IB_LIBRARY=$<TARGET_FILE:dion_fake_ibverbs>;FAKE_IBV_FAIL_AT=1")
  dion_test(NAME proxy_verbs_fault_retry COMMAND $<TARGET_FILE:dionrun> -n 3 --timeout 100 $<TARGET_FILE:proxy_verbs_fault> "retry counter exceeded"
            LABELS "host;cpu" TIMEOUT 120
            ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy/verbs;DION_IB_LIBRARY=$<TARGET_FILE:dion_fake_ibverbs>;FAKE_IBV_FAIL_AT=1;FAKE_IBV_FAIL_STATUS=12")
  # Engine choice: proxy = verbs when every rank opens it, else ofi on all; proxy/verbs refused with a sentence
  # naming the library when one rank lacks it; the per-peer log names the engine.
  dion_test(NAME proxy_engine_select COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/proxy_engine_select.sh $<TARGET_FILE:dionrun>
            $<TARGET_FILE:conformance_cpu> $<TARGET_FILE:dion_fake_ibverbs> LABELS "host;cpu" TIMEOUT 200)
endif()
# On-demand connection of the verbs engine's QPs (DION_IB_CONNECT=ondemand; docs/backends/proxy.md): the suite
# with 2, 3 and 4 ranks; QPs made only towards the peers addressed (and eager's n - 1 for contrast); a peer that
# died before the handshake fails the first command with a sentence naming it, within DION_WAIT_TIMEOUT.
if(TARGET dion_fake_ibverbs)
  foreach(n 2 3 4)
    dion_test(NAME conf_cpu_proxy_verbs_ondemand_${n} COMMAND $<TARGET_FILE:dionrun> -n ${n} --timeout 200 $<TARGET_FILE:conformance_cpu> all
              LABELS "host;cpu" TIMEOUT 240
              ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy/verbs;DION_IB_CONNECT=ondemand;DION_IB_LIBRARY=$<TARGET_FILE:dion_fake_ibverbs>;FAKE_IBV_REORDER=1;DT_STREAM_COUNT=2000;DION_WAIT_TIMEOUT=60s")
  endforeach()
  add_executable(proxy_verbs_ondemand ${CMAKE_CURRENT_SOURCE_DIR}/proxy_verbs_ondemand.c)
  target_link_libraries(proxy_verbs_ondemand PRIVATE dion ${CMAKE_DL_LIBS})
  foreach(mode ondemand eager)
    dion_test(NAME proxy_verbs_qp_count_${mode} COMMAND $<TARGET_FILE:dionrun> -n 4 --timeout 100 $<TARGET_FILE:proxy_verbs_ondemand> count ${mode}
              LABELS "host;cpu" TIMEOUT 120
              ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy/verbs;DION_IB_CONNECT=${mode};DION_IB_LIBRARY=$<TARGET_FILE:dion_fake_ibverbs>")
  endforeach()
  # auto: eager up to DION_IB_EAGER_MAX_RANKS, on demand above (4 ranks > 2)
  dion_test(NAME proxy_verbs_qp_count_auto COMMAND $<TARGET_FILE:dionrun> -n 4 --timeout 100 $<TARGET_FILE:proxy_verbs_ondemand> count ondemand
            LABELS "host;cpu" TIMEOUT 120
            ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy/verbs;DION_IB_CONNECT=auto;DION_IB_EAGER_MAX_RANKS=2;DION_IB_LIBRARY=$<TARGET_FILE:dion_fake_ibverbs>")
  dion_test(NAME proxy_verbs_ondemand_dead_peer COMMAND $<TARGET_FILE:dionrun> -n 3 --timeout 100 $<TARGET_FILE:proxy_verbs_ondemand> dead 2
            LABELS "host;cpu" TIMEOUT 120
            ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy/verbs;DION_IB_CONNECT=ondemand;DION_WAIT_TIMEOUT=2s;DION_WATCHDOG_INTERVAL=0;DION_IB_LIBRARY=$<TARGET_FILE:dion_fake_ibverbs>")
endif()
