# proxy/verbs engine without an RDMA device: pure pieces, and the engine over a fake libibverbs.
if(DION_IBVERBS_INCLUDE)
  add_library(dion_fake_ibverbs MODULE ${CMAKE_CURRENT_SOURCE_DIR}/fake_ibverbs.c)
  target_include_directories(dion_fake_ibverbs PRIVATE ${DION_IBVERBS_INCLUDE})
  set_target_properties(dion_fake_ibverbs PROPERTIES C_VISIBILITY_PRESET hidden)
  # its service thread (QPs between processes) outlives the engine's dlclose: the library must stay mapped
  target_link_options(dion_fake_ibverbs PRIVATE -Wl,-z,nodelete)
  target_link_libraries(dion_fake_ibverbs PRIVATE Threads::Threads)
  add_executable(test_verbs ${CMAKE_CURRENT_SOURCE_DIR}/test_verbs.c ${CMAKE_CURRENT_SOURCE_DIR}/test_verbs_engine.c
                            ${CMAKE_CURRENT_SOURCE_DIR}/test_verbs_ops.c)
  target_include_directories(test_verbs PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(test_verbs PRIVATE dion_internal)
  add_dependencies(test_verbs dion_fake_ibverbs)
  target_compile_options(test_verbs PRIVATE -Werror)
  target_compile_options(dion_fake_ibverbs PRIVATE -Werror)
  dion_test(NAME unit_verbs COMMAND test_verbs $<TARGET_FILE:dion_fake_ibverbs> LABELS host TIMEOUT 60)
endif()
# libdion must load where rdma-core is absent: it may not need any ibv_ symbol from the dynamic linker.
dion_test(NAME unit_verbs_no_link
  COMMAND sh -c "! nm -D --undefined-only $<TARGET_FILE:dion> | grep -E ' (_?_?ibv_|mlx5dv_)'"
  LABELS host TIMEOUT 60)
