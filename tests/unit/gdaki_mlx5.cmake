# gdaki's mlx5 host half (DEVX) over a fake libibverbs + libmlx5: mailboxes, transitions, doorbell choice,
# failure sentences and teardown order. No NIC, no GPU.
if(DION_IBVERBS_INCLUDE AND DION_MLX5DV_INCLUDE)
  add_library(dion_fake_mlx5 MODULE ${CMAKE_CURRENT_SOURCE_DIR}/fake_mlx5.c)
  target_include_directories(dion_fake_mlx5 PRIVATE ${DION_IBVERBS_INCLUDE} ${DION_MLX5DV_INCLUDE})
  set_target_properties(dion_fake_mlx5 PROPERTIES C_VISIBILITY_PRESET hidden)
  target_compile_options(dion_fake_mlx5 PRIVATE -Werror)
  add_executable(test_gdaki_mlx5 ${CMAKE_CURRENT_SOURCE_DIR}/test_gdaki_mlx5.c)
  target_include_directories(test_gdaki_mlx5 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(test_gdaki_mlx5 PRIVATE dion_internal)
  target_compile_options(test_gdaki_mlx5 PRIVATE -Werror)
  add_dependencies(test_gdaki_mlx5 dion_fake_mlx5)
  dion_test(NAME unit_gdaki_mlx5 COMMAND test_gdaki_mlx5 $<TARGET_FILE:dion_fake_mlx5> LABELS host TIMEOUT 60)
else()
  dion_test(NAME unit_gdaki_mlx5 COMMAND sh -c "echo 'rdma-core headers not found: install libibverbs-dev'; exit 77"
            LABELS host)
endif()
