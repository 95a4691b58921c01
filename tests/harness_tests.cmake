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

# What a GPU runs and a CPU device does not by default (vk/vk_decode.c): a
# value head split over several workgroups, a replay step as one dispatch of
# every row (the portable variant; the tiles' flush keeps two), the prefetched row blocks and
# the modules specialised for the model's strides, head counts, ring length
# and dtypes (a CPU device runs the `_rt` ones, vk/vk_device.c), on the
# Vulkan variants, for a few cases of both gates; on lavapipe with 4-wide
# subgroups, where a block's row sums are plain subgroupAdds and a lane
# reads several ring entries (vk/README.md, "Subgroup sizes"). Skipped on
# any other Vulkan device (tests/vk_subgroup_conform.cmake), whose default
# kernels are these.
if(RSSM_BACKEND_DEFINES MATCHES "RSSM_HAVE_VULKAN")
  # lavapipe with another vector width (LP_NATIVE_VECTOR_WIDTH: 128 bits are
  # 4-wide subgroups, 512 bits 16-wide; no other device reads it), with its
  # own Mesa shader cache and pipeline cache: Mesa keys neither by the width,
  # and a shader without a subgroup size in its specialization would be
  # found compiled for another. The Mesa caches are where Mesa's own is (its
  # MESA_SHADER_CACHE_DIR at configure time, as CI sets it, else the user's
  # cache directory), so that every build tree's tests (the sanitizer
  # build's, tools/test) find the compiles of the first.
  if(DEFINED ENV{MESA_SHADER_CACHE_DIR})
    set(_cache "$ENV{MESA_SHADER_CACHE_DIR}")
  elseif(DEFINED ENV{XDG_CACHE_HOME})
    set(_cache "$ENV{XDG_CACHE_HOME}")
  elseif(DEFINED ENV{HOME})
    set(_cache "$ENV{HOME}/.cache")
  else()
    set(_cache "${CMAKE_BINARY_DIR}")
  endif()
  # A conformance test on lavapipe at `bits`-bit vectors (bits / 32 lanes):
  # rssm conform ARGS through tests/vk_subgroup_conform.cmake, in the
  # environment of that width and ENV, with its COST and TIMEOUT.
  function(rssm_lavapipe_width_test name bits)
    cmake_parse_arguments(W "" "COST;TIMEOUT" "ENV;ARGS" ${ARGN})
    math(EXPR lanes "${bits} / 32")
    add_test(NAME ${name}
             COMMAND ${CMAKE_COMMAND} -DRSSM=$<TARGET_FILE:rssm_cli> -DLANES=${lanes} "-DARGS=${W_ARGS}"
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/vk_subgroup_conform.cmake)
    set(env RSSM_VK_VALIDATION=1 RSSM_VK_PIPELINE_CACHE=${CMAKE_BINARY_DIR}/vk-pipeline-cache-${bits}
            MESA_SHADER_CACHE_DIR=${_cache}/rssm-lavapipe-${bits} LP_NATIVE_VECTOR_WIDTH=${bits} ${W_ENV})
    set_tests_properties(${name} PROPERTIES
      ENVIRONMENT "${env}"
      LABELS "conformance"
      SKIP_REGULAR_EXPRESSION "rssm-skip:"
      COST ${W_COST}
      TIMEOUT ${W_TIMEOUT})
  endfunction()
  # COST: started first by `ctest -j`. Its pipelines are its own (nothing
  # else runs the GPU's modules here), two and a half minutes of compiling
  # on a cold machine, which run alone at the end of the suite otherwise.
  rssm_lavapipe_width_test(conform_vk_split 128 COST 1000 TIMEOUT 1500
    ENV RSSM_VK_ROW_SPLIT=8 RSSM_VK_PREFETCH=1 RSSM_VK_ONE_DISPATCH=1 RSSM_VK_RUNTIME_SHAPE=0
    ARGS --quick --backend vulkan:portable --backend vulkan:coopmat-emulated --case replay/fp32-L16
         --case replay/forced-flush --case gdn/replay/shape-odd-fp16-ring --case kda/replay/staggered
         --case packed/fp32 --case gdn/replay/verify-T8)
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
  # 16-wide subgroups (lavapipe with 512-bit vectors), a CPU device's
  # kernels: a replay of mixed positions (flush and read-only rows) and the
  # verify window, of one gate (KDA: per-channel decays), whose decode
  # pipelines the window's steps share (a second gate's were half its time).
  # COST: its pipelines are its own, as conform_vk_split's.
  rssm_lavapipe_width_test(conform_vk_sg16 512 COST 900 TIMEOUT 600
    ARGS --quick --backend vulkan:portable --case kda/replay/staggered --case kda/replay/verify-T8)
endif()

add_executable(test_trace test_trace.c)
target_link_libraries(test_trace PRIVATE rssm_harness ${RSSM_CMOCKA} m)
add_test(NAME trace COMMAND test_trace)
set_tests_properties(trace PROPERTIES
  ENVIRONMENT "${RSSM_TEST_ENV}"
  TIMEOUT 300)
