# The proxy backend's command ring and proxy threads (CPU mode, no GPU). The stress subtest pushes 8 x 1,000,000
# commands through one 256-slot ring; the sanitizer build pushes 8 x 100,000 (ASan makes each post several
# times dearer, and the 2-core CI machine runs both presets).
add_executable(test_proxy_ring ${CMAKE_CURRENT_SOURCE_DIR}/test_proxy_ring.c)
target_link_libraries(test_proxy_ring PRIVATE dion_internal)
if(DION_SANITIZE)
  set(DION_PROXY_STRESS_COUNT 100000)
else()
  set(DION_PROXY_STRESS_COUNT 1000000)
endif()
foreach(t topology full quiet threads stress)
  dion_test(NAME unit_proxy_ring_${t} COMMAND test_proxy_ring ${t} LABELS host TIMEOUT 120
            ENV "DT_STRESS_COUNT=${DION_PROXY_STRESS_COUNT}")
endforeach()
