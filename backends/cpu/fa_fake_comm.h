/* fa_fake_comm.h - an in-process fake of the flashattn comm vtable (tests and tools)

   Simulates a DCP group of world_size ranks inside one process, each rank driven by its own
   thread (fa_fake_comm_run). Collectives meet at a barrier, read every rank's send buffer
   directly and meet again before returning, so send buffers may be reused afterwards.

     fa_comm *comms;
     fa_fake_comm_group_create(2, &comms);      // comms[0], comms[1]: one per rank
     ... each rank thread uses &comms[rank] ...
     fa_fake_comm_group_destroy(comms);

   Every rank of the group must call the same collectives in the same order (as with NCCL).
   A call with arguments that differ between ranks (count, dtype) fails on every rank with
   FA_ERR_INVALID_ARG instead of hanging. dtype: all_gather any sized dtype; reduce_scatter
   F32, F16, BF16 (summed in float in rank order, rounded once to the dtype).

   Never hangs. The group has an abort flag: once it is set, every rank waiting in a collective
   and every later collective returns FA_ERR_BACKEND at once, with a message naming the
   collective and the cause ("all_gather: rank 0: peer rank 1 aborted (fa_fake_comm_abort)").
   It is set by
     - fa_comm.abort, which fa_forward calls when this rank fails a DCP step (a check or an
       op: "peer rank R aborted (its fa_forward failed)");
     - fa_fake_comm_abort(comm): the same for a caller, e.g. a rank that fails outside
       fa_forward (its own setup) and will not join the step;
     - any collective that fails (mismatched or bad arguments: every rank fails it);
     - a timeout, the last resort: a rank that waited timeout_ms (default 10 s,
       fa_fake_comm_group_set_timeout) for its peers returns FA_ERR_BACKEND naming the collective
       and the ranks that did not arrive, and aborts the group.
   The flag stays until fa_fake_comm_group_reset (or use a new group).
*/
#ifndef FA_FAKE_COMM_H
#define FA_FAKE_COMM_H

#include <stdint.h>

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a group of world_size (>= 1) ranks: *comms_out = array of world_size comms, rank r at
   index r. FA_ERR_INVALID_ARG for a bad world_size or NULL comms_out, FA_ERR_OUT_OF_MEMORY. */
fa_status fa_fake_comm_group_create(int32_t world_size, fa_comm **comms_out);

/* Destroys a group made by fa_fake_comm_group_create (pass the array; NULL is a no-op). */
void fa_fake_comm_group_destroy(fa_comm *comms);

/* Default timeout of a rank waiting for its peers in a collective, milliseconds. */
#define FA_FAKE_COMM_DEFAULT_TIMEOUT_MS 10000

/* Aborts the group of comm (one of a group's comms) on behalf of comm->rank: ranks waiting in a
   collective return FA_ERR_BACKEND "... peer rank R aborted ...", and so does every collective
   until the group is reset. Any thread may call it, at any time. FA_ERR_INVALID_ARG when comm
   is NULL or not a fake comm. */
fa_status fa_fake_comm_abort(const fa_comm *comm);

/* 1 when the group of comm is aborted (by fa_fake_comm_abort, a failed collective or a
   timeout), else 0 (also for NULL). */
int fa_fake_comm_aborted(const fa_comm *comm);

/* Clears the abort flag and the collective state so the group can be used again. Call it only
   while no rank is inside a collective (e.g. after fa_fake_comm_run returned). FA_ERR_INVALID_ARG
   when comms is NULL or not a fake group. */
fa_status fa_fake_comm_group_reset(fa_comm *comms);

/* Sets how long a rank waits for its peers in a collective before it gives up (FA_ERR_BACKEND)
   and aborts the group; timeout_ms <= 0 waits forever. Default FA_FAKE_COMM_DEFAULT_TIMEOUT_MS.
   FA_ERR_INVALID_ARG when comms is NULL or not a fake group. */
fa_status fa_fake_comm_group_set_timeout(fa_comm *comms, int64_t timeout_ms);

/* Runs fn(args[r]) on one thread per rank r in [0, world_size) and joins them all (fn's return
   value is ignored). The threads start fn only once every thread exists: if one cannot be
   started, none runs fn and FA_ERR_BACKEND is returned. args may be NULL (fn gets NULL). */
fa_status fa_fake_comm_run(int32_t world_size, void *(*fn)(void *), void **args);

#ifdef __cplusplus
}
#endif

#endif /* FA_FAKE_COMM_H */
