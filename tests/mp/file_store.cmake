# Rendezvous through the file store end to end: the collective matrix on 3 ranks under cohortrun with
# COHORT_STORE=file:<fresh temporary directory> (test_file_store.sh creates and removes it, and checks the files the
# rendezvous left there).
foreach(case existing_dir created_dir)
  add_test(NAME mp.file_store.${case}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_file_store.sh $<TARGET_FILE:cohortrun> $<TARGET_FILE:test_collectives>
                   ${case})
  set_tests_properties(mp.file_store.${case} PROPERTIES LABELS "mp;sanitize" TIMEOUT 300 ENVIRONMENT "COHORT_TRANSPORT=tcp")
endforeach()
