# The installed library as a user sees it: `cmake --install` into a fresh prefix, then the README's C example built
# against it with pkg-config and with find_package(cohort), each run under the installed cohortrun.
add_test(NAME install.readme_example
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_install.sh ${CMAKE_COMMAND} ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/README.md)
set_tests_properties(install.readme_example PROPERTIES LABELS "install" TIMEOUT 300)
