# `rssm conform ARGS` on lavapipe at another subgroup width: skipped (the
# "rssm-skip:" line) where the Vulkan device is not lavapipe, failed where
# lavapipe did not take the width the test's LP_NATIVE_VECTOR_WIDTH asks for
# (LANES lanes), so that the test cannot pass at the default width unnoticed.
# cmake -DRSSM=<rssm> -DLANES=<n> -DARGS=<;-list> -P vk_subgroup_conform.cmake
execute_process(COMMAND "${RSSM}" info OUTPUT_VARIABLE _info ERROR_VARIABLE _err)
# `rssm info`'s section of the `vulkan` backend: up to the blank line after it.
string(FIND "${_info}" "\nvulkan: available\n" _at)
if(_at LESS 0)
  message("rssm-skip: no Vulkan device")
  return()
endif()
string(SUBSTRING "${_info}" ${_at} -1 _section)
string(FIND "${_section}" "\n\n" _end)
string(SUBSTRING "${_section}" 0 ${_end} _section)
string(REGEX MATCH "device: ([^\n]*)" _ "${_section}")
if(NOT CMAKE_MATCH_1 MATCHES "^llvmpipe")
  message("rssm-skip: the Vulkan device is not lavapipe (${CMAKE_MATCH_1})")
  return()
endif()
string(REGEX MATCH "subgroup size: ([0-9]+)" _ "${_section}")
if(NOT CMAKE_MATCH_1 STREQUAL "${LANES}")
  message(FATAL_ERROR "lavapipe runs ${CMAKE_MATCH_1}-wide subgroups here, not ${LANES}: "
                      "LP_NATIVE_VECTOR_WIDTH=$ENV{LP_NATIVE_VECTOR_WIDTH} was not taken")
endif()
execute_process(COMMAND "${RSSM}" conform ${ARGS} RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "rssm conform at ${LANES}-wide subgroups: exit status ${_rc}")
endif()
