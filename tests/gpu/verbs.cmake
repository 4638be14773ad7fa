# proxy/verbs: dmabuf fds of GPU memory and the engine's registration through the fake libibverbs (no NIC).
if(DION_IBVERBS_INCLUDE AND TARGET dion_fake_ibverbs)
  add_executable(verbs_gpu ${CMAKE_CURRENT_SOURCE_DIR}/verbs_gpu.c)
  target_include_directories(verbs_gpu PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)
  target_link_libraries(verbs_gpu PRIVATE dion_internal)
  add_dependencies(verbs_gpu dion_fake_ibverbs)
  target_compile_options(verbs_gpu PRIVATE -Werror)
  dion_test(NAME verbs_gpu_dmabuf COMMAND verbs_gpu $<TARGET_FILE:dion_fake_ibverbs> LABELS gpu TIMEOUT 60)
endif()
