# The conformance program and the trace-format tests, built on the harness
# that `rssm conform` uses (tools/harness). Included by tests/CMakeLists.txt.

# Every conformance case on every backend built in; a backend without a
# device is skipped, never passed. On lavapipe it runs under the Vulkan
# validation layer.
add_executable(test_conform test_conform.c)
target_link_libraries(test_conform PRIVATE rssm_harness ${RSSM_CMOCKA} m)
# Two tests that ctest runs side by side: the GDN and the KDA cases (whose
# pipelines never coincide, so neither waits on the other's compiles). The
# limit is what a machine with a cold shader cache needs, measured on two
# cores (docs/testing.md), with room for the sanitizer build.
add_test(NAME conform_gdn COMMAND test_conform --harness gdn/)
add_test(NAME conform_kda COMMAND test_conform kda/)
set_tests_properties(conform_gdn conform_kda PROPERTIES
  ENVIRONMENT "${RSSM_TEST_ENV}"
  LABELS "conformance"
  TIMEOUT 1500)

# What a GPU runs and a CPU device does not by default (vk/vk_pipeline.c): a
# value head split over several workgroups, a replay step as one dispatch of
# every row (the portable variant; the tiles' flush keeps two), the prefetched row blocks and
# the modules specialised for the model's strides, head counts, ring length
# and dtypes (a CPU device runs the `_rt` ones, vk/vk_device.c), on the
# Vulkan variants, for a few cases of both gates.
if(RSSM_BACKEND_DEFINES MATCHES "RSSM_HAVE_VULKAN")
  add_test(NAME conform_vk_split
           COMMAND $<TARGET_FILE:rssm_cli> conform --quick --backend vulkan:portable --backend vulkan:coopmat-emulated
                   --case replay/fp32-L16 --case replay/forced-flush --case gdn/replay/shape-odd-fp16-ring
                   --case kda/replay/staggered --case packed/fp32)
  # COST: started first by `ctest -j`. Its pipelines are its own (nothing
  # else runs the GPU's modules here), two and a half minutes of compiling
  # on a cold machine, which run alone at the end of the suite otherwise.
  set_tests_properties(conform_vk_split PROPERTIES
    ENVIRONMENT "${RSSM_TEST_ENV};RSSM_VK_ROW_SPLIT=8;RSSM_VK_PREFETCH=1;RSSM_VK_ONE_DISPATCH=1;RSSM_VK_RUNTIME_SHAPE=0"
    LABELS "conformance"
    COST 1000
    TIMEOUT 1500)
  # A bf16 state's `_s16` modules (blocks of eight rows; the packed step and
  # a replay step's read-only rows on a GPU), with two dispatches a replay
  # step so that the read-only rows run them, on a head whose rows end
  # inside a block (V = 20).
  add_test(NAME conform_vk_s16
           COMMAND $<TARGET_FILE:rssm_cli> conform --quick --backend vulkan:portable
                   --case gdn/replay/shape-odd-bf16-state --case gdn/packed/shape-odd-bf16-state)
  set_tests_properties(conform_vk_s16 PROPERTIES
    ENVIRONMENT "${RSSM_TEST_ENV};RSSM_VK_ROW_SPLIT=8;RSSM_VK_PREFETCH=1;RSSM_VK_ONE_DISPATCH=0;RSSM_VK_RUNTIME_SHAPE=0"
    LABELS "conformance"
    TIMEOUT 600)
endif()

add_executable(test_trace test_trace.c)
target_link_libraries(test_trace PRIVATE rssm_harness ${RSSM_CMOCKA} m)
add_test(NAME trace COMMAND test_trace)
set_tests_properties(trace PROPERTIES
  ENVIRONMENT "${RSSM_TEST_ENV}"
  TIMEOUT 300)
