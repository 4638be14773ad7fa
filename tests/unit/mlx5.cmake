# mlx5 WQE/CQE builders (device/mlx5.cuh, CPU mode) and DEVX layouts against rdma-core's mlx5dv.h.
if(DION_MLX5DV_INCLUDE)
  add_executable(test_mlx5 ${CMAKE_CURRENT_SOURCE_DIR}/test_mlx5.c)
  target_link_libraries(test_mlx5 PRIVATE dion_internal)
  target_include_directories(test_mlx5 PRIVATE ${DION_MLX5DV_INCLUDE})
  dion_test(NAME unit_mlx5 COMMAND test_mlx5 LABELS host TIMEOUT 60)
else()
  # Say so instead of leaving the test out silently (scripts/setup.sh installs the header for the test suite).
  dion_test(NAME unit_mlx5 COMMAND sh -c "echo 'infiniband/mlx5dv.h not found: install libibverbs-dev'; exit 77"
            LABELS host)
endif()
# The softnic model's reader of doorbells and WQEs (transports/gdaki/softnic/wqe_check.c): what DION's builders
# write reads back, and every invariant a byte can break fails with its syndrome and sentence.
add_executable(test_softnic ${CMAKE_CURRENT_SOURCE_DIR}/test_softnic.c)
target_link_libraries(test_softnic PRIVATE dion_internal)
dion_test(NAME unit_softnic COMMAND test_softnic LABELS host TIMEOUT 60)
# gdaki's posting and completion logic (device/gdaki.cuh, CPU mode) on a QP in host memory, CQEs written by the
# test or a NIC thread: the completion count's lifting, publication, fetched values' slots, groups of threads as
# a warp's lanes, a held head slot, a parked lock holder. Twice: groups at ready_head try the doorbell lock
# before marking (the default), and every group marks first (DION_GDAKI_LOCK_FIRST=0, the GPU A/B's other arm).
foreach(v IN ITEMS "" _markfirst)
  add_executable(test_gdaki_post${v} ${CMAKE_CURRENT_SOURCE_DIR}/test_gdaki_post.c)
  target_link_libraries(test_gdaki_post${v} PRIVATE dion_internal)
  target_compile_options(test_gdaki_post${v} PRIVATE -Werror)
  dion_test(NAME unit_gdaki_post${v} COMMAND test_gdaki_post${v} LABELS host TIMEOUT 120)
endforeach()
target_compile_definitions(test_gdaki_post_markfirst PRIVATE DION_GDAKI_LOCK_FIRST=0)
