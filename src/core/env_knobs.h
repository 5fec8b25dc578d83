/*
 * env_knobs.h: every COHORT_* environment knob, declared once with its default and meaning.
 *
 * X(name, default, description). docs/env.md lists the same knobs (a unit test checks that it does), and
 * cohort_init() warns about COHORT_* variables that are not listed here, so that a typo does not pass silently.
 * Add a knob here, read it with cohort__env_*(), and document it in docs/env.md.
 */
#ifndef COHORT_CORE_ENV_KNOBS_H
#define COHORT_CORE_ENV_KNOBS_H

#define COHORT_ENV_KNOBS(X)                                                                                        \
  X("COHORT_SECRET", "", "job secret; when set, every store and peer link proves it knows it (HMAC-SHA256)")      \
  X("COHORT_TIMEOUT", "300", "seconds cohort_init() waits for every rank to arrive at the rendezvous")           \
  X("COHORT_OP_TIMEOUT", "600", "seconds a collective waits on a silent peer before failing with a timeout")      \
  X("COHORT_TRANSPORT", "auto", "transport between processes: auto (shm when every rank is on one host, else tcp), tcp or shm") \
  X("COHORT_NODE_ID", "", "overrides which ranks share a host: ranks with different node ids count as different hosts") \
  X("COHORT_SHM_RING_BYTES", "4194304", "with shm, bytes of the ring from each peer to each rank")                \
  X("COHORT_SHM_ARENA_BYTES", "1073741824", "with shm (also within nodes), bytes of each rank's zero-copy arena (cohort_alloc); 0: none") \
  X("COHORT_SHM_CHUNK_BYTES", "524288", "with shm, bytes of each of the two staging buffers of the node allreduce") \
  X("COHORT_ALGO", "auto", "allreduce algorithm: auto, ring, rd (recursive doubling) or hier (several nodes)")   \
  X("COHORT_SMALL_BYTES", "65536", "with auto, allreduce up to this size uses recursive doubling, broadcast a tree")           \
  X("COHORT_SEGMENT_BYTES", "262144", "pipeline segment of the ring algorithms, in bytes")                        \
  X("COHORT_SOCKETS_PER_PEER", "1", "TCP connections per peer; large messages are striped over them")             \
  X("COHORT_SOCKET_BUFFER", "0", "SO_SNDBUF and SO_RCVBUF of peer sockets, in bytes; 0 lets the kernel autotune") \
  X("COHORT_SPIN_US", "auto", "microseconds a waiting rank polls before sleeping in epoll; auto: 1000, 0 if oversubscribed") \
  X("COHORT_STORE", "tcp", "rendezvous store: tcp (MASTER_ADDR:MASTER_PORT) or file:DIR on a shared filesystem") \
  X("COHORT_LAUNCHER_STORE", "0", "1 when the launcher (cohortrun) serves the store; else rank 0 serves it")     \
  X("COHORT_RUN_ID", "", "job id scoping the rendezvous keys; default: derived from COHORT_SECRET, else 'default'") \
  X("COHORT_RESTART_COUNT", "0", "generation of the job; rendezvous keys are scoped by it so restarts never mix") \
  X("COHORT_BIND_ADDR", "", "address peers listen on; default: the address that reaches MASTER_ADDR")            \
  X("COHORT_SOCKET_IFNAME", "", "network interface whose address peers listen on; COHORT_BIND_ADDR wins")        \
  X("COHORT_BUCKET_MB", "25", "DDP bucket cap in MiB (the first bucket is at most 1 MiB); fractions allowed")     \
  X("COHORT_DDP_OVERLAP", "auto", "DDP: on, off, or auto (on when every rank of the host has 2 CPUs)")         \
  X("COHORT_TIMELINE", "", "path of a Chrome trace JSON the DDP engine writes at its end; empty: none")           \
  X("COHORT_STALL_S", "60", "seconds a rank waits for a bucket before the stall inspector names the ranks missing; 0: off") \
  X("COHORT_HEARTBEAT_S", "0", "cohortrun reports (and stops) a worker whose collectives make no progress for this many seconds; 0: off") \
  X("COHORT_HEARTBEAT_FD", "", "set by cohortrun: a memfd page in which a worker counts its collectives")       \
  X("COHORT_TTY", "", "set by cohortrun: 1 when its stdout is a terminal (live progress lines), else 0")        \
  X("COHORT_LOG_LEVEL", "warn", "error, warn, info or debug")

#endif
