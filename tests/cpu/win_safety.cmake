# Issue 7, defects 1, 2, 3 and 5 in CPU mode: argument agreement, stale windows, alignment and sizes, a
# descriptor CPU threads cannot read. Three ranks, so that sentences name one rank among several.
add_executable(win_safety_cpu ${CMAKE_CURRENT_SOURCE_DIR}/win_safety_cpu.c)
target_link_libraries(win_safety_cpu PRIVATE dion Threads::Threads)
dion_test(NAME win_args_cpu COMMAND $<TARGET_FILE:dionrun> -n 3 --timeout 60 $<TARGET_FILE:win_safety_cpu> args
          LABELS "host;cpu" TIMEOUT 90 ENV "DION_CPU_MODE=1")
foreach(mode stale align badwin)
  dion_test(NAME win_${mode}_cpu COMMAND $<TARGET_FILE:dionrun> -n 3 --timeout 60 $<TARGET_FILE:win_safety_cpu> ${mode}
            LABELS "host;cpu" TIMEOUT 90 ENV "DION_CPU_MODE=1;DION_CHECK=1")
endforeach()
