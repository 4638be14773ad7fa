# The ofi proxy engine between forked ranks (host memory, CPU only), over libfabric's tcp and shm providers,
# with 2 and 3 ranks and each way of ordering a signal behind its data. Skips (77) where the provider cannot open.
add_executable(test_engine_ofi ${CMAKE_CURRENT_SOURCE_DIR}/test_engine_ofi.c)
target_link_libraries(test_engine_ofi PRIVATE dion_internal Threads::Threads)
# Orders beyond each provider's automatic choice (tcp: msg_order; shm: msg_order with writes confirmed by a later
# fetch): tcp also with wait and fence (falls back to wait where the provider lacks FI_FENCE), shm also with wait
# (writes with FI_DELIVERY_COMPLETE, signals held until their data completed).
set(DION_OFI_ORDERS_tcp wait fence)
set(DION_OFI_ORDERS_shm wait)
# The error phase waits out the operation timeout on shm (it never completes a refused put): shorter there. Long
# enough for a loaded 2-core machine elsewhere.
set(DION_OFI_OPTO_tcp 20s)
set(DION_OFI_OPTO_shm 8s)
foreach(prov tcp shm)
  foreach(n 2 3)
    dion_test(NAME engine_ofi_${prov}_${n} COMMAND test_engine_ofi ${prov} ${n} LABELS "host;cpu" TIMEOUT 200
              ENV "DION_OFI_OP_TIMEOUT=${DION_OFI_OPTO_${prov}}")
  endforeach()
  foreach(order ${DION_OFI_ORDERS_${prov}})
    dion_test(NAME engine_ofi_${prov}_3_${order} COMMAND test_engine_ofi ${prov} 3 LABELS "host;cpu" TIMEOUT 200
              ENV "DION_OFI_ORDER=${order};DION_OFI_OP_TIMEOUT=${DION_OFI_OPTO_${prov}}")
  endforeach()
endforeach()
# shm with signals as plain atomics, confirmed like writes by a later fetch (DION_OFI_SIGNAL=plain): phase F
# checks every add and set is applied when it completes, D that signals stay behind their data.
dion_test(NAME engine_ofi_shm_3_plainsig COMMAND test_engine_ofi shm 3 LABELS "host;cpu" TIMEOUT 200
          ENV "DION_OFI_SIGNAL=plain;DION_OFI_OP_TIMEOUT=${DION_OFI_OPTO_shm}")
# shm with small put_signals and signals as one message each, applied by the target's engine and acknowledged
# (DION_OFI_SIGNAL=msg): G checks data before signal with random sizes around the message bound and adds of
# several sources to one word, F that each signal is applied when it completes, D the order behind data.
dion_test(NAME engine_ofi_shm_3_msgsig COMMAND test_engine_ofi shm 3 LABELS "host;cpu" TIMEOUT 200
          ENV "DION_OFI_SIGNAL=msg;DION_OFI_OP_TIMEOUT=${DION_OFI_OPTO_shm}")
# The same asked of tcp: where the provider's inject size cannot carry a message (libfabric 1.17's tcp;ofi_rxm:
# 64 bytes) the engine warns and keeps signals as atomics; the checks are the same either way.
dion_test(NAME engine_ofi_tcp_2_msgsig COMMAND test_engine_ofi tcp 2 LABELS "host;cpu" TIMEOUT 200
          ENV "DION_OFI_SIGNAL=msg;DION_OFI_OP_TIMEOUT=${DION_OFI_OPTO_tcp}")
dion_test(NAME engine_ofi_auto_2 COMMAND test_engine_ofi auto 2 LABELS "host;cpu" TIMEOUT 200
          ENV "DION_OFI_OP_TIMEOUT=20s")
dion_test(NAME engine_ofi_staging COMMAND test_engine_ofi stage LABELS "host;cpu" TIMEOUT 120
          ENV "DION_OFI_OP_TIMEOUT=20s")
dion_test(NAME engine_ofi_missing COMMAND test_engine_ofi missing LABELS "host;cpu" TIMEOUT 60)
# Files in /dev/shm under the shm provider's default names for this process (left by a killed process whose pid
# this one reuses): the engine names its endpoint itself and opens beside them.
dion_test(NAME engine_ofi_shm_stale COMMAND test_engine_ofi stale LABELS "host;cpu" TIMEOUT 60
          ENV "DION_OFI_OP_TIMEOUT=20s")

# GPU memory through the engine (FI_HMEM where the provider has it, else the "needs staging" refusal). Needs a GPU.
add_executable(test_engine_ofi_gpu ${CMAKE_CURRENT_SOURCE_DIR}/test_engine_ofi_gpu.c)
target_link_libraries(test_engine_ofi_gpu PRIVATE dion_internal)
foreach(prov tcp shm)
  dion_test(NAME engine_ofi_gpu_${prov} COMMAND test_engine_ofi_gpu ${prov} LABELS gpu TIMEOUT 60)
endforeach()

# A receive-only rank whose proxy thread naps (no idle spin, 20 ms naps) serves a peer's stream of fetch-adds:
# over tcp the naps must end through the completion queue's wait object (threads.c, engine slot wait_arm); over
# shm (no wait object its peers reach) the data alone is checked.
add_executable(test_proxy_idle ${CMAKE_CURRENT_SOURCE_DIR}/test_proxy_idle.c)
target_link_libraries(test_proxy_idle PRIVATE dion_internal Threads::Threads)
foreach(prov tcp shm)
  dion_test(NAME proxy_idle_${prov} COMMAND test_proxy_idle ${prov} LABELS "host;cpu" TIMEOUT 180)
endforeach()

# Staged windows under dion-perf's message-rate pattern (many blocks interleaved in few rings), CPU mode: data
# checked, rate and staging counters printed (larger shapes by hand: staged_rate_cpu BLOCKS THREADS PER REPS).
add_executable(staged_rate_cpu ${CMAKE_CURRENT_SOURCE_DIR}/staged_rate_cpu.c)
target_link_libraries(staged_rate_cpu PRIVATE dion_internal Threads::Threads)
dion_test(NAME staged_rate_cpu_shm_2 COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 100 $<TARGET_FILE:staged_rate_cpu> 16 2 16 2
          LABELS "host;cpu" TIMEOUT 150
          ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=shm;DION_PROXY_STAGING=always")

# A peer whose provider refuses every post (-FI_EAGAIN; a test hook stands for a peer that stopped draining its
# queue): the refused operation and those queued behind it fail in order within DION_OFI_OP_TIMEOUT, with sentences.
foreach(prov tcp shm)
  dion_test(NAME engine_ofi_refuse_${prov} COMMAND test_engine_ofi refuse ${prov} LABELS "host;cpu" TIMEOUT 90
            ENV "DION_OFI_OP_TIMEOUT=1s")
endforeach()
# and with signals as messages (DION_OFI_SIGNAL=msg): an unacknowledged message fails like any operation
dion_test(NAME engine_ofi_refuse_shm_msgsig COMMAND test_engine_ofi refuse shm LABELS "host;cpu" TIMEOUT 90
          ENV "DION_OFI_OP_TIMEOUT=1s;DION_OFI_SIGNAL=msg")

# The same through the whole proxy path: quiet returns the error, dion_dev_check the sentence; the engine works after.
add_executable(proxy_refuse_cpu ${CMAKE_CURRENT_SOURCE_DIR}/proxy_refuse_cpu.c)
target_link_libraries(proxy_refuse_cpu PRIVATE dion_internal Threads::Threads)
foreach(prov tcp shm)
  dion_test(NAME proxy_refuse_cpu_${prov} COMMAND $<TARGET_FILE:dionrun> -n 2 --timeout 60 $<TARGET_FILE:proxy_refuse_cpu>
            LABELS "host;cpu" TIMEOUT 90
            ENV "DION_CPU_MODE=1;DION_TRANSPORT=proxy;DION_OFI_PROVIDER=${prov};DION_OFI_OP_TIMEOUT=1s")
endforeach()

# The per-peer bound (DION_OFI_PEER_OPS=-1, shm's automatic one) over shm: 2000 puts posted without polling are held
# by the engine, none is refused by the provider; unbounded (0, the default) shm refuses some (the test can tell).
dion_test(NAME engine_ofi_bound_shm COMMAND test_engine_ofi bound none LABELS "host;cpu" TIMEOUT 60
          ENV "DION_OFI_PEER_OPS=-1")
dion_test(NAME engine_ofi_bound_shm_unbounded COMMAND test_engine_ofi bound some LABELS "host;cpu" TIMEOUT 60
          ENV "DION_OFI_PEER_OPS=0")
