/*
 * crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of checkpoint files.
 *
 * Chosen over zlib's CRC-32 because x86-64 computes it in hardware (SSE4.2 crc32), which makes checksumming a
 * large checkpoint cost far less than writing it. The hardware path is picked at run time; the table path gives
 * the same values everywhere. Thread-safe: the tables are built once, under pthread_once.
 */
#ifndef COHORT_CKPT_CRC32C_H
#define COHORT_CKPT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over len bytes: crc32c(crc32c(0, a), b) == crc32c(0, a || b). */
uint32_t cohort__crc32c(uint32_t crc, const void *buf, size_t len);
/* The portable table path alone, so tests can check both paths agree. */
uint32_t cohort__crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif
