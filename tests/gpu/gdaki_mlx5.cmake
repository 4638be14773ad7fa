# gdaki's mlx5 host half with the real CUDA operations (GPU queue memory, dmabuf, the UAR mapping or the CPU
# doorbell, GPU-mapped mailboxes) over the fake rdma-core: no NIC needed, a GPU is.
if(TARGET dion_fake_mlx5)
  add_executable(gdaki_mlx5_gpu ${CMAKE_CURRENT_SOURCE_DIR}/gdaki_mlx5_gpu.c ${CMAKE_CURRENT_SOURCE_DIR}/gdaki_mlx5_store.cu)
  target_include_directories(gdaki_mlx5_gpu PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)
  target_link_libraries(gdaki_mlx5_gpu PRIVATE dion_internal)
  add_dependencies(gdaki_mlx5_gpu dion_fake_mlx5)
  target_compile_options(gdaki_mlx5_gpu PRIVATE $<$<COMPILE_LANGUAGE:C>:-Werror>)
  dion_test(NAME gdaki_mlx5_gpu COMMAND gdaki_mlx5_gpu $<TARGET_FILE:dion_fake_mlx5> LABELS gpu TIMEOUT 120)
endif()
