# GPU choice without dionrun (local rank modulo visible GPUs) and the sharing warning, with fake devices.
add_executable(test_gpu_select ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_select.c)
target_link_libraries(test_gpu_select PRIVATE dion_internal)
dion_test(NAME unit_gpu_select COMMAND test_gpu_select LABELS host TIMEOUT 60)
# dion-info shows the mapping it would use (here without a GPU: the CPU-mode line; with one: local rank -> GPU).
dion_test(NAME unit_info_gpu_choice
  COMMAND sh -c "out=$($<TARGET_FILE:dion-info>) && printf '%s\\n' \"$out\" | grep -A2 'GPU choice when the launcher is not dionrun' | grep -Eq 'no GPU visible|local rank -> GPU'"
  LABELS host TIMEOUT 60)
