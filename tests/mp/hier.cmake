# The collective matrix on simulated nodes (tests/mp/as_nodes.sh gives each rank COHORT_NODE_ID=sim<RANK / k>):
# 2 nodes x 2 ranks and 3 nodes x 2 ranks get the layered transport ("tcp+shm": TCP across nodes, shm within) and
# the hierarchical allreduce (src/coll/hier.c); a run that fell back to plain TCP would print "(tcp)", which fails
# it, as would "(shm)". 2 nodes x 1 rank has nothing to share within a node, and 2 + 1 ranks are not the same number
# per node: plain TCP and the flat algorithms. COHORT_ALGO=ring or rd forces a flat algorithm over the layered transport.
set(as_nodes ${CMAKE_CURRENT_LIST_DIR}/as_nodes.sh)
add_test(NAME mp.hier.2x2 COMMAND $<TARGET_FILE:cohortrun> -np 4 ${as_nodes} 2 $<TARGET_FILE:test_collectives>)
set_tests_properties(mp.hier.2x2 PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 FAIL_REGULAR_EXPRESSION "\\((tcp|shm)\\)")
add_test(NAME mp.hier.3x2 COMMAND $<TARGET_FILE:cohortrun> -np 6 ${as_nodes} 2 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.hier.3x2 PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 FAIL_REGULAR_EXPRESSION "\\((tcp|shm)\\)")
add_test(NAME mp.hier.2x1 COMMAND $<TARGET_FILE:cohortrun> -np 2 ${as_nodes} 1 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.hier.2x1 PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 FAIL_REGULAR_EXPRESSION "\\((tcp\\+shm|shm)\\)")
add_test(NAME mp.hier.ring COMMAND $<TARGET_FILE:cohortrun> -np 4 ${as_nodes} 2 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.hier.ring PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 FAIL_REGULAR_EXPRESSION "\\((tcp|shm)\\)"
                     ENVIRONMENT "COHORT_ALGO=ring")
add_test(NAME mp.hier.rd COMMAND $<TARGET_FILE:cohortrun> -np 4 ${as_nodes} 2 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.hier.rd PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 FAIL_REGULAR_EXPRESSION "\\((tcp|shm)\\)"
                     ENVIRONMENT "COHORT_ALGO=rd")
add_test(NAME mp.hier.irregular COMMAND $<TARGET_FILE:cohortrun> -np 3 ${as_nodes} 2 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.hier.irregular PROPERTIES LABELS "mp;sanitize" TIMEOUT 900
                     FAIL_REGULAR_EXPRESSION "\\((tcp\\+shm|shm)\\)")
# The same through the launcher's own multi-node layout: two cohortruns, --nnodes 2, COHORT_NODE_ID a and b.
add_test(NAME mp.hier.two_cohortruns COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_hier_nodes.sh $<TARGET_FILE:cohortrun>
                                             $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.hier.two_cohortruns PROPERTIES LABELS "mp;sanitize" TIMEOUT 600 PASS_REGULAR_EXPRESSION "PASS")
# On buffers from cohort_alloc: the node part's arena, so the hierarchical allreduce reads its node peers' inputs and
# copies their slices' results in place (2 x 2 simulated nodes).
add_test(NAME mp.hier.2x2.zero_copy COMMAND $<TARGET_FILE:cohortrun> -np 4 ${as_nodes} 2
                                            $<TARGET_FILE:test_collectives> --zero-copy)
set_tests_properties(mp.hier.2x2.zero_copy PROPERTIES LABELS "mp;sanitize" TIMEOUT 900
                     FAIL_REGULAR_EXPRESSION "\\((tcp|tcp\\+shm|shm)\\)|\\((tcp|shm), zero copy\\)")
