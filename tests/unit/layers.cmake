# unit.layers: the build enforces the layering (cohort_layer in CMakeLists.txt; cmake/check_layers.cmake). For every
# layer, a file that includes a header of each layer it uses compiles with that layer's include path, and one that
# includes a header of any other layer (above it, or beside it and not used) fails to; and no file under src/ reaches
# around its layer's view with a relative "../" include.
add_test(NAME unit.layers
         COMMAND ${CMAKE_COMMAND} -DCC=${CMAKE_C_COMPILER} -DSRC=${CMAKE_SOURCE_DIR} -DVIEWS=${CMAKE_BINARY_DIR}/layers
                 "-DLAYERS=${COHORT_LAYERS}" -DWORK=${CMAKE_CURRENT_BINARY_DIR}/layers_probe
                 -P ${CMAKE_SOURCE_DIR}/cmake/check_layers.cmake)
set_tests_properties(unit.layers PROPERTIES LABELS "unit" TIMEOUT 300)
