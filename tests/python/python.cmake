# The Python package (python/cohort, docs/torch.md) between real processes under cohortrun, with Debian's
# python3-torch: every op and dtype against numpy at world sizes 1, 2 and 3; training equivalence with PyTorch DDP
# (gloo) and with one process; faults (a killed rank, mismatched shapes, Ctrl-C of cohortrun). A missing torch
# fails them: never a silent skip. Label: python.
# COHORT_PYTHON: the python3 with torch that tests/CMakeLists.txt found.
set(COHORT_PY_ENV "PYTHONPATH=${CMAKE_BINARY_DIR}/python;OMP_NUM_THREADS=1")

foreach(np 1 2 3)
  add_test(NAME python.ops.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_ops.py)
  set_tests_properties(python.ops.np${np} PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}")
endforeach()

# CUDA tensors through the library's device collectives (2 ranks sharing one GPU: cuda-ipc), and DDP on a CUDA module
# (buckets in device memory) against one process with the global batch; SKIP with the reason where torch sees no GPU,
# as in CI.
add_test(NAME python.cuda_tensors COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
         ${CMAKE_CURRENT_LIST_DIR}/test_cuda_tensors.py)
add_test(NAME python.cuda_ddp COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
         ${CMAKE_CURRENT_LIST_DIR}/test_cuda_ddp.py)
# torch.distributed's backend "cohort" on CUDA tensors: every operation against the same on CPU tensors, and torch's
# DDP on a CUDA module against DDP on gloo.
add_test(NAME python.cuda_dist COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
         ${CMAKE_CURRENT_LIST_DIR}/test_dist_cuda.py)
# torch 2's DeviceMesh, DCP and FSDP2 on the backend (CPU tensors); SKIP on torch 1.13, which has none of them.
add_test(NAME python.dist_torch2 COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
         ${CMAKE_CURRENT_LIST_DIR}/test_dist_torch2.py)
set_tests_properties(python.dist_torch2 PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}"
                     SKIP_RETURN_CODE 77)
set_tests_properties(python.cuda_tensors python.cuda_ddp python.cuda_dist PROPERTIES LABELS "python;mp;gpu" TIMEOUT 300
                     ENVIRONMENT "${COHORT_PY_ENV}" SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu)

# 20 steps of a small CNN on 2 ranks: DistributedOptimizer and DistributedDataParallel (with and without
# no_sync/backward_passes_per_step) against torch DDP on gloo (1e-6) and 1 process with the global batch (1e-5).
add_test(NAME python.train_equiv COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
         ${CMAKE_CURRENT_LIST_DIR}/test_train_equiv.py)
set_tests_properties(python.train_equiv PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}")

# Uneven inputs (test_join.py): ranks with different batch counts train with DistributedOptimizer + hvd.join() and
# DistributedDataParallel + model.join(); the parameters against a one-process replay of the per-step averages (1e-6),
# bitwise equal on every rank, join()'s rank; cohortrun exits 0 only if every rank passed; a hang fails on the TIMEOUT.
foreach(np 2 3)
  add_test(NAME python.join.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_join.py)
  set_tests_properties(python.join.np${np} PROPERTIES LABELS "python;mp" TIMEOUT 120 ENVIRONMENT "${COHORT_PY_ENV}")
endforeach()

# What join() refuses is an error on every rank within seconds, never a hang (test_join_misuse.py): another rank's
# plain allreduce while one has joined, hvd.join() with two engines alive, hvd.join() between backward and step.
foreach(mode allreduce two_engines inside_step)
  add_test(NAME python.join.misuse.${mode} COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_join_misuse.py ${mode})
  set_tests_properties(python.join.misuse.${mode} PROPERTIES LABELS "python;mp" TIMEOUT 60
                       ENVIRONMENT "${COHORT_PY_ENV}")
endforeach()

# Faults (tests/python/test_faults.sh): a rank SIGKILLed inside an allreduce (RemoteError naming it within 2 s),
# ranks reducing different shapes or each broadcasting as its own root (MismatchError on both, and the job goes on),
# Ctrl-C of cohortrun (the ranks stop, /dev/shm clean), a rank that shuts down while the other waits for it (shm:
# RemoteError at once, not at COHORT_OP_TIMEOUT).
foreach(mode kill mismatch sigint left)
  add_test(NAME python.fault.${mode} COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_faults.sh $<TARGET_FILE:cohortrun>
           ${COHORT_PYTHON} ${mode})
  set_tests_properties(python.fault.${mode} PROPERTIES LABELS "python;fault" TIMEOUT 120
                       ENVIRONMENT "${COHORT_PY_ENV}" PASS_REGULAR_EXPRESSION "PASS \\(${mode}\\)")
endforeach()

# The examples (examples/torch) on 2 ranks for a few steps: they train and print fmnist-train's final line.
foreach(ex horovod ddp)
  add_test(NAME python.example.${ex} COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
           ${CMAKE_SOURCE_DIR}/examples/torch/fmnist_${ex}.py --steps 20)
  set_tests_properties(python.example.${ex} PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}"
                       PASS_REGULAR_EXPRESSION "final: steps=20 loss=[0-9.]+ test_acc=0\\.[0-9]+ img_per_s=[0-9]+")
endforeach()

# cmake --install into a virtual environment (with the system's torch): its python imports the package with no
# PYTHONPATH (it was put in lib/python3/dist-packages before, which no Python of that prefix searches), binds the
# installed library, and says its version.
add_test(NAME python.install COMMAND sh -c "d=$(mktemp -d) && trap 'rm -rf $d' EXIT && \
${COHORT_PYTHON} -m venv --without-pip --system-site-packages $d/venv && \
${CMAKE_COMMAND} --install ${CMAKE_BINARY_DIR} --prefix $d/venv >/dev/null && env -u PYTHONPATH $d/venv/bin/python -c \
'import cohort, cohort.torch as hvd, sys; hvd.init(); assert cohort._lib.lib.path.startswith(sys.argv[1]), cohort._lib.lib.path; \
assert cohort.__version__ == hvd.__version__ == \"${PROJECT_VERSION}\", cohort.__version__; \
assert hvd.allreduce(hvd.torch.ones(2), op=hvd.Sum).tolist() == [1.0, 1.0]; print(\"installed ok:\", cohort._lib.lib.path)' $d")
set_tests_properties(python.install PROPERTIES LABELS "python" TIMEOUT 120 PASS_REGULAR_EXPRESSION "installed ok")

# A plain torch DDP program (plain_ddp.py: init_process_group('gloo', init_method='env://'), nothing of cohort in it)
# runs under cohortrun as under torchrun: rank 0 serves torch's store on MASTER_PORT, which cohortrun keeps free. On
# one node (torchrun's spelling, --standalone) and on two cohortruns as two nodes of 2 workers each. cohortrun exits 0
# only if every rank passed its checks (equal parameters everywhere after training on different shards).
add_test(NAME python.plain_ddp.one_node COMMAND $<TARGET_FILE:cohortrun> --standalone --nproc_per_node 2
         ${COHORT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/plain_ddp.py)
set_tests_properties(python.plain_ddp.one_node PROPERTIES LABELS "python;mp" TIMEOUT 120 ENVIRONMENT "${COHORT_PY_ENV}")
add_test(NAME python.plain_ddp.two_nodes COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_plain_ddp_nodes.sh
         $<TARGET_FILE:cohortrun> ${COHORT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/plain_ddp.py)
set_tests_properties(python.plain_ddp.two_nodes PROPERTIES LABELS "python;mp" TIMEOUT 180 ENVIRONMENT "${COHORT_PY_ENV}"
                     PASS_REGULAR_EXPRESSION "PASS \\(plain ddp on 2 nodes\\)")

# cohort programs (fmnist-train, and cohort.torch) under torch 1.13's own launcher, python3 -m torch.distributed.run:
# its default static rendezvous, whose agent holds MASTER_PORT (cohort's rank 0 serves on MASTER_PORT+1), and
# --standalone (test_torchrun.sh).
foreach(mode static standalone)
  add_test(NAME python.torchrun.${mode} COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_torchrun.sh ${COHORT_PYTHON}
           $<TARGET_FILE:fmnist-train> ${mode})
  set_tests_properties(python.torchrun.${mode} PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}"
                       PASS_REGULAR_EXPRESSION "PASS \\(torchrun ${mode}\\)")
endforeach()

# Two processes started by hand with torchrun's variables (no cohortrun) find each other.
add_test(NAME python.env_launch COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_env_launch.sh ${COHORT_PYTHON})
set_tests_properties(python.env_launch PROPERTIES LABELS "python;mp" TIMEOUT 120 ENVIRONMENT "${COHORT_PY_ENV}"
                     PASS_REGULAR_EXPRESSION "PASS \\(env launch\\)")

# A call before init() is a RuntimeError that says so (and the interpreter lives on).
add_test(NAME python.before_init COMMAND ${COHORT_PYTHON} -c "
import torch, cohort, cohort.torch as hvd
for fn in (lambda: hvd.allreduce(torch.ones(1)), hvd.rank, lambda: cohort.allgather(bytearray(2)),
           lambda: hvd.DistributedDataParallel(torch.nn.Linear(2, 2))):
    try:
        fn()
        raise SystemExit('no error before init()')
    except RuntimeError as e:
        assert 'init()' in str(e), e
assert not hvd.is_initialized()
print('PASS (before init)')")
set_tests_properties(python.before_init PROPERTIES LABELS "python" TIMEOUT 60 ENVIRONMENT "${COHORT_PY_ENV}"
                     PASS_REGULAR_EXPRESSION "PASS \\(before init\\)")

# DistributedDataParallel and DistributedOptimizer features on 2 ranks: broadcast_buffers, find_unused_parameters,
# zero_grad(set_to_none=True), op=Sum, fp16 compression, synchronize/skip_synchronize, a shape mismatch.
add_test(NAME python.ddp_features COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
         ${CMAKE_CURRENT_LIST_DIR}/test_ddp_features.py)
set_tests_properties(python.ddp_features PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}")

# bench.torch_vs_gloo_smoke: bench/torch_vs_gloo.sh for a few steps up to 1 MiB, against the real gloo anchor, so
# that a change in the script, the package or the anchor shows up as a failure rather than as a wrong table. It
# passes when the 1 MiB rows (dist.all_reduce's with its memory floor), the overhead rows and the training rows were
# printed; the figures are not judged.
string(CONCAT COHORT_TORCH_BENCH_ROWS " 1048576 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+\n"
       ".*overhead cohort.torch.allreduce_ us=[0-9.]+\n.*"
       "cnn  cohort 1 rank +[0-9.]+ +2 ranks +[0-9.]+ .* ratio [0-9.]+x\n"
       "mlp  cohort 1 rank +[0-9.]+ +2 ranks +[0-9.]+ .* ratio [0-9.]+x\n.*"
       " 1048576 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+\n.*"
       "mlp  dist.cohort. +[0-9.]+ +dist.gloo. +[0-9.]+ +cohort.torch +[0-9.]+ img/s +dist.cohort./gloo [0-9.]+x.*\n"
       " +alone +[0-9.]+ img/s .no wrapper. +dist.cohort., gradient_as_bucket_view +[0-9.]+: /gloo [0-9.]+x")
add_test(NAME bench.torch_vs_gloo_smoke COMMAND bash ${CMAKE_SOURCE_DIR}/bench/torch_vs_gloo.sh 3 1 500)
set_tests_properties(bench.torch_vs_gloo_smoke PROPERTIES LABELS "bench;python" TIMEOUT 600 RUN_SERIAL TRUE
                     ENVIRONMENT "BUILD=${CMAKE_BINARY_DIR};PYTHON=${COHORT_PYTHON}"
                     SKIP_REGULAR_EXPRESSION "anchor [^ ]* is missing" PASS_REGULAR_EXPRESSION "${COHORT_TORCH_BENCH_ROWS}")

# Process sets (hvd.add_process_set, process_set=) and new_group with DistributedDataParallel(process_group=): sets of
# 2 and 3 ranks, and 2 and 2, each a sub-communicator with a transport of its own.
foreach(np 4 5)
  add_test(NAME python.process_sets.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_process_sets.py)
  set_tests_properties(python.process_sets.np${np} PROPERTIES LABELS "python;mp" TIMEOUT 300
                       ENVIRONMENT "${COHORT_PY_ENV}")
endforeach()

# COHORT_HEARTBEAT_S names the rank that hangs in a plain torch program too, which maps no heartbeat page: cohortrun
# judges it by its CPU time, I/O and output (/proc, tools/cohortrun/watch.c). Run by test_launcher_waits.sh.
add_test(NAME python.plain_hang COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fault/test_launcher_waits.sh hang-torch)
set_tests_properties(python.plain_hang PROPERTIES LABELS "python;fault" TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT
                     "${COHORT_PY_ENV};COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_PYTHON=${COHORT_PYTHON};COHORT_TEST_PLAIN_HANG=${CMAKE_CURRENT_LIST_DIR}/plain_hang.py")

# torch's @record under cohortrun, cohortrun's own TORCHELASTIC_ERROR_FILE, and torchrun over cohortrun reading it.
add_test(NAME python.torchrun_errors COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fault/test_torchrun_cli.sh errors)
set_tests_properties(python.torchrun_errors PROPERTIES LABELS "python;fault" TIMEOUT 180 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${COHORT_PY_ENV};COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_PYTHON=${COHORT_PYTHON}")
# The observers from cohort.torch: the timeline's forward/backward spans and the per-step metrics with the loss.
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/tests/python_observe_counters)
add_test(NAME python.observe COMMAND ${CMAKE_COMMAND} -E env COHORT_TIMELINE=${CMAKE_BINARY_DIR}/tests/python_observe.json
         COHORT_METRICS=${CMAKE_BINARY_DIR}/tests/python_observe.jsonl
         COHORT_METRICS_DIR=${CMAKE_BINARY_DIR}/tests/python_observe_counters
         COHORT_REPORT=${CMAKE_SOURCE_DIR}/tools/cohort-report/cohort-report $<TARGET_FILE:cohortrun> -np 2
         ${COHORT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_observe.py)
set_tests_properties(python.observe PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}")

# torch.distributed's backend "cohort" (python/cohort/torch/_backend.py, docs/torch.md): every operation on CPU
# tensors with its values checked (test_dist_backend.py), under cohortrun (cohort's own rendezvous) at 1 to 3 ranks,
# and in processes started by hand that meet through torch's store: init_method file:// and tcp://, and env:// over
# the tcp transport.
# COHORT_TEST_TORCH_EXT says whether CMake built the backend's C++ half (cohort.torch._c10d): the test checks that
# it is loaded and that blocking all_reduces take it; python.dist_backend.noext runs the same with the backend in
# Python alone (COHORT_TORCH_EXT=0).
foreach(np 1 2 3 noext)
  set(ranks ${np})
  if(np STREQUAL "noext")
    set(ranks 2)
    set(name python.dist_backend.noext)
  else()
    set(name python.dist_backend.np${np})
  endif()
  add_test(NAME ${name} COMMAND $<TARGET_FILE:cohortrun> -np ${ranks} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_dist_backend.py)
  set_tests_properties(${name} PROPERTIES LABELS "python;mp" TIMEOUT 300
                       ENVIRONMENT "${COHORT_PY_ENV};COHORT_TEST_TORCH_EXT=${COHORT_TORCH_EXT_BUILT}")
endforeach()
set_property(TEST python.dist_backend.noext APPEND PROPERTY ENVIRONMENT "COHORT_TORCH_EXT=0")
foreach(mode file tcp env)
  add_test(NAME python.dist_backend.${mode} COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_dist_launch.sh ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_dist_backend.py ${mode} 3)
  set_tests_properties(python.dist_backend.${mode} PROPERTIES LABELS "python;mp" TIMEOUT 300
                       ENVIRONMENT "${COHORT_PY_ENV}" PASS_REGULAR_EXPRESSION "PASS \\(dist launch ${mode}, 3 ranks\\)")
endforeach()
set_property(TEST python.dist_backend.env APPEND PROPERTY ENVIRONMENT "COHORT_TRANSPORT=tcp")

# torch's own distributed conformance suite (torch/testing/_internal/distributed/distributed_test.py, which Debian's
# python3-torch ships) on backend "cohort" at world sizes 2 and 3, driven by tests/python/torch_dist_suite.py (torch
# ships no driver): every test the suite lets a plugin backend with DDP and subgroups run, and its CPU all-to-all
# tests, which it skips for every backend but MPI. Each test forks its ranks from the driver, which has imported torch
# (spawned, as torch's own driver does, world size 3 took 7 minutes alone on 2 cores, and 19 minutes beside the rest
# of the suite; forked, 53 s alone, with the same outcome for every test).
foreach(ws 2 3)
  add_test(NAME python.dist_suite.ws${ws} COMMAND sh -c "d=$(mktemp -d) && trap 'rm -rf $d' EXIT && \
BACKEND=cohort WORLD_SIZE=${ws} TEMP_DIR=$d ${COHORT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/torch_dist_suite.py")
  # COST: the longest tests start first, so that ctest -j packs the rest beside them rather than after them.
  set_tests_properties(python.dist_suite.ws${ws} PROPERTIES LABELS "python;conformance" TIMEOUT 900
                       ENVIRONMENT "${COHORT_PY_ENV}" COST 10000)
endforeach()

# hvd.elastic on cohortrun's restarts (issue 32; tests/python/test_elastic.sh): a rank SIGKILLs itself mid-training,
# the next generation resumes from the last commit and ends with the parameters of a run without the kill.
foreach(np 2 3)
  add_test(NAME python.elastic.np${np} COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_elastic.sh $<TARGET_FILE:cohortrun>
           ${COHORT_PYTHON} ${np})
  set_tests_properties(python.elastic.np${np} PROPERTIES LABELS "python;fault" TIMEOUT 300
                       ENVIRONMENT "${COHORT_PY_ENV}" PASS_REGULAR_EXPRESSION "PASS \\(elastic")
endforeach()

# op=Adasum (issue 32; tests/python/test_adasum.py): the values at 1, 2 and 4 ranks, the refusal at 3.
foreach(np 1 2 3 4)
  add_test(NAME python.adasum.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_adasum.py)
  set_tests_properties(python.adasum.np${np} PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}")
endforeach()

# Horovod's names that its own test suite needs (issue 32; tests/python/test_hvd_api.py): alltoall, grouped
# allgather/reducescatter, sparse_allreduce_async, int8/int16 and integer scaling, the gradients of the collectives
# as Horovod defines them, SyncBatchNorm against BatchNorm1d on the whole batch, process sets' root_rank, barrier and
# broadcast_object.
foreach(np 1 2 3)
  add_test(NAME python.hvd_api.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_hvd_api.py)
  set_tests_properties(python.hvd_api.np${np} PROPERTIES LABELS "python;mp" TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}")
endforeach()

# Operations matched by name, as Horovod matches them (issue 32; tests/python/test_named.py): each rank issues its
# named calls of every kind in its own order, blocking and async, with join(), a process set, a duplicate name, one
# name for two kinds of call, a name only rank 0 issues (the stall warning and the timeout, set short here), and
# shutdown() with a name never completed. At 1 rank names are not matched: the same script runs in call order.
foreach(np 1 2 3)
  add_test(NAME python.named.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_named.py)
  set_tests_properties(python.named.np${np} PROPERTIES LABELS "python;mp" TIMEOUT 120
                       ENVIRONMENT "${COHORT_PY_ENV};COHORT_STALL_S=1;COHORT_OP_TIMEOUT=4"
                       PASS_REGULAR_EXPRESSION "named ok")
endforeach()
# The same under Open MPI's mpirun over the MPI transport (auto there), where the twin is a duplicate of
# MPI_COMM_WORLD and, at 3 ranks, the process set (ranks 1 and 2) a context of the sub-communicators' duplicate.
if(COHORT_MPI_PC AND COHORT_MPIRUN)
  foreach(np 2 3)
    add_test(NAME python.named.mpi.np${np} COMMAND ${COHORT_MPIRUN} --oversubscribe -np ${np} -x PYTHONPATH
             -x OMP_NUM_THREADS -x COHORT_STALL_S -x COHORT_OP_TIMEOUT -x COHORT_TRANSPORT ${COHORT_PYTHON}
             ${CMAKE_CURRENT_LIST_DIR}/test_named.py)
    set_tests_properties(python.named.mpi.np${np} PROPERTIES LABELS "python;mp" TIMEOUT 120
                         ENVIRONMENT "${COHORT_PY_ENV};COHORT_STALL_S=1;COHORT_OP_TIMEOUT=4;COHORT_TRANSPORT=mpi;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
                         FAIL_REGULAR_EXPRESSION "Traceback") # mpirun fails when a rank does
  endforeach()
endif()

# Large CPU tensors in the backend's shared arena (test_torch_arena.py): torch's CPU allocator on the arena, at 2 and
# 3 ranks over shm with a 32 MiB arena and an 8 MiB keep (so that the arena fills and freed blocks are trimmed), and
# at 2 ranks where it must stay out of the way: COHORT_TORCH_ARENA=0, and the tcp transport (no arena).
foreach(variant np2 np3 off tcp)
  set(ranks 2)
  set(extra "")
  if(variant STREQUAL "np3")
    set(ranks 3)
  elseif(variant STREQUAL "off")
    set(extra "COHORT_TORCH_ARENA=0")
  elseif(variant STREQUAL "tcp")
    set(extra "COHORT_TRANSPORT=tcp")
  endif()
  add_test(NAME python.torch_arena.${variant} COMMAND $<TARGET_FILE:cohortrun> -np ${ranks} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_torch_arena.py)
  set_tests_properties(python.torch_arena.${variant} PROPERTIES LABELS "python;mp" TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "arena ok" FAIL_REGULAR_EXPRESSION "Traceback|AssertionError"
                       ENVIRONMENT "${COHORT_PY_ENV};COHORT_TEST_ARENA=${COHORT_TORCH_ALLOC_EXPECTED};COHORT_SHM_ARENA_BYTES=33554432;COHORT_TORCH_ARENA_KEEP_BYTES=8388608;${extra}")
endforeach()
# The same on a /dev/shm of 64 MiB, as containers often have: a tmpfs mounted over /dev/shm in a mount namespace of
# the job's own (unshare -m; skipped where that is not allowed), the default 1 GiB arena.
add_test(NAME python.torch_arena.small_shm COMMAND sh -c "unshare -m true 2>/dev/null || { echo 'SKIP: unshare -m is not \
allowed here'; exit 77; }; exec unshare -m sh -c 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec \"$0\" -np 2 \
\"$1\" \"$2\"' $<TARGET_FILE:cohortrun> ${COHORT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_torch_arena.py")
set_tests_properties(python.torch_arena.small_shm PROPERTIES LABELS "python;mp" TIMEOUT 120 SKIP_RETURN_CODE 77
                     PASS_REGULAR_EXPRESSION "arena ok" FAIL_REGULAR_EXPRESSION "Traceback|AssertionError"
                     ENVIRONMENT "${COHORT_PY_ENV};COHORT_TEST_ARENA=${COHORT_TORCH_ALLOC_EXPECTED};COHORT_TEST_SMALL_SHM=1")

# shutdown() then init() 20 times in the same 2 processes, over each transport (test_reinit.py); a hang fails on
# the TIMEOUT.
foreach(tr shm tcp)
  add_test(NAME python.reinit.${tr} COMMAND $<TARGET_FILE:cohortrun> -np 2 ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_reinit.py 20)
  set_tests_properties(python.reinit.${tr} PROPERTIES LABELS "python;mp" TIMEOUT 180
                       ENVIRONMENT "${COHORT_PY_ENV};COHORT_TRANSPORT=${tr}" PASS_REGULAR_EXPRESSION "reinit ok")
endforeach()
# The same with the ranks started by hand (torchrun's variables, no launcher): rank 0 serves the store and stops it
# at each shutdown(), so the other rank may dial rank 0's old server in the next round (src/comm/job.c,
# check_owner).
add_test(NAME python.reinit.rank0_store COMMAND sh ${CMAKE_SOURCE_DIR}/tests/mp/test_rank0_store.sh 2 ${COHORT_PYTHON}
         ${CMAKE_CURRENT_LIST_DIR}/test_reinit.py 20)
set_tests_properties(python.reinit.rank0_store PROPERTIES LABELS "python;mp" TIMEOUT 180
                     ENVIRONMENT "${COHORT_PY_ENV};COHORT_TRANSPORT=tcp" PASS_REGULAR_EXPRESSION "reinit ok"
                     FAIL_REGULAR_EXPRESSION "FAIL|Traceback")
if(COHORT_MPI_PC AND COHORT_MPIRUN)
  add_test(NAME python.reinit.mpi COMMAND ${COHORT_MPIRUN} --oversubscribe -np 3 -x PYTHONPATH -x OMP_NUM_THREADS
           -x COHORT_TRANSPORT ${COHORT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_reinit.py 10)
  set_tests_properties(python.reinit.mpi PROPERTIES LABELS "python;mp" TIMEOUT 180
                       ENVIRONMENT "${COHORT_PY_ENV};COHORT_TRANSPORT=mpi;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
                       FAIL_REGULAR_EXPRESSION "FAIL|Traceback")
endif()

# torch's own DistributedDataParallel on backend "cohort" against DDP on gloo in the same processes
# (test_dist_ddp.py): plain, find_unused_parameters, gradient_as_bucket_view, static_graph, no_sync, the fp16/bf16
# and PowerSGD comm hooks, Join over uneven inputs, ZeroRedundancyOptimizer; bitwise equal parameters at 2 ranks,
# within 1e-5 (hooks: 1e-4, 1e-3) at 3 (another summation order). PowerSGD apart: its hook waits, inside a future's
# callback, on another all_reduce of the group (the backend gives each operation in flight a thread of its own).
# Not batched_powerSGD_hook: torch 1.13's passes a 2-D matrix to _orthogonalize, which asserts 3-D, on any backend.
foreach(np 2 3)
  add_test(NAME python.dist_ddp.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_dist_ddp.py plain unused bucket_view static_graph no_sync fp16 bf16 join zero)
  add_test(NAME python.dist_ddp.powersgd.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} ${COHORT_PYTHON}
           ${CMAKE_CURRENT_LIST_DIR}/test_dist_ddp.py powersgd)
  set_tests_properties(python.dist_ddp.np${np} python.dist_ddp.powersgd.np${np} PROPERTIES LABELS "python;mp"
                       TIMEOUT 300 ENVIRONMENT "${COHORT_PY_ENV}")
endforeach()

# Faults of backend "cohort" (test_dist_faults.sh): a rank SIGKILLed inside all_reduce (the survivors raise within
# 2 s naming it), mismatched collectives (every rank raises naming both calls; the next all_reduce works),
# init_process_group(timeout=3 s) with a rank that stays away (raise after ~3 s naming it). Through
# work.get_future().wait() (what DDP and comm hooks see), and through dist.all_reduce/work.wait() (torch 1.13's Work
# made from a future returns from wait() without raising; the backend hands torch's Python API a Work of its own).
foreach(mode kill mismatch timeout)
  foreach(via future wait)
    add_test(NAME python.dist_fault.${mode}.${via} COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_dist_faults.sh
             $<TARGET_FILE:cohortrun> ${COHORT_PYTHON} ${mode} ${via})
    set_tests_properties(python.dist_fault.${mode}.${via} PROPERTIES LABELS "python;fault" TIMEOUT 120
                         ENVIRONMENT "${COHORT_PY_ENV}" PASS_REGULAR_EXPRESSION "PASS \\(${mode} ${via}\\)")
  endforeach()
endforeach()
