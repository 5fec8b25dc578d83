# The collective matrix over shared memory between real processes started by cohortrun: on the default transport
# (auto picks shm on one host; a run that fell back to TCP would print "(tcp)", which fails it), where allreduce is
# the node allreduce (src/transport/shm_coll.c); with small chunks, so that vectors span many double-buffered chunks;
# and with COHORT_ALGO=ring, the frame-based algorithms through the rings.
foreach(np 2 3 5)
  add_test(NAME mp.shm.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_collectives>)
  set_tests_properties(mp.shm.np${np} PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 FAIL_REGULAR_EXPRESSION "\\(tcp\\)")
endforeach()
add_test(NAME mp.shm.small_chunks COMMAND $<TARGET_FILE:cohortrun> -np 3 $<TARGET_FILE:test_collectives>)
set_tests_properties(mp.shm.small_chunks PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 FAIL_REGULAR_EXPRESSION "\\(tcp\\)"
                     ENVIRONMENT "COHORT_TRANSPORT=shm;COHORT_SHM_CHUNK_BYTES=4096")
add_test(NAME mp.shm.ring COMMAND $<TARGET_FILE:cohortrun> -np 3 $<TARGET_FILE:test_collectives>)
set_tests_properties(mp.shm.ring PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 FAIL_REGULAR_EXPRESSION "\\(tcp\\)"
                     ENVIRONMENT "COHORT_TRANSPORT=shm;COHORT_ALGO=ring")
# Tiny pipeline segments through tiny rings: frames, and the headers in front of them, wrap around all the time.
add_test(NAME mp.shm.tiny_rings COMMAND $<TARGET_FILE:cohortrun> -np 3 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.shm.tiny_rings PROPERTIES LABELS "mp;sanitize" FAIL_REGULAR_EXPRESSION "\\(tcp\\)"
                     ENVIRONMENT
                     "COHORT_TRANSPORT=shm;COHORT_ALGO=ring;COHORT_SEGMENT_BYTES=1000;COHORT_SHM_RING_BYTES=4096")
# The matrix once more on buffers from cohort_alloc: allreduce is zero copy (every rank's buffers in the arena: the
# push, no staging), and every other collective runs on arena memory through the rings. test_collectives fails a
# buffer that cohort_alloc placed outside the arena; a line without ", zero copy", or on another transport, fails.
foreach(np 2 3)
  add_test(NAME mp.shm.zero_copy.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_collectives>
                                                 --zero-copy)
  set_tests_properties(mp.shm.zero_copy.np${np} PROPERTIES LABELS "mp;sanitize" TIMEOUT 900
                       FAIL_REGULAR_EXPRESSION "\\((tcp|tcp\\+shm|shm)\\)|\\((tcp|tcp\\+shm), zero copy\\)")
endforeach()
# The small path's threshold (COHORT_SHM_SMALL_BYTES, docs/env.md). 0 sends every allreduce through the sliced path,
# down to vectors of fewer elements than ranks (5 ranks: empty slices); 1000 splits the matrix's sizes between the
# two paths. Ranks that disagree on it are refused at init, naming it, rather than waiting on each other's flags.
foreach(small 0 1000 65536)
  add_test(NAME mp.shm.small_bytes.${small} COMMAND $<TARGET_FILE:cohortrun> -np 5 $<TARGET_FILE:test_collectives>
                                                   --quick)
  set_tests_properties(mp.shm.small_bytes.${small} PROPERTIES LABELS "mp" TIMEOUT 600 FAIL_REGULAR_EXPRESSION
                       "\\(tcp\\)" ENVIRONMENT "COHORT_TRANSPORT=shm;COHORT_SHM_SMALL_BYTES=${small}")
endforeach()
add_test(NAME mp.shm.small_bytes.disagree COMMAND $<TARGET_FILE:cohortrun> -np 2 sh -c
                                                  "COHORT_SHM_SMALL_BYTES=$((RANK * 4096)) exec \"$0\""
                                                  $<TARGET_FILE:test_collectives>)
set_tests_properties(mp.shm.small_bytes.disagree PROPERTIES LABELS "mp;fault" TIMEOUT 120 ENVIRONMENT
                     "COHORT_TRANSPORT=shm" PASS_REGULAR_EXPRESSION
                     "ranks disagree on COHORT_SHM_SMALL_BYTES: rank [01] uses (0|4096), rank [01] uses (0|4096)")
# auto (the default) resolves by the ranks on the host: 65536 at 2 (a rank that sets it joins one that does not), 0
# at 4 (a rank that sets 65536 there is refused, the message saying what auto gave the others).
add_test(NAME mp.shm.small_bytes.auto.np2 COMMAND $<TARGET_FILE:cohortrun> -np 2 sh -c
                                                  "[ $RANK = 1 ] && export COHORT_SHM_SMALL_BYTES=65536; exec \"$0\" --quick"
                                                  $<TARGET_FILE:test_collectives>)
set_tests_properties(mp.shm.small_bytes.auto.np2 PROPERTIES LABELS "mp" TIMEOUT 300 ENVIRONMENT "COHORT_TRANSPORT=shm"
                     FAIL_REGULAR_EXPRESSION "\\(tcp\\)")
add_test(NAME mp.shm.small_bytes.auto.np4 COMMAND $<TARGET_FILE:cohortrun> -np 4 sh -c
                                                  "[ $RANK = 3 ] && export COHORT_SHM_SMALL_BYTES=65536; exec \"$0\""
                                                  $<TARGET_FILE:test_collectives>)
set_tests_properties(mp.shm.small_bytes.auto.np4 PROPERTIES LABELS "mp;fault" TIMEOUT 120 ENVIRONMENT
                     "COHORT_TRANSPORT=shm" PASS_REGULAR_EXPRESSION
                     "ranks disagree on COHORT_SHM_SMALL_BYTES: rank [0-3] uses (0|65536), rank [0-3] uses (0|65536)")
# Buffers a few bytes past a page boundary, as malloc and numpy place large blocks (16 bytes past), against the
# page-aligned staging buffers, and 16 bytes before one (4080 past): the copies that take cohort__copy's own loop
# (src/core/copy.h), in place and out of place, from one chunk to many, every element checked.
foreach(off 16 4080)
  add_test(NAME mp.shm.page_offset.${off}
           COMMAND bash -c "for p in --in-place ''; do $<TARGET_FILE:cohortrun> -np 3 $<TARGET_FILE:cohort-bench> \
                              allreduce --min 4K --max 8M --factor 4 --page-offset ${off} --check $p || exit 1; done")
  set_tests_properties(mp.shm.page_offset.${off} PROPERTIES LABELS "mp" TIMEOUT 300
                       PASS_REGULAR_EXPRESSION "every result correct.*every result correct"
                       FAIL_REGULAR_EXPRESSION "transport tcp")
endforeach()
