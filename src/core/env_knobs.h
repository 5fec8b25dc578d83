/*
 * env_knobs.h: every COHORT_* environment knob, declared once: its name, the field of cohort__config (config.h) it
 * is parsed into, its type and range, its default and its meaning.
 *
 * X(NAME, field, KIND, LIMITS, default, description), where
 *   KIND     INT (a long in LIMITS = RANGE(min, max)), INT_AUTO (the same, or "auto", stored as -1),
 *            NUM (a finite double in RANGE(min, max); MIN_EXCLUSIVE makes the lower bound exclusive),
 *            CHOICE (one of the words in LIMITS = ONE_OF("a,b,c"), stored as its text),
 *            STR (any text up to COHORT__KNOB_STR_MAX - 1 bytes; LIMITS = ANY);
 *   default  text, parsed like a value from the environment (an empty or unset variable takes it).
 * docs/env.md lists the same knobs (a unit test checks that it does), and cohort_init() warns about COHORT_*
 * variables that are not listed here, so that a typo does not pass silently. Add a knob here, read it from the
 * cohort__config that cohort_init() passes down, and document it in docs/env.md.
 */
#ifndef COHORT_CORE_ENV_KNOBS_H
#define COHORT_CORE_ENV_KNOBS_H

/* One knob a row: the table reads best unwrapped. */
/* clang-format off */
#define COHORT_ENV_KNOBS(X)                                                                                        \
  X(COHORT_SECRET, secret, STR, ANY, "", "job secret; when set, every store and peer link proves it knows it (HMAC-SHA256)") \
  X(COHORT_TIMEOUT, timeout_s, INT, RANGE(1, 100000000), "300", "seconds cohort_init() waits for every rank to arrive at the rendezvous") \
  X(COHORT_OP_TIMEOUT, op_timeout_s, INT, RANGE(1, 100000000), "600", "seconds a collective waits on a silent peer before failing with a timeout") \
  X(COHORT_TRANSPORT, transport, CHOICE, ONE_OF("auto,tcp,shm,mpi"), "auto", "transport between processes: auto (under mpirun, mpi where libcohort was built with MPI; else shm when every rank is on one host, else tcp), tcp, shm or mpi (MPI point-to-point under mpirun)") \
  X(COHORT_NODE_ID, node_id, STR, ANY, "", "overrides which ranks share a host: ranks with different node ids count as different hosts") \
  X(COHORT_SHM_RING_BYTES, shm_ring_bytes, INT_AUTO, RANGE(256, 1L << 30), "auto", "with shm, bytes of the ring from each peer to each rank; auto: 4 MiB, from 10 ranks on a host 32 MiB per rank shared among its peers (at least 256 KiB a ring)") \
  X(COHORT_SHM_ARENA_BYTES, shm_arena_bytes, INT_AUTO, RANGE(0, 1L << 44), "auto", "with shm (also within nodes), bytes of each rank's zero-copy arena (cohort_alloc); auto: /dev/shm's size shared among the ranks of the host, from 1 GiB to 4 GiB (and at most a quarter of RLIMIT_AS shared among them); 0: none") \
  X(COHORT_SHM_CHUNK_BYTES, shm_chunk_bytes, INT, RANGE(4096, 1L << 30), "524288", "with shm, bytes of each of the two staging buffers of the node allreduce") \
  X(COHORT_SHM_SMALL_BYTES, shm_small_bytes, INT_AUTO, RANGE(0, 65536), "auto", "with shm, allreduces up to this many bytes take the node allreduce's small path (every rank reduces the whole vector from every rank's staging buffer: two flag rounds), larger ones the sliced path (each rank reduces 1/n of it: three rounds); auto: 65536 with 2 ranks on the host, 0 with more; every rank of a host must set the same") \
  X(COHORT_P2P, p2p, CHOICE, ONE_OF("on,off"), "on", "on: every communicator of several ranks makes a second transport for point-to-point messages (cohort_send/recv) when it is made; off: none (a program that never sends messages saves its sockets, rings and thread; cohort_send/recv then fail with COHORT_ERR_INVALID)") \
  X(COHORT_CALL_CHECK, call_check, CHOICE, ONE_OF("on,off"), "on", "on: before a collective's data moves the ranks compare their calls, and a mismatch is refused on every rank (COHORT_ERR_MISMATCH) with the communicator still usable; off: no such exchange (a mismatch is found, if at all, by the frames and is fatal)") \
  X(COHORT_ALGO, algo, CHOICE, ONE_OF("auto,ring,rd,hier"), "auto", "allreduce algorithm: auto, ring, rd (recursive doubling) or hier (several nodes)") \
  X(COHORT_SMALL_BYTES, small_bytes, INT, RANGE(0, 1L << 40), "65536", "with auto, allreduce up to this size uses recursive doubling, broadcast a tree") \
  X(COHORT_SEGMENT_BYTES, segment_bytes, INT, RANGE(1, 1L << 30), "262144", "pipeline segment of the ring algorithms, in bytes") \
  X(COHORT_SOCKETS_PER_PEER, sockets_per_peer, INT, RANGE(1, 64), "1", "TCP connections per peer; large messages are striped over them") \
  X(COHORT_SOCKET_BUFFER, socket_buffer, INT, RANGE(0, 1L << 30), "0", "SO_SNDBUF and SO_RCVBUF of peer sockets, in bytes; 0 lets the kernel autotune") \
  X(COHORT_SPIN_US, spin_us, INT_AUTO, RANGE(0, 10000000), "auto", "microseconds a waiting rank polls before sleeping in epoll; auto: 1000, 0 if oversubscribed") \
  X(COHORT_STORE, store, STR, ANY, "tcp", "rendezvous store: tcp (COHORT_STORE_ADDR:COHORT_STORE_PORT) or file:DIR on a shared filesystem") \
  X(COHORT_STORE_ADDR, store_addr, STR, ANY, "", "host of the tcp rendezvous store; default: MASTER_ADDR") \
  X(COHORT_STORE_PORT, store_port, INT, RANGE(0, 65535), "0", "port of the tcp rendezvous store; 0: MASTER_PORT (MASTER_PORT+1 beside torchrun's agent store)") \
  X(COHORT_LAUNCHER_STORE, launcher_store, INT, RANGE(0, 1), "0", "1 when the launcher (cohortrun) serves the store; else rank 0 serves it") \
  X(COHORT_RUN_ID, run_id, STR, ANY, "", "job id scoping the rendezvous keys; default: derived from COHORT_SECRET, else 'default'") \
  X(COHORT_RESTART_COUNT, restart_count, INT, RANGE(0, 1000000000), "0", "generation of the job; rendezvous keys are scoped by it so restarts never mix") \
  X(COHORT_BIND_ADDR, bind_addr, STR, ANY, "", "address peers listen on; default: the address that reaches MASTER_ADDR") \
  X(COHORT_SOCKET_IFNAME, socket_ifname, STR, ANY, "", "network interface whose address peers listen on; COHORT_BIND_ADDR wins") \
  X(COHORT_BUCKET_MB, bucket_mb, NUM, MIN_EXCLUSIVE(0, 1e9), "25", "DDP bucket cap in MiB (the first bucket is at most 1 MiB); fractions allowed") \
  X(COHORT_DDP_OVERLAP, ddp_overlap, CHOICE, ONE_OF("auto,on,off"), "auto", "DDP: on, off, or auto (on when every rank of the host has 2 CPUs)") \
  X(COHORT_TIMELINE, timeline, STR, ANY, "", "path of a Chrome trace JSON the DDP engine writes at its end; empty: none") \
  X(COHORT_METRICS, metrics, STR, ANY, "", "path of a JSON-lines file of per-step metrics across ranks that the DDP engine's rank 0 writes; empty: none") \
  X(COHORT_METRICS_DIR, metrics_dir, STR, ANY, "", "set by cohortrun --metrics-port: the directory where each rank's DDP engine keeps its live counters for cohortrun to serve; empty: none") \
  X(COHORT_STALL_S, stall_s, NUM, RANGE(0, 1e9), "60", "seconds a rank waits in a collective (a bucket; cohort.torch: a name= some ranks have not issued) before a warning names the ranks missing; 0: off") \
  X(COHORT_HEARTBEAT_S, heartbeat_s, NUM, RANGE(0, 1e6), "0", "cohortrun reports (and stops) a worker whose collectives make no progress for this many seconds; 0: off") \
  X(COHORT_HEARTBEAT_FD, heartbeat_fd, INT, RANGE(-1, 1L << 20), "-1", "set by cohortrun: the descriptor of a memfd page in which a worker counts its collectives; -1 or empty: none") \
  X(COHORT_TTY, tty, STR, ANY, "", "set by cohortrun: 1 when its stdout is a terminal (live progress lines), else 0") \
  X(COHORT_GPU_PATH, gpu_path, CHOICE, ONE_OF("auto,nccl,ipc,staged"), "auto", "device collectives: auto (nccl when every rank has a GPU of its own and NCCL loads, ipc when all share one GPU, else staged), nccl, ipc (CUDA IPC on one GPU) or staged (through host memory)") \
  X(COHORT_GPU_IPC_SYNC, gpu_ipc_sync, CHOICE, ONE_OF("device,host"), "device", "cuda-ipc path (ranks sharing one GPU): device: the ranks' streams wait for each other at flags in shared host memory, so a stream-ordered call returns once queued; host: every wait is on the host (the input, rank 0's kernel); one rank asking for host puts every rank there") \
  X(COHORT_CUDA_LIBRARY, cuda_library, STR, ANY, "", "path of libcohort_cuda.so (the device collectives); default: beside libcohort, then the linker's path") \
  X(COHORT_ELASTIC_DIR, elastic_dir, STR, ANY, "", "cohort.torch's hvd.elastic: the directory where rank 0 keeps the last commit for the next generation; empty: a directory of the temporary directory named after the job") \
  X(COHORT_TORCH_EXT, torch_ext, CHOICE, ONE_OF("0,1"), "1", "the torch.distributed backend \"cohort\": 1 uses its C++ half (cohort.torch._c10d) where it was built; 0 runs the backend in Python alone") \
  X(COHORT_TORCH_ARENA, torch_arena, CHOICE, ONE_OF("0,1"), "1", "the torch.distributed backend \"cohort\": 1 puts torch's CPU tensors of at least COHORT_TORCH_ARENA_MIN_BYTES made after the first group of the whole world in its shared arena (zero copy in the collectives); 0 leaves torch's allocator alone") \
  X(COHORT_TORCH_ARENA_MIN_BYTES, torch_arena_min_bytes, INT, RANGE(1, 1L << 44), "1048576", "with COHORT_TORCH_ARENA=1, the smallest CPU tensor placed in the arena") \
  X(COHORT_TORCH_ARENA_KEEP_BYTES, torch_arena_keep_bytes, INT, RANGE(0, 1L << 44), "268435456", "with COHORT_TORCH_ARENA=1, bytes of freed tensors kept in the arena for the next tensor of the same size") \
  X(COHORT_KERNELS, kernels, CHOICE, ONE_OF("auto,reference,onednn"), "auto", "the kernels a new model runs on (cohort_model_set_kernels overrides): onednn (oneDNN's JIT kernels, by the CPU's features), reference (im2col + OpenBLAS, the readable oracle), or auto (onednn where libcohort was built with it and oneDNN runs a wider SIMD family than OpenBLAS, e.g. AVX-512 under OPENBLAS_CORETYPE=Haswell, or both run AVX-512; else reference)") \
  X(COHORT_LOG_LEVEL, log_level, CHOICE, ONE_OF("error,warn,info,debug"), "warn", "error, warn, info or debug")

/* clang-format on */

#endif
