# Collectives on device memory (docs/gpu.md), on the GPU host: every rank on its one GPU (the cuda-ipc path) at 2 and
# 4 ranks, 1 rank over NCCL, 2 ranks forced through the staged path, a rank killed mid-allreduce, mismatches. Where
# there is no GPU (CI) each reports SKIP with the reason (exit 77). Built only with the CUDA plugins.
if(COHORT_HAVE_CUDA)
  cohort_add_test_binary(test_gpu_coll SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpu_coll.c)
  target_link_libraries(test_gpu_coll PRIVATE CUDA::cudart_static)
  add_dependencies(test_gpu_coll cohort_cuda)
  set(gpu_run ${CMAKE_CURRENT_LIST_DIR}/run_ranks.sh)
  foreach(np 1 2 4)
    add_test(NAME gpu.coll.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_gpu_coll>)
  endforeach()
  add_test(NAME gpu.coll.staged.np2 COMMAND $<TARGET_FILE:cohortrun> -np 2 $<TARGET_FILE:test_gpu_coll>)
  set_tests_properties(gpu.coll.staged.np2 PROPERTIES ENVIRONMENT "COHORT_GPU_PATH=staged")
  add_test(NAME gpu.coll.tcp.np2 COMMAND $<TARGET_FILE:cohortrun> -np 2 $<TARGET_FILE:test_gpu_coll>)
  set_tests_properties(gpu.coll.tcp.np2 PROPERTIES ENVIRONMENT "COHORT_TRANSPORT=tcp")
  # The IPC path with every wait on the host, as before 2026-11-28 (the default waits on the device).
  add_test(NAME gpu.coll.ipc_host_sync.np2 COMMAND $<TARGET_FILE:cohortrun> -np 2 $<TARGET_FILE:test_gpu_coll>)
  set_tests_properties(gpu.coll.ipc_host_sync.np2 PROPERTIES ENVIRONMENT "COHORT_GPU_IPC_SYNC=host")
  add_test(NAME gpu.fault.kill.np3 COMMAND ${gpu_run} 3 $<TARGET_FILE:test_gpu_coll> faults_kill)
  add_test(NAME gpu.fault.kill_stream.np3 COMMAND ${gpu_run} 3 $<TARGET_FILE:test_gpu_coll> faults_kill_stream)
  add_test(NAME gpu.fault.mismatch.np2 COMMAND ${gpu_run} 2 $<TARGET_FILE:test_gpu_coll> faults_mismatch)
  add_test(NAME gpu.fault.mismatch_host.np2 COMMAND ${gpu_run} 2 $<TARGET_FILE:test_gpu_coll> faults_mismatch)
  set_tests_properties(gpu.fault.mismatch_host.np2 PROPERTIES ENVIRONMENT "COHORT_TEST_MISMATCH_HOST=1")
  set_tests_properties(gpu.coll.np1 gpu.coll.np2 gpu.coll.np4 gpu.coll.staged.np2 gpu.coll.tcp.np2
                       gpu.coll.ipc_host_sync.np2 gpu.fault.kill.np3 gpu.fault.kill_stream.np3 gpu.fault.mismatch.np2 gpu.fault.mismatch_host.np2
                       PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77 TIMEOUT 300 RESOURCE_LOCK gpu)
endif()
