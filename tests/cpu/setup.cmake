# scripts/setup.sh run to the end on simulated machines: apt unable to reach an archive, an optional header
# missing, cmake too old with no way to get another or with pip (tests/cpu/setup_test.sh). The two that build share one
# small build folder of their own (CPU mode, no tests or benchmarks, sm_90 only), so they take turns.
foreach(case apt_unreachable header_missing cmake_too_old pip_fallback)
  dion_test(NAME setup_${case}
            COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/setup_test.sh ${PROJECT_SOURCE_DIR}
                    ${CMAKE_CURRENT_BINARY_DIR}/setup_check ${case}
            LABELS cpu TIMEOUT 300)
  set_tests_properties(setup_${case} PROPERTIES RESOURCE_LOCK dion_setup_build)
endforeach()
