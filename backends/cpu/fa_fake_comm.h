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

/* Runs fn(args[r]) on one thread per rank r in [0, world_size) and joins them all (fn's return
   value is ignored). The threads start fn only once every thread exists: if one cannot be
   started, none runs fn and FA_ERR_BACKEND is returned. args may be NULL (fn gets NULL). */
fa_status fa_fake_comm_run(int32_t world_size, void *(*fn)(void *), void **args);

#ifdef __cplusplus
}
#endif

#endif /* FA_FAKE_COMM_H */
