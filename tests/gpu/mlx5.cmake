# 32 lanes of a warp build mlx5 WQEs into one ring at once; the host checks every byte (device/mlx5.cuh).
# Building it compiles device/mlx5.cuh with nvcc for every CUDA architecture of the build (sm_80, sm_90).
add_executable(mlx5_warp_gpu mlx5_warp_gpu.cu)
target_link_libraries(mlx5_warp_gpu PRIVATE dion)
target_include_directories(mlx5_warp_gpu PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
dion_test(NAME mlx5_warp_gpu COMMAND $<TARGET_FILE:mlx5_warp_gpu> LABELS gpu TIMEOUT 60)
