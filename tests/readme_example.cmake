# Fails unless README.md's ```c block is examples/quickstart.c from its first
# #include line on, so the README's example is the program the suite runs.
file(READ "${EXAMPLE}" _example)
string(FIND "${_example}" "#include <rssm.h>" _at)
if(_at LESS 0)
  message(FATAL_ERROR "${EXAMPLE} has no '#include <rssm.h>' line")
endif()
string(SUBSTRING "${_example}" ${_at} -1 _example)
file(READ "${README}" _readme)
string(FIND "${_readme}" "```c\n${_example}```" _found)
if(_found LESS 0)
  message(FATAL_ERROR "README.md does not hold ${EXAMPLE} (from '#include <rssm.h>' on) in a ```c block: "
                      "copy the file's text into the README")
endif()
