# GPU choice without dionrun (launcher's local rank modulo visible GPUs, the application's own choice kept)
# and the warning for ranks sharing a GPU without MPS. Run directly, not under dionrun (which sets DION_DEVICE).
add_executable(gpu_select_gpu ${CMAKE_CURRENT_SOURCE_DIR}/gpu_select_gpu.cu)
target_link_libraries(gpu_select_gpu PRIVATE dion)
foreach(lr 0 1 2 3)
  dion_test(NAME gpu_select_local_${lr} COMMAND gpu_select_gpu local LABELS gpu TIMEOUT 60
            ENV "OMPI_COMM_WORLD_LOCAL_RANK=${lr}")
endforeach()
dion_test(NAME gpu_select_app COMMAND gpu_select_gpu app LABELS gpu TIMEOUT 60)
dion_test(NAME gpu_select_share COMMAND gpu_select_gpu share LABELS gpu TIMEOUT 200)
