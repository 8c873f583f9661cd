/* fa_nccl.h - the NCCL comm of flashattn: DCP collectives over NCCL (pulls in no CUDA or NCCL
   header)

   What it is
     An fa_comm (flashattn.h) whose all_gather and reduce_scatter (sum) are NCCL collectives,
     issued on the CUDA stream given at creation. Pass the SAME stream to the CUDA backend
     (fa_cuda_backend_create) so that a forward's kernels and its collectives are ordered on one
     stream and the whole forward stays asynchronous (and CUDA-graph capturable).

   Two ways to create the comms of a DCP group
     (a) one process per GPU: rank 0 makes a unique id (fa_nccl_unique_id_create) and hands it
         to the others, through a file (fa_nccl_unique_id_write / _read) or loopback TCP
         (fa_nccl_unique_id_send_tcp / _recv_tcp), or any channel of the engine's own; then every
         rank calls fa_nccl_comm_create with the same id (it blocks until all ranks have joined):

           // rank 0                                      // rank r > 0
           unsigned char id[FA_NCCL_UNIQUE_ID_BYTES];     unsigned char id[FA_NCCL_UNIQUE_ID_BYTES];
           fa_nccl_unique_id_create(id);                  fa_nccl_unique_id_read(path, 60000, id);
           fa_nccl_unique_id_write(path, id);
           fa_comm *comm;
           fa_nccl_comm_create(world_size, rank, id, device, stream, &comm);
           ... fa_builder_create(be, &cfg, comm, &b) ...  // cfg.parallel: dcp_world_size, dcp_rank
           fa_nccl_comm_destroy(comm);                    // collective: every rank calls it

     (b) one process driving several GPUs: fa_nccl_comms_create_local makes all ranks at once
         (ncclCommInitAll). Each rank must then be driven from ITS OWN THREAD: a rank's forward
         issues its collectives one at a time, and a collective returns only once it is
         enqueued, which can wait for the peers' matching call.

           fa_comm *comms;                                // comms[r] is rank r
           fa_nccl_comms_create_local(2, devices, streams, &comms);
           ... thread r: fa_builder_create(be[r], &cfg_r, &comms[r], &b) and fa_forward ...
           fa_nccl_comm_destroy(comms);                   // all ranks at once, one thread

   Collectives (the fa_comm contract)
     all_gather(send, recv, count, dtype): recv = concat over ranks of send (rank order), count
       elements per rank. dtype F32, F16, BF16 natively; I32, I64, FP8_E4M3, FP8_E5M2 as bytes.
       In place when send == recv + rank * count * size.
     reduce_scatter(send, recv, count, dtype): send = world_size chunks of count elements; recv
       (count) = sum over ranks of their chunk `rank`. dtype F32, F16, BF16 (NCCL sums 16-bit
       types in float and rounds once per step).
     Both are asynchronous on the comm's stream; count == 0 does nothing. Every rank of the group
     must call the same collectives, in the same order, with the same count and dtype (as with
     NCCL itself: a mismatch hangs or corrupts). Errors: FA_ERR_INVALID_ARG (NULL buffer),
     FA_ERR_UNSUPPORTED (dtype), FA_ERR_BACKEND (NCCL or CUDA failed; the message carries
     ncclGetErrorString / ncclGetLastError / cudaGetErrorString). comm->last_error(comm->ctx)
     returns the message of that comm's last failure; flashattn's fa_forward wraps it into
     fa_last_error().

   Errors of the functions below: the return status; fa_nccl_last_error() gives the detail
   (this thread's last failure; FA_ERR_INVALID_ARG messages name the argument and its value).

   NVLink SHARP (NVLS, multicast) is not used: unless the process already set
   NCCL_NVLS_ENABLE, the creation functions set it to 0 before NCCL reads it (the DCP
   collectives are small; multicast buys nothing here).

   Thread safety: creation, destruction and the unique-id helpers may be called from any
   thread. A comm's collectives must be called from one thread at a time (NCCL's rule).

   Link: libflashattn_nccl.a, NCCL (-lnccl), the CUDA runtime (-lcudart).
*/
#ifndef FA_NCCL_H
#define FA_NCCL_H

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Size of an NCCL unique id (ncclUniqueId) in bytes. */
#define FA_NCCL_UNIQUE_ID_BYTES 128

/* Detail of this thread's last failure of a function of this header ("" when none). */
const char *fa_nccl_last_error(void);

/* NCCL version of the linked library (ncclGetVersion, e.g. 22809 for 2.28.9); 0 on failure. */
int fa_nccl_version(void);

/* ---------------------------------------------------------------------------------------- */
/* unique id: creation and hand-over between processes */

/* Makes a fresh unique id (ncclGetUniqueId) into id_out (FA_NCCL_UNIQUE_ID_BYTES bytes). The
   calling process hosts the group's bootstrap: it must stay alive until every rank has
   created its comm. */
fa_status fa_nccl_unique_id_create(void *id_out);

/* Writes the id to `path` atomically: a temporary file in the same folder, then rename(), so a
   reader sees either no file or the whole id. Use a fresh path per launch (for instance one
   that contains the launcher's pid): a stale file from an earlier run would hand out a dead
   id. The file is left in place; the caller removes it once every rank has read it. */
fa_status fa_nccl_unique_id_write(const char *path, const void *id);

/* Reads the id from `path`, polling (every 10 ms) until the file exists or timeout_ms (>= 0)
   have passed: FA_ERR_BACKEND "timed out" then. A file of another size than
   FA_NCCL_UNIQUE_ID_BYTES is an error (FA_ERR_BACKEND). */
fa_status fa_nccl_unique_id_read(const char *path, int timeout_ms, void *id_out);

/* Rank 0's side of the loopback-TCP hand-over: listens on 127.0.0.1:port (only loopback) and
   sends the id to each of num_peers (>= 0) connecting peers, then closes. Returns when all
   were served, or FA_ERR_BACKEND after timeout_ms (> 0) in all. port in [1, 65535]. */
fa_status fa_nccl_unique_id_send_tcp(int port, int num_peers, int timeout_ms, const void *id);

/* A peer's side: connects to 127.0.0.1:port, retrying every 20 ms while nobody listens yet,
   and receives the id; FA_ERR_BACKEND after timeout_ms (> 0) in all. */
fa_status fa_nccl_unique_id_recv_tcp(int port, int timeout_ms, void *id_out);

/* ---------------------------------------------------------------------------------------- */
/* comms */

/* (a) One rank of a group spread over processes (or threads): ncclCommInitRank on `device`
   with the id (FA_NCCL_UNIQUE_ID_BYTES bytes, the same on every rank). Blocks until all
   world_size ranks have joined. stream: a cudaStream_t for the collectives (NULL = the legacy
   default stream; not owned). world_size >= 1, rank in [0, world_size), device in
   [0, device count). On failure *out is NULL. The current device of the calling thread is
   left as it was. */
fa_status fa_nccl_comm_create(int world_size, int rank, const void *unique_id, int device, void *stream,
                              fa_comm **out);

/* (b) All ranks of a group inside this process (ncclCommInitAll): *comms_out = an array of
   world_size comms, rank r at index r on devices[r] (distinct devices) with streams[r]
   (streams NULL-able: all legacy default streams; an entry NULL-able likewise). Drive each
   rank from its own thread (see the top of this file). */
fa_status fa_nccl_comms_create_local(int world_size, const int *devices, void *const *streams,
                                     fa_comm **comms_out);

/* Destroys what a create function returned: one comm of (a), or the whole array of (b) (pass
   the array, i.e. &comms[0]). Flushes the group's pending collectives first (ncclCommFinalize;
   for (a) this waits for the other ranks to destroy theirs too, so every rank must call it),
   and aborts the comm if that fails. NULL is a no-op. FA_ERR_INVALID_ARG for a pointer that no
   create function of this header returned (nothing is freed then). */
fa_status fa_nccl_comm_destroy(fa_comm *comm);

/* CUDA device and stream (a cudaStream_t) of an NCCL comm; -1 / NULL for another comm. */
int fa_nccl_comm_device(const fa_comm *comm);
void *fa_nccl_comm_stream(const fa_comm *comm);

#ifdef __cplusplus
}
#endif

#endif /* FA_NCCL_H */
