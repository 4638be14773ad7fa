# dion-info and the configuration table. Host-only: no GPU and no RDMA device needed.
set(DION_INFO_EXE $<TARGET_FILE:dion-info>)

# The report runs to the end with exit 0 here, and every backend ends in a one-line verdict with its reason.
dion_test(NAME unit_dion_info
  COMMAND ${CMAKE_COMMAND} -DDION_INFO=${DION_INFO_EXE} -P ${CMAKE_CURRENT_SOURCE_DIR}/info_report.cmake
  LABELS host TIMEOUT 120)

# docs/configuration.md is generated; a table change without regenerating it fails here.
dion_test(NAME unit_config_docs
  COMMAND ${CMAKE_COMMAND} -DDION_INFO=${DION_INFO_EXE} -DDOC=${PROJECT_SOURCE_DIR}/docs/configuration.md
          -DOUT=${CMAKE_CURRENT_BINARY_DIR}/configuration.generated.md
          -P ${CMAKE_CURRENT_SOURCE_DIR}/info_config_docs.cmake
  LABELS host TIMEOUT 60)

# Every environment variable the sources read is in the table (so documented), and the library reads none
# behind the table's back.
dion_test(NAME unit_config_table
  COMMAND ${CMAKE_COMMAND} -DDION_INFO=${DION_INFO_EXE} -DSRC=${PROJECT_SOURCE_DIR}
          -P ${CMAKE_CURRENT_SOURCE_DIR}/info_config_table.cmake
  LABELS host TIMEOUT 60)
