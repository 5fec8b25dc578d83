# The collective matrix at large worlds between real processes: 8, 16, 32 and 64 ranks on however few cores the host
# has (oversubscribed: 2 in CI), every collective, dtype and op. Counts: 0, 1 and 7 (below the world size) and 4097
# (no multiple of it) for every collective; 300007 for allreduce and broadcast alone (test_collectives
# --large-counts), which takes their large-message paths (the ring, the chain, the node allreduce's chunks) for every
# dtype, while reduce_scatter and allgather of such a count would need count x world elements per rank.
#   mp.shm.np<N>         the default transport on one host: shm (the node allreduce, every other collective through
#                        the rings); a run that fell back to TCP prints "(tcp)", which fails it.
#   mp.collectives.np<N> TCP: recursive doubling and the ring, the tree and the chain, the rings of reduce_scatter and
#                        allgather.
#   mp.shm.ring.np64     the frame-based algorithms through the shm rings, at the ring size COHORT_SHM_RING_BYTES=auto
#                        gives 64 ranks (520 KiB).
#   mp.hier.8x8          64 ranks on 8 simulated nodes (as_nodes.sh): tcp+shm and the hierarchical allreduce.
# Measured on 2 loaded cores before the rooted calls and alltoall: about 3 s each at 8 ranks, 6 s at 16, 13-15 s at
# 32, 23-28 s at 64; 3 minutes in all with unit.coll_inproc.np16/32/64 (tests/unit/coll.cmake).
# At 32 and 64 ranks, one dtype of each size (f32, f16, i64, bool; --dtypes): the reductions of each dtype do not
# depend on the world size (8 and 16 ranks, and the small worlds, check all ten), the algorithms' scaling does. The
# whole matrix at 64 ranks took 175-375 s per test on 2 cores once the rooted calls, alltoall and the new dtypes
# and ops had joined it, a quarter of CI's test time for these five tests.
set(large_counts --counts 0,1,7,4097 --large-counts 300007)
set(thin_dtypes --dtypes f32,f16,i64,bool)
foreach(np 8 16 32 64)
  if(np GREATER 16)
    set(large_counts --counts 0,1,7,4097 --large-counts 300007 ${thin_dtypes})
  endif()
  add_test(NAME mp.shm.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_collectives>
                                       ${large_counts})
  set_tests_properties(mp.shm.np${np} PROPERTIES LABELS "mp" TIMEOUT 600 FAIL_REGULAR_EXPRESSION "\\(tcp\\)")
  add_test(NAME mp.collectives.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_collectives>
                                               ${large_counts})
  set_tests_properties(mp.collectives.np${np} PROPERTIES LABELS "mp" TIMEOUT 600 ENVIRONMENT "COHORT_TRANSPORT=tcp")
endforeach()
add_test(NAME mp.shm.ring.np64 COMMAND $<TARGET_FILE:cohortrun> -np 64 $<TARGET_FILE:test_collectives> ${large_counts})
set_tests_properties(mp.shm.ring.np64 PROPERTIES LABELS "mp" TIMEOUT 600 FAIL_REGULAR_EXPRESSION "\\(tcp\\)"
                     ENVIRONMENT "COHORT_TRANSPORT=shm;COHORT_ALGO=ring")
add_test(NAME mp.hier.8x8 COMMAND $<TARGET_FILE:cohortrun> -np 64 ${CMAKE_CURRENT_LIST_DIR}/as_nodes.sh 8
                                  $<TARGET_FILE:test_collectives> ${large_counts})
set_tests_properties(mp.hier.8x8 PROPERTIES LABELS "mp" TIMEOUT 600 FAIL_REGULAR_EXPRESSION "\\((tcp|shm)\\)")
# COST: in a fresh clone (CI) ctest has no timings yet; these start early, beside the conformance suite, rather than
# last with nothing left to run beside them.
set_tests_properties(mp.shm.np64 mp.shm.ring.np64 mp.collectives.np64 mp.hier.8x8 PROPERTIES COST 1000)
