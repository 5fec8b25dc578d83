# The host side of the device collectives without a GPU (CI): the path choice, a CPU-only process asked for device
# collectives, the plugin's override. Each case in its own process: the plugin is loaded (or not) once per process.
cohort_add_test_binary(test_gpu_host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpu_host.c)
foreach(case path_auto path_forced cpu_only plugin_override)
  add_test(NAME unit.gpu_host.${case} COMMAND test_gpu_host ${case})
  set_tests_properties(unit.gpu_host.${case} PROPERTIES LABELS "unit;sanitize" TIMEOUT 60)
endforeach()
