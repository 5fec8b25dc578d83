/*
 * frame.c: the checks every byte-stream transport applies to a received header, in one place so that TCP and
 * shared memory reject the same frames with the same words. Pure: they describe what is wrong and return the
 * status; failing the transport (and telling the peers) is the caller's job.
 */
#include <stdio.h>

#include "transport/frame.h"

cohort_status cohort__frame_check_size(const cohort__frame *hdr, int peer, char *msg, size_t len) {
  /* No algorithm sends more than the call's whole buffer in one frame; checked before anything is allocated for
   * it, so that a corrupt header cannot make a rank reserve 2^40 bytes for an early frame. */
  size_t es = cohort_dtype_size((cohort_dtype)hdr->dtype);
  if (es == 0 || hdr->bytes / es > hdr->count || hdr->bytes % es != 0) {
    snprintf(msg, len, "malformed frame from rank %d: %llu bytes for a call of %llu elements of dtype %u", peer,
             (unsigned long long)hdr->bytes, (unsigned long long)hdr->count, hdr->dtype);
    return COHORT_ERR_PROTOCOL;
  }
  return COHORT_OK;
}

cohort_status cohort__frame_match(const cohort__call *mine, int my_rank, int peer, const cohort__frame *hdr,
                                  size_t expect_bytes, const char *size_hint, char *msg, size_t len) {
  cohort__call theirs;
  cohort__frame_to_call(hdr, &theirs);
  if (cohort__call_equal(&theirs, mine)) {
    if (hdr->bytes == expect_bytes) return COHORT_OK;
    snprintf(msg, len,
             "rank %d sent a frame of %llu bytes where rank %d expects %zu in the same call: do the ranks "
             "use the same %s?",
             peer, (unsigned long long)hdr->bytes, my_rank, expect_bytes, size_hint);
    return COHORT_ERR_MISMATCH;
  }
  char a[256], b[256];
  cohort__call_describe(mine, a, sizeof a);
  cohort__call_describe(&theirs, b, sizeof b);
  if (theirs.seq != mine->seq)
    snprintf(msg, len, "ranks disagree: rank %d is in %s and expects more data from rank %d, which has moved on to %s",
             my_rank, a, peer, b);
  else
    snprintf(msg, len, "ranks disagree: rank %d called %s but rank %d called %s", my_rank, a, peer, b);
  return COHORT_ERR_MISMATCH;
}
