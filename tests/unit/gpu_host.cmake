# The host side of the device collectives without a GPU (CI): the path choice, a CPU-only process asked for device
# collectives, the plugin's override. Each case in its own process: the plugin is loaded (or not) once per process.
cohort_add_test_binary(test_gpu_host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpu_host.c)
# A stand-in for the CUDA driver whose every call aborts (fake_libcuda.c), for the fork cases.
add_library(fake_libcuda MODULE ${CMAKE_CURRENT_LIST_DIR}/fake_libcuda.c)
set_target_properties(fake_libcuda PROPERTIES PREFIX "" OUTPUT_NAME "libcuda" SUFFIX ".so.1"
                                              LIBRARY_OUTPUT_DIRECTORY ${COHORT_TEST_DIR}/fake-cuda)
target_link_options(fake_libcuda PRIVATE -Wl,-soname,libcuda.so.1)
add_dependencies(test_gpu_host fake_libcuda)
target_compile_definitions(test_gpu_host PRIVATE FAKE_LIBCUDA="$<TARGET_FILE:fake_libcuda>")
if(TARGET cohort_cuda) # the plugin is built: the stand-in must be reached through it (its cuInit)
  add_dependencies(test_gpu_host cohort_cuda)
  target_compile_definitions(test_gpu_host PRIVATE COHORT_TEST_PLUGIN_BUILT=1)
endif()
foreach(case path_auto path_forced cpu_only plugin_override forked_after_cuda fake_driver_reached gpus_hidden
             hidden_read_when_driver_seen)
  add_test(NAME unit.gpu_host.${case} COMMAND test_gpu_host ${case})
  set_tests_properties(unit.gpu_host.${case} PROPERTIES LABELS "unit;sanitize" TIMEOUT 60)
endforeach()
