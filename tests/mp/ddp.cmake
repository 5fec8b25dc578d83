# The DDP engine between real processes: every check of ddp_check.c on 2 and 3 ranks, then the end-to-end
# scenarios: the timeline, a rank held back (stall warning), a missing gradient, a killed rank.
cohort_add_test_binary(test_ddp SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ddp.c ${CMAKE_CURRENT_LIST_DIR}/../ddp_check.c)
foreach(np 2 3)
  add_test(NAME mp.ddp.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_ddp>)
  set_tests_properties(mp.ddp.np${np} PROPERTIES LABELS "mp;sanitize;numeric" TIMEOUT 300)
endforeach()
# The same checks on 2 simulated nodes x 2 ranks (tests/mp/as_nodes.sh): the layered transport, whose buckets live in
# the node's shared arena and whose allreduce is the hierarchical one. Another transport in the line fails it.
add_test(NAME mp.ddp.hier2x2 COMMAND $<TARGET_FILE:cohortrun> -np 4 ${CMAKE_CURRENT_LIST_DIR}/as_nodes.sh 2
                                     $<TARGET_FILE:test_ddp>)
set_tests_properties(mp.ddp.hier2x2 PROPERTIES LABELS "mp;sanitize;numeric" TIMEOUT 300
                     FAIL_REGULAR_EXPRESSION "\\((tcp|shm)\\)")
foreach(mode train held_back missing killed)
  add_test(NAME mp.ddp.${mode} COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_ddp_faults.sh $<TARGET_FILE:cohortrun>
           $<TARGET_FILE:test_ddp> ${mode})
  set_tests_properties(mp.ddp.${mode} PROPERTIES LABELS "mp;fault;sanitize" TIMEOUT 120)
endforeach()
# ZeRO-1 against the unsharded engine also at 4 ranks (2 and 3 run above with every check).
add_test(NAME mp.ddp.zero_np4 COMMAND sh -c "'$<TARGET_FILE:cohortrun>' -np 4 '$<TARGET_FILE:test_ddp>' --check zero_sgd && '$<TARGET_FILE:cohortrun>' -np 4 '$<TARGET_FILE:test_ddp>' --check zero_adamw && '$<TARGET_FILE:cohortrun>' -np 4 '$<TARGET_FILE:test_ddp>' --check zero_lars")
set_tests_properties(mp.ddp.zero_np4 PROPERTIES LABELS "mp;numeric" TIMEOUT 300)
