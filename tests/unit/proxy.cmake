# The proxy backend's command ring and proxy threads (CPU mode, no GPU). The stress subtest pushes 8 x 1,000,000
# commands through one 256-slot ring in both presets (about 4-6 s of CPU time with or without ASan; DT_STRESS_COUNT
# changes the count for experiments).
add_executable(test_proxy_ring ${CMAKE_CURRENT_SOURCE_DIR}/test_proxy_ring.c)
target_link_libraries(test_proxy_ring PRIVATE dion_internal)
foreach(t topology full quiet hole threads stress)
  dion_test(NAME unit_proxy_ring_${t} COMMAND test_proxy_ring ${t} LABELS host TIMEOUT 120)
endforeach()

# The staged windows' copy coalescing (px_stage.c): runs cover exactly the ranges' bytes, joined where they touch.
add_executable(test_px_coalesce ${CMAKE_CURRENT_SOURCE_DIR}/test_px_coalesce.c)
target_link_libraries(test_px_coalesce PRIVATE dion_internal)
dion_test(NAME unit_px_coalesce COMMAND test_px_coalesce LABELS host TIMEOUT 60)
