# The conformance program and the trace-format tests, built on the harness
# that `rssm conform` uses (tools/harness). Included by tests/CMakeLists.txt.

# Every conformance case on every backend built in; a backend without a
# device is skipped, never passed. On lavapipe it runs under the Vulkan
# validation layer.
add_executable(test_conform test_conform.c)
target_link_libraries(test_conform PRIVATE rssm_harness rssm ${RSSM_CMOCKA} m)
add_test(NAME conform COMMAND test_conform)
set_tests_properties(conform PROPERTIES
  ENVIRONMENT "${RSSM_TEST_ENV}"
  LABELS "conformance"
  TIMEOUT 900)

add_executable(test_trace test_trace.c)
target_link_libraries(test_trace PRIVATE rssm_harness rssm ${RSSM_CMOCKA} m)
add_test(NAME trace COMMAND test_trace)
set_tests_properties(trace PROPERTIES
  ENVIRONMENT "${RSSM_TEST_ENV}"
  TIMEOUT 300)
