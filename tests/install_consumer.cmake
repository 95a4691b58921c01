# The installed library as an outside project sees it (ctest install_consumer):
#   cmake -DBUILD=<build tree> -DSOURCE=<source tree> -DWORK=<scratch dir>
#         -DCC=<C compiler> -DVERSION=<x.y.z> -P install_consumer.cmake
# 1. `cmake --install` into WORK/prefix, the `rssm` tool included;
# 2. the shared library exports the functions of rssm.h and nothing else
#    (every defined dynamic symbol starts with rssm_), and has a soname;
# 3. examples/consumer configures with find_package(rssm), builds against
#    rssm::rssm and rssm::rssm_static, and both programs run;
# 4. pkg-config knows the version, and the program built from its flags runs.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})

file(GLOB_RECURSE so ${prefix}/*/librssm.so)
file(GLOB_RECURSE pc ${prefix}/*/rssm.pc)
if(NOT so OR NOT pc OR NOT EXISTS ${prefix}/include/rssm.h)
  message(FATAL_ERROR "the install lacks librssm.so, rssm.pc or include/rssm.h")
endif()
get_filename_component(libdir ${so} DIRECTORY)
if(NOT EXISTS ${libdir}/librssm.a)
  message(FATAL_ERROR "the install lacks librssm.a beside librssm.so")
endif()
run("the installed rssm tool" ${prefix}/bin/rssm --version)
if(NOT run_out MATCHES "${VERSION}")
  message(FATAL_ERROR "the installed `rssm --version` says '${run_out}', the project is ${VERSION}")
endif()

run("nm -D" nm -D --defined-only ${so})
string(REPLACE "\n" ";" syms "${run_out}")
foreach(line IN LISTS syms)
  if(line MATCHES " ([A-Za-z_][A-Za-z0-9_]*)(@.*)?$")
    set(name ${CMAKE_MATCH_1})
    if(NOT name MATCHES "^rssm_" AND NOT name MATCHES "^RSSM_[0-9]+\\.[0-9]+$")
      message(FATAL_ERROR "librssm.so exports '${name}', which is not rssm.h's")
    endif()
  endif()
endforeach()
run("objdump -p" objdump -p ${so})
if(NOT run_out MATCHES "SONAME +librssm\\.so\\.[0-9]")
  message(FATAL_ERROR "librssm.so has no soname")
endif()

run("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE}/examples/consumer -B ${WORK}/build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=${CC})
run("build the consumer" ${CMAKE_COMMAND} --build ${WORK}/build)
run("the consumer (rssm::rssm)" ${WORK}/build/consumer)
run("the consumer (rssm::rssm_static)" ${WORK}/build/consumer_static)

find_program(PKG_CONFIG pkg-config REQUIRED)
get_filename_component(pcdir ${pc} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
run("pkg-config --modversion" ${PKG_CONFIG} --modversion rssm)
string(STRIP "${run_out}" v)
if(NOT v STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config says version '${v}', the project is ${VERSION}")
endif()
run("pkg-config --cflags --libs" ${PKG_CONFIG} --cflags --libs rssm)
string(STRIP "${run_out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run("cc with pkg-config's flags" ${CC} ${SOURCE}/examples/quickstart.c ${flags} -o ${WORK}/consumer_pc)
set(ENV{LD_LIBRARY_PATH} ${libdir})
run("the consumer (pkg-config)" ${WORK}/consumer_pc)
message(STATUS "installed rssm ${v}: find_package (shared and static) and pkg-config consumers ran")
