# Every sentence the library can log or return has a row in docs/troubleshooting.md's "## Every message"
# table (scripts/sentences.py finds them; its failure output names each row to add, with file:line).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  dion_test(NAME unit_messages_documented
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/sentences.py check ${PROJECT_SOURCE_DIR}
            ${PROJECT_SOURCE_DIR}/docs/troubleshooting.md
    LABELS host TIMEOUT 60)
  set_tests_properties(unit_messages_documented PROPERTIES WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
else()
  dion_test(NAME unit_messages_documented COMMAND sh -c "echo 'python3 not found: cannot check the messages'; exit 77"
    LABELS host)
endif()
